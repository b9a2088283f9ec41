"""The op table: ATen/prims overloads lowered to loop IR values.

Pointwise ops stay lazy (inlined into their readers), views become strided windows or index
maps (no copy), reductions produce buffers, and indexing, embeddings and ``cat`` become
gathers (loads at data-dependent places) fused into their readers. A lowering that cannot
handle its arguments raises ``Unsupported`` (the node runs in eager ATen).
"""

from __future__ import annotations

import sympy
import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.fx import Node as FxNode
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ember.core.compiler import ir
from ember.core.compiler.ir import (
    Lazy,
    StridedView,
    TensorValue,
    Unsupported,
    cast,
    compute_dtype,
    const,
    contiguous_strides,
    op,
)
from ember.core.compiler.lowering.builders import (
    Ctx,
    Decline,
    add_scaled,
    addc,
    bload,
    bload_converted,
    check_index,
    converted,
    elementwise,
    lerp,
    meta_val,
    norm_dim,
    pointwise,
    reduce,
    reduction_dims,
    register,
    scalar_expr,
    sym,
    with_dtype,
)
from ember.core.compiler.prims import PRIMS

aten = torch.ops.aten
prims = torch.ops.prims
def _simple(name: str):
    arity = PRIMS[name].arity

    def lower(ctx, *args, **kwargs):
        # an overload with more arguments (round.decimals, ...) means something else: refuse
        # rather than drop them
        if len(args) != arity or kwargs:
            raise Unsupported(f"{ctx.node.target} with arguments {args[arity:]} {kwargs}")
        return pointwise(ctx, name, *args)
    return lower


_SIMPLE = {
    "add": [aten.add, prims.add], "sub": [aten.sub, prims.sub], "mul": [aten.mul, prims.mul],
    "truediv": [prims.div], "neg": [aten.neg, prims.neg], "abs": [aten.abs, prims.abs],
    "maximum": [aten.maximum, prims.maximum], "minimum": [aten.minimum, prims.minimum],
    "sign": [aten.sign, prims.sign], "exp": [aten.exp, prims.exp], "exp2": [aten.exp2],
    "expm1": [aten.expm1, prims.expm1], "log": [aten.log, prims.log],
    "log2": [aten.log2, prims.log2], "log10": [aten.log10], "log1p": [aten.log1p],
    "sqrt": [aten.sqrt, prims.sqrt], "rsqrt": [aten.rsqrt, prims.rsqrt],
    "reciprocal": [aten.reciprocal, prims.reciprocal], "sigmoid": [aten.sigmoid],
    "sin": [aten.sin, prims.sin], "cos": [aten.cos, prims.cos], "tan": [aten.tan],
    "asin": [aten.asin], "acos": [aten.acos], "atan": [aten.atan], "sinh": [aten.sinh],
    "cosh": [aten.cosh], "tanh": [aten.tanh, prims.tanh], "asinh": [aten.asinh],
    "acosh": [aten.acosh], "atanh": [aten.atanh], "erf": [aten.erf, prims.erf],
    "erfc": [aten.erfc], "floor": [aten.floor, prims.floor], "ceil": [aten.ceil],
    "trunc": [aten.trunc, prims.trunc], "round": [aten.round], "atan2": [aten.atan2],
    "fmod": [aten.fmod], "remainder": [aten.remainder], "isnan": [aten.isnan],
    "eq": [aten.eq, prims.eq], "ne": [aten.ne, prims.ne], "lt": [aten.lt, prims.lt],
    "le": [aten.le, prims.le], "gt": [aten.gt, prims.gt], "ge": [aten.ge, prims.ge],
    "logical_and": [aten.logical_and], "logical_or": [aten.logical_or],
    "logical_xor": [aten.logical_xor], "logical_not": [aten.logical_not],
    "bitwise_and": [aten.bitwise_and], "bitwise_or": [aten.bitwise_or],
    "bitwise_xor": [aten.bitwise_xor], "bitwise_not": [aten.bitwise_not],
    "where": [aten.where, prims.where], "isinf": [aten.isinf],
}
for _name, _ops in _SIMPLE.items():
    register(*_ops)(_simple(_name))


@register(aten.round)
def _round(ctx, x, *, decimals=0):
    """round(x, decimals): eager scales by 10^|decimals| in the compute type, rounds half to
    even, and scales back (multiply then divide for decimals >= 0, the reverse below 0)."""
    if decimals == 0:
        return pointwise(ctx, "round", x)
    if not compute_dtype(ctx.dtype).is_floating_point or abs(decimals) > 30:
        raise Unsupported(f"round with decimals={decimals} of {ctx.dtype}")
    dtype, size = ctx.dtype, ctx.size
    cdt = compute_dtype(dtype)
    scale = const(10.0 ** abs(decimals), cdt)
    first, second = ("mul", "truediv") if decimals > 0 else ("truediv", "mul")

    def fn(i):
        v = bload(x, size, i, cdt)
        return cast(op(second, cdt, op("round", cdt, op(first, cdt, v, scale)), scale), dtype)
    return Lazy(dtype, size, fn)


@register(aten.fmod, aten.remainder)
def _fmod(ctx, a, b):
    name = "fmod" if ctx.node.target._overloadpacket is aten.fmod else "remainder"
    if compute_dtype(ctx.dtype).is_floating_point:
        return pointwise(ctx, name, a, b)
    return _int_by_constant(ctx, name, a, b)


def _int_by_constant(ctx, name: str, a, b):
    """Integer fmod / remainder / floor or trunc division (torch.roll's index arithmetic,
    conv output lengths): exact with C++'s / and % when the divisor is a known constant other
    than 0 (eager raises) and -1 (INT_MIN / -1 overflows in C++). fmod and trunc division
    follow the dividend's sign; remainder takes the divisor's and floor division rounds down
    (e_rem and e_floordiv correct C++'s truncating result)."""
    if isinstance(b, sympy.Expr) and b.is_Integer:
        b = int(b)
    dtype = ctx.dtype
    if ctx.graph.device != "cpu" or dtype == torch.bool or not isinstance(a, TensorValue) \
            or isinstance(b, (bool, TensorValue)) or not isinstance(b, int) or b in (0, -1) \
            or not torch.iinfo(dtype).min <= b <= torch.iinfo(dtype).max:
        raise Unsupported(f"integer {name} by a divisor that is not a known constant "
                          "other than 0 and -1")
    cdt, size = compute_dtype(dtype), ctx.size
    return Lazy(dtype, size, lambda i: cast(
        op(name, cdt, bload(a, size, i, cdt), const(b, cdt)), dtype))


@register(aten.add, aten.sub)
def _add(ctx, a, b, *, alpha=1):
    return add_scaled(ctx, "add" if ctx.node.target._overloadpacket is aten.add else "sub",
                      a, b, alpha)


@register(aten.addcmul)
def _addcmul(ctx, x, t1, t2, *, value=1):
    return elementwise(ctx, lambda T, *a: addc(T, "mul", *a), x, t1, t2, value)


@register(aten.addcdiv)
def _addcdiv(ctx, x, t1, t2, *, value=1):
    if not compute_dtype(ctx.dtype).is_floating_point:
        raise Unsupported("integer addcdiv")  # eager refuses it too
    return elementwise(ctx, lambda T, *a: addc(T, "truediv", *a), x, t1, t2, value)


@register(aten.lerp)
def _lerp(ctx, s, e, w):
    if not compute_dtype(ctx.dtype).is_floating_point:
        raise Unsupported("integer lerp")
    return elementwise(ctx, lambda T, s, e, wv: lerp(T, s, e, wv, w), s, e, w)


@register(aten.div)
def _div(ctx, a, b, *, rounding_mode=None):
    if rounding_mode is None:
        return pointwise(ctx, "truediv", a, b)
    if not compute_dtype(ctx.dtype).is_floating_point:
        return _int_by_constant(ctx, "floordiv" if rounding_mode == "floor" else "truncdiv",
                                a, b)
    if ctx.dtype in (torch.float16, torch.bfloat16):
        # eager rounds the quotient to the 16-bit type before rounding it to an integer
        raise Unsupported(f"{rounding_mode} division of {ctx.dtype} (eager's double rounding)")
    return pointwise(ctx, "floordiv" if rounding_mode == "floor" else "truncdiv", a, b)


@register(aten.pow, prims.pow)
def _pow(ctx, a, b):
    if not compute_dtype(ctx.dtype).is_floating_point:
        raise Unsupported("integer pow")
    if not isinstance(b, TensorValue) and not isinstance(a, TensorValue):
        raise Unsupported("scalar pow")
    # the exponents eager's kernel computes by multiplication (gelu_new's x ** 3): the same
    # rounding, and no call of the vector pow, which is ~10x slower
    e = None if isinstance(b, TensorValue) or not sympy.sympify(b).is_number else float(b)
    if e == 2.0:
        return pointwise(ctx, "mul", a, a)
    if e == 3.0:
        return pointwise(ctx, "mul", pointwise(ctx, "mul", a, a), a)
    if e == 0.5:
        return pointwise(ctx, "sqrt", a)
    if e == -1.0:
        return pointwise(ctx, "reciprocal", a)
    if e == -2.0:
        return pointwise(ctx, "reciprocal", pointwise(ctx, "mul", a, a))
    return pointwise(ctx, "pow", a, b)


@register(aten.relu)
def _relu(ctx, a):
    return pointwise(ctx, "maximum", a, 0)


@register(aten.clamp, aten.clamp_min, aten.clamp_max)
def _clamp(ctx, x, lo=None, hi=None):
    target = ctx.node.target._overloadpacket
    if target is aten.clamp_max:
        lo, hi = None, lo
    out = x
    if lo is not None:
        out = pointwise(ctx, "maximum", out, lo)
    if hi is not None:
        out = pointwise(ctx, "minimum", out, hi)
    return out


@register(prims.convert_element_type, aten._to_copy, aten.clone, aten.alias,
          aten.lift_fresh_copy, aten._conj, aten.positive)
def _convert(ctx, x, *args, **kwargs):
    layout = kwargs.get("layout")
    if ctx.val.device.type != ctx.graph.device or layout not in (None, torch.strided):
        raise Unsupported("device or layout change")
    if not isinstance(x, TensorValue):
        raise Unsupported("scalar conversion")
    if ctx.node.target._overloadpacket in (aten.alias,) and isinstance(x, StridedView):
        return x
    # asked for a layout (channels_last, or contiguous: ATen's embedding_bag reads its indices
    # as contiguous without checking, trusting F.embedding_bag's .contiguous()): a copy unless
    # the strides already are
    return _copy_of(ctx, x, any_layout=kwargs.get("memory_format") in (None,
                                                                      torch.preserve_format))


def _copy_of(ctx, x: TensorValue, any_layout: bool) -> Lazy:
    """``x`` converted to the node's dtype as a fresh value; a view of ``x`` (its ``source``)
    where nothing changes: the same dtype, and ``any_layout`` or eager's strides already."""
    dtype = ctx.dtype
    out = Lazy(dtype, ctx.size, lambda i: converted(x.load(i), x.dtype, dtype))
    if isinstance(x, StridedView) and x.dtype == dtype and (
            any_layout or all(ir.same(n, 1) or ir.same(a, sym(b))
                              for a, b, n in zip(x.stride, ctx.val.stride(), x.size))):
        out.source = x
    return out


@register(aten.copy)
def _copy(ctx, dst, src, non_blocking=False):
    dtype, size = ctx.dtype, ctx.size
    return Lazy(dtype, size, lambda i: bload_converted(src, size, i, dtype))


@register(aten.full, aten.scalar_tensor, aten.full_like, aten.empty, aten.empty_like,
          aten.empty_permuted, aten.empty_strided, aten.zeros, aten.ones, aten.zeros_like,
          aten.ones_like, aten.new_empty, aten.new_empty_strided, aten.new_zeros,
          aten.new_ones, aten.new_full)
def _full(ctx, *args, **_kwargs):
    packet = ctx.node.target._overloadpacket
    if ctx.val.device.type != ctx.graph.device:
        raise Unsupported(f"factory off the graph's device ({ctx.graph.device})")
    if packet in (aten.full, aten.full_like):
        value = args[1]
    elif packet is aten.new_full:
        value = args[2]
    elif packet is aten.scalar_tensor:
        value = args[0]
    elif packet in (aten.ones, aten.ones_like, aten.new_ones):
        value = 1
    else:
        value = 0  # empty tensors: any content is valid
    return _filled(ctx, value)


def _filled(ctx, value) -> Lazy:
    """The node's whole output holding ``value``."""
    dtype = ctx.dtype
    return Lazy(dtype, ctx.size, lambda i: scalar_expr(value, dtype))


@register(aten.arange, prims.iota)
def _arange(ctx, *args, **kwargs):
    """Integer steps as index arithmetic. A floating arange is ATen's (``Decline``) unless every
    value is an integer the dtype holds exactly: eager computes fractional ones in a wider type
    and rounds each vector's first value on its own, so their last bits depend on the ISA."""
    packet = ctx.node.target._overloadpacket
    if packet is prims.iota:
        start, step = kwargs["start"], kwargs["step"]
    elif len(args) == 1:
        start, step = 0, 1
    else:
        start, step = args[0], (args[2] if len(args) > 2 else kwargs.get("step", 1))
    dtype = ctx.dtype
    if dtype.is_floating_point and not _exact_float_arange(start, step, ctx.size[0], dtype):
        raise Decline
    expr_start, expr_step = (v if isinstance(v, sympy.Expr) else sym(int(v))
                             for v in (start, step))
    return Lazy(dtype, ctx.size,
                lambda i: cast(ir.Index(torch.int64, expr_start + i[0] * expr_step), dtype))


def _exact_float_arange(start, step, n, dtype: torch.dtype) -> bool:
    """Static integer start, step and length whose values ``dtype`` represents exactly."""
    vals = (start, step, n)
    if not all(isinstance(v, (int, float, sympy.Integer)) and float(v).is_integer()
               for v in vals):
        return False
    last = int(start) + (int(n) - 1) * int(step)
    return max(abs(int(start)), abs(last)) <= 2 / torch.finfo(dtype).eps


@register(aten.permute, prims.transpose)
def _permute(ctx, x, dims):
    dims = [norm_dim(d, len(x.size)) for d in dims]
    if isinstance(x, StridedView):
        return StridedView(x.buf, [x.size[d] for d in dims], [x.stride[d] for d in dims],
                           x.offset)
    inv = [0] * len(dims)
    for k, d in enumerate(dims):
        inv[d] = k
    out = Lazy(x.dtype, [x.size[d] for d in dims], lambda i: x.load([i[inv[j]] for j in
                                                                     range(len(dims))]))
    out.permuted = (x, dims)
    return out


@register(aten.t)
def _t(ctx, x):
    return _permute(ctx, x, list(range(len(x.size)))[::-1])


@register(aten.transpose)
def _transpose(ctx, x, d0, d1):
    dims = list(range(len(x.size)))
    d0, d1 = norm_dim(d0, len(dims)), norm_dim(d1, len(dims))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _permute(ctx, x, dims)


@register(aten.expand, prims.broadcast_in_dim)
def _expand(ctx, x, shape, bdims=None, **_kw):
    size = ctx.size
    n = len(size)
    if bdims is None:
        bdims = list(range(n - len(x.size), n))
    if isinstance(x, StridedView):
        stride = [sympy.Integer(0)] * n
        for k, d in enumerate(bdims):
            stride[d] = x.stride[k] if x.size[k] == size[d] or x.size[k] != 1 else 0
        return StridedView(x.buf, size, stride, x.offset)

    def fn(i):
        return x.load([sympy.Integer(0) if (x.size[k] == 1 and size[d] != 1) else i[d]
                       for k, d in enumerate(bdims)])
    return Lazy(x.dtype, size, fn)


@register(aten.unsqueeze)
def _unsqueeze(ctx, x, dim):
    dim = norm_dim(dim, len(x.size) + 1)
    if isinstance(x, StridedView):
        return StridedView(x.buf, x.size[:dim] + [sympy.Integer(1)] + x.size[dim:],
                           x.stride[:dim] + [sympy.Integer(0)] + x.stride[dim:], x.offset)
    return Lazy(x.dtype, ctx.size, lambda i: x.load(list(i[:dim]) + list(i[dim + 1:])))


@register(aten.squeeze, prims.squeeze)
def _squeeze(ctx, x, dims=None):
    n = len(x.size)
    if n == 0:  # eager accepts dim 0 / -1 of a 0-dim tensor: nothing to squeeze
        return x
    if dims is None:
        dims = [d for d in range(n) if x.size[d] == 1]
    elif isinstance(dims, int):
        dims = [dims]
    dims = {norm_dim(d, n) for d in dims if x.size[norm_dim(d, n)] == 1}
    keep = [d for d in range(n) if d not in dims]
    if isinstance(x, StridedView):
        return StridedView(x.buf, [x.size[d] for d in keep], [x.stride[d] for d in keep],
                           x.offset)

    def fn(i):
        full, it = [], iter(i)
        for d in range(n):
            full.append(sympy.Integer(0) if d in dims else next(it))
        return x.load(full)
    return Lazy(x.dtype, [x.size[d] for d in keep], fn)


def _known_nonnegative(ctx, v, position: int, name: str) -> bool:
    """Is the position ``v`` (the node's argument ``position`` / ``name``) known not to count
    from the end? An int argument under dynamic=True is a symbol of unknown sign; one built
    from sizes is settled by the sizes' ranges and guards."""
    if v.is_number or v.is_nonnegative:
        return True
    args = ctx.node.args
    fx = args[position] if len(args) > position else ctx.node.kwargs.get(name)
    val = meta_val(fx) if isinstance(fx, FxNode) else fx
    return isinstance(val, torch.SymInt) and statically_known_true(val >= 0)


@register(aten.slice)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = norm_dim(dim, len(x.size))
    size = ctx.size
    start = sym(start or 0)
    if isinstance(start, sympy.Expr) and start.is_number and start < 0:
        start = start + x.size[dim]
    if not _known_nonnegative(ctx, start, 2, "start"):
        raise Unsupported("slice with a symbolic start of unknown sign")
    if start.is_number and x.size[dim].is_number:
        start = max(0, min(int(start), int(x.size[dim])))
    # else a start known not to be negative: past the end, torch's output size is 0 and
    # nothing is read, so it needs no clamp (a Min/Max the Triton printer cannot index with)
    start = sym(start)
    if isinstance(x, StridedView):
        stride = list(x.stride)
        stride[dim] = stride[dim] * step
        return StridedView(x.buf, size, stride, x.offset + start * x.stride[dim])
    return Lazy(x.dtype, size, lambda i: x.load(
        [i[k] * step + start if k == dim else i[k] for k in range(len(i))]))


@register(aten.select)
def _select(ctx, x, dim, index):
    dim = norm_dim(dim, len(x.size))
    index = sym(index)
    if index.is_number and index < 0:
        index = index + x.size[dim]
    if not _known_nonnegative(ctx, index, 2, "index"):
        raise Unsupported("select with a symbolic index of unknown sign")
    if isinstance(x, StridedView):
        return StridedView(x.buf, x.size[:dim] + x.size[dim + 1:],
                           x.stride[:dim] + x.stride[dim + 1:], x.offset + index * x.stride[dim])
    return Lazy(x.dtype, ctx.size, lambda i: x.load(list(i[:dim]) + [index] + list(i[dim:])))


@register(aten.as_strided)
def _as_strided(ctx, x, size, stride, storage_offset=None):
    """A view of the storage ``x`` lies in (eager's ``storage_offset`` counts from that
    storage's start, not from ``x``). Lowered where our buffer is laid out as eager's
    storage: an intermediate whose strides and offset are eager's, or a graph input or
    constant without an offset (addressed from ``x``'s own start). A graph input with an
    offset is ATen's (its storage offset is not guarded); an intermediate laid out otherwise
    than eager's makes the graph run in eager (an ATen call would see our copy)."""
    x = ctx.graph.realize(x)
    val = meta_val(ctx.node.args[0])
    outside = any(b is x.buf for b in ctx.graph.inputs) or x.buf.name in ctx.graph.constants
    size, stride = [sym(s) for s in size], [sym(s) for s in stride]
    if outside:
        if storage_offset is not None:
            raise Unsupported("as_strided with a storage offset into a graph input")
        return StridedView(x.buf, size, stride, x.offset)
    if not (isinstance(val, torch.Tensor) and ir.same(x.offset, sym(val.storage_offset()))
            and all(ir.same(n, 1) or ir.same(a, sym(b))
                    for n, a, b in zip(x.size, x.stride, val.stride()))):
        raise ir.EagerOnly("as_strided of a value whose storage is laid out otherwise than "
                           "eager's (a view of another value)")
    off = x.offset if storage_offset is None else sym(storage_offset)
    return StridedView(x.buf, size, stride, off)


@register(aten.flip)
def _flip(ctx, x, dims):
    """``x.flip(dims)`` as an index map: i -> size - 1 - i along each flipped dim."""
    n = len(x.size)
    flipped = {norm_dim(d, n) for d in dims}
    size = list(x.size)
    return Lazy(x.dtype, size, lambda i: x.load(
        [size[d] - 1 - i[d] if d in flipped else i[d] for d in range(n)]))


@register(aten.repeat)
def _repeat(ctx, x, repeats):
    """``x.repeat(*repeats)`` as an index map: output dim d reads input dim d modulo its size
    (leading dims that ``repeats`` adds read nothing)."""
    size = ctx.size
    pad = len(size) - len(x.size)
    if pad < 0:
        raise Unsupported("repeat with fewer repeats than dims")

    def fn(i):
        idx = []
        for k, s in enumerate(x.size):
            j = i[pad + k]
            idx.append(j if ir.same(s, size[pad + k]) else
                       sympy.Integer(0) if s == 0 or s == 1 else sympy.Mod(j, s))
        return x.load(idx)
    return Lazy(x.dtype, size, fn)


def _static_int(v) -> int | None:
    v = sympy.sympify(v) if v is not None else None
    return int(v) if v is not None and v.is_Integer else None


def _dense_scatter(ctx, x, src, cstride: list, view: list, vstride: list, offset: int):
    """as_strided_scatter whose view is dense (contiguous strides for its own shape, e.g. a
    reshape of a flattened input): the elements at linear positions [offset, offset + N)
    of the contiguous ``x`` come from ``src`` unravelled."""
    total = int(ir.numel(list(x.size)))
    numel = int(ir.numel(view))
    if vstride != [int(v) for v in contiguous_strides(view)] or offset + numel > total:
        raise Unsupported("as_strided_scatter view that is neither a box nor dense")
    dtype, size = ctx.dtype, ctx.size
    cdt = compute_dtype(dtype)
    src_stride = [int(v) for v in contiguous_strides(view)]

    def fn(i):
        lin = sum((i[d] * cstride[d] for d in range(len(cstride))), sympy.Integer(0))
        t = sympy.Min(sympy.Max(lin - offset, 0), numel - 1)
        j = [sympy.floor(t / st) if k == 0 else sympy.Mod(sympy.floor(t / st), n)
             for k, (st, n) in enumerate(zip(src_stride, view))]
        hit = op("eq", torch.bool, ir.Index(torch.int64, lin),
                 ir.Index(torch.int64, t + offset))
        return cast(op("where", cdt, hit, cast(src.load(j), cdt), bload(x, size, i, cdt)),
                    dtype)
    return Lazy(dtype, size, fn)


def _box_scatter(ctx, x, src, box: dict):
    """``x`` with the strided box ``{dim: (start, step)}`` (static ints, every other dim whole)
    replaced by ``src``: a pointwise select. Along a boxed dim, output position p takes
    ``src[q]`` with q = clamp(floor((p - start) / step), 0, n - 1) when p == start + step * q;
    the clamp keeps the unused load in bounds."""
    dtype, size = ctx.dtype, ctx.size
    cdt = compute_dtype(dtype)

    def fn(i):
        j, hit = list(i), None
        for d, (start, step) in box.items():
            n = int(src.size[d])
            p = i[d]
            q = sympy.Min(sympy.Max(sympy.floor((p - start) / step) if step > 1 else p - start,
                                    0), n - 1)
            j[d] = q
            h = op("eq", torch.bool, ir.Index(torch.int64, p),
                   ir.Index(torch.int64, start + step * q))
            hit = h if hit is None else op("logical_and", torch.bool, hit, h)
        new = cast(src.load(j), cdt)
        if hit is None:
            return cast(new, dtype)
        return cast(op("where", cdt, hit, new, bload(x, size, i, cdt)), dtype)
    return Lazy(dtype, size, fn)


def _static_box(x, src, box: dict) -> bool:
    """Every size static, the box inside ``x`` and ``src`` its exact shape."""
    sizes = [_static_int(v) for v in [*x.size, *src.size]]
    if None in sizes or len(src.size) != len(x.size):
        return False
    for d in range(len(x.size)):
        start, step = box.get(d, (0, 1))
        n, m = int(src.size[d]), int(x.size[d])
        if n < 1 or start < 0 or step < 1 or start + step * (n - 1) >= m or \
                (d not in box and n != m):
            return False
    return True


@register(aten.slice_scatter)
def _slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    """``x`` with ``x[start:end:step]`` along ``dim`` replaced by ``src`` (the backward of
    slicing). Static sizes, start and step; CPU (the index printing of Min/Max/floor)."""
    if ctx.graph.device != "cpu" or not isinstance(src, TensorValue) or \
            not isinstance(x, TensorValue):
        raise Unsupported("slice_scatter off CPU or of a scalar")
    dim = norm_dim(dim, len(x.size))
    size_d = _static_int(x.size[dim])
    start, step = (0 if start is None else _static_int(start)), _static_int(step)
    if size_d is None or start is None or step is None:
        raise Unsupported("slice_scatter with symbolic sizes, start or step")
    start = min(max(start + size_d if start < 0 else start, 0), size_d)
    if _static_int(src.size[dim]) == 0:
        dtype, size = ctx.dtype, ctx.size
        return Lazy(dtype, size, lambda i: bload(x, size, i, dtype))
    if not _static_box(x, src, {dim: (start, step)}):
        raise Unsupported("slice_scatter with symbolic sizes or a source off the slice")
    return _box_scatter(ctx, x, src, {dim: (start, step)})


@register(aten.as_strided_scatter)
def _as_strided_scatter(ctx, x, src, size, stride, storage_offset=None):
    """``x`` with ``x.as_strided(size, stride, offset)`` replaced by ``src``, when that view
    is a strided box of a contiguous ``x`` (eager's layout, checked on the FX value): every
    view dim d of size > 1 walks input dim d with stride step_d * contiguous_stride[d], and
    the offset splits into per-dim starts. Anything else is refused."""
    x_val = meta_val(ctx.node.args[0])
    if ctx.graph.device != "cpu" or not isinstance(src, TensorValue) or \
            not isinstance(x, TensorValue) or x_val is None or not x_val.is_contiguous() or \
            x_val.storage_offset() != 0:
        raise Unsupported("as_strided_scatter of a non-contiguous input")
    shape = [_static_int(v) for v in x.size]
    view = [_static_int(sym(v)) for v in size]
    vstride = [_static_int(sym(v)) for v in stride]
    offset = _static_int(sym(storage_offset or 0))
    if None in shape or None in view or None in vstride or offset is None or 0 in shape or \
            0 in view or [_static_int(v) for v in src.size] != view:
        raise Unsupported("as_strided_scatter with symbolic or empty sizes")
    cstride = [int(v) for v in contiguous_strides(shape)]
    if len(view) != len(shape):
        return _dense_scatter(ctx, x, src, cstride, view, vstride, offset)
    box, rest = {}, offset
    for d in range(len(shape)):  # the offset in mixed radix: one start per dim
        start, rest = divmod(rest, cstride[d])
        if start >= shape[d]:
            raise Unsupported("as_strided_scatter offset outside the input")
        step = 1 if view[d] == 1 else vstride[d] // cstride[d]
        if view[d] != 1 and (vstride[d] % cstride[d] or step < 1):
            raise Unsupported("as_strided_scatter view that is not a strided box")
        if (start, step, view[d]) != (0, 1, shape[d]):
            box[d] = (start, step)
    if rest or not _static_box(x, src, box):
        raise Unsupported("as_strided_scatter view that is not a strided box")
    return _box_scatter(ctx, x, src, box)


@register(aten.view, aten._unsafe_view, aten.reshape, prims.reshape, aten.view_copy)
def _view(ctx, x, *_shape):
    size = ctx.size
    if ctx.dtype != x.dtype:
        raise Unsupported("view as another dtype")
    old = [s for s in x.size if s != 1]
    new = [s for s in size if s != 1]
    if ir.same_sizes(old, new):  # only size-1 dims change: a pure index map
        if isinstance(x, StridedView):
            it = iter([st for s, st in zip(x.size, x.stride) if s != 1])
            stride = [sympy.Integer(0) if s == 1 else next(it) for s in size]
            return StridedView(x.buf, size, stride, x.offset)

        def fn(i):
            it = iter([ik for ik, s in zip(i, size) if s != 1])
            return x.load([sympy.Integer(0) if s == 1 else next(it) for s in x.size])
        return Lazy(x.dtype, size, fn)
    if isinstance(x, StridedView):
        if x.is_contiguous():
            return StridedView(x.buf, size, contiguous_strides(size), x.offset)
        stride = _view_strides(x.size, x.stride, size)
        if stride is not None:
            return StridedView(x.buf, size, stride, x.offset)
    x = ctx.graph.realize(_copy_lazy(x))
    if not x.is_contiguous():  # realized in eager's (non-contiguous) memory order: copy
        x = ctx.graph.realize(Lazy(x.dtype, list(x.size), x.load))
    return StridedView(x.buf, size, contiguous_strides(size), x.offset)


def _view_strides(old: list, old_stride: list, new: list) -> list | None:
    """Strides viewing (old, old_stride) as ``new`` without a copy, or None (static sizes)."""
    if not all(sympy.sympify(v).is_Integer for v in [*old, *old_stride, *new]):
        return None
    old, old_stride, new = ([int(v) for v in vs] for vs in (old, old_stride, new))
    if not old or 0 in old:
        return None
    out = [0] * len(new)
    view_d = len(new) - 1
    base = old_stride[-1]
    tensor_n = view_n = 1
    for d in range(len(old) - 1, -1, -1):
        tensor_n *= old[d]
        if d == 0 or (old[d - 1] != 1 and old_stride[d - 1] != tensor_n * base):
            while view_d >= 0 and (view_n < tensor_n or new[view_d] == 1):
                out[view_d] = view_n * base
                view_n *= new[view_d]
                view_d -= 1
            if view_n != tensor_n:
                return None
            if d > 0:
                base, tensor_n, view_n = old_stride[d - 1], 1, 1
    if view_d != -1:
        return None
    return [sympy.Integer(v) for v in out]


def _copy_lazy(x: TensorValue) -> Lazy:
    if isinstance(x, Lazy):
        return x
    return Lazy(x.dtype, list(x.size), x.load)


@register(aten.split, aten.split_with_sizes)
def _split(ctx, x, sizes, dim=0):
    dim = norm_dim(dim, len(x.size))
    outs, start = [], sympy.Integer(0)
    for v in ctx.val:
        n = sym(v.shape[dim])
        size = [sym(s) for s in v.shape]
        sub = with_dtype(ctx, x.dtype, size)
        outs.append(_slice(sub, x, dim, start, start + n, 1))
        start = start + n
    return outs


@register(aten.unbind)
def _unbind(ctx, x, dim=0):
    dim = norm_dim(dim, len(x.size))
    return [_select(with_dtype(ctx, x.dtype, [sym(s) for s in v.shape]), x, dim, k)
            for k, v in enumerate(ctx.val)]


# ---------------------------------------------------------------- gathers

def _position(ctx: Ctx, t, size, at, bsize, wrap: bool):
    """The int64 position read from index tensor ``t`` (broadcast to ``bsize``) at ``at``,
    negative values wrapped when ``wrap``, then clamped into [0, size) so no load leaves the
    buffer: an index that was outside raises IndexError after the kernels (``check_index``)."""
    v = bload(t, bsize, at, torch.int64)
    n = scalar_expr(size, torch.int64)
    zero = const(0, torch.int64)
    if wrap:
        v = op("where", torch.int64, op("lt", torch.bool, v, zero), op("add", torch.int64, v, n),
               v)
    return _clamp_position(v, op("sub", torch.int64, n, const(1, torch.int64)))


def _clamp_position(v, top):
    """An int64 position clamped into [0, top]: the load it feeds stays inside its buffer."""
    return op("minimum", torch.int64, op("maximum", torch.int64, v, const(0, torch.int64)), top)


def _advanced(x, indices: list):
    """Advanced indexing's layout of ``x[indices]`` (``None`` keeps a dimension): the indices
    padded to ``x``'s dims, the indexed dims, and where the broadcast index dims sit in the
    result (``first``) and how many there are. Declines boolean masks and scalars."""
    n = len(x.size)
    idx = list(indices) + [None] * (n - len(indices))
    dims = [d for d, t in enumerate(idx) if t is not None]
    if not dims or len(idx) > n or any(
            not isinstance(idx[d], TensorValue) or idx[d].dtype not in (torch.int64, torch.int32)
            for d in dims):
        raise Decline  # boolean masks (data-dependent shapes), scalars: ATen
    nb = max(len(idx[d].size) for d in dims)
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    return idx, dims, (dims[0] if adjacent else 0), nb


def _places(ctx: Ctx, x, idx: list, dims: list, first: int, nb: int, bsize: list, wrap: bool):
    """``fn(i) -> (at, positions)``: for the element ``i`` of ``x[idx]``, the index into ``x``
    (``gather_slot(k)`` for the k-th indexed dim) and the clamped position of each slot."""
    n = len(x.size)
    slots = {d: ir.gather_slot(k) for k, d in enumerate(dims)}

    def fn(i):
        b = i[first:first + nb]
        rest = iter(list(i[:first]) + list(i[first + nb:]))
        at = [slots[d] if d in slots else next(rest) for d in range(n)]
        return at, [_position(ctx, idx[d], x.size[d], b, bsize, wrap) for d in dims]
    return fn


def _gather_index(ctx: Ctx, x, indices: list, *, wrap: bool, check: bool, what: str):
    """``x[indices]`` with advanced-indexing semantics (``None`` keeps a dimension) as a
    pointwise value whose loads of ``x`` sit at data-dependent places: fused into its
    reader, no ATen call, no copy of the gathered rows. CPU and Triton code generators."""
    idx, dims, first, nb = _advanced(x, indices)
    size = ctx.size
    src = ctx.graph.realize(x)
    for d in dims:
        if check:
            check_index(ctx, idx[d], x.size[d], f"{what}: an index along dim {d}", wrap)
    places = _places(ctx, x, idx, dims, first, nb, size[first:first + nb], wrap)

    def fn(i):
        at, positions = places(i)
        return ir.gather(x.dtype, src.buf.name, src.flat_index(at), positions)

    return Lazy(x.dtype, size, fn)


def _broadcast_sizes(sizes: list) -> list:
    """The broadcast of several (symbolic) shapes."""
    nb = max(len(s) for s in sizes)
    out = []
    for k in range(nb):
        dims = [s[len(s) - nb + k] for s in sizes if len(s) - nb + k >= 0]
        big = [v for v in dims if not ir.same(v, 1)]
        out.append(big[0] if big else sympy.Integer(1))
    return out


def _dense_strides(val, size) -> list | None:
    """Strides for a buffer a kernel of its own writes in eager's layout (``val``'s), or None
    where eager's tensor overlaps or has gaps."""
    if val.is_contiguous():
        return contiguous_strides(size)
    if is_non_overlapping_and_dense_or_false(val):
        return [sym(s) for s in val.stride()]
    return None


@register(aten.index_put, aten._unsafe_index_put)
def _index_put(ctx, x, indices, values, accumulate=False):
    """index_put as a scatter kernel (C++ code generator): ``x`` copied into a fresh buffer,
    then each element of ``values`` stored (added, with ``accumulate``) at the place its
    indices give; the backwards of indexing and upsampling, which ATen runs serially over a
    strided copy. Indices wrap when negative; one outside raises IndexError after the kernels
    (``index_put``, not ``_unsafe_index_put``)."""
    if ctx.graph.triton or not isinstance(values, TensorValue) or \
            x.dtype != ctx.dtype or (accumulate and ctx.dtype == torch.bool):
        raise Decline
    idx, dims, first, nb = _advanced(x, indices)
    bsize = _broadcast_sizes([idx[d].size for d in dims])
    rest = [s for d, s in enumerate(x.size) if d not in dims]
    size = rest[:first] + bsize + rest[first:]
    if len(values.size) > len(size):
        raise Decline
    stride = _dense_strides(ctx.val, ctx.size)
    if stride is None:
        raise Decline
    if ctx.node.target._overloadpacket is aten.index_put:
        for d in dims:
            check_index(ctx, idx[d], x.size[d], f"index_put: an index along dim {d}", True)
    buf = ctx.graph.new_buffer(ctx.dtype, ctx.size, stride)
    out = StridedView.of(buf)
    places = _places(ctx, x, idx, dims, first, nb, bsize, True)

    def target(i):
        at, positions = places(i)
        return ir.gather(ctx.dtype, buf.name, out.flat_index(at), positions)

    ctx.graph.add(ir.Scatter(buf, lambda i: bload(x, list(x.size), i, ctx.dtype), size, target,
                             lambda i: bload(values, size, i, ctx.dtype), bool(accumulate)))
    return out


@register(aten.index, aten._unsafe_index)
def _index(ctx, x, indices):
    unsafe = ctx.node.target._overloadpacket is aten._unsafe_index
    return _gather_index(ctx, x, indices, wrap=True, check=not unsafe, what="index")


@register(aten.index_select)
def _index_select(ctx, x, dim, index):
    dim = norm_dim(dim, len(x.size))
    if not isinstance(index, TensorValue) or len(index.size) > 1:
        raise Decline
    return _gather_index(ctx, x, [None] * dim + [index], wrap=False, check=True,
                         what="index_select")


@register(aten.embedding)
def _embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return _gather_index(ctx, weight, [indices], wrap=False, check=True, what="embedding")


@register(aten._embedding_bag_backward)
def _embedding_bag_backward(ctx, grad, *args, **kwargs):
    """No bag (``offsets`` of one element with ``include_last_offset``, or none): the gradient
    is zero. ATen's kernel reads outside its buffers then (uninitialised values in eager, a
    crash on a compiled graph's contiguous empty gradient); with bags it runs in ATen."""
    sparse = args[8] if len(args) > 8 else kwargs.get("sparse", False)
    if sparse or not sympy.sympify(grad.size[0]).is_zero:
        raise Unsupported("embedding_bag's backward runs in ATen")
    return _filled(ctx, 0)


CAT_MAX_INPUTS = 8  # Triton's select gathers every input in every element: beyond, ATen's cat
# from this many parts a cat is stored part by part even for pointwise readers: the select
# gathers every part in every element, and 16-bit gathers do not vectorize (densenet's
# cat -> batch_norm -> relu: 27.8 -> 21.7 ms bfloat16, 24.1 -> 21.5 ms float32, 1 thread)
CAT_STORE_PARTS = 3
# readers that take the cat from memory (ATen, or loops reading each element more than once):
# for them the parts are stored straight into the cat's slices (``ir.Concat``)
CAT_FROM_MEMORY = {aten.convolution, aten.mm, aten.addmm, aten.bmm, aten.baddbmm,
                   aten.max_pool2d_with_indices, aten.avg_pool2d}


def _stored_cat_strides(ctx, nparts: int) -> list | None:
    """Strides of a cat stored part by part, or None for the pointwise select: where every
    reader takes the cat from memory or it has ``CAT_STORE_PARTS`` parts or more, in the
    cat's layout; where its one reader is a layout copy (channels_last's rewrite puts one
    before a convolution), in the copy's layout, so the copy has nothing to do."""
    if ctx.graph.triton:
        return None
    users, val = list(ctx.node.users), ctx.val
    if len(users) == 1 and users[0].target is aten.clone.default and \
            users[0].kwargs.get("memory_format") is not None:
        val, users = meta_val(users[0]), list(users[0].users)
    if nparts < CAT_STORE_PARTS and (not users or not all(
            u.op == "output" or getattr(u.target, "_overloadpacket", None) in CAT_FROM_MEMORY
            for u in users)):
        return None
    return _dense_strides(val, ctx.size)


@register(aten.cat)
def _cat(ctx, tensors, dim=0):
    """cat as a pointwise value: each element gathers from the input its position along
    ``dim`` falls in (the offset clamped into every input, so no branch reads outside its
    buffer), fused into the reader (rotary embeddings' cat(-x2, x1) * sin + ...). Where
    every reader takes it from memory (a convolution), or it has three parts or more, each
    part is instead stored straight into its slice of the cat's buffer (C++ only)."""
    size = ctx.size
    n = len(size)
    parts = [t for t in tensors if not (isinstance(t, TensorValue) and len(t.size) == 1 and
                                        len(size) > 1 and ir.same(t.size[0], sympy.Integer(0)))]
    if not parts or n == 0 or \
            any(not isinstance(t, TensorValue) or len(t.size) != n for t in parts):
        raise Decline
    if len(parts) == 1:  # a copy (densenet's first layer cats its one input)
        return _copy_of(ctx, parts[0], any_layout=False)
    dim = norm_dim(dim, n)
    stride = _stored_cat_strides(ctx, len(parts))
    if stride is not None:
        buf = ctx.graph.new_buffer(ctx.dtype, size, stride)
        ctx.graph.add(ir.Concat(buf, parts, dim))
        return StridedView.of(buf)
    if len(parts) > CAT_MAX_INPUTS:
        raise Decline
    srcs = [ctx.graph.realize(t) for t in parts]
    ends, end = [], sympy.Integer(0)
    for t in srcs:
        end = end + t.size[dim]
        ends.append(end)
    cdt = compute_dtype(ctx.dtype)

    def fn(i):
        pos = ir.Index(torch.int64, i[dim])
        at = list(i)
        at[dim] = ir.gather_slot(0)
        value = None
        for k in reversed(range(len(srcs))):
            start = ends[k] - srcs[k].size[dim]
            local = op("sub", torch.int64, pos, scalar_expr(start, torch.int64))
            local = _clamp_position(local, scalar_expr(srcs[k].size[dim] - 1, torch.int64))
            v = cast(ir.gather(srcs[k].dtype, srcs[k].buf.name, srcs[k].flat_index(at),
                               [local]), cdt)
            value = v if value is None else op(
                "where", cdt, op("lt", torch.bool, pos, scalar_expr(ends[k], torch.int64)), v,
                value)
        return cast(value, ctx.dtype)

    return Lazy(ctx.dtype, size, fn)


def _dims_arg(dims):
    if dims is None:
        return None
    return [dims] if isinstance(dims, int) else list(dims)


@register(aten.sum, prims.sum)
def _sum(ctx, x, dims=None, keepdim=False, *, dtype=None, output_dtype=None):
    out = ctx.dtype
    acc = torch.int64 if not out.is_floating_point and out != torch.bool else compute_dtype(out)
    return reduce(ctx, x, _dims_arg(dims), keepdim, "sum", out, acc)


@register(aten.prod, prims.prod)
def _prod(ctx, x, dims=None, keepdim=False, *, dtype=None, output_dtype=None):
    out = ctx.dtype  # integers and bool multiply in int64, like eager
    acc = torch.int64 if not out.is_floating_point and out != torch.bool else compute_dtype(out)
    return reduce(ctx, x, _dims_arg(dims), keepdim, "prod", out, acc)


@register(aten.mean)
def _mean(ctx, x, dims=None, keepdim=False, *, dtype=None):
    d = reduction_dims(_dims_arg(dims), len(x.size))
    count = ir.numel([x.size[k] for k in d])
    # the sum stays in the compute dtype: eager divides a float sum of a bfloat16 or float16
    # tensor and rounds once (rounding the sum first is off by an ulp where count is no power
    # of two, a 7x7 average pool)
    s = reduce(ctx, x, d, keepdim, "sum", compute_dtype(ctx.dtype))
    return pointwise(ctx, "truediv", s, count)


@register(aten.amax, aten.amin, prims.amax, prims.amin)
def _amax(ctx, x, dims=None, keepdim=False):
    packet = ctx.node.target._overloadpacket
    rtype = "max" if packet in (aten.amax, prims.amax) else "min"
    if ctx.dtype == torch.bool:
        raise Unsupported("bool amax")
    if not dims and any(s == 0 for s in x.size):
        raise Unsupported("amax of an empty tensor")
    return reduce(ctx, x, _dims_arg(dims), keepdim, rtype, ctx.dtype)


@register(aten.any)
def _any(ctx, x, dims=None, keepdim=False):
    return reduce(ctx, Lazy(torch.bool, x.size, lambda i: cast(x.load(i), torch.bool)),
                  _dims_arg(dims), keepdim, "any", torch.bool, torch.bool)


@register(prims.var)
def _var(ctx, x, dims, correction=1, *, output_dtype=None):
    n = len(x.size)
    d = reduction_dims(_dims_arg(dims), n)
    count = ir.numel([x.size[k] for k in d])
    dtype = ctx.dtype
    size_k = [sympy.Integer(1) if k in d else x.size[k] for k in range(n)]
    s = reduce(ctx, x, d, True, "sum", dtype)
    mean = pointwise(with_dtype(ctx, dtype, size_k), "truediv", s, count)
    full = with_dtype(ctx, dtype, list(x.size))
    diff = pointwise(full, "sub", x, mean)
    sq = pointwise(full, "mul", diff, diff)
    ss = reduce(ctx, sq, d, False, "sum", dtype)
    # eager divides by max(N - correction, 0): 0 (a nan or inf result) when N <= correction
    denom = sympy.Max(count - sym(correction), 0)
    return pointwise(ctx, "truediv", ss, denom)


@register(aten._weight_norm_interface_backward)
def _weight_norm_backward(ctx, grad_w, v, g, norms, dim):
    """Backward of ``w = v * (g / ||v||)`` (norm over every dim but ``dim``), as ATen's kernel
    computes it: grad_g = sum(grad_w * v) / norm, grad_v = (g / norm) * (grad_w - v * (grad_g
    / norm)); one reduction, the rest fused. float32/float64 only (ATen's half path
    accumulates differently)."""
    tensors = (grad_w, v, g, norms)
    n = len(v.size) if isinstance(v, TensorValue) else 0
    dim = norm_dim(dim, n) if n else dim
    dtype = v.dtype if isinstance(v, TensorValue) else None
    if not all(isinstance(t, TensorValue) for t in tensors) or \
            dtype not in (torch.float32, torch.float64) or \
            any(t.dtype != dtype for t in tensors) or dim not in (0, n - 1) or \
            not ir.same_sizes(grad_w.size, v.size):
        raise Unsupported("weight_norm backward other than float32/float64 over dim 0 or -1")
    gsize = [v.size[d] if d == dim else sympy.Integer(1) for d in range(n)]
    if not (ir.same_sizes(g.size, gsize) and ir.same_sizes(norms.size, gsize)):
        raise Unsupported("weight_norm backward with unexpected g / norms shapes")
    full, small = with_dtype(ctx, dtype, list(v.size)), with_dtype(ctx, dtype, gsize)
    others = [d for d in range(n) if d != dim]
    dot = reduce(ctx, pointwise(full, "mul", grad_w, v), others, True, "sum", dtype)
    grad_g = pointwise(small, "truediv", dot, norms)
    scale = pointwise(small, "truediv", g, norms)
    ratio = pointwise(small, "truediv", grad_g, norms)
    grad_v = pointwise(full, "mul", scale,
                       pointwise(full, "sub", grad_w, pointwise(full, "mul", v, ratio)))
    return grad_v, grad_g
