"""Ember's closed prim set: every pointwise operation a kernel may contain, and what each is.

``PRIMS`` maps a prim name to its ``Prim(arity, kind)``; the kind is the dtype rule:

- ``arith``: any numeric type; computes and returns the promoted compute type.
- ``math``: floating compute (an integer result is refused, except floor/ceil/trunc/round,
  which are the identity on integers).
- ``compare``: operands in their promoted compute type, a bool result.
- ``logical``: bool operands, a bool result.
- ``bitwise``: integers and bool only.
- ``select``: ``where(cond, a, b)``: a bool condition, the result type for both branches.

``REDUCTIONS`` maps a reduction to its identity (the accumulator's initial value). How a prim
is spelled is each code generator's business (``codegen/cpp.py``, ``codegen/triton.py``).
"""

from __future__ import annotations

from typing import NamedTuple


class Prim(NamedTuple):
    arity: int
    kind: str  # arith | math | compare | logical | bitwise | select


PRIMS: dict[str, Prim] = {
    # arithmetic
    "add": Prim(2, "arith"),
    "sub": Prim(2, "arith"),
    "mul": Prim(2, "arith"),
    "fma": Prim(3, "math"),  # a * b + c rounded once: eager's multiply-adds (alpha, lerp)
    "truediv": Prim(2, "math"),
    "neg": Prim(1, "arith"),
    "abs": Prim(1, "arith"),
    "maximum": Prim(2, "arith"),
    "minimum": Prim(2, "arith"),
    "sign": Prim(1, "arith"),
    # floating-point math
    "exp": Prim(1, "math"),
    "exp2": Prim(1, "math"),
    "expm1": Prim(1, "math"),
    "log": Prim(1, "math"),
    "log2": Prim(1, "math"),
    "log10": Prim(1, "math"),
    "log1p": Prim(1, "math"),
    "sqrt": Prim(1, "math"),
    "rsqrt": Prim(1, "math"),
    "reciprocal": Prim(1, "math"),
    "sigmoid": Prim(1, "math"),
    "sin": Prim(1, "math"),
    "cos": Prim(1, "math"),
    "tan": Prim(1, "math"),
    "asin": Prim(1, "math"),
    "acos": Prim(1, "math"),
    "atan": Prim(1, "math"),
    "sinh": Prim(1, "math"),
    "cosh": Prim(1, "math"),
    "tanh": Prim(1, "math"),
    "asinh": Prim(1, "math"),
    "acosh": Prim(1, "math"),
    "atanh": Prim(1, "math"),
    "erf": Prim(1, "math"),
    "erfc": Prim(1, "math"),
    "floor": Prim(1, "math"),
    "ceil": Prim(1, "math"),
    "trunc": Prim(1, "math"),
    "round": Prim(1, "math"),
    "pow": Prim(2, "math"),
    "atan2": Prim(2, "math"),
    "fmod": Prim(2, "math"),
    "remainder": Prim(2, "math"),
    "floordiv": Prim(2, "math"),
    "truncdiv": Prim(2, "math"),
    "isnan": Prim(1, "math"),
    "isinf": Prim(1, "math"),
    # the nearest bfloat16 / float16 value, kept in the compute type: an explicit conversion
    # to a 16-bit float whose value a kernel reads on without storing it
    "round_bf16": Prim(1, "math"),
    "round_fp16": Prim(1, "math"),
    # comparisons (operands in the promoted type, bool result)
    "eq": Prim(2, "compare"),
    "ne": Prim(2, "compare"),
    "lt": Prim(2, "compare"),
    "le": Prim(2, "compare"),
    "gt": Prim(2, "compare"),
    "ge": Prim(2, "compare"),
    # logic and bits
    "logical_and": Prim(2, "logical"),
    "logical_or": Prim(2, "logical"),
    "logical_xor": Prim(2, "logical"),
    "logical_not": Prim(1, "logical"),
    "bitwise_and": Prim(2, "bitwise"),
    "bitwise_or": Prim(2, "bitwise"),
    "bitwise_xor": Prim(2, "bitwise"),
    "bitwise_not": Prim(1, "bitwise"),
    "where": Prim(3, "select"),
}

# reduction name -> identity (the accumulator's initial value, as a Python number)
REDUCTIONS: dict[str, float] = {
    "sum": 0,
    "prod": 1,
    "max": float("-inf"),
    "min": float("inf"),
    "any": 0,
}
