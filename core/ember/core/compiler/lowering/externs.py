"""Extern ops (run in ATen by design) and the rewrites that take one off ATen when the
device and shapes make it pay: skinny matmuls as loop reductions, oneDNN's linear for large
float32 inference linears on CPU, 1-d convolutions with a short reduction as a native kernel,
16-bit matmuls and convolutions (forward and backward) as float32 calls on CPUs without native
16-bit dot products, and gather/scatter of one element per row as selects.

Each rewrite raises ``Decline`` outside its case, and the call stays an ATen extern.
"""

from __future__ import annotations

import contextvars

import sympy
import torch

from ember.core.compiler import ir
from ember.core.compiler.ir import Lazy, StridedView, TensorValue, cast, compute_dtype, const, op
from ember.core.compiler.lowering.builders import (
    Ctx,
    Decline,
    check_index,
    norm_dim,
    pointwise,
    reduce,
    register,
    scalar_expr,
    with_dtype,
)

aten = torch.ops.aten

# Ops that are expected to run in ATen (no fallback warning): matmuls, convs, sorting,
# indexing, random numbers and a few data-movement ops.
EXTERN_OPS = {
    aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.convolution, aten.convolution_backward,
    aten.sort, aten.topk, aten.embedding, aten.embedding_dense_backward, aten.index,
    aten.index_select, aten.gather, aten.scatter, aten.scatter_add, aten.index_put,
    aten.cat, aten.constant_pad_nd, aten.max_pool2d_with_indices,
    aten.max_pool2d_with_indices_backward, aten.avg_pool2d, aten.avg_pool2d_backward,
    aten._adaptive_avg_pool2d, aten._adaptive_avg_pool2d_backward, aten.rand, aten.randn,
    aten.rand_like, aten.randn_like, aten.bernoulli, aten.native_dropout,
    # the functional forms of the in-place samplers (uniform_, normal_, ...): eager's stream
    aten.uniform, aten.normal_functional, aten.exponential, aten.cauchy, aten.log_normal,
    aten.geometric, aten.argmax,
    aten.argmin, aten.max, aten.min, aten.cumsum, aten.scaled_dot_product_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward, aten.randint, aten.randperm,
    aten.copy_,  # input mutations AOTAutograd keeps in inference graphs
    aten.linspace, aten.logspace, aten.arange,  # eager's rounding (a float arange may decline)
    aten._linalg_check_errors,  # linalg's error checks (under with_effects)
    *((torch.ops.mkldnn._convolution_pointwise,)  # prepacked convolutions (freezing)
      if hasattr(torch.ops.mkldnn, "_convolution_pointwise") else ()),
    *((torch.ops.mkl._mkl_linear,)  # prepacked linears (freezing)
      if torch._C.has_mkl and hasattr(torch.ops.mkl, "_mkl_linear") else ()),
}


# ATen kernels that assume the strides eager hands them: eager reaches them only through a
# dispatcher that checked or fixed the layout. The CPU flash attention reads q, k and v as if
# their last dim were contiguous (given a transposed matmul result, it returned garbage).
_EAGER_LAYOUT_NAMES = [
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_forward", "_flash_attention_backward",
    "_efficient_attention_forward", "_efficient_attention_backward",
]
EAGER_LAYOUT_OPS = {getattr(aten, n) for n in _EAGER_LAYOUT_NAMES if hasattr(aten, n)}
_STRIDE_TAGS = {getattr(torch.Tag, t) for t in
                ("needs_exact_strides", "needs_fixed_stride_order", "needs_contiguous_strides")
                if hasattr(torch.Tag, t)}


def needs_eager_layout(target) -> bool:
    """``target``'s tensor arguments must have eager's strides (a unit-stride last dim at
    least): the attention kernels above and ops torch tags as stride-sensitive."""
    packet = getattr(target, "overloadpacket", target)
    return packet in EAGER_LAYOUT_OPS or bool(_STRIDE_TAGS & set(getattr(target, "tags", ())))


def is_extern(packet) -> bool:
    """ATen ops expected to run in ATen, and the ops declared through ``ember.core.kernels``
    (``ember::sdpa``, domain kernels): those are our own kernels, not an eager fallback."""
    if packet in EXTERN_OPS:
        return True
    from ember.core import kernels

    return getattr(packet, "_qualified_op_name", None) in kernels._registry


# ---------------------------------------------------------------- skinny matmuls

# mm/addmm with M, N or K at most this (static sizes) run as a loop reduction: BLAS is far
# from its peak on such shapes ([512,512] @ [512,10] on 2 cores: MKL 190 us, the loop 40 us).
# Not at 16: MKL has a fast path for a dimension of one AVX-512 vector (a linear to 16
# features, [512,k] @ [k,16], k 64..512: MKL 1.4-2.7x faster than the loop, 1 and 2 threads;
# at 8 and 12 features the loop still wins 1.1-1.4x on most shapes)
SKINNY_MM = 12
# with only K short, the loop computes one K-long dot product per output: BLAS wins once the
# output is large ([512,16] @ [16,64] on 1 thread: the loop 93 us, MKL's addmm 25-30 us)
SHORT_K_MAX_OUTPUTS = 4096


def _stored_if_computed(ctx: Ctx, x):
    """A matmul operand as the loop reduction reads it: each element once per row or column
    of the other operand, so a value computed from its inputs (the gelu before a linear) is
    stored first instead of recomputed that often (vit's MLP: every erf 768 times). Loads,
    views and casts alone (an AMP weight cast) stay fused."""
    if isinstance(x, StridedView):
        return x
    probe = x.load(ir.index_vars("i", len(x.size)))
    if any(isinstance(e, (ir.PrimOp, ir.Gather)) for e in ir.walk(probe)):
        return ctx.graph.realize(x)
    return x


def _unit_stride(x, dim: int) -> bool:
    """Every element ``x`` reads moves by one along ``dim`` (a weight read row by row)."""
    at = ir.index_vars("i", len(x.size))
    loads = ir.loads(x.load(at))
    return bool(loads) and ir.unit_stride(loads, at[dim])


def _skinny_mm(ctx: Ctx, a, b, dtype: torch.dtype | None = None) -> StridedView:
    """``a @ b`` as a loop reduction, stored as ``dtype`` (default the node's)."""
    sizes = [*a.size, b.size[-1]]
    if ctx.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16) or \
            not all(sympy.sympify(v).is_Integer for v in sizes) or \
            not 0 < min(int(v) for v in sizes) <= SKINNY_MM:
        raise Decline
    if _native_16bit(ctx):
        raise Decline  # oneDNN's 16-bit dot products: 1.3-3x faster than the loop, any shape
    m, k, n = (int(v) for v in sizes)
    if min(m, n) > SKINNY_MM and m * n > SHORT_K_MAX_OUTPUTS:
        raise Decline  # only K is short: a dot product of K per output loses to BLAS
    acc = compute_dtype(ctx.dtype)
    a, b = _stored_if_computed(ctx, a), _stored_if_computed(ctx, b)
    if m <= SKINNY_MM < n and _unit_stride(b, 0):
        # few rows of A, many columns of B stored along K (a linear's weight rows): the
        # columns in the outer loop and the rows inside it, so each weight row is read once
        # and reused from cache for every row of A; the result is stored N x M and handed out
        # transposed. Rows outside meant one full pass over B per row (vit_b_32's 10 tokens:
        # 10 passes over 85M weights per call). A B walked across its rows (the backward's
        # grad @ W) keeps the rows outside: there the new order ran vit's training step 1.6x
        # slower
        prod = Lazy(acc, [b.size[1], a.size[0], a.size[1]],
                    lambda i: op("mul", acc, cast(a.load([i[1], i[2]]), acc),
                                 cast(b.load([i[2], i[0]]), acc)))
        out = reduce(ctx, prod, [2], False, "sum", dtype or ctx.dtype, acc)
        return StridedView(out.buf, [out.size[1], out.size[0]],
                           [out.stride[1], out.stride[0]], out.offset)
    prod = Lazy(acc, [a.size[0], b.size[1], a.size[1]],
                lambda i: op("mul", acc, cast(a.load([i[0], i[2]]), acc),
                             cast(b.load([i[2], i[1]]), acc)))
    return reduce(ctx, prod, [2], False, "sum", dtype or ctx.dtype, acc)


ONEDNN_MIN_MACS = 1 << 26  # below this many multiply-adds (static sizes) MKL's sgemm is faster


def _onednn_linear(ctx: Ctx, a, b, bias) -> StridedView:
    """``a @ b (+ bias)`` with ``b`` a transposed [N, K] weight (nn.Linear) on float32 CPU
    tensors in an inference graph, through oneDNN's linear: 5-20% faster than MKL's sgemm
    on ``ember bench compile``'s "MLP 512-2048-512 [N]" ([256,512] @ [512,2048]: 2.8 vs
    3.4-3.7 ms in the run BENCHMARKS.md records). Training graphs keep MKL: with oneDNN the
    same bench's "training step MLP+CE [N]" ran 12% slower. Anything else declines too."""
    if not ctx.graph.inference or ctx.graph.device != "cpu" or ctx.dtype != torch.float32 \
            or not _onednn_available():
        raise Decline
    # only tensors already in memory: realizing a lazy operand here would copy it, where
    # ATen's mm takes any strides
    if not all(isinstance(t, StridedView) for t in (a, b, bias) if t is not None):
        raise Decline
    if not a.is_contiguous() or not ir.same(b.stride[0], sympy.Integer(1)) or \
            not ir.same(b.stride[1], b.size[0]) or a.dtype != b.dtype:
        raise Decline
    macs = ir.numel([a.size[0], a.size[1], b.size[1]])
    if not (sympy.sympify(macs).is_Integer and int(macs) >= ONEDNN_MIN_MACS):
        raise Decline  # oneDNN's fixed cost per call: [32,64] @ [64,64] took 33 us vs MKL's 6
    weight = StridedView(b.buf, [b.size[1], b.size[0]], [b.stride[1], b.stride[0]], b.offset)
    if bias is not None:
        if len(bias.size) != 1 or not bias.is_contiguous() or bias.dtype != torch.float32:
            raise Decline
    return ctx.graph.extern_call(torch.ops.mkldnn._linear_pointwise.default,
                                 (a, weight, bias, "none", [], ""), ctx.val)


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_linear_pointwise")


# ---------------------------------------------------------------- 16-bit matmuls in float32

# x86 CPU flags that give oneDNN native 16-bit dot products; without them ATen's bfloat16 /
# float16 GEMM is an emulation ~10x slower than MKL's sgemm on the same values (AVX2, 1
# thread: [34,64] @ [64,128] bfloat16 addmm 256 us, float32 27 us)
_NATIVE_16BIT = {torch.bfloat16: ("avx512_bf16", "amx_bf16"),
                 torch.float16: ("avx512_fp16", "amx_fp16")}


def _has_16bit(ctx: Ctx, native: bool) -> bool:
    """A bfloat16/float16 CPU matmul on an x86 CPU with (``native``) or without native 16-bit
    dot products; False for any other matmul, or where the CPU's flags are unknown."""
    if ctx.graph.device != "cpu" or ctx.dtype not in _NATIVE_16BIT:
        return False
    from ember.core.compiler.runtime import isa

    flags = isa.cpu_flags()
    return bool(flags) and isa.cannot_run(()) is None and \
        any(f in flags for f in _NATIVE_16BIT[ctx.dtype]) == native


def _slow_16bit(ctx: Ctx) -> bool:
    """Where a 16-bit matmul runs as a float32 GEMM of its widened operands."""
    return _has_16bit(ctx, native=False)


def _native_16bit(ctx: Ctx) -> bool:
    """Where a skinny 16-bit matmul stays ATen's: with avx512_bf16, bfloat16 [10,768] @
    [768,3072] took 236 us in oneDNN and 697 us as our loop (which widens each element),
    [512,512] @ [512,10] 46 vs 104 us (2 threads)."""
    return _has_16bit(ctx, native=True)


def _as_float32(ctx: Ctx, x) -> StridedView:
    """``x`` (16-bit) widened to a float32 buffer: exact, so a float32 GEMM over the widened
    operands sums the same products as ATen's 16-bit GEMM (which accumulates in float32)
    and rounds once, when its result is stored or read as 16-bit."""
    x = ctx.graph.realize(x) if not isinstance(x, StridedView) else x
    return ctx.graph.realize(Lazy(torch.float32, list(x.size),
                                  lambda i: cast(x.load(i), torch.float32)))


class _Float32Val:
    """``val``'s shape and strides with dtype float32 (what ``extern_call`` reads)."""

    dtype = torch.float32

    def __init__(self, val) -> None:
        self.shape, self._stride = val.shape, val.stride()

    def stride(self):
        return self._stride


def _float32_matmul(ctx: Ctx, target, args: tuple, widen: tuple[int, ...]) -> StridedView:
    """``target(*args)`` on 16-bit operands run in float32 (the operands at ``widen``
    widened), its float32 result read back as ``ctx.dtype``."""
    if not _slow_16bit(ctx):
        raise Decline
    args = tuple(_as_float32(ctx, a) if k in widen else a for k, a in enumerate(args))
    out = ctx.graph.extern_call(target, args, _Float32Val(ctx.val))
    # stored as 16-bit: later ops read eager's rounded values, not the float32 sums
    return ctx.graph.realize(Lazy(ctx.dtype, list(out.size),
                                  lambda i: cast(out.load(i), ctx.dtype)))


@register(aten.mm)
def _mm(ctx, a, b):
    try:
        return _skinny_mm(ctx, a, b)
    except Decline:
        pass
    try:
        return _onednn_linear(ctx, a, b, None)
    except Decline:
        return _float32_matmul(ctx, aten.mm.default, (a, b), (0, 1))


@register(aten.addmm)
def _addmm(ctx, bias, a, b, *, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Decline
    try:  # the sum kept in the compute dtype: the bias joins it before the one rounding
        mm = _skinny_mm(ctx, a, b, compute_dtype(ctx.dtype))
    except Decline:
        try:
            return _onednn_linear(ctx, a, b, bias)
        except Decline:
            return _float32_matmul(ctx, aten.addmm.default, (bias, a, b), (0, 1, 2))
    return pointwise(ctx, "add", bias, mm)


@register(aten.bmm)
def _bmm(ctx, a, b):
    return _float32_matmul(ctx, aten.bmm.default, (a, b), (0, 1))


@register(aten.baddbmm)
def _baddbmm(ctx, x, a, b, *, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Decline
    return _float32_matmul(ctx, aten.baddbmm.default, (x, a, b), (0, 1, 2))


# ---------------------------------------------------------------- short convolutions

# 1-d convolutions reducing over at most this many (input channel, tap) pairs run through
# ember::conv1d_small: a waveform's first layer (1 channel, kernel 10, stride 5, 512
# channels, 4 x 80000 samples) took 150 ms in oneDNN's im2col + GEMM, 32 ms there (1 thread)
SHORT_CONV_TAPS = 16

# off while lowering an ahead-of-time package: its C++ runs ATen ops only, no Python kernels
python_kernels = contextvars.ContextVar("python_kernels", default=True)


@register(aten.convolution)
def _convolution(ctx, x, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    """A float32 CPU 1-d convolution with a short reduction -> ``ember::conv1d_small``
    (same values up to the summation order); a large enough float32 CPU 3x3, stride-1 2-d
    one -> ``ember::winograd_conv2d`` (rounding error of the same order); a 16-bit one on
    a CPU without native 16-bit dot products -> a float32 convolution of the widened
    operands (ATen's bfloat16 convolution on AVX2 is an emulation: ViT's [2,3,32,32] patch
    embedding took 0.5-0.7 ms); anything else stays ATen's."""
    if ctx.dtype in _NATIVE_16BIT:
        return _float32_matmul(ctx, aten.convolution.default,
                               (x, weight, bias, stride, padding, dilation, transposed,
                                output_padding, groups), (0, 1) if bias is None else (0, 1, 2))
    if ctx.graph.device != "cpu" or not python_kernels.get() or transposed or groups != 1 or \
            ctx.dtype != torch.float32 or \
            not all(isinstance(t, StridedView) for t in (weight, bias) if t is not None) or \
            weight.dtype != torch.float32 or (bias is not None and bias.dtype != torch.float32):
        raise Decline
    sizes = [sympy.sympify(v) for v in weight.size]
    if not all(v.is_Integer for v in sizes):
        raise Decline
    sizes = [int(v) for v in sizes]
    if len(sizes) == 3:
        return _short_conv1d(ctx, x, weight, bias, sizes, stride, padding, dilation)
    if len(sizes) == 4:
        return _winograd_conv2d(ctx, x, weight, bias, sizes, stride, padding, dilation, groups)
    raise Decline


def _short_conv1d(ctx, x, weight, bias, sizes, stride, padding, dilation):
    if not ctx.val.is_contiguous() or not 0 < sizes[1] * sizes[2] <= SHORT_CONV_TAPS:
        raise Decline
    from ember.core.nn import conv1d_small

    if not conv1d_small.available():
        raise Decline
    (s,), (p,), (d,) = stride, padding, dilation
    return ctx.graph.extern_call(conv1d_small.conv1d_small.op.default,
                                 (ctx.graph.realize(x), weight, bias, s, p, d), ctx.val)


def _winograd_conv2d(ctx, x, weight, bias, sizes, stride, padding, dilation, groups):
    from ember.core.nn import winograd_conv

    val = ctx.val
    shape = [sympy.sympify(v) for v in x.size]
    if not all(v.is_Integer for v in shape):
        raise Decline
    channels_last = val.is_contiguous(memory_format=torch.channels_last) and \
        not val.is_contiguous()
    if not (channels_last or val.is_contiguous()) or not winograd_conv.applies(
            sizes, [int(v) for v in shape], stride, padding, dilation, groups, packed_once=False,
            channels_last=channels_last):
        raise Decline
    return ctx.graph.extern_call(
        winograd_conv.winograd_conv2d.op.default,
        (ctx.graph.realize(x), weight, None, bias, None, list(padding), "none", channels_last),
        val)


@register(aten.convolution_backward)
def _convolution_backward(ctx, grad, x, weight, bias_sizes, stride, padding, dilation,
                          transposed, output_padding, groups, output_mask):
    """A 16-bit convolution backward on a CPU without native 16-bit dot products -> the
    float32 backward of the widened operands (ATen's bfloat16 one is the same emulation as
    its forward), each gradient stored back as 16-bit as eager's is. Static, contiguous
    gradients only; anything else stays ATen's."""
    vals = ctx.val
    dtype = grad.dtype
    if not _slow_16bit(with_dtype(ctx, dtype)) or x.dtype != dtype or weight.dtype != dtype or \
            not all(v is None or (v.dtype == dtype and v.is_contiguous() and
                                  all(type(s) is int for s in v.shape)) for v in vals):
        raise Decline
    args = (_as_float32(ctx, grad), _as_float32(ctx, x), _as_float32(ctx, weight), bias_sizes,
            stride, padding, dilation, transposed, output_padding, groups, output_mask)
    outs = ctx.graph.extern_call(aten.convolution_backward.default, args,
                                 tuple(None if v is None else _Float32Val(v) for v in vals))
    return [None if o is None else
            ctx.graph.realize(Lazy(dtype, list(o.size), lambda i, o=o: cast(o.load(i), dtype)))
            for o in outs]


# ---------------------------------------------------------------- gather of one element

@register(aten.gather)
def _gather(ctx, x, dim, index, *, sparse_grad=False):
    """gather with one index per output along ``dim`` (nll_loss / cross-entropy picking the
    target's log-probability) as a row reduction selecting ``r == index``: fused into the
    producer's row loops, so e.g. log_softmax is never written out. An index outside
    [0, size) raises IndexError after the kernels, as eager does before."""
    n = len(x.size)
    dim = norm_dim(dim, n)
    if ctx.graph.device != "cpu" or n == 0 or len(index.size) != n or \
            not ir.same(index.size[dim], sympy.Integer(1)) or \
            not all(ir.same(index.size[d], x.size[d]) for d in range(n) if d != dim):
        raise Decline  # 0-d: ATen's
    size = list(index.size)
    size[dim] = x.size[dim]
    # int32 compares vectorize twice as wide; an index that wraps is caught by the check
    it = torch.int32 if static_below(x.size[dim], 2 ** 31) else torch.int64

    def at(i):
        j = list(i)
        j[dim] = sympy.Integer(0)
        return op("eq", torch.bool, ir.Index(it, i[dim]), cast(index.load(j), it))

    acc = compute_dtype(x.dtype)
    picked = Lazy(x.dtype, size, lambda i: op("where", acc, at(i), cast(x.load(i), acc),
                                              const(0, acc)))
    out = reduce(ctx, picked, [dim], True, "sum", x.dtype, acc)
    check_index(ctx, index, x.size[dim], f"gather: an index along dim {dim}")
    return out


@register(aten.scatter)
def _scatter(ctx, x, dim, index, src=None, *, value=None, reduce=None):
    """scatter of one element per row along ``dim`` (nll_loss backward writing -1 at the
    target) as a pointwise select ``r == index ? src : x``: no copy of ``x``, no ATen call;
    an index outside [0, size) raises IndexError after the kernels."""
    n = len(x.size)
    dim = norm_dim(dim, n)
    if value is not None:
        src = value
    if reduce is not None or ctx.graph.device != "cpu" or n == 0 or len(index.size) != n or \
            not ir.same(index.size[dim], sympy.Integer(1)) or \
            not all(ir.same(index.size[d], x.size[d]) for d in range(n) if d != dim) or \
            (isinstance(src, TensorValue) and not all(
                ir.same(src.size[d], index.size[d]) for d in range(n))):
        raise Decline
    it = torch.int32 if static_below(x.size[dim], 2 ** 31) else torch.int64
    cdt = compute_dtype(ctx.dtype)

    def fn(i):
        j = list(i)
        j[dim] = sympy.Integer(0)
        hit = op("eq", torch.bool, ir.Index(it, i[dim]), cast(index.load(j), it))
        new = cast(src.load(j), cdt) if isinstance(src, TensorValue) else \
            scalar_expr(src, cdt)
        return cast(op("where", cdt, hit, new, cast(x.load(i), cdt)), ctx.dtype)

    check_index(ctx, index, x.size[dim], f"scatter: an index along dim {dim}")
    return Lazy(ctx.dtype, list(x.size), fn)


def static_below(v, bound: int) -> bool:
    v = sympy.sympify(v)
    return bool(v.is_Integer) and int(v) < bound
