"""The arguments of ``compile``: every ``options`` key Ember understands, checked up front.

A misspelt key or a bad value raises here, through ``ember.core.compile`` and through
``torch.compile(backend="ember")`` alike, instead of being ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.core.compiler.modes import MODES
from ember.core.compiler.runtime import isa


@dataclass(frozen=True)
class Option:
    """One user-facing key: the values it takes and what it does."""

    values: tuple
    doc: str


OPTIONS = {
    "strict": Option((True, False), "raise when a graph cannot be compiled, instead of running "
                                    "it in eager ATen with a logged reason"),
    "codegen": Option(("cpp", "triton", "portable"), "force a code generator (Triton on CPU "
                                                      "needs TRITON_INTERPRET=1)"),
    "patterns": Option((True, False), "torch-level rewrites such as unfused attention -> SDPA"),
    "channels_last": Option((True, False), "2-D convolutions take channels-last "
                                           "activations: all of an ahead-of-time package's "
                                           "(weights too), those of a JIT inference graph "
                                           "whose weight copy is small (default True)"),
    "freezing": Option((True, False), "inference graphs take parameters and buffers as "
                                      "constants: folded, convolution and linear weights "
                                      "prepacked (default False)"),
    "arena": Option((True, False), "a CPU graph's internal buffers of static size live in "
                                   "one arena kept between calls, instead of fresh memory "
                                   "whose pages fault in every call (default True)"),
    "cpu_isa": Option(isa.NAMES, "instruction-set level of C++ kernels (default: "
                                 f"${isa.ENV}, else native)"),
}
# set by the backend itself, never by a user
INTERNAL = {"mode", "inference"}


def check_mode(mode) -> str:
    if mode is None:
        return "default"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (or None); got {mode!r}")
    return mode


def check_dynamic(dynamic) -> None:
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"dynamic must be True, False or None; got {dynamic!r}")


def check_options(options, *, internal: bool = False) -> dict:
    """A copy of ``options`` after checking every key and value; ``internal`` admits the
    keys the backend adds itself."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    for k, v in options.items():
        if internal and k in INTERNAL:
            continue
        if k not in OPTIONS:
            raise ValueError(f"unknown option {k!r}; Ember's options are "
                             f"{', '.join(sorted(OPTIONS))}")
        allowed = OPTIONS[k].values
        if not any(v is a or (type(v) is type(a) and v == a) for a in allowed):
            raise ValueError(f"options[{k!r}] must be one of "
                             f"{', '.join(map(repr, allowed))}; got {v!r}")
    isa.selected(options)  # a level this CPU cannot run fails now, not at the first build
    return dict(options)
