"""scaled_dot_product_attention against torch's own, over shapes, dtypes, masks, causal, GQA."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ember.core import kernels
from ember.core.nn import attention_cpu, attention_math, attention_native
from ember.core.nn.attention_dropout import keep_scale
from ember.core.nn.functional import scaled_dot_product_attention as sdpa


@pytest.fixture(params=["one_tile", "many_tiles", "threaded", "native_one_tile",
                        "native_many_tiles"])
def tiles(request, monkeypatch):
    """Run each case through the torch-op tiles with one big tile, with many small tiles (online
    softmax across tiles) and with many tiles spread over the worker threads; and through the
    native kernel with one tile on one thread and many tiles on all threads."""
    native = request.param.startswith("native")
    monkeypatch.setattr(attention_native, "enabled", native)
    big = request.param.endswith("one_tile")
    module = attention_native if native else attention_cpu
    monkeypatch.setattr(module, "BLOCK_Q", 4096 if big else 16)
    monkeypatch.setattr(module, "BLOCK_K", 4096 if big else 16)
    monkeypatch.setattr(attention_cpu, "THREADED_MIN_ELEMENTS",
                        0 if request.param == "threaded" else 1 << 62)
    # the native kernel: many tiles on every thread, one tile on one thread
    monkeypatch.setattr(attention_native, "THREADED_MIN_ELEMENTS", 1 << 62 if big else 0)
    if native:
        assert attention_native.available(*[torch.zeros(1)] * 3), "native kernel missing"
    return request.param


def _qkv(b, h, hkv, length_q, length_k, e, ev, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length_q, e, generator=g, dtype=dtype)
    k = torch.randn(b, hkv, length_k, e, generator=g, dtype=dtype)
    v = torch.randn(b, hkv, length_k, ev, generator=g, dtype=dtype)
    return q, k, v


SHAPES = [  # b, h, hkv, L, S, E, Ev
    (2, 3, 3, 17, 23, 8, 8),
    (1, 4, 2, 40, 33, 16, 12),
    (2, 6, 1, 1, 50, 4, 4),
    (1, 2, 2, 50, 1, 8, 8),
    (3, 1, 1, 64, 64, 32, 16),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_forward_and_backward(shape, causal, tiles):
    b, h, hkv, length_q, length_k, e, ev = shape
    q, k, v = (t.requires_grad_() for t in _qkv(*shape))
    out = sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    grad = torch.randn_like(ref)
    ours = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(ref, (q, k, v), grad)
    for a, r in zip(ours, theirs):
        torch.testing.assert_close(a, r, rtol=1e-9, atol=1e-9)


MASKS = {
    "bool_LS": lambda b, h, L, S, g: torch.rand(L, S, generator=g) > 0.4,
    "bool_B1LS": lambda b, h, L, S, g: torch.rand(b, 1, L, S, generator=g) > 0.4,
    "bool_1H1S": lambda b, h, L, S, g: torch.rand(1, h, 1, S, generator=g) > 0.2,
    "float_LS": lambda b, h, L, S, g: torch.randn(L, S, generator=g, dtype=torch.float64),
    "float_BHLS": lambda b, h, L, S, g: torch.randn(b, h, L, S, generator=g, dtype=torch.float64),
    "float_1S": lambda b, h, L, S, g: torch.randn(1, S, generator=g, dtype=torch.float64),
}


@pytest.mark.parametrize("mask_kind", sorted(MASKS))
def test_masks_match_torch(mask_kind, tiles):
    shape = (2, 4, 2, 37, 45, 8, 8)
    q, k, v = (t.requires_grad_() for t in _qkv(*shape))
    mask = MASKS[mask_kind](2, 4, 37, 45, torch.Generator().manual_seed(1))
    out = sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    grad = torch.randn_like(ref)
    for a, r in zip(torch.autograd.grad(out, (q, k, v), grad),
                    torch.autograd.grad(ref, (q, k, v), grad)):
        torch.testing.assert_close(a, r, rtol=1e-9, atol=1e-9)


def test_fully_masked_rows_give_zeros_and_finite_grads(tiles):
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 2, 20, 30, 8, 8))
    mask = torch.rand(20, 30) > 0.5
    mask[3] = False
    mask[17] = False
    out = sdpa(q, k, v, attn_mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref)
    assert torch.all(out[:, :, 3] == 0)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 2e-2),
                                       (torch.float16, 2e-3)])
def test_low_precision_dtypes(dtype, tol, tiles):
    q, k, v = (t.to(dtype).requires_grad_() for t in _qkv(2, 2, 2, 33, 47, 16, 16))
    mask = torch.rand(33, 47) > 0.3
    out = sdpa(q, k, v, attn_mask=mask)
    assert out.dtype == dtype
    # reference: float64 math on the same (rounded) inputs
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask)
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    grad = torch.randn_like(ref)
    out.backward(grad.to(dtype))
    ref.backward(grad)
    for a, r in zip((q, k, v), (qd, kd, vd)):
        assert a.grad.dtype == dtype
        torch.testing.assert_close(a.grad.double(), r.grad, rtol=4 * tol, atol=4 * tol)


@pytest.mark.parametrize("shapes", [
    ((3, 10, 8), (3, 12, 8), (3, 12, 5)),            # unbatched [H, L, E]
    ((10, 8), (12, 8), (12, 6)),                      # [L, E]
    ((2, 3, 4, 10, 8), (2, 3, 4, 12, 8), (2, 3, 4, 12, 8)),  # extra leading dim
    ((2, 4, 10, 8), (1, 4, 12, 8), (1, 4, 12, 8)),    # batch broadcast
])
def test_leading_dims_like_torch(shapes):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g, dtype=torch.float64) for s in shapes)
    out = sdpa(q, k, v, scale=0.3)
    ref = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref)


def test_gradcheck_float64(tiles):
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 1, 9, 21, 4, 3))
    mask = torch.randn(9, 21, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda q, k, v: sdpa(q, k, v, attn_mask=mask, enable_gqa=True), (q, k, v))
    assert torch.autograd.gradcheck(
        lambda q, k, v: sdpa(q, k, v, is_causal=True, enable_gqa=True), (q, k, v))


def test_mask_requiring_grad_matches_torch():
    q, k, v = _qkv(1, 2, 2, 6, 7, 4, 4)
    mask = torch.randn(6, 7, dtype=torch.float64, requires_grad=True)
    sdpa(q, k, v, attn_mask=mask).sum().backward()
    ours = mask.grad.clone()
    mask.grad = None
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    torch.testing.assert_close(ours, mask.grad)


def test_never_materialises_the_score_matrix(monkeypatch):
    """Every intermediate of the torch-op tiles is far smaller than L x S per head."""
    # dispatch modes are per thread: run the units inline so every op is seen
    monkeypatch.setattr(attention_native, "enabled", False)
    monkeypatch.setattr(attention_cpu, "BLOCK_Q", 128)
    monkeypatch.setattr(attention_cpu, "BLOCK_K", 256)
    sizes = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    sizes.append(t.numel())
            return out

    length = 1024
    q, k, v = (torch.randn(1, 1, length, 8) for _ in range(3))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one intra-op thread: ember.core.parallel runs units inline
    try:
        with Record():
            out, lse = attention_cpu.forward(q, k, v, None, 0.0, False, 0.3, None)
            attention_cpu.backward(torch.ones_like(out), q, k, v, out, lse, None, 0.0, False,
                                   0.3, None)
    finally:
        torch.set_num_threads(threads)
    assert len(sizes) > 100  # the tile loop was recorded
    assert max(sizes) <= length * length // 16


def test_native_kernel_allocates_only_linear_tensors(monkeypatch):
    """The native kernel's tensors are O(L) per head; its C++ tiles are BLOCK_Q x BLOCK_K."""
    monkeypatch.setattr(attention_native, "enabled", True)
    sizes = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    sizes.append(t.numel())
            return out

    length = 2048
    q, k, v = (torch.randn(1, 1, length, 8) for _ in range(3))
    with Record():
        out, lse = attention_cpu.forward(q, k, v, None, 0.0, True, 0.3, None)
        grads = attention_cpu.backward(torch.ones_like(out), q, k, v, out, lse, None, 0.0, True,
                                       0.3, None)
    assert max(sizes) <= torch.get_num_threads() * length * 8
    ref = F.scaled_dot_product_attention(*(t.requires_grad_() for t in (q, k, v)),
                                         is_causal=True, scale=0.3)
    ref.backward(torch.ones_like(ref))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for g, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-4)


def test_dropout_statistics():
    rng = torch.tensor([1234, 99])
    for p in (0.1, 0.5):
        keep = keep_scale(rng, p, slice(0, 4), slice(0, 64), slice(0, 256), 64, 256, torch.float32)
        assert keep.shape == (4, 64, 256)
        kept = keep > 0
        assert abs(kept.float().mean().item() - (1 - p)) < 0.01
        torch.testing.assert_close(keep[kept], torch.full_like(keep[kept], 1 / (1 - p)))
    # A tile cut out of a larger one has the same mask: tiling never changes the draw.
    whole = keep_scale(rng, 0.3, slice(0, 2), slice(0, 20), slice(0, 30), 20, 30, torch.float32)
    part = keep_scale(rng, 0.3, slice(1, 2), slice(5, 12), slice(10, 25), 20, 30, torch.float32)
    torch.testing.assert_close(part, whole[1:, 5:12, 10:25])


def test_dropout_expectation_and_replay(tiles):
    # With uniform attention and v = 1 each output is the kept fraction times 1/(1-p).
    q = torch.zeros(2, 2, 64, 8)
    k = torch.zeros(2, 2, 512, 8)
    v = torch.ones(2, 2, 512, 4)
    out = sdpa(q, k, v, dropout_p=0.25)
    assert abs(out.mean().item() - 1.0) < 0.02
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 2, 30, 40, 8, 8, dtype=torch.float32))
    torch.manual_seed(7)
    a = sdpa(q, k, v, dropout_p=0.3)
    torch.manual_seed(7)
    b = sdpa(q, k, v, dropout_p=0.3)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, sdpa(q, k, v, dropout_p=0.3))


def test_dropout_matches_math_path_and_backward_replays_the_mask(tiles):
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 1, 7, 19, 3, 2))
    rng = torch.tensor([42, 1000])
    op = torch.ops.ember.sdpa
    out, lse = op(q, k, v, None, 0.4, False, 0.5, rng)
    ref, ref_lse = attention_math.attention(q, k, v, None, 0.4, False, 0.5, rng)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse)
    # gradcheck with the same (seed, offset) each call: backward must use forward's mask.
    assert torch.autograd.gradcheck(lambda q, k, v: op(q, k, v, None, 0.4, False, 0.5, rng)[0],
                                    (q, k, v))
    causal = lambda q, k, v: op(q, k, v, None, 0.2, True, 0.5, rng)[0]
    assert torch.autograd.gradcheck(causal, (q, k, v))


def test_portable_kernel_is_the_math_path():
    q, k, v = _qkv(1, 4, 2, 10, 14, 8, 8)
    mask = torch.rand(10, 14) > 0.3
    portable = kernels.get("ember::sdpa").kernels["portable"]
    out, lse = portable(q, k, v, mask[None, None], 0.0, False, 0.25, None)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                   scale=0.25, enable_gqa=True))
    scores = (q @ attention_math.repeat_kv(k, 4).mT * 0.25).masked_fill(~mask, -math.inf)
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1))
    backward = kernels.get("ember::sdpa_backward").kernels["portable"]
    grad = torch.randn_like(out)
    dq, dk, dv = backward(grad, q, k, v, out, lse, mask[None, None], 0.0, False, 0.25, None)
    cpu = attention_cpu.backward(grad, q, k, v, out, lse, mask[None, None], 0.0, False, 0.25,
                                 None)
    for a, b in zip((dq, dk, dv), cpu):
        torch.testing.assert_close(a, b)


def test_meta_tensors_use_the_fake():
    q = torch.empty(2, 4, 10, 16, device="meta")
    k = torch.empty(2, 2, 12, 16, device="meta")
    v = torch.empty(2, 2, 12, 8, device="meta")
    out = sdpa(q, k, v, enable_gqa=True)
    assert out.shape == (2, 4, 10, 8) and out.device.type == "meta"


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
def test_compiles_without_graph_breaks(dropout_p):
    def block(q, k, v):
        return sdpa(q.sin(), k, v, dropout_p=dropout_p, is_causal=True).cos()

    q, k, v = _qkv(1, 2, 2, 8, 8, 4, 4, dtype=torch.float32)
    explanation = torch._dynamo.explain(block)(q, k, v)
    assert explanation.graph_break_count == 0
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    q.requires_grad_()
    torch.manual_seed(3)
    out = compiled(q, k, v)
    out.sum().backward()
    torch.manual_seed(3)
    eager_q = q.detach().requires_grad_()
    ref = block(eager_q, k, v)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(q.grad, eager_q.grad)
    torch._dynamo.reset()


@pytest.mark.parametrize("kwargs,match", [
    (dict(query=[1.0]), "query must be a torch.Tensor"),
    (dict(query=torch.zeros(2, 3, 4, dtype=torch.int64)), "query must be float16"),
    (dict(key=torch.zeros(2, 5, 7)), "key must have query's feature size"),
    (dict(value=torch.zeros(2, 6, 4)), "value must have key's length"),
    (dict(value=torch.zeros(2, 5, 4, dtype=torch.float64)), "must share a dtype"),
    (dict(key=torch.zeros(1, 5, 4), value=torch.zeros(1, 5, 4)), "enable_gqa"),
    (dict(attn_mask=torch.zeros(4, 5, dtype=torch.bool)), "attn_mask of shape"),
    (dict(attn_mask=torch.zeros(3, 5, dtype=torch.int32)), "attn_mask must be bool"),
    (dict(attn_mask=torch.zeros(3, 5, dtype=torch.bool), is_causal=True), "attn_mask must be None"),
    (dict(dropout_p=1.5), "dropout_p must be"),
    (dict(scale="big"), "scale must be"),
    (dict(query=torch.zeros(3)), "at least 2 dimensions"),
    (dict(query=torch.zeros(3, 2, 3, 4), key=torch.zeros(2, 2, 5, 4),
          value=torch.zeros(2, 2, 5, 4)), "batch dimensions must broadcast"),
    (dict(attn_mask=torch.zeros(2, 1, 3, 5, dtype=torch.bool)), "attn_mask of shape"),
])
def test_bad_input_names_the_argument(kwargs, match):
    args = dict(query=torch.zeros(2, 3, 4), key=torch.zeros(2, 5, 4), value=torch.zeros(2, 5, 4))
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        sdpa(**args)


def test_forked_child_gets_fresh_workers(monkeypatch):
    """A fork after the workers started must not hang the child's attention."""
    import multiprocessing

    monkeypatch.setattr(attention_cpu, "THREADED_MIN_ELEMENTS", 0)
    q, k, v = _qkv(1, 2, 2, 16, 16, 8, 8, dtype=torch.float32)
    expected = sdpa(q, k, v)  # starts the worker pool in this process
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        out = pool.apply_async(_child_attention, (q, k, v)).get(timeout=120)
    torch.testing.assert_close(out, expected)


def _child_attention(q, k, v):
    attention_cpu.THREADED_MIN_ELEMENTS = 0
    return sdpa(q, k, v)


def test_op_fakes_match_kernels_for_permuted_inputs():
    # Inductor trusts the fake's strides: a [B, L, H, E] tensor viewed as [B, H, L, E] must
    # give gradients laid out as the kernels really return them (contiguous).
    from ember.core.nn.attention_op import sdpa, sdpa_backward

    q, k, v = (torch.randn(2, 6, 3, 8).transpose(1, 2) for _ in range(3))
    out, lse = sdpa(q, k, v, None, 0.0, False, 0.35, None)
    args = (torch.randn_like(out), q, k, v, out, lse, None, 0.0, False, 0.35, None)
    torch.library.opcheck(sdpa.op.default, (q, k, v, None, 0.0, True, 0.35, None),
                          test_utils=("test_faketensor",))
    torch.library.opcheck(sdpa_backward.op.default, args, test_utils=("test_faketensor",))
    assert all(g.is_contiguous() for g in sdpa_backward(*args))
