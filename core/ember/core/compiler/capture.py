"""Capture-stage observability: TorchDynamo's graph breaks and recompiles on our loggers.

Dynamo reports both through its artifact loggers; ``install()`` forwards them to
``ember.graph_breaks`` / ``ember.recompiles`` when those are enabled. It also keeps the
record ``explain()`` reads: graphs captured and ops that fell back to eager. Each captured
graph is logged on ``ember.capture`` (INFO: its size; DEBUG: its code).
"""

from __future__ import annotations

import logging
import threading

from ember.core.logs import get_logger

_TORCH_LOGGERS = {
    "graph_breaks": ["torch._dynamo.symbolic_convert.__graph_breaks",
                     "torch._dynamo.exc.__graph_breaks",
                     "torch._dynamo.convert_frame.__graph_breaks"],
    "recompiles": ["torch._dynamo.guards.__recompiles",
                   "torch._dynamo.convert_frame.__recompiles"],
}
_state = threading.local()
log = get_logger("capture")


class _Forward(logging.Handler):
    def __init__(self, target: logging.Logger):
        super().__init__(logging.DEBUG)
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.target.info("%s", record.getMessage())
        except Exception:
            pass


_enabled_by_us: set[str] = set()


def _torch_log_state():
    try:
        from torch._logging._internal import log_state
    except ImportError:  # pragma: no cover - private API moved
        return None
    return log_state


def install() -> None:
    """Forward dynamo's graph-break / recompile messages if our loggers want them."""
    state = _torch_log_state()
    for ours, names in _TORCH_LOGGERS.items():
        target = get_logger(ours)
        enabled = target.isEnabledFor(logging.INFO)
        if state is not None:
            if enabled and not state.is_artifact_enabled(ours):
                state.enable_artifact(ours)  # dynamo only formats reasons when asked
                _enabled_by_us.add(ours)
            elif not enabled and ours in _enabled_by_us:
                state.artifact_names.discard(ours)
                _enabled_by_us.discard(ours)
        for name in names:
            lg = logging.getLogger(name)
            handlers = [h for h in lg.handlers if isinstance(h, _Forward)]
            if enabled and not handlers:
                lg.addHandler(_Forward(target))
                lg.setLevel(logging.DEBUG)
                lg.propagate = ours not in _enabled_by_us  # don't print twice
            elif not enabled:
                for h in handlers:
                    lg.removeHandler(h)


def _record() -> dict | None:
    return getattr(_state, "record", None)


def start_recording() -> dict:
    _state.record = {"graphs": [], "fallback_ops": []}
    return _state.record


def stop_recording() -> None:
    _state.record = None


def record_graph(gm) -> None:
    """A graph Dynamo hands the backend: logged on ``ember.capture``, kept for ``explain``."""
    if log.isEnabledFor(logging.INFO):
        nodes = gm.graph.nodes
        log.info("captured a graph: %d ops, %d inputs",
                 sum(n.op in ("call_function", "call_method", "call_module") for n in nodes),
                 sum(n.op == "placeholder" for n in nodes))
        log.debug("captured graph:\n%s", gm.code)
    rec = _record()
    if rec is not None:
        rec["graphs"].append(gm)


def record_fallback(op: str) -> None:
    rec = _record()
    if rec is not None and op not in rec["fallback_ops"]:
        rec["fallback_ops"].append(op)
