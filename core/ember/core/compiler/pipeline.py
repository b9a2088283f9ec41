"""One ATen graph through the stages: lower -> schedule -> codegen -> build -> a callable.

``compile_graph`` is what AOTAutograd's compilers call; it returns a boxed callable running
our kernels and externs, or the graph itself in eager ATen (with a logged reason) when any
stage fails and ``strict`` is off.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import NamedTuple

import torch
from torch.fx import GraphModule

from ember.core.compiler import capture, modes, routing
from ember.core.compiler.codegen import arena, wrapper
from ember.core.compiler.ir import Buffer, Extern, StridedView
from ember.core.compiler.lowering.graph import GraphLowering
from ember.core.compiler.runtime import cpp_kernels
from ember.core.compiler.schedule import Kernel, schedule
from ember.core.logs import get_logger

fallback_log = get_logger("fallback")
output_log = get_logger("output_code")
codegen_log = get_logger("codegen")

# Process-wide counters: graphs compiled / fallen back, kernels generated.
stats: Counter = Counter()


def _boxed(fn):
    def call(args):
        return fn(*args)
    call._boxed_call = True
    return call


def compile_graph(gm: GraphModule, example_inputs, *, options: dict | None = None):
    """ATen FX graph -> boxed callable running our kernels (eager fallback on failure).

    ``options``: the user's ``compile(options=...)`` plus ``mode``; ``strict`` re-raises.
    """
    options = options or {}
    strict = bool(options.get("strict", False))
    try:
        call = _compile(gm, example_inputs, options)
        if os.environ.get("EMBER_CHECK"):
            return _checked(call, gm)
        return call
    except Exception as e:
        if strict:
            raise
        return _boxed(run_in_eager(gm.forward, f"{type(e).__name__}: {e}"))


def run_in_eager(forward, reason: str):
    """``forward`` left uncompiled: counted, logged with ``reason`` and kept for explain."""
    stats["graphs_fallback"] += 1
    fallback_log.warning("graph runs in eager ATen: %s", reason)
    capture.record_fallback(f"<graph: {reason}>")
    return forward


def _checked(call, gm: GraphModule):
    """Debug aid (EMBER_CHECK=1): run eager alongside and report the first mismatch."""
    def run(args):
        ours = call(list(args))
        ref = gm.forward(*args)
        for i, (a, b) in enumerate(zip(ours, ref)):
            if isinstance(a, torch.Tensor) and not torch.allclose(a, b, atol=1e-4, rtol=1e-4,
                                                                  equal_nan=True):
                raise AssertionError(f"output {i} differs from eager:\n{gm.code}")
        return ours
    run._boxed_call = True
    return run


class Lowered(NamedTuple):
    """One graph lowered and scheduled: what code generators and wrappers start from."""

    graph: GraphLowering
    buffers: dict  # name -> Buffer: inputs, constants and every node's outputs
    steps: list  # Kernel | Extern, in run order
    kernels: list  # the Kernel steps


def lower(gm: GraphModule, device: str, inference: bool, triton: bool = False) -> Lowered:
    """Lower ``gm`` to IR and schedule it into kernels and extern calls (for Triton's code
    generator when ``triton``, else C++)."""
    g = GraphLowering(gm, device=device, inference=inference, triton=triton)
    g.run()
    for name in g.fallback_ops:
        capture.record_fallback(name)
    buffers: dict[str, Buffer] = {}
    for b in g.inputs:
        if isinstance(b, Buffer):
            buffers[b.name] = b
    for name, t in g.constants.items():
        buffers[name] = Buffer(name, t.dtype, list(t.shape), list(t.stride()))
    for n in g.nodes:
        for b in (n.outs if isinstance(n, Extern) else [n.buf]):
            if b is not None:
                buffers[b.name] = b
    outputs = {o.buf.name for o in g.outputs if isinstance(o, StridedView)}
    outputs |= {c.flag.buf.name for c in g.checks}
    steps = schedule(g.nodes, outputs)
    return Lowered(g, buffers, steps, [s for s in steps if isinstance(s, Kernel)])


def _compile(gm: GraphModule, example_inputs, options: dict):
    device = routing.device_type(example_inputs)
    use_triton = routing.codegen_for(device, options) == "triton"
    if use_triton:
        from ember.core.compiler.runtime import triton_kernels

        device = triton_kernels.check_device(device)
    lowered = lower(gm, device if use_triton else "cpu", bool(options.get("inference")),
                    triton=use_triton)
    g, buffers, steps, kernels = lowered.graph, lowered.buffers, lowered.steps, lowered.kernels
    if use_triton:
        libs, tu = triton_kernels.load_kernels(kernels, buffers, options)
    else:
        libs, tu = cpp_kernels.load(steps, buffers, options)
    # a tuned kernel re-runs on its real arguments: none of them may be overwritten
    plan = wrapper.plan(g.inputs, g.outputs, g.checks, steps, wrapper.specs_of(libs), buffers,
                        inplace=not modes.tunes_kernels(options),
                        segments=wrapper.segments_of(libs), extern_out=not use_triton)
    if not use_triton and options.get("arena", True):
        plan = arena.place(plan)
    src, globs = wrapper.PythonWrapper(g.constants, libs, device=g.device).render(plan)
    if output_log.isEnabledFor(logging.INFO):
        output_log.info("generated %s:\n%s\nwrapper:\n%s", "Triton" if use_triton else "C++",
                        tu, src)
    codegen_log.info("graph: %d IR nodes -> %d kernels, %d externs", len(g.nodes),
                     len(kernels), len(steps) - len(kernels))
    exec(compile(src, "<ember wrapper>", "exec"), globs)
    call = globs["call"]
    if use_triton:
        call = triton_kernels.finish(call, gm, options, g.device)
    call._boxed_call = True
    stats["graphs_compiled"] += 1
    stats["kernels"] += len(kernels)
    return call
