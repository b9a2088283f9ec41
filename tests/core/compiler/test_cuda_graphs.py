"""CUDA: Triton codegen on the GPU and ``mode="reduce-overhead"`` (CUDA graphs).

The GPU cases are marked ``cuda`` and skipped without a device; the CPU cases check that the
CUDA-graph wrapper leaves CPU graphs alone and finds the inputs a graph mutates.
"""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ember.core.compiler import compile as ember_compile
from ember.core.compiler.runtime import cudagraphs

no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _compile(fn, **kwargs):
    torch._dynamo.reset()
    return ember_compile(fn, options={"strict": True, **kwargs.pop("options", {})}, **kwargs)


def test_wrapper_calls_cpu_graphs_directly():
    calls = []

    def fn(args):
        calls.append(len(args))
        return [args[0] * 2]

    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    run = cudagraphs.wrap(fn, gm)
    recorded = cudagraphs.stats["recorded"]
    out = run([torch.ones(3), 4])
    torch.testing.assert_close(out[0], torch.full((3,), 2.0))
    assert calls == [2] and cudagraphs.stats["recorded"] == recorded


def test_mutated_inputs_are_found():
    def f(x, running):
        running.copy_(running * 0.9 + x.mean())
        return x + 1

    gm = torch.fx.symbolic_trace(f)
    # symbolic_trace records the method call; rewrite it as the ATen op AOTAutograd emits
    for n in gm.graph.nodes:
        if n.op == "call_method" and n.target == "copy_":
            n.op, n.target = "call_function", torch.ops.aten.copy_.default
    gm.recompile()
    assert cudagraphs._mutated_inputs(gm) == [1]


@pytest.mark.cuda
@no_cuda
@pytest.mark.timeout(300)  # max-autotune builds every candidate config with ptxas
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_on_cuda_matches_eager(dtype, matches):
    x = torch.randn(64, 300, device="cuda", dtype=dtype)
    w = torch.randn(300, device="cuda", dtype=dtype)
    f = lambda x, w: (torch.softmax(x, -1), F.layer_norm(x, (300,), w), x.sum(0), x.amax(),
                      F.gelu(x) * w, x.t().contiguous() + 1, x.float().var(-1))
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    for mode in ("default", "max-autotune"):
        matches(_compile(f, mode=mode)(x, w), f(x, w), atol=tol, rtol=tol)


@pytest.mark.cuda
@no_cuda
def test_reduce_overhead_replays_and_rerecords_on_new_shapes(matches):
    f = lambda x, y: (torch.relu(x) * y).sum(-1) + 1
    compiled = _compile(f, mode="reduce-overhead", dynamic=False)
    recorded, replays = cudagraphs.stats["recorded"], cudagraphs.stats["replays"]
    x, y = torch.randn(8, 32, device="cuda"), torch.randn(8, 32, device="cuda")
    first = compiled(x, y)
    matches(first, f(x, y))
    x2 = torch.randn(8, 32, device="cuda")
    second = compiled(x2, y)  # same shapes: a replay with the new input copied in
    matches(second, f(x2, y))
    matches(first, f(x, y))  # outputs are clones: the replay did not overwrite them
    x3, y3 = torch.randn(5, 16, device="cuda"), torch.randn(5, 16, device="cuda")
    matches(compiled(x3, y3), f(x3, y3))  # new shapes: a new graph
    matches(compiled(x, y), f(x, y))
    assert cudagraphs.stats["recorded"] - recorded >= 2
    assert cudagraphs.stats["replays"] - replays == 4


@pytest.mark.cuda
@no_cuda
def test_reduce_overhead_keeps_input_mutations(matches):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.ReLU()).cuda().train()
    ref = copy.deepcopy(model)
    compiled = _compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(8, 16, device="cuda")
            matches(compiled(x), ref(x), atol=1e-4, rtol=1e-4)
    for b, r in zip(model.buffers(), ref.buffers()):
        torch.testing.assert_close(b, r, atol=1e-5, rtol=1e-5)
