"""Public API: ``compile`` (torch.compile's signature, our backend) and ``explain``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ember.core.compiler import capture
from ember.core.compiler.backend import ember_backend
from ember.core.compiler.options import check_dynamic, check_mode, check_options


def compile(model: Callable | None = None, *, mode: str | None = "default",
            dynamic: bool | None = None, fullgraph: bool = False, backend="ember",
            options: dict | None = None):
    """Compile a function or module with Ember's backend; same semantics as torch.compile.

    A module result is torch's OptimizedModule: it keeps parameters, state_dict, train/eval.
    Bad arguments raise here (``options.py``): an unknown ``options`` key, a ``mode`` or
    ``dynamic`` torch.compile does not take.
    """
    if backend == "ember":
        check_mode(mode)
        options = check_options(options)
    check_dynamic(dynamic)
    if not isinstance(fullgraph, bool):
        raise TypeError(f"fullgraph must be True or False; got {fullgraph!r}")
    if model is None:
        return lambda m: compile(m, mode=mode, dynamic=dynamic, fullgraph=fullgraph,
                                 backend=backend, options=options)
    if not callable(model):
        raise TypeError(f"model must be a callable or nn.Module, got {type(model).__name__}")
    capture.install()
    if backend == "ember":
        backend = functools.partial(ember_backend, mode=mode, options=dict(options or {}))
        functools.update_wrapper(backend, ember_backend)
        return torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=fullgraph)
    return torch.compile(model, mode=mode, dynamic=dynamic, fullgraph=fullgraph,
                         backend=backend, options=options)


@dataclass
class ExplainOutput:
    """What ``explain`` found: captured graphs, graph breaks and eager fallbacks."""

    graphs: list = field(default_factory=list)
    graph_breaks: list = field(default_factory=list)  # reasons, in order
    fallback_ops: list = field(default_factory=list)
    output: object = None

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.graph_breaks)

    def __str__(self) -> str:
        lines = [f"graphs: {self.graph_count}", f"graph breaks: {self.graph_break_count}"]
        lines += [f"  - {r}" for r in self.graph_breaks]
        lines.append(f"ops in eager ATen: {', '.join(self.fallback_ops) or 'none'}")
        return "\n".join(lines)


def explain(fn: Callable, *args, **kwargs) -> ExplainOutput:
    """Compile ``fn`` with Ember, run it once on ``args`` and report what happened."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    before = dict(counters["graph_break"])
    rec = capture.start_recording()
    try:
        out = compile(fn)(*args, **kwargs)
    finally:
        capture.stop_recording()
    breaks = []
    for reason, n in counters["graph_break"].items():
        breaks += [reason] * (n - before.get(reason, 0))
    return ExplainOutput(list(rec["graphs"]), breaks, list(rec["fallback_ops"]), out)
