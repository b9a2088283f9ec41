"""Lazy numeric column expressions: a tree of ops over columns, evaluated in one pass.

Arithmetic, comparison and logical operators on numeric columns build an ``Expr`` instead
of computing at once. Evaluation runs the tree over zero-copy views of the Arrow value
buffers (validity bitmaps are combined separately: any null input gives a null output):
eagerly with NumPy ufuncs that reuse intermediate buffers, each node in the dtype torch's
promotion rules give it, or, after ``compile_expr``, as one function through
``ember.core.compile`` (the same tree written with torch ops, fused into one kernel).
"""

from __future__ import annotations

import functools
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
# Tensors over Arrow buffers are read-only views by design (documented on to_tensor);
# torch's warning about that is silenced for calls made from this package only.
warnings.filterwarnings("ignore", message="The given buffer is not writable",
                        category=UserWarning, module=r"ember\.arrow\.")

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
_TORCH_BY_NAME = {v.name: k for k, v in _TORCH_TO_DTYPE.items()}


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
    return torch.frombuffer(arr.buffers()[1], dtype=tdt, count=n, offset=arr.offset * size)


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
    """The tree as plain tuples: ``(op, args)``, ``("col", i, dtype name)``, ``("const", v)``.

    Hashable (the compile cache key) and free of references to column data.
    """
    index = {id(c): i for i, c in enumerate(cols)}

    def key(a):
        if isinstance(a, Expr):
            return (a.op, tuple(key(x) for x in a.args))
        if _is_column(a):
            return ("col", index[id(a)], a.dtype.name)
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


# Eager evaluation runs in NumPy (single-threaded ufuncs reusing intermediate buffers),
# each node computed in the dtype torch's promotion gives it, so eager and compiled agree.
_NUMPY: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor, "invert": np.invert, "neg": np.negative, "abs": np.absolute,
    "ceil": np.ceil, "floor": np.floor, "round": np.rint, "exp": np.exp, "log": np.log,
    "sqrt": np.sqrt,
}
_INTEGER_IDENTITY = {"ceil", "floor", "round"}


@functools.lru_cache(maxsize=512)
def node_dtypes(tree: tuple) -> tuple:
    """``(numpy dtype, children)`` for every op node, from torch's promotion on empty tensors."""

    def run(node):
        head = node[0]
        if head == "col":
            return torch.empty(0, dtype=_TORCH_BY_NAME[node[2]]), None
        if head == "const":
            return node[1], None
        pairs = [run(a) for a in node[1]]
        fn, _ = OPS[head]
        out = fn(*[v for v, _ in pairs])
        return out, (torch.empty(0, dtype=out.dtype).numpy().dtype, tuple(d for _, d in pairs))

    return run(tree)[1]


def values_numpy(arr: pa.Array) -> np.ndarray:
    """The value buffer of a primitive Arrow array as a read-only NumPy view (booleans
    unpacked)."""
    if pa.types.is_boolean(arr.type):
        return arr.fill_null(False).to_numpy(zero_copy_only=False)
    np_dtype = arr.type.to_pandas_dtype()
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype=np_dtype)
    return np.frombuffer(arr.buffers()[1], dtype=np_dtype, count=n,
                         offset=arr.offset * np.dtype(np_dtype).itemsize)


def _numpy_eval(tree: tuple, dtypes: tuple, arrays: list) -> np.ndarray:
    owned: set[int] = set()

    def run(node, info):
        head = node[0]
        if head == "col":
            return arrays[node[1]]
        if head == "const":
            return node[1]
        dtype, child_info = info
        args = [run(a, d) for a, d in zip(node[1], child_info)]
        x = args[0]
        if head in _INTEGER_IDENTITY and dtype.kind in "iub":
            return x
        if head in ("floordiv", "mod") and dtype.kind in "iu":
            d = args[1]
            if (np.any(d == 0) if isinstance(d, np.ndarray) else d == 0):
                raise ZeroDivisionError("integer division by zero in a column expression")
        out = next((a for a in args if isinstance(a, np.ndarray) and id(a) in owned
                    and a.dtype == dtype), None)
        if head == "clip":
            lo, hi = args[1], args[2]
            res = x.astype(dtype, copy=False) if x.dtype != dtype else x
            if lo is not None or hi is not None:
                res = np.clip(res, lo, hi, out=out if out is not None and out is res else None)
        elif head == "sigmoid":
            res = np.negative(x, dtype=dtype, out=out)
            np.exp(res, out=res)
            np.add(res, 1, out=res)
            np.reciprocal(res, out=res)
        elif OPS[head][1]:  # comparisons: NumPy picks the loop, the result is bool
            res = _NUMPY[head](*args)
        else:
            res = _NUMPY[head](*args, out=out, dtype=dtype)
        if isinstance(res, np.ndarray):
            owned.add(id(res))
        return res

    with np.errstate(all="ignore"):
        return run(tree, dtypes)


def _validity_numpy(cols: list) -> np.ndarray | None:
    masks = [c._data.is_valid().to_numpy(zero_copy_only=False)
             for c in cols if c._data.null_count]
    if not masks:
        return None
    return masks[0] if len(masks) == 1 else np.logical_and.reduce(masks)


def _guard_divisors(tree: tuple, cols: list, values: list, where) -> list:
    """Integer // and % by a null slot must not fail: null divisor slots get the value 1."""

    def walk(node):
        if node[0] in ("col", "const"):
            return
        for a in node[1]:
            walk(a)
        if node[0] in _INT_DIVISION and node[1][1][0] == "col":
            i = node[1][1][1]
            arr = cols[i]._data
            if arr.null_count and not pa.types.is_floating(arr.type):
                valid = arr.is_valid().to_numpy(zero_copy_only=False)
                values[i] = where(valid, values[i])

    walk(tree)
    return values


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
    """Evaluate ``expr``: in NumPy, or with ``fn`` (a compiled torch function) if given."""
    cols = leaves(expr)
    tree = plan(expr, cols)
    if fn is None and _COMPILE_ROWS is not None and cols and len(cols[0]) >= _COMPILE_ROWS:
        if compiler_available():
            fn = compile_expr(expr)
        else:
            _log.info("compile threshold reached but ember.core.compile is unavailable")
    valid = _validity_numpy(cols)
    mask = None if valid is None else ~valid
    if fn is not None:
        tensors = _guard_divisors(tree, cols, [values_tensor(c._data) for c in cols],
                                  lambda v, x: torch.where(torch.from_numpy(v), x,
                                                           torch.ones_like(x)))
        out = fn(*tensors)
        return pa.array(out.contiguous().numpy(), mask=mask)
    arrays = _guard_divisors(tree, cols, [values_numpy(c._data) for c in cols],
                             lambda v, x: np.where(v, x, np.ones_like(x)))
    out = _numpy_eval(tree, node_dtypes(tree), arrays)
    if not isinstance(out, np.ndarray):
        raise TypeError("expression has no column operand")
    return pa.array(out, mask=mask)


def result_dtype(expr: Expr) -> dt.DType:
    """The dtype ``expr`` produces: torch's promotion over the leaf dtypes and constants."""
    cols = leaves(expr)
    np_dtype = node_dtypes(plan(expr, cols))[0]
    tdt = torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype
    return _TORCH_TO_DTYPE[tdt](nullable=any(c.dtype.nullable for c in cols))


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
