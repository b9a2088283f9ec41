"""Lazy numeric column expressions: a tree of ops over columns, evaluated in one pass.

Arithmetic, comparison and logical operators on numeric columns build an ``Expr`` instead
of computing at once. Evaluation runs the tree with torch over zero-copy views of the
Arrow value buffers (validity bitmaps are combined separately: any null input gives a null
output), so ``(df.a * 2 + df.b).clip(0, 10)`` allocates only its intermediates.
``compile_expr`` runs the same tree as one function through ``ember.core.compile``.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from ember.arrow import dtypes as dt
from ember.core.logs import get_logger

_log = get_logger("arrow")

# op name -> (torch function, result is boolean)
OPS: dict[str, tuple[Callable, bool]] = {
    "add": (torch.add, False), "sub": (torch.sub, False), "mul": (torch.mul, False),
    "truediv": (torch.true_divide, False), "floordiv": (torch.floor_divide, False),
    "mod": (torch.remainder, False), "pow": (torch.pow, False),
    "eq": (torch.eq, True), "ne": (torch.ne, True), "lt": (torch.lt, True),
    "le": (torch.le, True), "gt": (torch.gt, True), "ge": (torch.ge, True),
    "and": (operator.and_, False), "or": (operator.or_, False), "xor": (operator.xor, False),
    "invert": (operator.invert, False), "neg": (torch.neg, False), "abs": (torch.abs, False),
    "clip": (torch.clamp, False), "ceil": (torch.ceil, False), "floor": (torch.floor, False),
    "round": (torch.round, False), "exp": (torch.exp, False), "log": (torch.log, False),
    "sqrt": (torch.sqrt, False), "sigmoid": (torch.sigmoid, False),
}
_INT_DIVISION = {"floordiv", "mod"}

_TORCH_TO_DTYPE = {
    torch.bool: dt.Boolean, torch.int8: dt.Int8, torch.int16: dt.Int16,
    torch.int32: dt.Int32, torch.int64: dt.Int64, torch.float32: dt.Float32,
    torch.float64: dt.Float64,
}
_DTYPE_TO_TORCH = {v: k for k, v in _TORCH_TO_DTYPE.items()}


@dataclass(frozen=True, eq=False)
class Expr:
    """One op applied to arguments: sub-expressions, leaf columns, or Python scalars."""

    op: str
    args: tuple


def torch_dtype(dtype: dt.DType) -> torch.dtype:
    try:
        return _DTYPE_TO_TORCH[type(dtype)]
    except KeyError:
        raise TypeError(f"dtype {dtype} has no torch equivalent") from None


def values_tensor(arr: pa.Array) -> torch.Tensor:
    """The value buffer of a primitive Arrow array as a tensor; zero-copy except booleans.

    Slots under nulls hold whatever the buffer holds. The tensor aliases read-only Arrow
    memory: do not modify it in place.
    """
    tdt = torch_dtype(dt.from_arrow_type(arr.type))
    if tdt == torch.bool:
        return torch.from_numpy(arr.fill_null(False).to_numpy(zero_copy_only=False))
    n = len(arr)
    if n == 0:
        return torch.empty(0, dtype=tdt)
    size = torch.empty(0, dtype=tdt).element_size()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only buffer: we never write it
        return torch.frombuffer(arr.buffers()[1], dtype=tdt, count=n, offset=arr.offset * size)


def validity_tensor(arr: pa.Array) -> torch.Tensor | None:
    """Boolean presence per row, or None when the array has no nulls."""
    if arr.null_count == 0:
        return None
    return torch.from_numpy(arr.is_valid().to_numpy(zero_copy_only=False))


def leaves(expr: Expr) -> list:
    """The distinct leaf columns of ``expr`` in first-use order."""
    out, seen = [], set()

    def walk(e):
        for a in e.args:
            if isinstance(a, Expr):
                walk(a)
            elif _is_column(a) and id(a) not in seen:
                seen.add(id(a))
                out.append(a)

    walk(expr)
    return out


def _is_column(x) -> bool:
    from ember.arrow.column import Column

    return isinstance(x, Column)


def plan(expr: Expr, cols: list) -> tuple:
    """The tree as plain tuples: ``(op, args)``, ``("col", i, dtype)``, ``("const", v)``.

    Hashable (the compile cache key) and free of references to column data.
    """
    index = {id(c): i for i, c in enumerate(cols)}

    def key(a):
        if isinstance(a, Expr):
            return (a.op, tuple(key(x) for x in a.args))
        if _is_column(a):
            return ("col", index[id(a)], str(a.dtype))
        return ("const", as_numpy_scalar(a))

    return key(expr)


def build_function(tree: tuple) -> Callable[..., torch.Tensor]:
    """A plain function ``f(*leaf_tensors) -> tensor`` computing a planned tree's values."""

    def run(node, tensors):
        head, rest = node[0], node[1:]
        if head == "col":
            return tensors[rest[0]]
        if head == "const":
            return rest[0]
        fn, _ = OPS[head]
        return fn(*[run(a, tensors) for a in rest[0]])

    def f(*tensors):
        return run(tree, tensors)

    return f


def _validity(expr: Expr, cols: list) -> torch.Tensor | None:
    masks = [m for m in (validity_tensor(c._data) for c in cols) if m is not None]
    if not masks:
        return None
    out = masks[0].clone()
    for m in masks[1:]:
        out &= m
    return out


def _guard_divisors(expr: Expr, cols: list, tensors: list) -> list:
    """Integer // and % by a null slot must not raise: give null divisor slots the value 1."""
    index = {id(c): i for i, c in enumerate(cols)}

    def walk(e):
        for a in e.args:
            if isinstance(a, Expr):
                walk(a)
        if e.op in _INT_DIVISION and _is_column(e.args[1]):
            c = e.args[1]
            valid = validity_tensor(c._data)
            if valid is not None and not tensors[index[id(c)]].is_floating_point():
                i = index[id(c)]
                tensors[i] = torch.where(valid, tensors[i], torch.ones_like(tensors[i]))

    walk(expr)
    return tensors


def to_arrow(values: torch.Tensor, valid: torch.Tensor | None) -> pa.Array:
    """Wrap a result tensor as an Arrow array (zero-copy for non-boolean values)."""
    values = values.contiguous()
    arr = values.numpy()
    mask = None if valid is None else ~valid.numpy()
    return pa.array(arr, mask=mask)


_COMPILE_ROWS: int | None = None


def set_compile_threshold(rows: int | None) -> None:
    """Compile every expression over at least ``rows`` rows (None, the default: only on
    ``Column.compile()``; a first compile takes seconds, a cached one is reused)."""
    global _COMPILE_ROWS
    if rows is not None and (not isinstance(rows, int) or rows < 0):
        raise ValueError(f"set_compile_threshold(): rows must be a non-negative int or None, "
                         f"got {rows!r}")
    _COMPILE_ROWS = rows


def evaluate(expr: Expr, fn: Callable | None = None) -> pa.Array:
    """Evaluate ``expr`` eagerly with torch (or with ``fn``, e.g. a compiled function)."""
    cols = leaves(expr)
    if fn is None and _COMPILE_ROWS is not None and cols and len(cols[0]) >= _COMPILE_ROWS:
        if compiler_available():
            fn = compile_expr(expr)
        else:
            _log.info("compile threshold reached but ember.core.compile is unavailable")
    tensors = _guard_divisors(expr, cols, [values_tensor(c._data) for c in cols])
    values = (fn or build_function(plan(expr, cols)))(*tensors)
    if not isinstance(values, torch.Tensor):  # a tree over constants only
        raise TypeError("expression has no column operand")
    return to_arrow(values, _validity(expr, cols))


def result_dtype(expr: Expr) -> dt.DType:
    """The dtype ``expr`` produces: torch's promotion over the leaf dtypes and constants."""
    cols = leaves(expr)
    meta = [torch.empty(0, dtype=torch_dtype(c.dtype)) for c in cols]
    out = build_function(plan(expr, cols))(*meta)
    nullable = any(c.dtype.nullable for c in cols)
    return _TORCH_TO_DTYPE[out.dtype](nullable=nullable)


_COMPILED: dict[tuple, Callable] = {}


def compiler_available() -> bool:
    try:
        from ember.core import compile as _compile
    except ImportError:
        return False
    return callable(_compile)


def compile_expr(expr: Expr) -> Callable:
    """The tree as one function compiled by ``ember.core.compile`` (cached by signature)."""
    cols = leaves(expr)
    key = plan(expr, cols)
    if key not in _COMPILED:
        if not compiler_available():
            raise RuntimeError("Column.compile() needs ember.core.compile, which this "
                               "installation does not provide")
        from ember.core import compile as ember_compile

        _log.info("compiling column expression %s", key)
        _COMPILED[key] = ember_compile(build_function(key), dynamic=True)
    return _COMPILED[key]


def as_numpy_scalar(x):
    return x.item() if isinstance(x, np.generic) else x
