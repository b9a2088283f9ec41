"""The ``_foreach_*`` ops (what optimizers' foreach steps call) as one lazy pointwise value per
tensor of the list, each computed as eager's per-tensor kernel computes it.

A foreach call becomes a list of values that the scheduler fuses like any other pointwise
values: a parameter's whole update (and its write back into the parameter, see
``GraphLowering`` for ``copy_``) ends up in one loop. Overloads: ``Scalar`` (one scalar),
``List`` (a second list), ``ScalarList`` (a scalar per tensor), ``Tensor`` (one tensor, 0-dim
in practice, broadcast) and ``pow.ScalarAndTensor`` (scalar base). Reductions
(``_foreach_norm``, ``_foreach_max``), ``clone`` and ``zero`` stay in ATen.
"""

from __future__ import annotations

import torch

from ember.core.compiler.ir import (
    Lazy,
    StridedView,
    TensorValue,
    Unsupported,
    compute_dtype,
)
from ember.core.compiler.lowering.builders import (
    Ctx,
    add_scaled,
    addc,
    bload,
    elementwise,
    lerp,
    pointwise,
    register,
)
from ember.core.compiler.lowering.ops import _pow

aten = torch.ops.aten


class _Elem(Ctx):
    """The context of the ``i``-th tensor of a foreach call (its meta value is the i-th)."""

    def __init__(self, ctx: Ctx, i: int):
        self.graph, self.node = ctx.graph, ctx.node
        self.val, self.count = ctx.val[i], len(ctx.val)


def _count(ctx: _Elem, lists: list) -> int:
    n = ctx.count
    for xs in lists:
        if not isinstance(xs, (list, tuple)) or len(xs) != n:
            raise Unsupported(f"{ctx.node.target}: lists of different lengths")
    return n


def _elementwise(fn):
    """Lower ``fn(elem_ctx, i, *args)`` for every tensor; the node's meta value is a list."""
    def lower(ctx, *args, **kwargs):
        if not isinstance(ctx.val, (list, tuple)) or not all(
                isinstance(v, torch.Tensor) for v in ctx.val):
            raise Unsupported(f"{ctx.node.target} without a list of tensors")
        return [fn(_Elem(ctx, i), i, *args, **kwargs) for i in range(len(ctx.val))]
    return lower


def _overload(ctx) -> str:
    return ctx.node.target._overloadname


def _pick(ctx, i: int, other):
    """The second operand of the i-th tensor: a list's i-th entry, else the value itself."""
    if _overload(ctx) in ("List", "ScalarList"):
        _count(ctx, [other])
        return other[i]
    return other


_UNARY = {
    "abs": "abs", "acos": "acos", "asin": "asin", "atan": "atan", "ceil": "ceil", "cos": "cos",
    "cosh": "cosh", "erf": "erf", "erfc": "erfc", "exp": "exp", "expm1": "expm1",
    "floor": "floor", "log": "log", "log10": "log10", "log1p": "log1p", "log2": "log2",
    "neg": "neg", "reciprocal": "reciprocal", "round": "round", "rsqrt": "rsqrt",
    "sigmoid": "sigmoid", "sign": "sign", "sin": "sin", "sinh": "sinh", "sqrt": "sqrt",
    "tan": "tan", "tanh": "tanh", "trunc": "trunc",
}


def _unary(prim: str):
    def fn(ctx, i, xs):
        _count(ctx, [xs])
        return pointwise(ctx, prim, xs[i])
    return _elementwise(fn)


for _name, _prim in _UNARY.items():
    register(getattr(aten, f"_foreach_{_name}"))(_unary(_prim))

_BINARY = {"mul": "mul", "div": "truediv", "maximum": "maximum", "minimum": "minimum",
           "clamp_min": "maximum", "clamp_max": "minimum"}


def _binary(prim: str):
    def fn(ctx, i, xs, other):
        _count(ctx, [xs])
        return pointwise(ctx, prim, xs[i], _pick(ctx, i, other))
    return _elementwise(fn)


for _name, _prim in _BINARY.items():
    register(getattr(aten, f"_foreach_{_name}"))(_binary(_prim))


def _add_sub(prim: str):
    def fn(ctx, i, xs, other, *, alpha=1):
        _count(ctx, [xs])
        return add_scaled(ctx, prim, xs[i], _pick(ctx, i, other), alpha)
    return _elementwise(fn)


register(aten._foreach_add)(_add_sub("add"))
register(aten._foreach_sub)(_add_sub("sub"))


@register(aten._foreach_pow)
@_elementwise
def _foreach_pow(ctx, i, base, exponent):
    if _overload(ctx) == "ScalarAndTensor":
        _count(ctx, [exponent])
        return _pow(ctx, base, exponent[i])
    _count(ctx, [base])
    return _pow(ctx, base[i], _pick(ctx, i, exponent))


def _scalar_of(ctx, i: int, scalars):
    """The i-th ``value`` of addcmul/addcdiv: a Python scalar, a list's entry, or a 1-D
    tensor's element i (the ``Tensor`` overload) as a 0-dim view."""
    over = _overload(ctx)
    if over == "ScalarList":
        _count(ctx, [scalars])
        return scalars[i]
    if over == "Tensor":
        if not isinstance(scalars, StridedView) or len(scalars.size) != 1:
            raise Unsupported(f"{ctx.node.target} with scalars that are not a 1-D buffer")
        return StridedView(scalars.buf, [], [], scalars.offset + i * scalars.stride[0])
    return scalars


def _addc(prim: str):
    """Eager's addcmul or addcdiv of each tensor (``builders.addc``)."""
    def fn(ctx, i, xs, t1, t2, value=1):
        _count(ctx, [xs, t1, t2])
        if not compute_dtype(ctx.dtype).is_floating_point:
            raise Unsupported(f"{ctx.node.target} of {ctx.dtype}")
        return elementwise(ctx, lambda T, *a: addc(T, prim, *a), xs[i], t1[i], t2[i],
                           _scalar_of(ctx, i, value))
    return _elementwise(fn)


register(aten._foreach_addcmul)(_addc("mul"))
register(aten._foreach_addcdiv)(_addc("truediv"))


@register(aten._foreach_lerp)
@_elementwise
def _foreach_lerp(ctx, i, xs, ends, weight):
    """Eager's lerp (``builders.lerp``)."""
    _count(ctx, [xs, ends])
    w = _pick(ctx, i, weight)
    if not compute_dtype(ctx.dtype).is_floating_point:
        raise Unsupported(f"{ctx.node.target} of {ctx.dtype}")
    if not isinstance(w, (TensorValue, int, float)) and not getattr(w, "is_number", False):
        raise Unsupported(f"{ctx.node.target} with a symbolic weight")
    return elementwise(ctx, lambda T, s, e, wv: lerp(T, s, e, wv, w), xs[i], ends[i], w)


@register(aten._foreach_copy)
@_elementwise
def _foreach_copy(ctx, i, xs, src, non_blocking=False):
    _count(ctx, [xs, src])
    dtype, size = ctx.dtype, ctx.size
    s = src[i]
    return Lazy(dtype, size, lambda idx: bload(s, size, idx, dtype))
