"""The Triton FlashAttention-2 kernels, run on CPU by Triton's interpreter at tiny shapes.

``TRITON_INTERPRET`` must be set before triton itself is imported (triton's own library
functions are decorated then), so unless this process was started with it, the kernel tests
run in a child pytest process that is.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
OutOfResources = pytest.importorskip("triton.runtime.errors").OutOfResources

from ember.core import kernels  # noqa: E402
from ember.core.nn import attention_cpu  # noqa: E402
from ember.core.nn.attention_dropout import philox_uniform  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INTERPRETED, reason="runs in the interpreter subprocess")
ON_CUDA = not INTERPRETED and torch.cuda.is_available()
# kernel tests run on CPU tensors in the interpreter and, where there is one, on the GPU
interpreted_or_cuda = pytest.mark.skipif(not (INTERPRETED or ON_CUDA),
                                         reason="runs in the interpreter subprocess or on CUDA")
DEVICE = "cuda" if ON_CUDA else "cpu"


@pytest.mark.skipif(INTERPRETED, reason="this process already interprets Triton")
def test_kernels_in_an_interpreter_subprocess():
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           __file__], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


@pytest.fixture(scope="module")
def fa():
    from ember.core.nn import flash_attention_triton

    return flash_attention_triton


def _qkv(n, h, hkv, length_q, length_k, e, ev, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, h, length_q, e, generator=g).to(DEVICE, dtype),
            torch.randn(n, hkv, length_k, e, generator=g).to(DEVICE, dtype),
            torch.randn(n, hkv, length_k, ev, generator=g).to(DEVICE, dtype))


def _reference(q, k, v, mask, causal, scale):
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask, is_causal=causal,
                                         scale=scale, enable_gqa=True)
    return out, (qd, kd, vd)


CASES = [  # n, h, hkv, L, S, E, Ev, dtype, mask, causal
    (1, 2, 2, 19, 23, 16, 16, torch.float32, None, False),
    (1, 2, 1, 21, 13, 16, 16, torch.float32, None, True),
    (2, 2, 2, 17, 30, 24, 8, torch.float32, "bool", False),
    (1, 2, 2, 9, 33, 16, 16, torch.float32, "float", False),
    (1, 2, 1, 20, 20, 32, 32, torch.float16, None, True),
    (1, 1, 1, 18, 18, 16, 16, torch.bfloat16, "bool", False),
]
TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 3e-2}


# Shapes past one tile in every direction, at the GPU's block sizes (too slow to interpret).
GPU_CASES = [
    (2, 4, 2, 300, 517, 64, 64, torch.float16, None, True),
    (1, 4, 4, 1000, 1000, 128, 128, torch.bfloat16, None, False),
    (2, 2, 2, 257, 130, 96, 64, torch.float16, "bool", False),
    (1, 2, 1, 200, 333, 64, 64, torch.float32, "float", False),
    (1, 2, 2, 150, 140, 128, 128, torch.float32, None, True),
    (1, 1, 1, 70, 90, 256, 256, torch.float32, "bool", False),
]


def _case_params():
    cpu = [pytest.param(c, marks=interpreted) for c in CASES]
    gpu = [pytest.param(c, marks=[pytest.mark.cuda, pytest.mark.skipif(
        not ON_CUDA, reason="needs a CUDA device")]) for c in CASES + GPU_CASES]
    return cpu + gpu


@pytest.mark.parametrize("case", _case_params(),
                         ids=lambda c: f"{c[3]}x{c[4]}x{c[5]}-{c[7]}-{c[8]}-causal{c[9]}")
def test_forward_and_backward_match_reference(case, fa):
    n, h, hkv, length_q, length_k, e, ev, dtype, mask_kind, causal = case
    q, k, v = _qkv(n, h, hkv, length_q, length_k, e, ev, dtype)
    g = torch.Generator().manual_seed(5)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(n, 1, length_q, length_k, generator=g) > 0.3
        mask[..., 2, :] = False  # one fully masked row
    elif mask_kind == "float":
        mask = torch.randn(length_q, length_k, generator=g)
    mask = None if mask is None else mask.to(DEVICE)
    scale = e ** -0.5
    out, lse = fa.forward(q, k, v, mask, 0.0, causal, scale, None)
    ref, leaves = _reference(q, k, v, None if mask is None else mask.double()
                             if mask.is_floating_point() else mask, causal, scale)
    tol = TOL[dtype]
    assert out.dtype == dtype and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    grad = torch.randn(ref.shape, generator=g, dtype=torch.float64).to(DEVICE)
    ref.backward(grad)
    dq, dk, dv = fa.backward(grad.to(dtype), q, k, v, out, lse, mask, 0.0,
                                                 causal, scale, None)
    for ours, leaf in zip((dq, dk, dv), leaves):
        assert ours.dtype == dtype and ours.shape == leaf.shape
        torch.testing.assert_close(ours.double(), leaf.grad, rtol=5 * tol, atol=5 * tol)


@interpreted_or_cuda
def test_head_dim_256_and_fallback_above(fa):
    q, k, v = _qkv(1, 1, 1, 16, 16, 256, 256, torch.float32)
    out, _ = fa.forward(q, k, v, None, 0.0, False, 0.1, None)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.1),
                               rtol=1e-4, atol=1e-4)
    q, k, v = _qkv(1, 1, 1, 8, 8, 260, 8, torch.float32)  # beyond 256: tiled torch path
    out, _ = fa.forward(q, k, v, None, 0.0, False, 0.1, None)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.1))


def test_block_sizes_shrink_with_the_bytes_of_a_row(fa, monkeypatch):
    """A float32 row of 64 takes the tiles of a 16-bit row of 128: its shared memory is the same."""
    monkeypatch.setattr(triton.knobs.runtime, "interpret", False)
    assert fa.block_sizes(64, 4) == fa.block_sizes(128, 2) != fa.block_sizes(64, 2)
    assert fa.block_sizes(256, 4)[:2] < fa.block_sizes(256, 2)[:2]


class _NoRoom:
    """Stands in for a kernel whose launch needs more shared memory than the GPU has."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise OutOfResources(264192, 232448, "shared memory")
        return launch


def test_a_launch_out_of_shared_memory_falls_back_to_the_tiled_path(fa, monkeypatch, caplog):
    for name in ("_fwd_kernel", "_bwd_kv_kernel", "_bwd_q_kernel"):
        monkeypatch.setattr(fa, name, _NoRoom())
    q, k, v = _qkv(1, 2, 1, 9, 11, 16, 16, torch.float32)
    q, k, v = q.cpu(), k.cpu(), v.cpu()
    with caplog.at_level("WARNING", logger="ember.attention"):
        out, lse = fa.forward(q, k, v, None, 0.0, True, 0.25, None)
        grads = fa.backward(torch.ones_like(out), q, k, v, out, lse, None, 0.0, True, 0.25, None)
    assert sum("OutOfResources" in r.getMessage() for r in caplog.records) == 2
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaves, is_causal=True, scale=0.25, enable_gqa=True)
    ref.sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for a, leaf in zip(grads, leaves):
        torch.testing.assert_close(a, leaf.grad, rtol=1e-5, atol=1e-5)


@interpreted_or_cuda
def test_philox_in_torch_ops_equals_tl_rand():
    @triton.jit
    def draw(out_ptr, seed, base, n: tl.constexpr):
        offs = tl.arange(0, n)
        tl.store(out_ptr + offs, tl.rand(seed, base + offs.to(tl.int64)))

    for seed, base in ((0, 0), (123456789, 7), (2**40 + 5, 2**33 + 11)):
        out = torch.empty(64, device=DEVICE)
        draw[(1,)](out, seed, base, 64)
        expected = philox_uniform(seed, torch.arange(64, dtype=torch.int64) + base)
        torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


@interpreted_or_cuda
def test_dropout_replays_the_cpu_kernel_forward_and_backward(fa):
    q, k, v = _qkv(1, 2, 1, 18, 21, 16, 16, torch.float32)
    rng = torch.tensor([2024, 77])
    args = (None, 0.3, False, 0.25, rng)
    out, lse = fa.forward(q, k, v, *args)
    qc, kc, vc = (t.cpu() for t in (q, k, v))
    cpu_out, cpu_lse = attention_cpu.forward(qc, kc, vc, *args)
    torch.testing.assert_close(out.cpu(), cpu_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lse.cpu(), cpu_lse, rtol=1e-4, atol=1e-4)
    grad = torch.randn_like(out)
    for a, b in zip(fa.backward(grad, q, k, v, out, lse, *args),
                    attention_cpu.backward(grad.cpu(), qc, kc, vc, cpu_out, cpu_lse, *args)):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-4)


@interpreted_or_cuda
def test_cuda_kernel_registered_on_the_op():
    """The op's cuda entry runs the Triton kernels (on CPU tensors: through the interpreter)."""
    for op in ("ember::sdpa", "ember::sdpa_backward"):
        assert kernels.registered()[op] == ["cpu", "cuda", "portable"]
    q, k, v = _qkv(1, 2, 2, 10, 12, 16, 16, torch.float32)
    fwd = kernels.get("ember::sdpa").kernels["cuda"]
    bwd = kernels.get("ember::sdpa_backward").kernels["cuda"]
    out, lse = fwd(q, k, v, None, 0.0, True, 0.25, None)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    dq, dk, dv = bwd(torch.ones_like(out), q, k, v, out, lse, None, 0.0, True, 0.25, None)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*leaves, is_causal=True, scale=0.25).sum().backward()
    for a, leaf in zip((dq, dk, dv), leaves):
        torch.testing.assert_close(a, leaf.grad, rtol=1e-4, atol=1e-4)
