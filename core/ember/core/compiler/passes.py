"""Named rewrites of kernel expressions that change the arithmetic a kernel performs.

Code generators only render what they are handed; a rewrite that changes the program (and so
possibly the last bits of its results) is a named pass here, logged at DEBUG on
``ember.codegen`` whenever it changes something. ``PASSES`` lists them with the code
generators that apply them:

- ``divide_by_reciprocal``: in a loop, ``a / d`` with ``d`` invariant in the loop and
  computed from a reduction of the same kernel (softmax's row sum) becomes ``a * (1 / d)``:
  one division per row instead of one per element, as eager's softmax computes. A division
  by a constant or by a scalar read from memory stays a division, as eager's ``div`` computes
  it (``x / 0.7`` was an ulp off eager in a tenth of the elements). Applied by the C++ code
  generator to loop stages. Triton keeps the true division: applying it there would change
  Triton kernels' results in the last bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ember.core.compiler import ir
from ember.core.logs import get_logger

log = get_logger("codegen")


class Pass(NamedTuple):
    name: str
    applied_by: tuple[str, ...]  # the code generators that apply it
    what: str
    rewrite: Callable  # (expr, loop_vars, memo, where=) -> expr


# Prims whose result jumps on a one-bit change of a floating-point argument.
_DISCONTINUOUS = frozenset({"floor", "ceil", "trunc", "round", "floordiv", "truncdiv", "fmod",
                            "remainder", "sign", "eq", "ne", "lt", "le", "gt", "ge"})


def divide_by_reciprocal(e: ir.Expr, loop_vars: set, memo: dict | None = None,
                         where: str = "") -> ir.Expr:
    """``e`` with each float division by a value invariant in ``loop_vars`` that reads a
    reduction's accumulator (and a dividend that is not invariant) turned into a
    multiplication by its reciprocal, except where the quotient
    feeds a rounding or comparing prim: there the reciprocal's last bit can flip the result
    (round(x / 1000) at x = 2500), so the true division stays. ``memo`` caches
    ``ir.invariant`` answers for ``loop_vars``."""
    memo = {} if memo is None else memo
    count = 0

    def rewrite(x, exact=False):
        nonlocal count
        if isinstance(x, ir.Cast):
            return x._replace(x=rewrite(x.x, exact))
        if not isinstance(x, ir.PrimOp):
            return x
        exact = exact or x.prim in _DISCONTINUOUS
        args = tuple(rewrite(a, exact) for a in x.args)
        if x.prim == "truediv" and not exact and x.dtype.is_floating_point \
                and ir.invariant(args[1], loop_vars, memo) \
                and not ir.invariant(args[0], loop_vars, memo) \
                and any(isinstance(v, ir.Var) for v in ir.walk(args[1])):
            count += 1
            return ir.PrimOp(x.dtype, "mul", (args[0], ir.PrimOp(x.dtype, "reciprocal",
                                                                  (args[1],))))
        return x._replace(args=args)

    out = rewrite(e)
    if count:
        log.debug("pass divide_by_reciprocal%s: %d division(s) by a loop invariant",
                  f" in {where}" if where else "", count)
    return out


PASSES = {p.name: p for p in [
    Pass("divide_by_reciprocal", ("cpp",),
         "a / d with d a loop-invariant reduction result -> a * (1 / d)", divide_by_reciprocal),
]}


def apply(generator: str, e: ir.Expr, loop_vars: set, memo: dict, where: str = "") -> ir.Expr:
    """``e`` after every pass that code generator ``generator`` applies, in ``PASSES`` order;
    ``memo`` caches ``ir.invariant`` answers for ``loop_vars``."""
    for p in PASSES.values():
        if generator in p.applied_by:
            e = p.rewrite(e, loop_vars, memo, where=where)
    return e
