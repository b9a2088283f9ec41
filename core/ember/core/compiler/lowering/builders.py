"""The building blocks of every lowering: the per-node context, broadcasting loads, pointwise
values over the prim set, reductions, index-range checks, and the table lowerings register in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import sympy
import torch
from torch.fx import Node as FxNode

from ember.core.compiler import ir
from ember.core.compiler.ir import (
    Expr,
    Lazy,
    Pointwise,
    Reduction,
    StridedView,
    TensorValue,
    Unsupported,
    cast,
    compute_dtype,
    const,
    op,
)
from ember.core.compiler.prims import PRIMS

if TYPE_CHECKING:
    from ember.core.compiler.lowering.graph import GraphLowering

# ATen overload packet -> lowering(ctx, *args, **kwargs) -> IR value (see ``ops``, ``externs``)
LOWERINGS: dict = {}


class InputWrite(Pointwise):
    """A pointwise node whose buffer is a graph input it overwrites (an input mutation that
    AOTAutograd leaves in the graph as ``copy_``): always stored, and never before a node that
    still reads the input's old contents (see ``schedule``)."""


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


def scalar_expr(v, dtype: torch.dtype) -> ir.Expr:
    if isinstance(v, sympy.Expr) and not v.is_number:
        return cast(ir.Index(torch.int64 if v.is_integer else torch.float64, v), dtype)
    if isinstance(v, sympy.Expr):
        v = float(v) if not v.is_integer else int(v)
    return const(v, dtype)


def bload(x, size: Sequence, index: Sequence, dtype: torch.dtype) -> ir.Expr:
    """Load ``x`` broadcast to ``size`` at ``index``, cast to ``dtype``'s compute type."""
    if not isinstance(x, TensorValue):
        return scalar_expr(x, dtype)
    off = len(size) - len(x.size)
    idx = [sympy.Integer(0) if (s == 1 and size[off + i] != 1) else index[off + i]
           for i, s in enumerate(x.size)]
    return cast(x.load(idx), dtype)


def bload_converted(x, size: Sequence, index: Sequence, dtype: torch.dtype) -> ir.Expr:
    """``bload`` for a conversion to ``dtype``: rounded as eager's (:func:`converted`)."""
    if not isinstance(x, TensorValue):
        return scalar_expr(x, dtype)
    return converted(bload(x, size, index, x.dtype), x.dtype, dtype)


# 16-bit float -> its rounding prim, and the source dtypes whose every value it holds exactly
_ROUND_TO = {torch.bfloat16: "round_bf16", torch.float16: "round_fp16"}
_EXACT_IN = {torch.bfloat16: {torch.bool, torch.int8, torch.uint8},
             torch.float16: {torch.bool, torch.int8, torch.uint8}}


def converted(e: ir.Expr, src: torch.dtype, dst: torch.dtype) -> ir.Expr:
    """``e`` (a value of dtype ``src``) converted to ``dst`` as eager's conversion gives it.
    Kernels compute 16-bit floats in float32, so a conversion to one rounds explicitly: a
    fused reader (``x.to(torch.bfloat16).float()``, an autocast weight cast feeding a loop
    matmul) must see eager's rounded value, not the wider one."""
    if dst in _ROUND_TO and src != dst and src not in _EXACT_IN[dst]:
        return ir.op(_ROUND_TO[dst], dst, cast(e, torch.float32))
    return cast(e, dst)


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
    arity, kind = PRIMS[name]
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


def add_scaled(ctx: Ctx, prim: str, a, b, alpha) -> Lazy:
    """``a + alpha * b`` (``prim`` "add") or ``a - alpha * b`` ("sub") as eager computes it:
    a float result in one multiply-add rounded once (eager's kernels call fmadd), with a number
    ``alpha`` first rounded to a 16-bit result's dtype; an integer result exactly."""
    if alpha == 1:
        return pointwise(ctx, prim, a, b)
    if compute_dtype(ctx.dtype).is_floating_point:
        if ctx.dtype != compute_dtype(ctx.dtype) and isinstance(alpha, (int, float)):
            alpha = torch.tensor(alpha, dtype=ctx.dtype).item()  # as eager rounds it
        return pointwise(ctx, "fma", b, alpha if prim == "add" else -alpha, a)
    b = pointwise(with_dtype(ctx, result_type(b, alpha)), "mul", b, alpha)
    return pointwise(ctx, prim, a, b)


def elementwise(ctx: Ctx, body: Callable, *args) -> Lazy:
    """A value of ``ctx``'s dtype and size whose element is ``body(cdt, *elements)``: the
    elements of ``args`` (broadcast) loaded in the compute dtype ``cdt``."""
    dtype, size = ctx.dtype, ctx.size
    cdt = compute_dtype(dtype)
    return Lazy(dtype, size, lambda i: cast(body(cdt, *(bload(a, size, i, cdt) for a in args)),
                                            dtype))


def addc(cdt: torch.dtype, prim: str, x: Expr, t1: Expr, t2: Expr, value: Expr) -> Expr:
    """Eager's addcmul (``prim`` "mul") or addcdiv ("truediv") of loaded values:
    ``value * t1``, then times or over ``t2``, then plus ``x``; a float addcmul's last two in
    one multiply-add rounded once, as eager's kernel."""
    prod = op("mul", cdt, value, t1)
    if prim == "mul" and cdt.is_floating_point:
        return op("fma", cdt, prod, t2, x)
    return op("add", cdt, x, op(prim, cdt, prod, t2))


def lerp(cdt: torch.dtype, s: Expr, e: Expr, w: Expr, weight) -> Expr:
    """Eager's lerp of loaded values: ``s + w * (e - s)`` where ``|w| < 0.5``, else
    ``e + (w - 1) * (e - s)``, each one multiply-add rounded once; a number ``weight`` (the
    op's argument) picks the formula once."""
    diff = op("sub", cdt, e, s)
    low = op("fma", cdt, w, diff, s)
    high = op("fma", cdt, op("sub", cdt, w, const(1, cdt)), diff, e)
    if not isinstance(weight, TensorValue):
        return low if abs(float(weight)) < 0.5 else high
    return op("where", cdt, op("lt", torch.bool, op("abs", cdt, w), const(0.5, cdt)), low, high)


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


def with_dtype(ctx, dtype, size=None):
    return _DtypeCtx(ctx, dtype, size)


def norm_dim(d: int, n: int) -> int:
    return d + n if d < 0 else d


def reduction_dims(dims, n: int) -> list[int]:
    """The dims a reduction over ``dims`` (None or empty: all) of an ``n``-dim value runs
    over, sorted; a 0-d value's one dim (0 or -1, as torch accepts) is none: its element."""
    return sorted({norm_dim(d, n) for d in dims}) if dims and n else list(range(n))


def reduce(ctx: Ctx, x, dims, keepdim: bool, rtype: str, out_dtype: torch.dtype,
           acc_dtype: torch.dtype | None = None) -> StridedView:
    n = len(x.size)
    dims = reduction_dims(dims, n)
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


class Decline(Exception):
    """A lowering leaves this call of an extern op to ATen, as expected (no fallback)."""


def check_index(ctx: Ctx, index, size, what: str, wrap: bool = False) -> None:
    """Flag (for the wrapper's IndexError) an element of ``index`` outside [0, size), or
    outside [-size, size) with ``wrap`` (negative indices count from the end)."""
    key = (id(index), str(size), wrap, what)
    if key in ctx.graph.checked:  # the same index tensor checked for another gather already
        return
    ctx.graph.checked[key] = index  # (kept alive: its id stays unique)
    lo = op("neg", torch.int64, scalar_expr(size, torch.int64)) if wrap else \
        const(0, torch.int64)

    def outside(i):
        v = cast(index.load(i), torch.int64)
        return op("logical_or", torch.bool, op("lt", torch.bool, v, lo),
                  op("ge", torch.bool, v, scalar_expr(size, torch.int64)))

    flag = reduce(ctx, Lazy(torch.bool, list(index.size), outside), None, False, "any",
                  torch.bool, torch.bool)
    low = f"-{size}" if wrap else "0"
    ctx.graph.checks.append(ir.IndexCheck(flag, f"{what} is outside [{low}, {size})"))
