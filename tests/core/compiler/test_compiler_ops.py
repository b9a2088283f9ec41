"""Op-level suite: prims, decompositions, dtypes, broadcasting, layouts, all against eager."""

import pytest
import torch
import torch.nn.functional as F

from ember.core import explain
from ember.core.compiler.runtime import isa

pytestmark = pytest.mark.usefixtures("isa_level")  # native and AVX2

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.float64: 1e-7, torch.float16: 2e-3, torch.bfloat16: 2e-2}
SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-3, -2.5, 7.0]


def _unary(x):
    return (x.abs(), -x, x.exp(), x.exp2(), x.expm1(), x.log(), x.log2(), x.log10(), x.log1p(),
            x.sqrt(), x.rsqrt(), x.reciprocal(), x.sigmoid(), x.sin(), x.cos(), x.tan(),
            x.asin(), x.acos(), x.atan(), x.sinh(), x.cosh(), x.tanh(), x.asinh(), x.erf(),
            x.erfc(), x.floor(), x.ceil(), x.trunc(), x.round(), x.sign(), x.isnan(),
            x.isinf(), torch.relu(x), x.clamp(-1, 2), F.silu(x),
            F.gelu(x.clamp(-1e4, 1e4)),  # eager's erf-gelu(+inf) is nan, the formula's is inf
            F.gelu(x, approximate="tanh"), F.hardtanh(x), F.leaky_relu(x, 0.1), F.elu(x),
            F.softplus(x), x.square(), x ** 3)


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_prims(ecompile, matches, dtype):
    x = torch.cat([torch.randn(56) * 2, torch.tensor(SPECIAL)]).to(dtype).reshape(8, 8)
    matches(ecompile(_unary)(x), _unary(x), atol=TOL[dtype], rtol=TOL[dtype])


def test_bfloat16_store_rounds_like_eager_bitwise(ecompile):
    """float32 -> bfloat16 in a kernel that also calls exp (the vectorized path): round to
    nearest even, ties and infinities included, bit for bit; NaN stays NaN (its payload
    bits are the CPU's business: eager's differ between its AVX-512 and AVX2 paths)."""
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-2**31, 2**31 - 1, (4096,), generator=g, dtype=torch.int64)
    ties = torch.arange(-2048, 2048, dtype=torch.int64) * 65536 + 32768  # exactly halfway
    x = torch.cat([bits, ties]).to(torch.int32).view(torch.float32)
    x = torch.cat([x, torch.tensor(SPECIAL)])
    fn = lambda x: (x.to(torch.bfloat16),
                    torch.where(torch.exp(x.clamp(-80, 80)) >= 0, x, -x).to(torch.bfloat16))
    nan = x.isnan()
    for got, want in zip(ecompile(fn)(x), fn(x)):
        assert torch.equal(got.isnan(), nan)
        assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))


def test_bfloat16_values_stored_as_bfloat16_keep_their_bits(ecompile, output_code):
    """A value that is a bfloat16 already (a ReLU6 of a rounded result, a max, negation or
    select of bfloat16 inputs and representable constants) is stored by keeping its top 16
    bits, with eager's bits; a value that is not (times 1.5) is still rounded."""
    g = torch.Generator().manual_seed(2)
    bits = torch.randint(-2**31, 2**31 - 1, (4096,), generator=g, dtype=torch.int64)
    x = torch.cat([bits.to(torch.int32).view(torch.float32), torch.tensor(SPECIAL)])
    xb = x.to(torch.bfloat16)
    fn = lambda x, xb: (F.relu6(x.to(torch.bfloat16).float()).to(torch.bfloat16),
                        torch.maximum(xb, -xb), torch.where(x > 0, xb, xb.abs() * 1.5),
                        torch.clamp(xb, -2.5, 0.1))
    got, want = ecompile(fn)(x, xb), fn(x, xb)
    bits_of = lambda t: (t.float() + 0.0).view(torch.int32)  # -0.0 as 0.0: a max's choice
    for g_, w in zip(got, want):
        nan = w.isnan()
        assert g_.dtype == torch.bfloat16 and torch.equal(g_.isnan(), nan)
        assert torch.equal(bits_of(g_[~nan]), bits_of(w[~nan]))
    code = "\n".join(output_code).split("wrapper:")[0]
    assert code.count("= e_bf16_bits(") == 2 and code.count("= e_f_to_bf16(") >= 2


def test_bfloat16_round_trip_in_a_kernel_is_bitwise_eager(ecompile):
    """``x.to(bf16).float()`` read by a fused op (round_bf16, rounded in 32-bit lanes): the
    bits of eager's round trip for random bit patterns, exact ties, infinities, denormals."""
    g = torch.Generator().manual_seed(1)
    bits = torch.randint(-2**31, 2**31 - 1, (4096,), generator=g, dtype=torch.int64)
    ties = torch.arange(-2048, 2048, dtype=torch.int64) * 65536 + 32768
    x = torch.cat([bits, ties]).to(torch.int32).view(torch.float32)
    x = torch.cat([x, torch.tensor(SPECIAL + [1e-39, -3e-39, 1e-45])])
    fn = lambda x: torch.relu(x.to(torch.bfloat16).float()) - x.to(torch.bfloat16).float() * 4
    got, want = ecompile(fn)(x), fn(x)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conversion_to_16bit_rounds_inside_fused_kernels(ecompile, dtype):
    """Kernels compute 16-bit floats in float32, but an explicit conversion to one must round
    where its reader is fused: ``x.to(bf16).float()`` returned ``x`` unchanged (fake
    quantization was a no-op) and ``(x.to(bf16) * k).long()`` was off by one."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(2000, generator=g) * 3, torch.tensor([1e5, -7e4, 65520.0])])
    i = torch.arange(-3000, 3000, 7, dtype=torch.int32)
    fn = lambda x, i: (x.to(dtype).float(), (x.to(dtype).float() * 37.3).long(),
                       x.double().to(dtype).double() * 3, i.to(dtype).float() + 0.5,
                       x.half().to(dtype).float(), torch.empty_like(x).copy_(
                           torch.empty_like(x, dtype=dtype).copy_(x)) * 2,
                       x + torch.full_like(x, 1.7).to(dtype))   # a constant, rounded too
    for got, want in zip(ecompile(fn)(x, i), fn(x, i)):
        assert got.dtype == want.dtype
        assert torch.equal(got, want)


def test_new_tensor_factories_are_kernels_not_eager_ops(ecompile):
    """``x.new_empty_strided`` (swin_v2's training graph) and the other ``new_*`` factories
    lower like their plain forms; new_empty_strided ran in eager ATen."""
    from ember.core.compiler import explain

    fn = lambda x: (x.new_zeros((3, 4)) + x.new_ones((3, 4)) * 2 + x.new_full((3, 4), 1.5) + x,
                    x.new_empty_strided((4, 3), (1, 4)).fill_(3.0) * x.t(),
                    x.new_empty((2,)).zero_() + 1)
    x = torch.randn(3, 4)
    for got, want in zip(ecompile(fn)(x), fn(x)):
        assert torch.equal(got, want) and got.stride() == want.stride()
    assert not explain(fn, x).fallback_ops

def _binary_float(a, b):
    return (a + b, a - b, a * b, a / b, torch.maximum(a, b), torch.minimum(a, b),
            a.abs() ** b, torch.atan2(a, b), torch.fmod(a, b), torch.remainder(a, b),
            torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"),
            a == b, a != b, a < b, a <= b, a > b, a >= b, torch.where(a > b, a, b),
            torch.add(a, b, alpha=2), torch.lerp(a, b, 0.3), torch.addcmul(a, a, b, value=0.5))


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_float_prims(ecompile, matches, dtype):
    a = torch.cat([torch.randn(40), torch.tensor(SPECIAL)]).to(dtype)
    b = torch.cat([torch.randn(40) + 0.1, torch.tensor(SPECIAL[::-1])]).to(dtype)
    matches(ecompile(_binary_float)(a, b), _binary_float(a, b), atol=TOL[dtype],
            rtol=TOL[dtype])


def _binary_int(a, b):
    return (a + b, a - b, a * b, torch.maximum(a, b), torch.minimum(a, b), a & b, a | b, a ^ b,
            ~a, a == b, a < b, a >= b, torch.where(a > b, a, b), a // 3, a % 3, a / 2,
            a.abs(), a.sum(), a.sum(0), a.amax(1), a.amin(0))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8])
def test_integer_prims(ecompile, matches, dtype):
    lo = 0 if dtype == torch.uint8 else -100
    a = torch.randint(lo, 100, (6, 7), dtype=dtype)
    b = torch.randint(lo, 100, (6, 7), dtype=dtype)
    matches(ecompile(_binary_int)(a, b), _binary_int(a, b))


def test_uint8_wraps_like_eager(ecompile, matches):
    a = torch.arange(0, 256, dtype=torch.uint8)
    f = lambda a: (a + a, a * 3, a - 200, (a + 100) > 50)
    matches(ecompile(f)(a), f(a))


def test_bool_prims(ecompile, matches):
    a, b = torch.rand(5, 9) > 0.5, torch.rand(5, 9) > 0.3
    f = lambda a, b: (a & b, a | b, a ^ b, ~a, torch.logical_and(a, b),
                      torch.logical_or(a, b), torch.logical_not(a), a.any(), a.any(1), a == b,
                      a.sum(), a.to(torch.float32) * 2)
    matches(ecompile(f)(a, b), f(a, b))


def test_type_promotion(ecompile, matches):
    i = torch.randint(-5, 5, (4, 5))
    u = torch.randint(0, 255, (4, 5), dtype=torch.uint8)
    h = torch.randn(4, 5, dtype=torch.float16)
    s = torch.tensor(2.5)  # 0-dim float32: promotes like a scalar
    f = lambda i, u, h, s: (i + 1.5, u + i, h + s, h * 2, i / 2, u.float() / 255, h + i,
                            i > 0.5, (h > s), u * 2.0, i.to(torch.float16) + h)
    matches(ecompile(f)(i, u, h, s), f(i, u, h, s), atol=2e-3, rtol=2e-3)


def test_broadcasting_and_scalars(ecompile, matches):
    a, b, c = torch.randn(4, 1, 5), torch.randn(3, 1), torch.randn(())
    f = lambda a, b, c: (a + b, a * c + 2, (a - b).sum(-1), c * 3, (c + 1).exp())
    matches(ecompile(f)(a, b, c), f(a, b, c))


def test_non_contiguous_inputs(ecompile, matches):
    base = torch.randn(10, 12)
    f = lambda t, s, e: (t * 2 + 1, s.sin() + t[:5, 1:7], e + 1, t.sum(0), s.amax(-1))
    args = (base.t(), base[::2, 1::2], torch.randn(6, 1).expand(6, 5))
    matches(ecompile(f)(*args), f(*args))


def test_zero_size_inputs(ecompile, matches):
    z = torch.randn(0, 5)
    f = lambda z: (z * 2 + 1, z.sum(0), z.sum(), z.exp().mean(1))
    matches(ecompile(f)(z), f(z))


def test_views_are_index_maps(ecompile, matches):
    x = torch.randn(4, 6, 8)
    f = lambda x: (
        (x * 2).reshape(24, 8) + 1, x.permute(2, 0, 1) * 3, x.transpose(0, 1).exp(),
        x[:, 1:5:2, ::3] - 1, x.select(1, 2).sin(), (x + 1).unsqueeze(0).expand(2, 4, 6, 8),
        x.unsqueeze(2).squeeze(2) * 2, x.as_strided((4, 3), (48, 2), 5) + 1,
        (x + 1).view(4, 48).sum(-1), (x * 2).permute(1, 0, 2).reshape(6, 32))
    matches(ecompile(f)(x), f(x))


@pytest.mark.parametrize("offset", [None, 0, 3, 10])
def test_as_strided_of_an_input_view_counts_from_its_storage(ecompile, matches, offset):
    """A storage offset counts from the start of the storage, not of the input (a view at
    offset 5 read from 5 + offset); the compiled graph keeps no guard on the input's offset,
    so the same graph serves inputs at other offsets."""
    base = torch.arange(40.0)
    f = ecompile(lambda x: torch.as_strided(x, (2, 3), (1, 2), offset) * 2)
    for x in (base[5:15], base[0:10], base[12:30]):
        matches(f(x), torch.as_strided(x, (2, 3), (1, 2), offset) * 2)


def test_as_strided_of_a_view_of_an_intermediate_reads_eagers_storage(matches):
    """Eager's ``(a * 2)[1:]`` and ``(a * 2)[:1].expand(...)`` share the product's storage;
    where ours is laid out otherwise the graph runs in eager (Inductor reads its copy)."""
    from ember.core.compiler import compile as ember_compile

    a = torch.arange(12.0).reshape(3, 4)
    for f in (lambda a: torch.as_strided((a * 2)[1:], (2, 2), (1, 2), 0) * 1,
              lambda a: torch.as_strided((a * 2)[:1].expand(3, 4), (2, 2), (4, 1)) * 1,
              lambda a: torch.as_strided((a * 2).t(), (2, 2), (1, 2)) * 1):
        torch._dynamo.reset()
        matches(ember_compile(f)(a), f(a))


def test_an_op_on_expanded_inputs_returns_a_dense_tensor(ecompile, matches):
    """as_strided_scatter's meta kernel gives its output an expanded input's stride 0; the op
    returns a dense tensor, which no copy can lay out with stride 0: the buffer is row-major
    (it raised "more than one element ... refers to a single memory location")."""
    x, src = torch.randn(3, 1).expand(3, 3), torch.randn(2, 1).expand(2, 2)
    f = lambda x, s: (torch.as_strided_scatter(x, s, (2, 2), (1, 2), 0),
                      torch.as_strided_scatter(x, s, (2, 2), (3, 1), 1).sin() * 2)
    matches(ecompile(f)(x, src), f(x, src))


def test_an_extern_output_of_another_dtype_than_its_fake_kernel_says(ecompile, matches):
    """_batch_norm_with_update's CPU kernel returns bfloat16 running statistics where its fake
    kernel says float32; the wrapper converts, so the in-place update equals eager's (the
    bfloat16 bytes were read as float32: half the values, then memory past the buffer)."""
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=g).bfloat16() for s in ((4, 5, 6), (5,), (5,)))
    mean, var = torch.randn(5, generator=g).bfloat16(), torch.rand(5, generator=g).bfloat16()
    f = lambda x, w, b, m, v: torch.ops.aten._batch_norm_with_update(x, w, b, m, v, 0.5, 1e-5)
    m1, v1, m2, v2 = mean.clone(), var.clone(), mean.clone(), var.clone()
    matches(ecompile(f)(x, w, b, m1, v1), f(x, w, b, m2, v2))
    assert torch.equal(m1, m2) and torch.equal(v1, v2)


def test_select_and_slice_with_symbolic_negative_positions(ecompile, matches):
    """Under dynamic=True an int position is a symbol of unknown sign: a negative one counts
    from the end (it read before the buffer, or sliced from 0)."""
    f = lambda x, i, s, e: (x.select(1, i) * 2, x[s:e:2] + 1, x[:, s:] * 3)
    c = ecompile(f, dynamic=True)
    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(0))
    for i, s, e in [(-1, -10, -2), (2, 3, 15), (-6, -20, 19), (1, 25, 30)]:
        matches(c(x, i, s, e), f(x, i, s, e))


def test_embedding_bag_of_a_strided_index_view(ecompile, matches):
    """PyTorch's OpInfo sample: indices a stride-2 view. ``F.embedding_bag`` makes them
    contiguous, and ATen's kernel reads them as contiguous without checking: the contiguous
    clone must stay a copy (it was skipped: off by 72 on the sample)."""
    g = torch.Generator().manual_seed(0)
    w, psw = torch.randn(10, 5, generator=g), torch.randn(5, generator=g)
    idx, off = torch.tensor([0, 1, 7, 5, 3, 4, 2, 5, 8, 9, 6])[1::2], torch.tensor([0, 3])
    f = lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p)
    matches(ecompile(f)(w, idx, off, psw), f(w, idx, off, psw))


def test_pow_with_a_symbolic_exponent(ecompile, matches):
    """With ``dynamic=True`` an int exponent is a size-like symbol (``renorm``'s ``p`` and
    ``1 / p``): lowering read it with float() and the graph ran in eager."""
    f = lambda x, p: (x.abs() + 0.5) ** p + x.abs() ** (1.0 / p) + torch.renorm(x, p, 0, 0.7)
    c = ecompile(f, dynamic=True)
    for p in (2, 3, 5):
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(p))
        matches(c(x, p), f(x, p))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_reductions(ecompile, matches, dtype):
    x = torch.randn(6, 7, 9).to(dtype)
    f = lambda x: (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.mean(-1), x.amax(0),
                   x.amin((1, 2)), x.var(1), x.std(-1, keepdim=True), x.var(unbiased=False),
                   x.mean(), torch.logsumexp(x, -1), torch.linalg.vector_norm(x, dim=-1))
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    matches(ecompile(f)(x), f(x), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_mean_rounds_once_like_eager(ecompile, dtype):
    """A bfloat16 / float16 mean divides the float sum and rounds once, as eager's. Rounding
    the sum first put a quarter of a 7x7 average pool's outputs (49 is no power of two) an
    ulp off; now only the summation order may differ, which flips a rare last bit."""
    torch.manual_seed(0)
    x = (torch.randn(8, 64, 7, 7) * 3).to(dtype)
    y = x.contiguous(memory_format=torch.channels_last)  # a column sum: its own kernel
    f = lambda x, y: (x.mean((-2, -1)), F.adaptive_avg_pool2d(x, 1), x.mean(1, keepdim=True),
                      y.mean((-2, -1)), F.adaptive_avg_pool2d(y, 1) * 2)
    for out, ref in zip(ecompile(f)(x, y), f(x, y)):
        assert out.dtype == ref.dtype
        torch.testing.assert_close(out, ref, atol=0, rtol=2 ** -7)  # within an ulp
        assert (out != ref).float().mean() <= 0.01


def test_large_parallel_reductions(ecompile, matches):
    x = torch.randn(600_000, dtype=torch.float64)  # above the OpenMP threshold
    y = torch.randn(1024, 600)
    f = lambda x, y: (x.sum(), x.amax(), (x * 2).mean(), y.sum(-1), y.sum(0), y - y.mean())
    matches(ecompile(f)(x, y), f(x, y), atol=1e-4, rtol=1e-5)


def test_nan_inf_propagate_through_reductions(ecompile, matches):
    x = torch.tensor([[1.0, float("nan"), 3.0], [float("inf"), -float("inf"), 2.0],
                      [1.0, 2.0, float("inf")]])
    f = lambda x: (x.amax(-1), x.amin(0), x.sum(-1), x.softmax(-1), x.amax())
    matches(ecompile(f)(x), f(x))


def test_reductions_over_the_one_dim_of_a_0d_tensor(ecompile, matches):
    """torch takes dim 0 or -1 of a 0-d tensor as its one element (these raised IndexError
    while lowering)."""
    f = lambda x: (x.sum(-1), x.sum(0), x.amax(-1), x.mean(0, keepdim=True), x.var(0),
                   x.std(-1, correction=0), x.prod(0), x.softmax(0), x.log_softmax(-1),
                   x.logsumexp(0), x.all(0), torch.linalg.vector_norm(x, 2, 0))
    x = torch.tensor(-3.0)
    matches(ecompile(f)(x), f(x))


def test_gather_and_scatter_of_a_0d_tensor(ecompile, matches):
    """dim 0 of a 0-d tensor, as max/median/kthvalue's backward scatters into it (these
    raised IndexError while lowering, and their training graphs ran in eager)."""
    f = lambda x, i: (torch.gather(x, 0, i) * 2, torch.scatter(x, 0, i, 5.0) + 1,
                      torch.scatter(x, -1, i, x * 3) + 1)
    x, i = torch.tensor(-3.0), torch.tensor(0)
    matches(ecompile(f)(x, i), f(x, i))
    g = ecompile(lambda x: torch.max(x, 0)[0] * 3 + torch.median(x, -1, True)[0])
    x = torch.tensor(2.0, requires_grad=True)
    g(x).backward()
    assert x.grad.item() == 4.0


def _multiply_adds(a, b, c, d, w):
    return (torch.add(a, b, alpha=0.3), torch.sub(a, b, alpha=1.7),
            torch.addcmul(a, b, c, value=0.3), torch.addcmul(a, b, c), torch.addcdiv(a, b, d),
            a.addcdiv(b, d, value=0.3), torch.lerp(a, b, 0.3), torch.lerp(a, b, -0.7),
            torch.lerp(a, b, w),
            # in-place forms Dynamo decomposes into prims.fma (multiply_adds puts them back)
            a.clone().addcmul_(b, c, value=0.3), a.clone().addcdiv_(b, d, value=-0.3),
            a.clone().add_(b, alpha=torch.tensor(0.3, dtype=a.dtype)),
            *torch._foreach_add([a, b], [b, c], alpha=0.3),
            *torch._foreach_addcmul([a], [b], [c], value=0.3),
            *torch._foreach_lerp([a, b], [b, c], 0.3), *torch._foreach_lerp([a], [b], 0.7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_multiply_adds_round_once_like_eager(ecompile, dtype):
    """Eager's kernels compute an add with alpha, addcmul and lerp (both of lerp's formulas),
    and their foreach forms, with one multiply-add rounded once, and addcdiv as
    ``x + (value * t1) / t2``: bit for bit (rounding the product apart was an ulp off in a
    fifth of the elements). 1024 elements: eager's bfloat16 scalar tail (past its last
    32-lane vector) rounds the product to bfloat16 first, unlike its vectors."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(1024, generator=g).to(dtype) for _ in range(3))
    d = c.abs() + 0.5  # divisors (an input: a fused 16-bit |c| + 0.5 stays float32)
    w = torch.rand(1024, generator=g).to(dtype) * 1.4 - 0.2  # both sides of 0.5
    out, ref = ecompile(_multiply_adds)(a, b, c, d, w), _multiply_adds(a, b, c, d, w)
    for i, (o, r) in enumerate(zip(out, ref)):
        assert o.dtype == r.dtype and torch.equal(o, r), f"output {i}"


def _composites(x, w, b, rm, rv, y, z):
    return (F.softmax(x, -1), F.log_softmax(x, 0), F.layer_norm(x, (16,), w, b),
            F.group_norm(z, 4), F.batch_norm(z, rm.clone(), rv.clone(), training=True),
            F.batch_norm(z, rm, rv, training=False), F.gelu(x), F.gelu(x, approximate="tanh"),
            F.silu(x), F.dropout(x, 0.5, training=False), x.var(-1), x.std(0), x.mean(),
            F.cross_entropy(x, y), F.mse_loss(x, x.flip(0)), F.nll_loss(F.log_softmax(x, 1), y))


def test_decompositions_match_eager(ecompile, matches):
    args = (torch.randn(8, 16), torch.randn(16), torch.randn(16), torch.randn(8),
            torch.rand(8) + 0.5, torch.randint(0, 16, (8,)), torch.randn(2, 8, 3, 3))
    matches(ecompile(_composites)(*args), _composites(*args), atol=1e-5, rtol=1e-4)


def test_dropout_training_keeps_or_scales(ecompile):
    x = torch.ones(4000)
    out = ecompile(lambda x: F.dropout(x, 0.25, training=True))(x)
    kept = out != 0
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.75))
    assert 0.65 < kept.float().mean().item() < 0.85


def _clone_then_update_in_place(g, p):
    b = torch.clone(g).detach()  # the momentum buffer of SGD's first nesterov step
    g.add_(b, alpha=0.9)
    p.add_(g, alpha=-0.1)
    return b, b * 2


def test_clone_of_an_input_updated_in_place_later_keeps_the_old_values(ecompile, matches):
    """The clone is read after its source's in-place update: it must hold the values from
    before the update (it was once computed after the copy back into the input)."""
    g, p = torch.randn(6, 5), torch.randn(6, 5)
    ours_g, ours_p = g.clone(), p.clone()
    out = ecompile(_clone_then_update_in_place)(ours_g, ours_p)
    ref = _clone_then_update_in_place(g, p)
    matches(out, ref)
    matches([ours_g, ours_p], [g, p])


def test_dead_buffers_are_reused_safely(ecompile, matches):
    # flip runs in ATen; its dying output may be overwritten in place only by the reader
    x = torch.randn(6, 5)
    f = lambda a: (torch.relu(a), torch.maximum(a, a.flip(0)), (a.flip(1) * 2).exp(),
                   a.flip(0) + a.flip(0).sum(0))
    matches(ecompile(f)(x), f(x))


_DYNAMIC = {
    "views": lambda x: ((x * 2).reshape(-1, x.shape[-1] * 2) + 1, x.permute(2, 0, 1) * 3,
                        x[:, 1:3].sum(1), x.transpose(0, 1).exp()),
    "norms": lambda x: (F.layer_norm(x, x.shape[-1:]), F.softmax(x, -1), F.log_softmax(x, 1),
                        x.var(0), x.amax(1)),
    "pointwise": lambda x: (torch.where(x > 0, x, -x) + x.mean(),
                            F.gelu(x) * x.sum(-1, keepdim=True)),
}


@pytest.mark.parametrize("name", list(_DYNAMIC))
def test_symbolic_sizes_one_kernel_for_all_shapes(ecompile, matches, name):
    from ember.core.compiler.pipeline import stats

    f = _DYNAMIC[name]
    compiled = ecompile(f, dynamic=True)
    before = stats["graphs_compiled"]
    for shape in [(3, 4, 6), (5, 4, 6), (7, 8, 2), (2, 3, 10)]:
        x = torch.randn(shape)
        matches(compiled(x), f(x))
    assert stats["graphs_compiled"] - before == 1


def test_view_of_an_extern_view_keeps_its_offset(ecompile, matches):
    # unfold returns a view that starts inside its base's storage; slicing it again must count
    # the slice's offset from the view, not from the storage (a wrong answer before the fix).
    def f(x):
        flat = torch.nn.functional.pad(x, (5, 5)).reshape(-1)
        return torch.mm(flat[3:].unfold(0, 7, 4)[2:20], torch.ones(7, 3))

    x = torch.randn(2, 50)
    matches(ecompile(f, fullgraph=True)(x), f(x))


def test_prod_matches_eager_including_negative_ints(ecompile, matches):
    fn = lambda x, i: (x.prod(), x.prod(1), x.prod(0, keepdim=True), x.t().prod(1),
                       i.prod(1), i.prod(), (i > 0).prod(0), i.to(torch.int8).prod(0))
    x = torch.rand(5, 7) + 0.5
    i = torch.randint(-3, 4, (5, 7), dtype=torch.int32)
    matches(ecompile(fn)(x, i), fn(x, i))
    assert not [op for op in explain(fn, x, i).fallback_ops if "prod" in str(op)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rounding_division_of_16_bit_floats_is_exact(ecompile, dtype):
    fn = lambda a, b: (torch.div(a, b, rounding_mode="trunc"),
                       torch.div(a, b, rounding_mode="floor"))
    f = ecompile(fn)
    torch.manual_seed(0)
    for _ in range(5):  # eager rounds the quotient to 16 bits first: bit-exact, not close
        a = (torch.randn(64) * 3).to(dtype)
        b = (torch.randn(64) + 0.1).to(dtype)
        for o, r in zip(f(a, b), fn(a, b)):
            assert torch.equal(o, r)


def _row_then_columns(x, w, b):
    """A row reduction, a column reduction of its product, then a row pointwise use: the
    last reads nothing the column sum makes, so it may join the row kernel."""
    s = (x * w).sum(1, keepdim=True)
    return (x * s).sum(0) + b, x * s + 1, s


def _layer_norm_gelu_grads(x, w, b):
    x = x.detach().requires_grad_()
    w = w.detach().requires_grad_()
    b = b.detach().requires_grad_()
    y = F.layer_norm(F.gelu(x), x.shape[-1:], w, b)
    return torch.autograd.grad((y * y.flip(0)).sum(), (x, w, b))


_ROW_COLUMN = {
    "row_then_columns": _row_then_columns,
    "layer_norm_gelu_grads": _layer_norm_gelu_grads,
    "centred_row_sum": lambda x, w, b: ((x - x.mean(1, keepdim=True)) * w).sum(-1) + b.sum(),
}


@pytest.mark.parametrize("name", list(_ROW_COLUMN))
def test_fusion_across_row_and_column_reductions_matches_eager(ecompile, matches, name):
    x = torch.randn(33, 70)
    x[3, 5] = float("nan")
    args = (x, torch.randn(70), torch.randn(70))
    fn = _ROW_COLUMN[name]
    matches(ecompile(fn)(*args), fn(*args), atol=1e-4, rtol=1e-4)


_SKINNY = {  # (M, K, N): one of them small enough for the loop-reduction matmul, or none
    "small_n": (37, 70, 10), "small_k": (33, 9, 65), "small_m": (5, 80, 70),
    "all_big": (20, 24, 18),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", list(_SKINNY))
def test_skinny_matmuls_match_eager(ecompile, matches, shape, dtype):
    m, k, n = _SKINNY[shape]
    a, b = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype).t()  # b non-contiguous
    bias = torch.randn(n).to(dtype)
    fn = lambda a, b, bias: (a @ b, torch.addmm(bias, a, b), torch.addmm(bias, a, b, beta=0.5),
                             F.relu(a @ b) * 2)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    matches(ecompile(fn)(a, b, bias), fn(a, b, bias), atol=tol, rtol=tol)


def _16bit_matmul_case(dtype):
    a, b = torch.randn(34, 64).to(dtype), torch.randn(48, 64).to(dtype).t()
    bias = torch.randn(48).to(dtype)
    x, y = torch.randn(3, 17, 40).to(dtype), torch.randn(3, 40, 24).to(dtype)
    z = torch.randn(3, 17, 24).to(dtype)
    fn = lambda a, b, bias, x, y, z: (a @ b, torch.addmm(bias, a, b), F.gelu(a @ b + 1),
                                      torch.bmm(x, y), torch.baddbmm(z, x, y) * 2,
                                      torch.baddbmm(z, x, y, alpha=0.5))
    return fn, (a, b, bias, x, y, z)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_matmuls_match_eager(ecompile, matches, dtype):
    fn, args = _16bit_matmul_case(dtype)
    got = ecompile(fn)(*args)
    matches(got, fn(*args), atol=2e-2, rtol=2e-2)
    assert all(g.dtype == dtype for g in got)


def test_16bit_matmuls_run_as_float32_gemms(ecompile, output_code):
    """Without native 16-bit dot products (AVX2) they are float32 GEMMs on widened operands."""
    from ember.core.compiler.lowering import externs

    for dtype in (torch.bfloat16, torch.float16):
        if not isa.cpu_flags() or any(f in isa.cpu_flags() for f in externs._NATIVE_16BIT[dtype]):
            continue
        output_code.clear()
        fn, args = _16bit_matmul_case(dtype)
        ecompile(fn)(*args)
        code = "\n".join(output_code)
        assert "aten.addmm.default" in code and "aten.bmm.default" in code


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_convolutions_match_eager(ecompile, matches, dtype):
    # values O(1): eager's own 16-bit rounding stays far below the tolerance
    x, w, b = ((torch.randn(2, 3, 20, 20) * 0.3).to(dtype),
               (torch.randn(8, 3, 5, 5) * 0.3).to(dtype), torch.randn(8).to(dtype))
    dw = (torch.randn(8, 1, 3, 3) * 0.3).to(dtype)
    fn = lambda x, w, b, dw: (F.conv2d(x, w, b, stride=2), F.relu(F.conv2d(x, w, padding=2)),
                              F.conv2d(F.conv2d(x, w, b), dw, groups=8, padding=1) + 1)
    args = (x, w, b, dw)
    got = ecompile(fn)(*args)
    assert all(g.dtype == dtype for g in got)
    matches(got, fn(*args), atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_convolution_gradients_match_eager(ecompile, matches, dtype):
    """Input, weight and bias gradients of 16-bit convolutions (plain, strided with padding,
    depthwise; only the gradients asked for) equal eager's in dtype and, to 16-bit rounding,
    in value: on a CPU without native 16-bit dot products they are float32 backward calls."""
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    x = (torch.randn(2, 3, 12, 12, generator=g) * 0.3).to(dtype)
    w = (torch.randn(8, 3, 3, 3, generator=g) * 0.3).to(dtype)
    b = torch.randn(8, generator=g).to(dtype)
    dw = (torch.randn(8, 1, 3, 3, generator=g) * 0.3).to(dtype)

    def fn(x, w, b, dw):
        y = F.relu(F.conv2d(x, w, b, stride=2, padding=1))
        return F.conv2d(y, dw, groups=8, padding=1).float().square().mean()

    def grads(f, wants):
        leaves = [t.detach().requires_grad_(need) for t, need in zip((x, w, b, dw), wants)]
        out = torch.autograd.grad(f(*leaves), [t for t in leaves if t.requires_grad])
        assert all(o.dtype == dtype for o in out)
        return out

    for wants in ((True, True, True, True), (False, True, False, True)):
        matches(grads(ecompile(fn), wants), grads(fn, wants), atol=2e-2, rtol=5e-2)


def test_autocast_linear_matches_eager(ecompile, matches):
    lin = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    x = torch.randn(2, 17, 64)
    with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16):
        want, got = lin(x), ecompile(lin)(x)
    assert got.dtype == want.dtype == torch.bfloat16
    matches(got, want, atol=3e-2, rtol=3e-2)


def test_short_column_reductions_keep_nan_and_inf(ecompile, matches):
    # over at most 16 rows: the C++ code runs lanes over columns with register accumulators
    x = torch.randn(7, 300)
    x[2, 5], x[0, 9], x[6, 9], x[3, 11] = float("nan"), float("inf"), float("-inf"), float("inf")
    fn = lambda x: (x.amax(0), x.amin(0), x.sum(0), (x * 2).prod(0), x.abs().amax(0) + 1)
    matches(ecompile(fn)(x), fn(x))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_single_index_gather_matches_eager_and_checks_its_index(ecompile, matches, dim):
    x = torch.randn(6, 7, 5)
    x[1, 2, 3] = float("nan")
    size = [6, 7, 5]
    size[dim] = 1
    index = torch.randint(0, x.shape[dim], size)
    fn = lambda x, i: (torch.gather(torch.log_softmax(x * 2, dim), dim, i),
                       torch.gather(x.to(torch.int64), dim, i))
    compiled = ecompile(fn)
    matches(compiled(x, index), fn(x, index))
    for bad in (-1, x.shape[dim]):
        wrong = index.clone()
        wrong.view(-1)[3] = bad
        with pytest.raises((IndexError, RuntimeError)):
            fn(x, wrong)
        with pytest.raises(IndexError, match="outside"):
            compiled(x, wrong)


def test_cross_entropy_through_the_fused_gather_keeps_ignore_index(ecompile, matches):
    x, y = torch.randn(64, 30), torch.randint(0, 30, (64,))
    y[::7] = -100
    fn = lambda x, y: (F.cross_entropy(x, y), F.cross_entropy(x, y, reduction="none"),
                       F.nll_loss(F.log_softmax(x, 1), y, reduction="sum"))
    matches(ecompile(fn)(x, y), fn(x, y), atol=1e-5, rtol=1e-5)
    y[5] = 30
    with pytest.raises(IndexError):
        ecompile(fn)(x, y)


@pytest.mark.parametrize("dim", [0, 1])
def test_single_index_scatter_matches_eager_and_checks_its_index(ecompile, matches, dim):
    x = torch.randn(6, 7)
    size = [6, 7]
    size[dim] = 1
    index = torch.randint(0, x.shape[dim], size)
    src = torch.randn(size)
    fn = lambda x, i, s: (torch.scatter(x * 2, dim, i, -1.5), torch.scatter(x, dim, i, s) + 1,
                          torch.zeros_like(x).scatter(dim, i, 1.0).sum(dim))
    compiled = ecompile(fn)
    matches(compiled(x, index, src), fn(x, index, src))
    wrong = index.clone()
    wrong.view(-1)[2] = x.shape[dim]
    with pytest.raises((IndexError, RuntimeError)):
        fn(x, wrong, src)
    with pytest.raises(IndexError, match="outside"):
        compiled(x, wrong, src)


def _tensor_keywords(q, m, s, v, idx, d, lengths):
    return (F.scaled_dot_product_attention(q, q, q, attn_mask=m),
            F.scaled_dot_product_attention(q, q, q, attn_mask=m > 0),
            torch.searchsorted(s, v, sorter=idx), torch.segment_reduce(d, "sum", lengths=lengths),
            torch.pinverse(d.reshape(3, 2)))


def test_tensor_keyword_arguments_of_extern_and_eager_calls(ecompile, matches):
    """Optional[Tensor] keywords (attn_mask, sorter, lengths, atol) reach ATen as tensors."""
    s = torch.randn(10)
    args = (torch.randn(2, 4, 8, 16), torch.randn(2, 1, 8, 8), s, torch.randn(4), s.argsort(),
            torch.randn(6), torch.tensor([2, 3, 1]))
    matches(ecompile(_tensor_keywords)(*args), _tensor_keywords(*args), atol=1e-4, rtol=1e-4)


def _attention_of_made_contiguous(x, k, v, m):
    return F.scaled_dot_product_attention(x.transpose(-1, -2).contiguous(), k, v, attn_mask=m)


def test_attention_gets_eager_strides_where_ours_differ(ecompile, matches):
    """ATen's CPU flash attention reads q, k and v as if their last dim were contiguous; the
    lowering skips a clone's copy for ATen calls, so the transposed input reached it as is
    (max error 2.0). Such calls now get eager's layout."""
    torch.manual_seed(0)
    args = (torch.randn(2, 4, 16, 8), torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16),
            torch.randn(1, 4, 8, 8))
    matches(ecompile(_attention_of_made_contiguous)(*args), _attention_of_made_contiguous(*args),
            atol=1e-5, rtol=1e-5)


def _gathers(x, img, w, ids, i, j):
    return (x[i], x[:, j], x[i[:, None], j], x[j, :, i[:2]] if x.dim() == 3 else x[j[:2]],
            torch.index_select(x, 1, j.abs() % x.shape[1]), F.embedding(ids, w) * 2 + 1,
            F.interpolate(img, size=(13, 21), mode="bilinear"),
            F.interpolate(img, size=(9, 4), mode="bilinear", align_corners=True),
            F.interpolate(img, scale_factor=2, mode="nearest"),
            F.interpolate(img, size=(11, 17), mode="bicubic"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_gathers_index_embedding_upsampling(ecompile, matches, dtype):
    """Loads at data-dependent places (advanced indexing, negative indices included,
    index_select, embedding, the upsampling decompositions) against eager."""
    x = (torch.randn(6, 5) * 10).to(dtype)
    img = torch.randn(2, 3, 7, 8).to(dtype if dtype.is_floating_point else torch.float32)
    w = torch.randn(20, 4).to(img.dtype)
    ids = torch.tensor([[0, 19, 3], [7, 7, 1]])
    i, j = torch.tensor([-1, 0, 5, 2]), torch.tensor([4, -5, 1, 0])
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    matches(ecompile(_gathers)(x, img, w, ids, i, j), _gathers(x, img, w, ids, i, j),
            atol=tol, rtol=tol)


_GATHERS = {"index": lambda x, i: x[i], "embedding": lambda x, i: F.embedding(i, x),
            "index_select": lambda x, i: torch.index_select(x, 0, i)}


@pytest.mark.parametrize("what", sorted(_GATHERS))
def test_gather_index_out_of_range_raises_index_error(ecompile, what):
    x, fn = torch.randn(10, 3), _GATHERS[what]
    with pytest.raises(IndexError, match=what):
        ecompile(fn)(x, torch.tensor([2, 10]))
    with pytest.raises(IndexError, match=what):
        ecompile(fn)(x, torch.tensor([-11 if what == "index" else -1]))


def test_asserts_of_a_graph_run_in_it(ecompile, matches):
    """``one_hot``'s range checks reach us as ``_assert_async`` calls, which return nothing:
    the graph compiles (strict) with eager's values and raises eager's message on a class out
    of range."""
    f = ecompile(lambda i: F.one_hot(i, 4) * 2)
    matches(f(torch.tensor([0, 3, 1])), F.one_hot(torch.tensor([0, 3, 1]), 4) * 2)
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        f(torch.tensor([0, 4]))
    with pytest.raises(RuntimeError, match="non-negative"):
        f(torch.tensor([-1, 2]))


def test_every_index_check_of_a_graph_is_kept(ecompile):
    """Several gathers, each with its own out-of-range flag: a flag written by an early
    kernel keeps its memory until the checks after the last kernel read it."""
    img = torch.randn(1, 2, 8, 8)
    f = lambda img, ids: (F.interpolate(img, size=(16, 16), mode="bilinear"),
                          F.embedding(ids, img.reshape(16, 8)))
    with pytest.raises(IndexError, match="embedding"):
        ecompile(f)(img, torch.tensor([3, 16]))


def test_gathers_with_symbolic_sizes(ecompile, matches):
    f = ecompile(lambda w, ids: F.embedding(ids, w).sum((1, 2)) + w[ids[:, 0]].mean(-1),
                 dynamic=True)
    for n, v in [(5, 30), (9, 17)]:
        w, ids = torch.randn(v, 8), torch.randint(0, v, (n, 3))
        matches(f(w, ids), F.embedding(ids, w).sum((1, 2)) + w[ids[:, 0]].mean(-1))


_index_put = torch.ops.aten.index_put


def _scatters(x, i, j, v):
    return (_index_put(x, [i, None, j], v, True), _index_put(x * 2, [None, i], v[0, :1], True),
            _index_put(x, [i[:1]], x[:1] * 2), _index_put(x, [None, i, j], v[:, :5].T + 1, True),
            torch.ops.aten._unsafe_index_put(torch.zeros_like(x), [i, j], v[:, :1], True))


def _scatter_inputs(dtype):
    x = (torch.randn(5, 7, 6) * 10).to(dtype)
    i, j = torch.tensor([0, -1, 2, 0]), torch.tensor([1, 1, 5, 1])
    return x, i, j, (torch.randn(4, 7) * 10).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_put_matches_eager(ecompile, matches, dtype):
    """index_put, accumulating repeated places or storing: negative indices wrap, values
    broadcast, leading and split indexed dims, against eager."""
    args = _scatter_inputs(dtype)
    tol = 5e-2 if dtype == torch.bfloat16 else 1e-5
    matches(ecompile(_scatters)(*args), _scatters(*args), atol=tol, rtol=tol)


def test_index_put_is_a_scatter_kernel(ecompile, output_code):
    """The C++ code generator writes index_put as its own scatter kernel, no ATen call."""
    args = _scatter_inputs(torch.float32)
    torch.testing.assert_close(ecompile(_scatters)(*args), _scatters(*args))
    assert "aten.index_put" not in "\n".join(output_code)


def test_index_put_out_of_range_raises_index_error(ecompile):
    """An index out of range is an IndexError: our scatter kernel's check names index_put;
    where index_put stays ATen's (Triton), ATen's own message says so."""
    x, v = torch.randn(6, 3), torch.randn(2, 3)
    f = ecompile(lambda x, i, v: _index_put(x, [i], v, True))
    with pytest.raises(IndexError, match="index_put|out of bounds"):
        f(x, torch.tensor([1, 6]), v)
    with pytest.raises(IndexError, match="index_put|out of bounds"):
        f(x, torch.tensor([-7, 0]), v)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_upsampling_backward_scatters_into_its_input_gradient(ecompile, matches, mode):
    """The backward of upsampling accumulates each output gradient into the input places it
    was read from (index_put with accumulate), also for channels-last gradients."""
    def f(img):
        ramp = torch.arange(16.0, device=img.device)
        return (F.interpolate(img, scale_factor=2, mode=mode) * ramp).sin().sum()
    torch.manual_seed(0)
    img = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last).requires_grad_()
    ref = torch.autograd.grad(f(img), img)
    got = torch.autograd.grad(ecompile(f)(img), img)
    matches(got, ref, atol=1e-4, rtol=1e-4)  # sums of up to 16 terms in another order


def test_index_put_with_symbolic_sizes(ecompile, matches):
    f = ecompile(lambda x, i, v: _index_put(x, [i], v, True) * 2, dynamic=True)
    for n, m in [(6, 4), (9, 7)]:
        x, v = torch.randn(n, 3), torch.randn(m, 3)
        i = torch.randint(-n, n, (m,))
        matches(f(x, i, v), _index_put(x, [i], v, True) * 2)


def _cats(a, b, c, i):
    return (torch.cat([a, b, c], 1) * 2, torch.cat([-a[..., 2:], a[..., :2]], -1) * a,
            torch.cat([a[0], i[:, :4].to(a.dtype)], 0), torch.cat([a > 0, c > 0], 1),
            torch.cat([a, torch.empty(0, dtype=a.dtype)], 0),
            torch.cat([a.transpose(1, 2), c.mT], 2),
            torch.cat([b], 1) * 3, torch.cat([b.transpose(1, 2)], 0),
            torch.cat([torch.empty(0, dtype=a.dtype), c], 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_cat_is_a_fused_select(ecompile, matches, dtype):
    """cats (mixed dtypes, bool, the legacy empty tensor, strided inputs) equal to eager: a
    pointwise select fused into its reader (two parts; Triton up to eight), or each part
    stored into its slice (three parts or more in C++, and the cats returned); a cat of one
    tensor is a copy, returned in eager's layout."""
    a, b, c = (torch.randn(2, n, 4) * 9 for n in (3, 5, 1))
    a, b, c = a.to(dtype), b.to(dtype), c.to(dtype)
    i = torch.randint(-5, 5, (4, 6))
    tol = 1e-2 if dtype == torch.bfloat16 else 0  # one bfloat16 rounding of a product
    matches(ecompile(_cats)(a, b, c, i), _cats(a, b, c, i), atol=tol, rtol=tol)


def _cats_read_from_memory(a, b, w, m):
    parts = [torch.relu(a[:, k:k + 1]) * (k + 1) for k in range(a.shape[1])]
    return (torch.cat(parts, 1),  # more parts than the select takes
            F.conv2d(torch.cat([torch.relu(a), torch.sigmoid(b)], 1), w),
            F.max_pool2d(torch.cat([a, b.exp()], 1), 3, 2, 1),
            torch.cat([a.transpose(2, 3), (b * 4).to(torch.int64).transpose(2, 3)], 1),
            torch.cat([torch.relu(m), m.t()[:2] * 2, m[:0]], 0) @ m,
            torch.cat([a[:, :1], b[:1].expand(2, -1, -1, -1)], 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_cats_read_from_memory_match_eager(ecompile, matches, dtype, channels_last):
    """cats that convolutions, pooling, matmuls or the caller read from memory (in C++ each
    part stored into its slice, its producer fused into that store), in both layouts, with
    type promotion, broadcast parts and an empty part, equal to eager."""
    a, b = torch.randn(2, 12, 5, 6).to(dtype), torch.randn(2, 3, 5, 6).to(dtype)
    if channels_last:
        a, b = (t.contiguous(memory_format=torch.channels_last) for t in (a, b))
    w, m = torch.randn(4, 15, 1, 1).to(dtype), torch.randn(5, 5).to(dtype)
    tol = 3e-2 if dtype == torch.bfloat16 else 1e-5
    with torch.no_grad():
        matches(ecompile(_cats_read_from_memory)(a, b, w, m), _cats_read_from_memory(a, b, w, m),
                atol=tol, rtol=tol)


# (input shape, kernel, stride, padding, dilation, ceil_mode): a ResNet stem, ceil_mode's
# last window running over, rectangular dilated windows, a 3-D input, no padding
_POOLS = [((2, 16, 16, 16), 3, 2, 1, 1, False), ((2, 4, 9, 9), 3, 2, 1, 1, True),
          ((1, 3, 10, 7), (2, 3), (2, 1), (1, 0), (1, 2), False), ((3, 8, 8), 2, None, 0, 1, False),
          ((2, 3, 11, 11), 3, 2, 0, 1, True)]


def _pool_input(shape, dtype, channels_last):
    x = torch.randn(shape).to(dtype)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    flat = x.as_strided([x.numel()], [1])   # dense either way: mark a NaN and a -inf
    flat[3], flat[10] = float("nan"), float("-inf")
    return x


@pytest.mark.parametrize("pool", _POOLS, ids=lambda p: "x".join(map(str, p[0])) + f"-k{p[1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_max_pool2d_without_indices_matches_eager(ecompile, matches, pool, dtype, channels_last):
    """Inference max pooling (indices unread, a pointwise max over the window's taps) equals
    eager's, NaN and -inf included, after a fused relu and in eager's memory layout."""
    shape, k, s, p, d, ceil = pool
    x = _pool_input(shape, dtype, channels_last)

    def f(x):
        return F.max_pool2d(torch.relu(x) * 2, k, s, p, d, ceil_mode=ceil)
    with torch.no_grad():
        got, want = ecompile(f)(x), f(x)
    matches(got, want, atol=0, rtol=0)
    assert got.stride() == want.stride()


def test_max_pool2d_with_its_indices_read_matches_eager(ecompile, matches):
    """Where the indices are read (returned, or saved for the backward), the pool and its
    gradient still equal eager's."""
    x = torch.randn(2, 3, 9, 9, requires_grad=True)

    def f(x):
        return F.max_pool2d(x.sin(), 3, 2, 1, return_indices=True)
    matches(ecompile(f)(x), f(x))
    gx = torch.autograd.grad(ecompile(lambda x: F.max_pool2d(x.sin(), 3, 2, 1).sum())(x), x)
    matches(gx, torch.autograd.grad(F.max_pool2d(x.sin(), 3, 2, 1).sum(), x))
