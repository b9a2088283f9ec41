"""Lowering: an ATen/prims FX graph -> loop IR (Pointwise, Reduction, Extern nodes).

``LOWERINGS`` maps ATen overload packets to functions building IR values; views become
strided windows or index maps (no copy), pointwise ops stay lazy and are inlined into
their readers, reductions and externs produce buffers. Anything else becomes an eager
fallback node (logged once per op on ``ember.fallback``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import sympy
import torch
from torch.fx import GraphModule
from torch.fx import Node as FxNode

from ember.core.compiler import ir
from ember.core.compiler.ir import (
    Buffer,
    Extern,
    Lazy,
    Pointwise,
    Reduction,
    StridedView,
    TensorValue,
    Unsupported,
    cast,
    compute_dtype,
    const,
    contiguous_strides,
    op,
)
from ember.core.compiler.prims import PRIMS
from ember.core.logs import get_logger

aten = torch.ops.aten
prims = torch.ops.prims
_fallback_log = get_logger("fallback")
_lower_log = get_logger("lower")
_logged_fallbacks: set[str] = set()

# Ops that are expected to run in ATen (no fallback warning): matmuls, convs, sorting,
# indexing, random numbers and a few data-movement ops.
EXTERN_OPS = {
    aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.convolution, aten.convolution_backward,
    aten.sort, aten.topk, aten.embedding, aten.embedding_dense_backward, aten.index,
    aten.index_select, aten.gather, aten.scatter, aten.scatter_add, aten.index_put,
    aten.cat, aten.constant_pad_nd, aten.max_pool2d_with_indices,
    aten.max_pool2d_with_indices_backward, aten.avg_pool2d, aten.avg_pool2d_backward,
    aten._adaptive_avg_pool2d, aten._adaptive_avg_pool2d_backward, aten.rand, aten.randn,
    aten.rand_like, aten.randn_like, aten.bernoulli, aten.native_dropout, aten.argmax,
    aten.argmin, aten.max, aten.min, aten.cumsum, aten.scaled_dot_product_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward, aten.randint, aten.randperm,
    aten.copy_,  # input mutations AOTAutograd keeps in inference graphs
}
LOWERINGS: dict = {}


def _is_extern(packet) -> bool:
    """ATen ops expected to run in ATen, and the ops declared through ``ember.core.kernels``
    (``ember::sdpa``, domain kernels): those are our own kernels, not an eager fallback."""
    if packet in EXTERN_OPS:
        return True
    from ember.core import kernels

    return getattr(packet, "_qualified_op_name", None) in kernels._registry
# Prims worth storing rather than recomputing when a value has several readers.
_COSTLY = {"exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "erf", "erfc", "sigmoid",
           "pow", "sin", "cos", "tan", "atan2"}


def register(*ops):
    def deco(fn):
        for o in ops:
            LOWERINGS[o] = fn
        return fn
    return deco


def sym(v):
    """An int / SymInt / sympy value as a sympy expression."""
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return v.node.expr
    if isinstance(v, bool):
        return sympy.true if v else sympy.false
    if isinstance(v, int):
        return sympy.Integer(v)
    return v


def meta_val(node: FxNode):
    return node.meta.get("val")


def _scalar_expr(v, dtype: torch.dtype) -> ir.Expr:
    if isinstance(v, sympy.Expr) and not v.is_number:
        return cast(("index", torch.int64 if v.is_integer else torch.float64, v), dtype)
    if isinstance(v, sympy.Expr):
        v = float(v) if not v.is_integer else int(v)
    return const(v, dtype)


def bload(x, size: Sequence, index: Sequence, dtype: torch.dtype) -> ir.Expr:
    """Load ``x`` broadcast to ``size`` at ``index``, cast to ``dtype``'s compute type."""
    if not isinstance(x, TensorValue):
        return _scalar_expr(x, dtype)
    off = len(size) - len(x.size)
    idx = [sympy.Integer(0) if (s == 1 and size[off + i] != 1) else index[off + i]
           for i, s in enumerate(x.size)]
    return cast(x.load(idx), dtype)


def _proto(x):
    """A stand-in for torch.result_type: 0-dim tensors and scalars promote weakly."""
    if isinstance(x, TensorValue):
        return torch.empty([0] if x.size else [], dtype=x.dtype)
    if isinstance(x, sympy.Expr):
        return 1 if x.is_integer else 1.0
    return x


def result_type(*xs) -> torch.dtype:
    protos = [_proto(x) for x in xs]
    if len(protos) == 1:
        p = protos[0]
        return p.dtype if isinstance(p, torch.Tensor) else torch.tensor(p).dtype
    out = torch.result_type(protos[0], protos[1])
    for p in protos[2:]:
        out = torch.promote_types(out, torch.result_type(p, torch.empty([], dtype=out)))
    return out


class Ctx:
    """Per-node context handed to lowerings: the FX node and the graph being built."""

    def __init__(self, graph: GraphLowering, node: FxNode):
        self.graph, self.node = graph, node
        self.val = meta_val(node)

    @property
    def size(self) -> list:
        return [sym(s) for s in self.val.shape]

    @property
    def dtype(self) -> torch.dtype:
        return self.val.dtype


def pointwise(ctx: Ctx, name: str, *args) -> Lazy:
    if name == "bitwise_not" and ctx.dtype == torch.bool:
        name = "logical_not"
    arity, kind, _ = PRIMS[name]
    out_dtype, size = ctx.dtype, ctx.size
    if kind == "compare":
        cdt = compute_dtype(result_type(*args))
    elif kind == "logical":
        cdt = torch.bool
    elif kind == "bitwise":
        cdt = out_dtype
        if out_dtype.is_floating_point:
            raise Unsupported("bitwise op on floats")
    elif kind == "math" and not compute_dtype(out_dtype).is_floating_point:
        if name in ("floor", "ceil", "trunc", "round"):
            return Lazy(out_dtype, size, lambda i: bload(args[0], size, i, out_dtype))
        raise Unsupported(f"{name} with integer result")
    else:
        cdt = compute_dtype(out_dtype)
    rdt = torch.bool if kind in ("compare", "logical") else cdt

    if kind == "select":
        def fn(i):
            return cast(op(name, cdt, bload(args[0], size, i, torch.bool),
                           bload(args[1], size, i, cdt), bload(args[2], size, i, cdt)),
                        out_dtype)
    else:
        def fn(i):
            return cast(op(name, rdt, *(bload(a, size, i, cdt) for a in args[:arity])),
                        out_dtype)
    return Lazy(out_dtype, size, fn)


def _simple(name: str):
    arity = PRIMS[name][0]

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


def _int_out(ctx: Ctx, name: str):
    if not compute_dtype(ctx.dtype).is_floating_point:
        raise Unsupported(f"integer {name} (division by zero semantics)")


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
    name = "add" if ctx.node.target._overloadpacket is aten.add else "sub"
    if alpha != 1:
        b = pointwise(_with_dtype(ctx, result_type(b, alpha)), "mul", b, alpha)
    return pointwise(ctx, name, a, b)


class _DtypeCtx(Ctx):
    def __init__(self, ctx: Ctx, dtype, size=None):
        self.graph, self.node, self.val = ctx.graph, ctx.node, ctx.val
        self._dtype, self._size = dtype, size

    @property
    def dtype(self):
        return self._dtype

    @property
    def size(self):
        return self._size if self._size is not None else [sym(s) for s in self.val.shape]


def _with_dtype(ctx, dtype, size=None):
    return _DtypeCtx(ctx, dtype, size)


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
    e = None if isinstance(b, TensorValue) else float(b)
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
    dtype, size = ctx.dtype, ctx.size
    if ctx.node.target._overloadpacket in (aten.alias,) and isinstance(x, StridedView):
        return x
    out = Lazy(dtype, size, lambda i: cast(x.load(i), dtype))
    if isinstance(x, StridedView) and x.dtype == dtype:
        out.source = x
    return out


@register(aten.copy)
def _copy(ctx, dst, src, non_blocking=False):
    dtype, size = ctx.dtype, ctx.size
    return Lazy(dtype, size, lambda i: bload(src, size, i, dtype))


@register(aten.full, aten.scalar_tensor, aten.full_like, aten.empty, aten.empty_like,
          aten.empty_permuted, aten.empty_strided, aten.zeros, aten.ones, aten.zeros_like,
          aten.ones_like)
def _full(ctx, *args, **_kwargs):
    packet = ctx.node.target._overloadpacket
    if ctx.val.device.type != ctx.graph.device:
        raise Unsupported(f"factory off the graph's device ({ctx.graph.device})")
    if packet in (aten.full, aten.full_like):
        value = args[1]
    elif packet is aten.scalar_tensor:
        value = args[0]
    elif packet in (aten.ones, aten.ones_like):
        value = 1
    else:
        value = 0  # empty tensors: any content is valid
    dtype, size = ctx.dtype, ctx.size
    return Lazy(dtype, size, lambda i: _scalar_expr(value, dtype))


@register(aten.arange, prims.iota)
def _arange(ctx, *args, **kwargs):
    packet = ctx.node.target._overloadpacket
    if packet is prims.iota:
        start, step = kwargs["start"], kwargs["step"]
    elif len(args) == 1:
        start, step = 0, 1
    else:
        start, step = args[0], (args[2] if len(args) > 2 else kwargs.get("step", 1))
    if ctx.dtype.is_floating_point and any(isinstance(v, float) for v in (start, step)):
        dtype = ctx.dtype
        return Lazy(dtype, ctx.size, lambda i: op(
            "add", dtype, const(start, dtype),
            op("mul", dtype, cast(("index", torch.int64, i[0]), dtype), const(step, dtype))))
    expr_start, expr_step = sym(int(start)) if not isinstance(start, sympy.Expr) else start, \
        sym(int(step)) if not isinstance(step, sympy.Expr) else step
    dtype = ctx.dtype
    return Lazy(dtype, ctx.size,
                lambda i: cast(("index", torch.int64, expr_start + i[0] * expr_step), dtype))


# ---------------------------------------------------------------- views (index maps)

def _norm_dim(d: int, n: int) -> int:
    return d + n if d < 0 else d


@register(aten.permute, prims.transpose)
def _permute(ctx, x, dims):
    dims = [_norm_dim(d, len(x.size)) for d in dims]
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
    d0, d1 = _norm_dim(d0, len(dims)), _norm_dim(d1, len(dims))
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
    dim = _norm_dim(dim, len(x.size) + 1)
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
    dims = {_norm_dim(d, n) for d in dims if x.size[_norm_dim(d, n)] == 1}
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


@register(aten.slice)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = _norm_dim(dim, len(x.size))
    size = ctx.size
    start = sym(start or 0)
    if isinstance(start, sympy.Expr) and start.is_number and start < 0:
        start = start + x.size[dim]
    if not (start.is_number and start >= 0 and size[dim].is_number) and start != 0:
        # symbolic start: trust torch's clamped output size, compute start from the end
        start = sympy.Max(0, sympy.Min(start, x.size[dim]))
    if start.is_number and x.size[dim].is_number:
        start = min(int(start), int(x.size[dim]))
    start = sym(start)
    if isinstance(x, StridedView):
        stride = list(x.stride)
        stride[dim] = stride[dim] * step
        return StridedView(x.buf, size, stride, x.offset + start * x.stride[dim])
    return Lazy(x.dtype, size, lambda i: x.load(
        [i[k] * step + start if k == dim else i[k] for k in range(len(i))]))


@register(aten.select)
def _select(ctx, x, dim, index):
    dim = _norm_dim(dim, len(x.size))
    index = sym(index)
    if index.is_number and index < 0:
        index = index + x.size[dim]
    if isinstance(x, StridedView):
        return StridedView(x.buf, x.size[:dim] + x.size[dim + 1:],
                           x.stride[:dim] + x.stride[dim + 1:], x.offset + index * x.stride[dim])
    return Lazy(x.dtype, ctx.size, lambda i: x.load(list(i[:dim]) + [index] + list(i[dim:])))


@register(aten.as_strided)
def _as_strided(ctx, x, size, stride, storage_offset=None):
    x = ctx.graph.realize(x)
    if not x.is_natural():
        raise Unsupported("as_strided of a view")
    off = sym(storage_offset) if storage_offset is not None else sympy.Integer(0)
    return StridedView(x.buf, [sym(s) for s in size], [sym(s) for s in stride], off)


@register(aten.flip)
def _flip(ctx, x, dims):
    """``x.flip(dims)`` as an index map: i -> size - 1 - i along each flipped dim."""
    n = len(x.size)
    flipped = {_norm_dim(d, n) for d in dims}
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
        hit = op("eq", torch.bool, ("index", torch.int64, lin),
                 ("index", torch.int64, t + offset))
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
            h = op("eq", torch.bool, ("index", torch.int64, p),
                   ("index", torch.int64, start + step * q))
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
    dim = _norm_dim(dim, len(x.size))
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
    dim = _norm_dim(dim, len(x.size))
    outs, start = [], sympy.Integer(0)
    for v in ctx.val:
        n = sym(v.shape[dim])
        size = [sym(s) for s in v.shape]
        sub = _with_dtype(ctx, x.dtype, size)
        outs.append(_slice(sub, x, dim, start, start + n, 1))
        start = start + n
    return outs


@register(aten.unbind)
def _unbind(ctx, x, dim=0):
    dim = _norm_dim(dim, len(x.size))
    return [_select(_with_dtype(ctx, x.dtype, [sym(s) for s in v.shape]), x, dim, k)
            for k, v in enumerate(ctx.val)]


# ---------------------------------------------------------------- reductions

def reduce(ctx: Ctx, x, dims, keepdim: bool, rtype: str, out_dtype: torch.dtype,
           acc_dtype: torch.dtype | None = None) -> StridedView:
    n = len(x.size)
    dims = sorted({_norm_dim(d, n) for d in dims}) if dims else list(range(n))
    keep = [d for d in range(n) if d not in dims]
    outer = [x.size[d] for d in keep]
    rsizes = [x.size[d] for d in dims]
    if acc_dtype is None:
        acc_dtype = compute_dtype(out_dtype)

    def fn(o, r):
        idx = [None] * n
        for d, v in zip(keep, o):
            idx[d] = v
        for d, v in zip(dims, r):
            idx[d] = v
        return cast(x.load(idx), acc_dtype)

    # the same reduction of the same value (e.g. the two means in layer_norm's decomposition)
    key = (id(x), tuple(dims), rtype, out_dtype, acc_dtype)
    hit = ctx.graph.reductions.get(key)
    if hit is not None and hit[0] is x:
        buf = hit[1]
    else:
        buf = ctx.graph.new_buffer(out_dtype, outer)
        ctx.graph.add(Reduction(buf, rsizes, rtype, acc_dtype, fn))
        ctx.graph.reductions[key] = (x, buf)
    view = StridedView.of(buf)
    if keepdim:
        it = iter(view.stride)
        view = StridedView(buf, [sympy.Integer(1) if d in dims else x.size[d] for d in range(n)],
                           [sympy.Integer(0) if d in dims else next(it) for d in range(n)])
    return view


# ---------------------------------------------------------------- skinny matmuls

# mm/addmm with M, N or K at most this (static sizes) run as a loop reduction: BLAS is far
# from its peak on such shapes (MKL: 190 us for [512,512] @ [512,10] here, the loop 40 us)
SKINNY_MM = 16


class Decline(Exception):
    """A lowering leaves this call of an extern op to ATen, as expected (no fallback)."""


def _skinny_mm(ctx: Ctx, a, b) -> StridedView:
    sizes = [*a.size, b.size[-1]]
    if ctx.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16) or \
            not all(sympy.sympify(v).is_Integer for v in sizes) or \
            not 0 < min(int(v) for v in sizes) <= SKINNY_MM:
        raise Decline
    acc = compute_dtype(ctx.dtype)
    prod = Lazy(acc, [a.size[0], b.size[1], a.size[1]],
                lambda i: op("mul", acc, cast(a.load([i[0], i[2]]), acc),
                             cast(b.load([i[2], i[1]]), acc)))
    return reduce(ctx, prod, [2], False, "sum", ctx.dtype, acc)


ONEDNN_MIN_MACS = 1 << 26  # below this many multiply-adds (static sizes) MKL's sgemm is faster


def _onednn_linear(ctx: Ctx, a, b, bias) -> StridedView:
    """``a @ b (+ bias)`` with ``b`` a transposed [N, K] weight (nn.Linear) on float32 CPU
    tensors in an inference graph, through oneDNN's linear: 5-20% faster than MKL's sgemm
    on this AMD machine ([256,512] @ [512,2048]: 2.8 vs 3.4-3.7 ms). In training graphs it
    made the MLP+CE step 12% slower here (cause not found), so those keep MKL, as does
    anything else (Decline)."""
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
        raise Decline  # oneDNN's fixed cost per call: [32,64] @ [64,64] takes 33 us vs 6 us
    weight = StridedView(b.buf, [b.size[1], b.size[0]], [b.stride[1], b.stride[0]], b.offset)
    if bias is not None:
        if len(bias.size) != 1 or not bias.is_contiguous() or bias.dtype != torch.float32:
            raise Decline
    return ctx.graph.extern_call(torch.ops.mkldnn._linear_pointwise.default,
                                 (a, weight, bias, "none", [], ""), ctx.val)


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_linear_pointwise")


@register(aten.mm)
def _mm(ctx, a, b):
    try:
        return _skinny_mm(ctx, a, b)
    except Decline:
        return _onednn_linear(ctx, a, b, None)


@register(aten.addmm)
def _addmm(ctx, bias, a, b, *, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Decline
    try:
        mm = _skinny_mm(ctx, a, b)
    except Decline:
        return _onednn_linear(ctx, a, b, bias)
    return pointwise(ctx, "add", bias, mm)


# ---------------------------------------------------------------- gather of one element

@register(aten.gather)
def _gather(ctx, x, dim, index, *, sparse_grad=False):
    """gather with one index per output along ``dim`` (nll_loss / cross-entropy picking the
    target's log-probability) as a row reduction selecting ``r == index``: fused into the
    producer's row loops, so e.g. log_softmax is never written out. An index outside
    [0, size) raises IndexError after the kernels, as eager does before."""
    n = len(x.size)
    dim = _norm_dim(dim, n)
    if ctx.graph.device != "cpu" or len(index.size) != n or \
            not ir.same(index.size[dim], sympy.Integer(1)) or \
            not all(ir.same(index.size[d], x.size[d]) for d in range(n) if d != dim):
        raise Decline
    size = list(index.size)
    size[dim] = x.size[dim]
    # int32 compares vectorize twice as wide; an index that wraps is caught by the check
    it = torch.int32 if _static_below(x.size[dim], 2 ** 31) else torch.int64

    def at(i):
        j = list(i)
        j[dim] = sympy.Integer(0)
        return op("eq", torch.bool, ("index", it, i[dim]), cast(index.load(j), it))

    acc = compute_dtype(x.dtype)
    picked = Lazy(x.dtype, size, lambda i: op("where", acc, at(i), cast(x.load(i), acc),
                                              const(0, acc)))
    out = reduce(ctx, picked, [dim], True, "sum", x.dtype, acc)
    _check_index(ctx, index, x.size[dim], f"gather: an index along dim {dim}")
    return out


@register(aten.scatter)
def _scatter(ctx, x, dim, index, src=None, *, value=None, reduce=None):
    """scatter of one element per row along ``dim`` (nll_loss backward writing -1 at the
    target) as a pointwise select ``r == index ? src : x``: no copy of ``x``, no ATen call;
    an index outside [0, size) raises IndexError after the kernels."""
    n = len(x.size)
    dim = _norm_dim(dim, n)
    if value is not None:
        src = value
    if reduce is not None or ctx.graph.device != "cpu" or len(index.size) != n or \
            not ir.same(index.size[dim], sympy.Integer(1)) or \
            not all(ir.same(index.size[d], x.size[d]) for d in range(n) if d != dim) or \
            (isinstance(src, TensorValue) and not all(
                ir.same(src.size[d], index.size[d]) for d in range(n))):
        raise Decline
    it = torch.int32 if _static_below(x.size[dim], 2 ** 31) else torch.int64
    cdt = compute_dtype(ctx.dtype)

    def fn(i):
        j = list(i)
        j[dim] = sympy.Integer(0)
        hit = op("eq", torch.bool, ("index", it, i[dim]), cast(index.load(j), it))
        new = cast(src.load(j), cdt) if isinstance(src, TensorValue) else \
            _scalar_expr(src, cdt)
        return cast(op("where", cdt, hit, new, cast(x.load(i), cdt)), ctx.dtype)

    _check_index(ctx, index, x.size[dim], f"scatter: an index along dim {dim}")
    return Lazy(ctx.dtype, list(x.size), fn)


def _check_index(ctx: Ctx, index, size, what: str, wrap: bool = False) -> None:
    """Flag (for the wrapper's IndexError) an element of ``index`` outside [0, size), or
    outside [-size, size) with ``wrap`` (negative indices count from the end)."""
    lo = op("neg", torch.int64, _scalar_expr(size, torch.int64)) if wrap else \
        const(0, torch.int64)

    def outside(i):
        v = cast(index.load(i), torch.int64)
        return op("logical_or", torch.bool, op("lt", torch.bool, v, lo),
                  op("ge", torch.bool, v, _scalar_expr(size, torch.int64)))

    flag = reduce(ctx, Lazy(torch.bool, list(index.size), outside), None, False, "any",
                  torch.bool, torch.bool)
    low = f"-{size}" if wrap else "0"
    ctx.graph.checks.append((flag, f"{what} is outside [{low}, {size})"))


def _static_below(v, bound: int) -> bool:
    v = sympy.sympify(v)
    return bool(v.is_Integer) and int(v) < bound


# ---------------------------------------------------------------- gathers

def _position(ctx: Ctx, t, size, at, bsize, wrap: bool):
    """The int64 position read from index tensor ``t`` (broadcast to ``bsize``) at ``at``,
    negative values wrapped when ``wrap``, then clamped into [0, size) so no load leaves the
    buffer: an index that was outside raises IndexError after the kernels (``_check_index``)."""
    v = bload(t, bsize, at, torch.int64)
    n = _scalar_expr(size, torch.int64)
    zero = const(0, torch.int64)
    if wrap:
        v = op("where", torch.int64, op("lt", torch.bool, v, zero), op("add", torch.int64, v, n),
               v)
    return _clamp_position(v, op("sub", torch.int64, n, const(1, torch.int64)))


def _clamp_position(v, top):
    """An int64 position clamped into [0, top]: the load it feeds stays inside its buffer."""
    return op("minimum", torch.int64, op("maximum", torch.int64, v, const(0, torch.int64)), top)


def _gather_index(ctx: Ctx, x, indices: list, *, wrap: bool, check: bool, what: str):
    """``x[indices]`` with advanced-indexing semantics (``None`` keeps a dimension) as a
    pointwise value whose loads of ``x`` sit at data-dependent places: fused into its
    reader, no ATen call, no copy of the gathered rows. CPU and Triton code generators."""
    n = len(x.size)
    idx = list(indices) + [None] * (n - len(indices))
    dims = [d for d, t in enumerate(idx) if t is not None]
    if not dims or len(idx) > n or any(
            not isinstance(idx[d], TensorValue) or idx[d].dtype not in (torch.int64, torch.int32)
            for d in dims):
        raise Decline  # boolean masks (data-dependent shapes), scalars: ATen
    size = ctx.size
    nb = max(len(idx[d].size) for d in dims)
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    first = dims[0] if adjacent else 0
    bsize = size[first:first + nb]
    src = ctx.graph.realize(x)
    slots = {d: ir.gather_slot(k) for k, d in enumerate(dims)}
    for d in dims:
        if check:
            _check_index(ctx, idx[d], x.size[d], f"{what}: an index along dim {d}", wrap)

    def fn(i):
        b = i[first:first + nb]
        rest = iter(list(i[:first]) + list(i[first + nb:]))
        at = [slots[d] if d in slots else next(rest) for d in range(n)]
        positions = [_position(ctx, idx[d], x.size[d], b, bsize, wrap) for d in dims]
        return ir.gather(x.dtype, src.buf.name, src.flat_index(at), positions)

    return Lazy(x.dtype, size, fn)


@register(aten.index, aten._unsafe_index)
def _index(ctx, x, indices):
    unsafe = ctx.node.target._overloadpacket is aten._unsafe_index
    return _gather_index(ctx, x, indices, wrap=True, check=not unsafe, what="index")


@register(aten.index_select)
def _index_select(ctx, x, dim, index):
    dim = _norm_dim(dim, len(x.size))
    if not isinstance(index, TensorValue) or len(index.size) > 1:
        raise Decline
    return _gather_index(ctx, x, [None] * dim + [index], wrap=False, check=True,
                         what="index_select")


@register(aten.embedding)
def _embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return _gather_index(ctx, weight, [indices], wrap=False, check=True, what="embedding")


CAT_MAX_INPUTS = 8  # a select per input in every element: beyond this ATen's copy is cheaper


@register(aten.cat)
def _cat(ctx, tensors, dim=0):
    """cat as a pointwise value: each element gathers from the input its position along
    ``dim`` falls in (the offset clamped into every input, so no branch reads outside its
    buffer), fused into the reader (rotary embeddings' cat(-x2, x1) * sin + ...)."""
    size = ctx.size
    n = len(size)
    parts = [t for t in tensors if not (isinstance(t, TensorValue) and len(t.size) == 1 and
                                        len(size) > 1 and ir.same(t.size[0], sympy.Integer(0)))]
    if not 2 <= len(parts) <= CAT_MAX_INPUTS or n == 0 or \
            any(not isinstance(t, TensorValue) or len(t.size) != n for t in parts):
        raise Decline
    dim = _norm_dim(dim, n)
    srcs = [ctx.graph.realize(t) for t in parts]
    ends, end = [], sympy.Integer(0)
    for t in srcs:
        end = end + t.size[dim]
        ends.append(end)
    cdt = compute_dtype(ctx.dtype)

    def fn(i):
        pos = ("index", torch.int64, i[dim])
        at = list(i)
        at[dim] = ir.gather_slot(0)
        value = None
        for k in reversed(range(len(srcs))):
            start = ends[k] - srcs[k].size[dim]
            local = op("sub", torch.int64, pos, _scalar_expr(start, torch.int64))
            local = _clamp_position(local, _scalar_expr(srcs[k].size[dim] - 1, torch.int64))
            v = cast(ir.gather(srcs[k].dtype, srcs[k].buf.name, srcs[k].flat_index(at),
                               [local]), cdt)
            value = v if value is None else op(
                "where", cdt, op("lt", torch.bool, pos, _scalar_expr(ends[k], torch.int64)), v,
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
    n = len(x.size)
    d = _dims_arg(dims) or list(range(n))
    count = ir.numel([x.size[_norm_dim(k, n)] for k in d])
    s = reduce(ctx, x, d, keepdim, "sum", ctx.dtype)
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
    d = sorted({_norm_dim(k, n) for k in (_dims_arg(dims) or range(n))})
    count = ir.numel([x.size[k] for k in d])
    dtype = ctx.dtype
    size_k = [sympy.Integer(1) if k in d else x.size[k] for k in range(n)]
    s = reduce(ctx, x, d, True, "sum", dtype)
    mean = pointwise(_with_dtype(ctx, dtype, size_k), "truediv", s, count)
    full = _with_dtype(ctx, dtype, list(x.size))
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
    dim = _norm_dim(dim, n) if n else dim
    dtype = v.dtype if isinstance(v, TensorValue) else None
    if not all(isinstance(t, TensorValue) for t in tensors) or \
            dtype not in (torch.float32, torch.float64) or \
            any(t.dtype != dtype for t in tensors) or dim not in (0, n - 1) or \
            not ir.same_sizes(grad_w.size, v.size):
        raise Unsupported("weight_norm backward other than float32/float64 over dim 0 or -1")
    gsize = [v.size[d] if d == dim else sympy.Integer(1) for d in range(n)]
    if not (ir.same_sizes(g.size, gsize) and ir.same_sizes(norms.size, gsize)):
        raise Unsupported("weight_norm backward with unexpected g / norms shapes")
    full, small = _with_dtype(ctx, dtype, list(v.size)), _with_dtype(ctx, dtype, gsize)
    others = [d for d in range(n) if d != dim]
    dot = reduce(ctx, pointwise(full, "mul", grad_w, v), others, True, "sum", dtype)
    grad_g = pointwise(small, "truediv", dot, norms)
    scale = pointwise(small, "truediv", g, norms)
    ratio = pointwise(small, "truediv", grad_g, norms)
    grad_v = pointwise(full, "mul", scale,
                       pointwise(full, "sub", grad_w, pointwise(full, "mul", v, ratio)))
    return grad_v, grad_g


# ---------------------------------------------------------------- the graph walk

class GraphLowering:
    """Walks an FX graph, building IR nodes in topological order."""

    def __init__(self, gm: GraphModule, device: str = "cpu", inference: bool = False):
        self.gm = gm
        self.device = device  # kernels run on this device type (CUDA for Triton codegen)
        self.inference = inference  # no backward will follow (AOT's inference graph)
        self.nodes: list = []
        self.inputs: list = []  # (placeholder position, Buffer | sympy.Symbol | None)
        self.constants: dict[str, torch.Tensor] = {}
        self.outputs: list = []
        self.fallback_ops: list[str] = []
        # (bool scalar buffer, message): the wrapper raises IndexError when one is true
        self.checks: list = []
        self.reductions: dict = {}  # (value id, dims, type, dtypes) -> (value, buffer)
        self._count = 0
        self.env: dict[FxNode, object] = {}

    def new_buffer(self, dtype, size, stride=None) -> Buffer:
        self._count += 1
        return Buffer(f"buf{self._count}", dtype, list(size),
                      list(stride) if stride is not None else contiguous_strides(size))

    def add(self, node):
        node.pos = len(self.nodes)
        self.nodes.append(node)
        return node

    def realize(self, x) -> StridedView:
        if isinstance(x, StridedView):
            return x
        if isinstance(x, Lazy):
            if x.realized is None:
                buf = self.new_buffer(x.dtype, x.size)
                node = self.add(Pointwise(buf, x.fn))
                x.realized, x.realized_at = StridedView.of(buf), node.pos
            return x.realized
        raise TypeError(f"cannot realize {type(x).__name__}")

    def run(self) -> None:
        for node in self.gm.graph.nodes:
            self.env[node] = self._lower(node)

    def _arg(self, a):
        if isinstance(a, FxNode):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self._arg(v) for k, v in a.items()}
        if isinstance(a, (torch.SymInt, torch.SymFloat)):
            return sym(a)
        return a

    def _lower(self, node: FxNode):
        val = meta_val(node)
        if node.op == "placeholder":
            pos = len(self.inputs)
            if isinstance(val, torch.Tensor):
                self._check_tensor(val)
                buf = Buffer(f"arg{pos}", val.dtype, [sym(s) for s in val.shape],
                             [sym(s) for s in val.stride()])
                self.inputs.append(buf)
                return StridedView.of(buf)
            self.inputs.append(sym(val) if isinstance(val, (torch.SymInt, int)) else None)
            return sym(val) if isinstance(val, (torch.SymInt, torch.SymFloat, int, float)) \
                else val
        if node.op == "get_attr":
            t = getattr(self.gm, node.target)
            if not isinstance(t, torch.Tensor):
                raise Unsupported(f"get_attr of {type(t).__name__}")
            self._check_tensor(t)
            name = f"const{len(self.constants)}"
            self.constants[name] = t
            return StridedView.of(Buffer(name, t.dtype, [sym(s) for s in t.shape],
                                         [sym(s) for s in t.stride()]))
        if node.op == "output":
            outs = node.args[0]
            self.outputs = [self._output(self._arg(o)) for o in outs]
            return None
        if node.target is operator.getitem:
            src = self._arg(node.args[0])
            return src[node.args[1]]
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
                not isinstance(node.target, torch._ops.OpOverload)
                and isinstance(val, (int, float, bool))):
            return sym(val)
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            # with_effects (ordered side effects: linalg's error checks) threads a token an
            # extern call cannot carry; no HOP has a lowering: the graph runs in eager ATen
            raise Unsupported(f"higher-order op {node.target.name()}: the graph runs in eager")
        args, kwargs = self._arg(node.args), self._arg(node.kwargs)
        target = node.target
        packet = getattr(target, "_overloadpacket", None)
        lowering = LOWERINGS.get(packet)
        if lowering is not None and self._supported(node):
            try:
                out = lowering(Ctx(self, node), *args, **kwargs)
                return self._maybe_realize(node, out)
            except Decline:
                pass
            except Unsupported as e:
                self._note_fallback(target, str(e))
        elif not _is_extern(packet):
            self._note_fallback(target, "no lowering")
        return self._extern(node, args, kwargs, fallback=not _is_extern(packet))

    def _check_tensor(self, t) -> None:
        # complex tensors may enter the graph: only externs/eager ops touch them
        # (``_supported`` keeps them out of kernels)
        if t.device.type != self.device or t.layout != torch.strided or t.dtype not in \
                ir.SUPPORTED_DTYPES and not t.dtype.is_complex:
            raise Unsupported(f"tensor on {t.device} / {t.layout} / {t.dtype}")

    def _supported(self, node: FxNode) -> bool:
        vals = [meta_val(node)] + [meta_val(a) for a in node.all_input_nodes]
        for v in vals:
            for t in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(t, torch.Tensor) and (t.device.type != self.device or t.dtype not in
                                                    ir.SUPPORTED_DTYPES):
                    return False
        return True

    def _note_fallback(self, target, reason: str) -> None:
        name = str(target)
        self.fallback_ops.append(name)
        if name not in _logged_fallbacks:
            _logged_fallbacks.add(name)
            _fallback_log.info("%s runs in eager ATen: %s", name, reason)

    def _maybe_realize(self, node: FxNode, out):
        if isinstance(out, Lazy):
            users = len(node.users)
            e = out.fn(ir.index_vars("x", len(out.size)))
            ops = ir.op_count(e)
            costly = any(x[0] == "op" and x[2] in _COSTLY for x in ir.walk(e))
            if ops > 64 or (users > 1 and (ops > 3 or users > 3 or costly)):
                self.realize(out)
        return out

    def extern_call(self, target, args: tuple, val) -> StridedView:
        """An ATen call chosen by a lowering (not the node's own op) returning one tensor
        shaped like ``val``; ``args`` hold realized views."""
        reads = [a.buf for a in args if isinstance(a, StridedView)]
        out = self.new_buffer(val.dtype, [sym(s) for s in val.shape],
                              [sym(s) for s in val.stride()])
        self.add(Extern(target, args, {}, [out], "single", False, reads))
        return StridedView.of(out)

    def _extern(self, node: FxNode, args, kwargs, fallback: bool):
        reads: list[Buffer] = []

        schema = getattr(node.target, "_schema", None)
        pure = schema is not None and not any(
            x.alias_info is not None for x in [*schema.arguments, *schema.returns])

        def conv(a):
            if pure and isinstance(a, Lazy) and a.realized is None and a.source is not None:
                a = a.source  # ATen takes any strides: skip the copy (e.g. mm of a clone)
            if pure and isinstance(a, Lazy) and a.realized is None and a.permuted is not None:
                inner, dims = a.permuted  # store in natural order, hand ATen a permuted view
                v = self.realize(inner)
                reads.append(v.buf)
                return StridedView(v.buf, [v.size[d] for d in dims], [v.stride[d] for d in dims],
                                   v.offset)
            if isinstance(a, TensorValue):
                v = self.realize(a)
                reads.append(v.buf)
                return v
            if isinstance(a, (list, tuple)):
                return type(a)(conv(x) for x in a)
            return a

        args, kwargs = conv(args), {k: conv(v) for k, v in kwargs.items()}
        val = meta_val(node)
        vals = val if isinstance(val, (list, tuple)) else [val]
        outs = []
        for v in vals:
            if isinstance(v, torch.Tensor):
                outs.append(self.new_buffer(v.dtype, [sym(s) for s in v.shape],
                                            [sym(s) for s in v.stride()]))
            else:
                outs.append(None)
        tree = "list" if isinstance(val, list) else "tuple" if isinstance(val, tuple) \
            else "single"
        self.add(Extern(node.target, args, kwargs, outs, tree, fallback, reads))
        views = [StridedView.of(b) if b is not None else None for b in outs]
        return views if tree != "single" else views[0]

    def _output(self, v):
        if isinstance(v, Lazy):
            return self.realize(v)
        return v
