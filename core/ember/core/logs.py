"""Per-component logging, configured by ``EMBER_LOGS`` or :func:`set_logs`.

``EMBER_LOGS="+capture,schedule,-perf_hints"`` enables ``capture`` at DEBUG, ``schedule``
at INFO and silences ``perf_hints``; ``all`` / ``+all`` cover every component. Components
not named log warnings and errors only. Loggers are ``logging.getLogger("ember.<name>")``.
"""

from __future__ import annotations

import logging
import os
import sys

_ROOT = "ember"
_DEFAULT_LEVEL = logging.WARNING
_SILENT = logging.CRITICAL + 1

# name -> one-line description. Packages add their own with register_component().
_COMPONENTS: dict[str, str] = {
    "capture": "TorchDynamo capture: graphs handed to the backend",
    "aot": "AOTAutograd: forward/backward graphs and partitioning",
    "decompose": "ATen -> prim decompositions, ops left extern",
    "lower": "FX nodes -> loop IR",
    "schedule": "fusion decisions (DEBUG: every refused fusion with its reason)",
    "codegen": "kernel code generation and builds",
    "output_code": "the generated kernel source and wrapper",
    "graph_breaks": "graph breaks with their reasons",
    "recompiles": "recompilations with the guard that failed",
    "fallback": "ops and graphs that run in eager ATen, with the reason",
    "perf_hints": "hints about missed optimisations",
    "cache": "on-disk kernel cache hits, misses and rebuilds",
    "autotune": "kernel configuration search",
    "kernels": "custom-op registry and dispatch",
    "attention": "scaled_dot_product_attention backend selection",
    "vision": "ember.vision",
    "audio": "ember.audio",
    "data": "ember.data",
    "arrow": "ember.arrow",
    "bench": "ember bench harness",
}

_handler: logging.Handler | None = None


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at emit time (so redirection and capture work)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def register_component(name: str, description: str) -> None:
    """Declare a log component so EMBER_LOGS and set_logs accept its name."""
    if not name.isidentifier():
        raise ValueError(f"log component name must be an identifier, got {name!r}")
    _COMPONENTS.setdefault(name, description)


def known_components() -> dict[str, str]:
    """The components EMBER_LOGS understands, with their descriptions."""
    return dict(_COMPONENTS)


def _check(name: str) -> None:
    if name not in _COMPONENTS:
        known = ", ".join(sorted(_COMPONENTS))
        raise ValueError(f"unknown log component {name!r}; known components: all, {known}")


def _ensure_handler() -> None:
    global _handler
    if _handler is not None:
        return
    _handler = _StderrHandler()
    _handler.setFormatter(logging.Formatter("[%(name)s] %(levelname)s %(message)s"))
    root = logging.getLogger(_ROOT)
    root.addHandler(_handler)
    root.setLevel(logging.DEBUG)
    root.propagate = False


def get_logger(component: str) -> logging.Logger:
    """The logger of a known component (``ember.<component>``)."""
    _check(component)
    _ensure_handler()
    logger = logging.getLogger(f"{_ROOT}.{component}")
    if logger.level == logging.NOTSET:
        logger.setLevel(_DEFAULT_LEVEL)
    return logger


def _level(value: bool | int | str | None) -> int:
    if value is None or value is False:
        return _DEFAULT_LEVEL
    if value is True:
        return logging.INFO
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        named = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
                 "error": logging.ERROR, "off": _SILENT}
        if value.lower() in named:
            return named[value.lower()]
    raise ValueError(f"log level must be a bool, an int or one of debug/info/warning/error/off, "
                     f"got {value!r}")


def set_logs(**components: bool | int | str | None) -> None:
    """Set component levels from code: ``set_logs(schedule=logging.DEBUG, output_code=True)``.

    ``True`` means INFO, ``False``/``None`` restores the default (warnings only), ``"off"``
    silences. ``all=...`` applies to every component before the others.
    """
    for name in components:
        if name != "all":
            _check(name)
    if "all" in components:
        everything = components.pop("all")
        for name in _COMPONENTS:
            get_logger(name).setLevel(_level(everything))
    for name, value in components.items():
        get_logger(name).setLevel(_level(value))


def parse_spec(spec: str) -> dict[str, int]:
    """Parse an EMBER_LOGS string into ``{component: level}``; unknown names raise."""
    levels: dict[str, int] = {}
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        level = logging.INFO
        if item[0] == "+":
            level, item = logging.DEBUG, item[1:]
        elif item[0] == "-":
            level, item = _SILENT, item[1:]
        if item == "all":
            for name in _COMPONENTS:
                levels[name] = level
            continue
        _check(item)
        levels[item] = level
    return levels


def configure_from_env(environ: dict[str, str] | None = None) -> None:
    """Apply ``EMBER_LOGS`` (called once when ember.core is imported)."""
    spec = (environ if environ is not None else os.environ).get("EMBER_LOGS", "")
    for name, level in parse_spec(spec).items():
        get_logger(name).setLevel(level)
