"""Lazy numeric column expressions: a tree of ops over columns, evaluated in one pass.

Arithmetic, comparison and logical operators on numeric columns (and ``functional.where``)
build an ``Expr`` instead of computing at once. Evaluation plans the tree as straight-line
steps (a shared sub-expression once), each in the dtype torch's promotion gives it, and
runs them over zero-copy views of the Arrow value buffers: eagerly with NumPy ufuncs that
reuse temporaries, or, after ``compile_expr``, as one ``ember.core.compile``d function (one
fused C++ kernel) called over row chunks. Validity bitmaps are ANDed separately: any null
input gives a null output.
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
    "where": (torch.where, False),
}
_INT_DIVISION = {"floordiv", "mod"}

_TORCH_TO_DTYPE = {
    torch.bool: dt.Boolean, torch.int8: dt.Int8, torch.int16: dt.Int16,
    torch.int32: dt.Int32, torch.int64: dt.Int64, torch.float32: dt.Float32,
    torch.float64: dt.Float64,
}
_DTYPE_TO_TORCH = {v: k for k, v in _TORCH_TO_DTYPE.items()}
_TORCH_BY_NAME = {v.name: k for k, v in _TORCH_TO_DTYPE.items()}


class Leaf:
    """A column as an expression reads it (``dtype``, ``len``, Arrow values in ``_data``);
    Column derives from it, so this module needs no import of ``column``."""

    __slots__ = ()


@dataclass(frozen=True, eq=False)
class Expr:
    """One op applied to arguments: sub-expressions, leaf columns, or Python scalars.

    ``dtype`` (torch's promotion over the arguments) and ``nullable`` are worked out once,
    from the arguments' own, when the node is made.
    """

    op: str
    args: tuple
    dtype: torch.dtype = field(init=False, repr=False)
    nullable: bool = field(init=False, repr=False)

    def __post_init__(self):
        probes, nullable = [], False
        for a in self.args:
            if isinstance(a, Expr):
                probes.append(torch.empty(0, dtype=a.dtype))
                nullable = nullable or a.nullable
            elif isinstance(a, Leaf):
                probes.append(torch.empty(0, dtype=torch_dtype(a.dtype)))
                nullable = nullable or a.dtype.nullable
            else:
                probes.append(a)
        object.__setattr__(self, "dtype", OPS[self.op][0](*probes).dtype)
        object.__setattr__(self, "nullable", nullable)


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
            if id(a) in seen:
                continue
            if isinstance(a, Expr):
                seen.add(id(a))
                walk(a)
            elif isinstance(a, Leaf):
                seen.add(id(a))
                out.append(a)

    walk(expr)
    return out


def plan(expr: Expr, cols: list) -> tuple:
    """The tree as plain tuples: ``(op, args)``, ``("col", i, dtype name)``, ``("const", v)``.

    Hashable (the compile cache key) and free of references to column data.
    """
    index = {id(c): i for i, c in enumerate(cols)}
    done: dict[int, tuple] = {}  # shared sub-expressions are planned once

    def key(a):
        if isinstance(a, Expr):
            if id(a) not in done:
                done[id(a)] = (a.op, tuple(key(x) for x in a.args))
            return done[id(a)]
        if isinstance(a, Leaf):
            return ("col", index[id(a)], a.dtype.name)
        return ("const", as_numpy_scalar(a))

    return key(expr)


@dataclass(frozen=True)
class Program:
    """A planned tree as straight-line steps, each distinct subtree computed once.

    ``steps[k]`` is ``(op, args)`` with args ``("col", i)``, ``("const", v)`` or
    ``("tmp", j)`` (the result of step j); ``dtypes[k]`` is the NumPy dtype torch's
    promotion gives step k; ``last_use[k]`` is the last step reading step k's result.
    """

    steps: tuple
    dtypes: tuple
    last_use: tuple


@functools.lru_cache(maxsize=512)
def program(tree: tuple) -> Program:
    """The straight-line program of a planned tree (cached)."""
    steps: list = []
    slots: dict = {}
    probes: list = []  # empty tensors (or constants) run through torch for the dtypes

    def visit(node):
        head = node[0]
        if head == "col":
            return ("col", node[1]), torch.empty(0, dtype=_TORCH_BY_NAME[node[2]])
        if head == "const":
            return ("const", node[1]), node[1]
        if node in slots:
            k = slots[node]
            return ("tmp", k), probes[k]
        pairs = [visit(a) for a in node[1]]
        fn, _ = OPS[head]
        probe = fn(*[p for _, p in pairs])
        slots[node] = len(steps)
        steps.append((head, tuple(r for r, _ in pairs)))
        probes.append(probe)
        return ("tmp", len(steps) - 1), probe

    visit(tree)
    last = list(range(len(steps)))
    for k, (_, args) in enumerate(steps):
        for kind, j in args:
            if kind == "tmp":
                last[j] = k
    dtypes = tuple(torch.empty(0, dtype=p.dtype).numpy().dtype for p in probes)
    return Program(tuple(steps), dtypes, tuple(last))


def _clip_by_select(x, lower=None, upper=None):
    """``torch.clamp`` as two selects: the same values (NaN stays NaN), but g++ vectorises a
    loop of selects where it gives up on chained NaN-aware max/min next to other work."""
    if lower is not None:
        x = torch.where(x < lower, lower, x)
    if upper is not None:
        x = torch.where(x > upper, upper, x)
    return x


# ops written differently for the compiler (same results, better generated code)
_COMPILED_FORM: dict[str, Callable] = {"clip": _clip_by_select}


def build_function(tree: tuple) -> Callable[..., torch.Tensor]:
    """A plain function ``f(*leaf_tensors) -> tensor`` computing a planned tree's values
    with torch ops, shared subtrees once (so the traced graph has no duplicate nodes)."""
    prog = program(tree)
    fns = [_COMPILED_FORM.get(op, OPS[op][0]) for op, _ in prog.steps]
    tdtypes = [torch.from_numpy(np.empty(0, dtype=d)).dtype for d in prog.dtypes]

    def f(*tensors):
        tmp: list = []
        for (_, args), fn, dtype in zip(prog.steps, fns, tdtypes):
            vals = [tensors[v] if kind == "col" else tmp[v] if kind == "tmp" else v
                    for kind, v in args]
            out = fn(*vals)
            tmp.append(out if out.dtype == dtype else out.to(dtype))
        return tmp[-1]

    return f


# Eager evaluation runs in NumPy (single-threaded ufuncs reusing intermediate buffers),
# each step computed in the dtype torch's promotion gives it, so eager and compiled agree.
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


def _numpy_step(op: str, args: list, dtype: np.dtype, out: np.ndarray | None):
    x = args[0]
    if op in _INTEGER_IDENTITY and dtype.kind in "iub":
        return x
    if op in _INT_DIVISION and dtype.kind in "iu":
        d = args[1]
        if (np.any(d == 0) if isinstance(d, np.ndarray) else d == 0):
            raise ZeroDivisionError("integer division by zero in a column expression")
    if op == "clip":
        lo, hi = args[1], args[2]
        res = x.astype(dtype) if x.dtype != dtype else x
        if lo is None and hi is None:
            return res
        in_place = res is not x or (out is not None and out is x)  # a buffer we may write
        return np.clip(res, lo, hi, out=res if in_place else None)
    if op == "where":
        res = np.where(*args)
        return res.astype(dtype) if res.dtype != dtype else res
    if op == "sigmoid":
        res = np.negative(x, dtype=dtype, out=out)
        np.exp(res, out=res)
        np.add(res, 1, out=res)
        return np.reciprocal(res, out=res)
    if OPS[op][1]:  # comparisons: NumPy picks the loop, the result is bool
        return _NUMPY[op](*args)
    return _NUMPY[op](*args, out=out, dtype=dtype)


def _reusable(tmp: list, v: int, k: int, last_use: tuple, arrays: list) -> bool:
    """Step k may write over temporary v: an array nothing reads after step k (identity
    steps can return their argument, so every other name for the buffer counts)."""
    buf = tmp[v]
    if not isinstance(buf, np.ndarray) or any(buf is a for a in arrays):
        return False
    return all(last_use[j] <= k for j in range(len(tmp)) if tmp[j] is buf)


def _numpy_eval(tree: tuple, arrays: list):
    """The planned tree in NumPy; a temporary's buffer is reused by the step that reads it
    last (when the dtypes match)."""
    prog = program(tree)
    tmp: list = []
    with np.errstate(all="ignore"):
        for k, (op, args) in enumerate(prog.steps):
            vals = [arrays[v] if kind == "col" else tmp[v] if kind == "tmp" else v
                    for kind, v in args]
            dtype = prog.dtypes[k]
            out = next((tmp[v] for kind, v in args
                        if kind == "tmp" and _reusable(tmp, v, k, prog.last_use, arrays)
                        and tmp[v].dtype == dtype), None)
            tmp.append(_numpy_step(op, vals, dtype, out))
    return tmp[-1]


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
    if fn is not None and cols and len(cols[0]) > 1:  # 0 or 1 rows: not worth a kernel
        tensors = _guard_divisors(tree, cols, [values_tensor(c._data) for c in cols],
                                  lambda v, x: torch.where(torch.from_numpy(v), x,
                                                           torch.ones_like(x)))
        out = _run_chunked(fn, tensors, program(tree).dtypes[-1])
    else:
        arrays = _guard_divisors(tree, cols, [values_numpy(c._data) for c in cols],
                                 lambda v, x: np.where(v, x, np.ones_like(x)))
        out = _numpy_eval(tree, arrays)
        if not isinstance(out, np.ndarray):
            raise TypeError("expression has no column operand")
    return _with_validity(pa.array(out), _validity_bitmap(cols))


# Output rows per compiled call: a few MiB, so each call's result comes from (and goes back
# to) the malloc heap instead of fresh pages, and is copied while still in cache.
_CHUNK_BYTES = 4 << 20
_CHUNK_MIN_ROWS = 1 << 16


def _run_chunked(fn: Callable, tensors: list, dtype: np.dtype) -> np.ndarray:
    """``fn`` over row chunks of ``tensors``, written into one NumPy array.

    NumPy allocates large arrays on transparent huge pages; a fresh torch allocation of the
    whole result would instead fault in every 4 KiB page, which costs more than the fused
    kernel itself on 10M rows.
    """
    n = len(tensors[0])
    out = np.empty(n, dtype=dtype)
    step = max(_CHUNK_MIN_ROWS, _CHUNK_BYTES // out.itemsize)
    bounds = list(range(0, n, step)) + [n]
    if len(bounds) > 2 and n - bounds[-2] == 1:
        del bounds[-2]  # no 1-row chunk: torch.compile would specialise (recompile) on it
    for start, stop in zip(bounds, bounds[1:]):
        # a plain single-threaded copy: the chunk is in cache, and a parallel copy would add
        # a thread barrier per chunk
        np.copyto(out[start:stop], fn(*[t[start:stop] for t in tensors]).numpy())
    return out


def _validity_bitmap(cols: list) -> pa.Buffer | None:
    """The AND of the leaves' validity bitmaps (offset 0), or None when nothing is null."""
    valid = None
    for c in cols:
        arr = c._data
        if arr.null_count:
            v = arr.is_valid()
            valid = v if valid is None else pc.and_(valid, v)
    if valid is None:
        return None
    if valid.offset:  # not seen in practice: is_valid() and and_() write fresh bitmaps
        valid = pa.array(valid.to_numpy(zero_copy_only=False))
    return valid.buffers()[1]


def _with_validity(arr: pa.Array, bitmap: pa.Buffer | None) -> pa.Array:
    if bitmap is None:
        return arr
    # arr comes from pa.array(ndarray): offset 0, like the bitmap
    return pa.Array.from_buffers(arr.type, len(arr), [bitmap, *arr.buffers()[1:]])


def result_dtype(expr: Expr) -> dt.DType:
    """The dtype ``expr`` produces: torch's promotion over the leaf dtypes and constants."""
    return _TORCH_TO_DTYPE[expr.dtype](nullable=expr.nullable)


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
