"""``mode="reduce-overhead"`` on CUDA: replay a compiled graph as a recorded CUDA graph.

Per input signature (shapes, strides, dtypes, devices and the integer arguments) the graph is
warmed up on a side stream, recorded once into static input buffers, then replayed: each call
copies its inputs into the static buffers, replays, and returns clones of the outputs (the
recorded outputs live in the graph's memory pool and are overwritten by the next replay, so
cloning keeps torch's usual ownership). Inputs the graph mutates (``copy_`` into a
placeholder, e.g. batch-norm running statistics) are copied back after each replay. A new
signature records a new graph; graphs are kept per signature. Used only when every tensor
input is on CUDA; anything else calls the compiled function directly.
"""

from __future__ import annotations

from collections import Counter

import torch

from ember.core.logs import get_logger

log = get_logger("perf_hints")

# Process-wide counters (tests read them): graphs recorded, replays.
stats: Counter = Counter()


def _signature(args) -> tuple:
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append((tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad))
        else:
            sig.append(a)  # sizes (SymInt placeholders) and other Python values
    return tuple(sig)


def _mutated_inputs(gm: torch.fx.GraphModule) -> list[int]:
    """Positions of placeholders the graph writes in place (``aten.copy_(input, ...)``)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and getattr(n.target, "_overloadpacket", None) is \
                torch.ops.aten.copy_ and n.args and n.args[0] in placeholders:
            out.append(placeholders.index(n.args[0]))
    return sorted(set(out))


class _Recorded:
    """One CUDA graph with its static inputs and outputs."""

    def __init__(self, fn, args: list, warmup: int = 2):
        self.static_in = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):  # Triton compiles and autotunes here, outside the capture
                fn(list(self.static_in))
        torch.cuda.current_stream().wait_stream(stream)
        for a, s in zip(args, self.static_in):  # warm-up runs may have mutated the copies
            if isinstance(a, torch.Tensor):
                s.copy_(a)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):  # a private pool per graph
            self.static_out = fn(list(self.static_in))
        stats["recorded"] += 1

    def __call__(self, args: list, mutated: list[int]) -> list:
        for a, s in zip(args, self.static_in):
            if isinstance(a, torch.Tensor) and a.data_ptr() != s.data_ptr():
                s.copy_(a)
        self.graph.replay()
        stats["replays"] += 1
        for i in mutated:
            args[i].copy_(self.static_in[i])
        return [o.clone() if isinstance(o, torch.Tensor) else o for o in self.static_out]


def wrap(fn, gm: torch.fx.GraphModule):
    """A boxed callable replaying ``fn`` (boxed: takes the argument list) as CUDA graphs."""
    graphs: dict = {}
    mutated = _mutated_inputs(gm)

    def run(args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or any(t.device.type != "cuda" for t in tensors):
            return fn(args)
        sig = _signature(args)
        rec = graphs.get(sig)
        if rec is None:
            log.info("recording a CUDA graph for %d inputs (%d recorded so far)", len(args),
                     len(graphs))
            rec = graphs[sig] = _Recorded(fn, list(args))
        return rec(list(args), mutated)

    run._boxed_call = True
    return run
