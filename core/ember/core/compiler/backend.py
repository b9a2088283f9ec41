"""The ``ember`` TorchDynamo backend: AOTAutograd with our decompositions in front of
``pipeline.compile_graph``.

Dynamo hands ``ember_backend`` an FX graph; torch-level patterns are applied, devices without
a code generator take the portable path, and AOTAutograd traces forward / backward (or one
inference) graph through the decomposition table into the pipeline.
"""

from __future__ import annotations

import functools

import torch

from ember.core.compiler import (
    capture,
    channels_last,
    eager_parity,
    freezing,
    multiply_adds,
    overlapping_writes,
    patterns,
    routing,
)
from ember.core.compiler.decompose import decomposition_table, log_graph
from ember.core.compiler.options import check_mode, check_options
from ember.core.compiler.pipeline import compile_graph, run_in_eager, stats
from ember.core.logs import get_logger

# ``stats`` (graphs compiled / fallen back, kernels) is the pipeline's, read here by callers
# that count compiled graphs through the backend (tests, benches).
__all__ = ["compile_graph", "ember_backend", "stats"]

log = get_logger("aot")


def _make_aot(options: dict, params: list):
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    fw = functools.partial(compile_graph, options=options)

    def fw_compiler(gm, example_inputs):
        log.info("forward graph: %d nodes", len(gm.graph.nodes))
        log_graph("forward", gm)
        return fw(gm, example_inputs)

    def bw_compiler(gm, example_inputs):
        log.info("backward graph: %d nodes", len(gm.graph.nodes))
        log_graph("backward", gm)
        return fw(gm, example_inputs)

    infer = functools.partial(compile_graph, options={**options, "inference": True})

    def inference_compiler(gm, example_inputs):
        log.info("inference graph: %d nodes", len(gm.graph.nodes))
        log_graph("inference", gm)
        if options.get("freezing"):
            return freezing.freeze(gm, example_inputs, params, infer,
                                   strict=bool(options.get("strict")))
        if options.get("channels_last", True):
            channels_last.apply(gm, set(), jit=True)
        return infer(gm, example_inputs)

    return aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                        inference_compiler=inference_compiler,
                        decompositions=decomposition_table(),
                        partition_fn=min_cut_rematerialization_partition,
                        keep_inference_input_mutations=True)


def ember_backend(gm: torch.fx.GraphModule, example_inputs, *, mode: str | None = None,
                  options: dict | None = None):
    """TorchDynamo backend entry point (``torch.compile(m, backend="ember")``)."""
    options = check_options(options, internal=True)  # torch.compile(options=) lands here
    options["mode"] = check_mode(mode)
    capture.install()
    capture.record_graph(gm)
    refused = overlapping_writes.find(gm)
    if refused:  # eager raises its own error, or writes the shared memory, for such a write
        return run_in_eager(gm.forward, refused)
    patterns.apply(gm, options)  # torch-level rewrites (unfused attention -> ember sdpa)
    eager_parity.apply(gm)  # where torch's decompositions index otherwise than eager
    multiply_adds.apply(gm)  # Dynamo's addcmul_ / addcdiv_ as eager rounds them
    device = routing.device_type(example_inputs)
    if routing.codegen_for(device, options) == "portable":
        routing.announce_portable(device)
        return gm.forward
    # freezing bakes in the real parameters; the other inputs are not kept
    params = [t if freezing.is_parameter(t) else None for t in example_inputs] \
        if options.get("freezing") else []
    return _make_aot(options, params)(gm, example_inputs)
