"""Column: one typed, immutable, possibly nullable vector held in a ``pyarrow.Array``.

Every vectorised method runs through ``pyarrow.compute`` (or, for numeric expressions,
torch over zero-copy buffer views, see ``lazy``); only ``map`` and ``transform(format=
"python")`` call Python per row, because the user asked for a row UDF.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ember.arrow import dtypes as dt
from ember.arrow import lazy
from ember.arrow._build import python_to_arrow
from ember.arrow._extend import converter, defers_column_operators
from ember.arrow._infer import one_array

_REPR_ROWS = 10


def column(data: Any = None, dtype: dt.DType | None = None) -> Column:
    """A Column from a sequence, NumPy array, Arrow array, pandas Series or Column.

    ``dtype`` None infers it as TorchArrow does (``[1, 2, None]`` is a nullable int64).
    """
    if isinstance(data, Column):
        return data if dtype is None else data.cast(dtype)
    if data is None:
        if dtype is None:
            raise TypeError("column(): pass data, dtype, or both")
        data = []
    if type(data).__module__.startswith("pandas"):
        out = converter("from_pandas")(data)
        return out if dtype is None else out.cast(dtype)
    if type(data).__module__.startswith("torch"):
        return converter("from_tensor")(data, dtype)
    arr = python_to_arrow(data, dtype, "column()")
    return Column(arr, dtype)


def _is_scalar(x) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, complex)


class Column(lazy.Leaf):
    """A typed vector over an Arrow array; see ``ember.arrow.column`` to make one.

    ``.str``, ``.list``, ``.maps`` (``accessors``), ``to_pandas`` (``interop``),
    ``to_tensor`` (``tensor``) and ``describe`` (``dataframe``) are attached by those
    modules when ``ember.arrow`` imports them.
    """

    __slots__ = ("_arr", "_dtype", "_expr", "_fn", "_len", "_thunk", "__weakref__")
    __hash__ = None  # type: ignore[assignment]  # == is element-wise

    def __init__(self, data: pa.Array, dtype: dt.DType | None = None):
        if isinstance(data, pa.ChunkedArray):
            data = one_array(data)
        if not isinstance(data, pa.Array):
            raise TypeError(f"Column() takes a pyarrow.Array, got {type(data).__name__}; "
                            "use ember.arrow.column(data) for other data")
        if pa.types.is_dictionary(data.type):
            data = data.dictionary_decode()
        if dtype is None:
            dtype = dt.dtype_of_array(data)
        elif not dtype.nullable and data.null_count:
            dtype = dtype.with_null()
        self._arr, self._dtype, self._expr, self._fn, self._len = data, dtype, None, None, None
        self._thunk = None

    @classmethod
    def _lazy(cls, expr: lazy.Expr, length: int) -> Column:
        self = cls.__new__(cls)
        self._arr, self._expr, self._fn, self._len, self._thunk = None, expr, None, length, None
        self._dtype = lazy.result_dtype(expr)
        return self

    @classmethod
    def _deferred(cls, thunk: Callable[[], pa.Array], dtype: dt.DType, length: int) -> Column:
        """A column whose array ``thunk()`` computes on first use (e.g. a filtered column
        of a frame: only the columns read afterwards are ever filtered)."""
        self = cls.__new__(cls)
        self._arr, self._expr, self._fn, self._len = None, None, None, length
        self._thunk, self._dtype = thunk, dtype
        return self

    def __reduce__(self):
        return (Column, (self._data, self._dtype))  # lazy columns pickle their values

    @property
    def _data(self) -> pa.Array:
        if self._arr is None:
            if self._expr is not None:
                self._arr = lazy.evaluate(self._expr, self._fn)
            else:
                self._arr = self._thunk()
            self._expr = self._fn = self._thunk = None
        return self._arr

    # ------------------------------------------------------------------ basics
    @property
    def dtype(self) -> dt.DType:
        return self._dtype

    @property
    def null_count(self) -> int:
        return self._data.null_count

    @property
    def is_lazy(self) -> bool:
        """True while this column is an unevaluated expression."""
        return self._arr is None

    def __len__(self) -> int:
        return self._len if self._arr is None else len(self._arr)

    def __iter__(self):
        return iter(self.to_pylist())

    def __bool__(self):
        raise ValueError("the truth value of a Column is ambiguous; use .all() or .any(), "
                         "and & | ~ instead of and/or/not")

    def __repr__(self) -> str:
        rows = self.head(_REPR_ROWS).to_pylist()
        width = len(str(max(len(rows) - 1, 0)))
        body = [f"{i:<{width}}  {v!r}" for i, v in enumerate(rows)]
        if len(self) > _REPR_ROWS:
            body.append("...")
        body.append(f"dtype: {self.dtype}, length: {len(self)}, null_count: {self.null_count}")
        return "\n".join(body)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            n = len(self)
            i = int(key) + n if key < 0 else int(key)
            if not 0 <= i < n:
                raise IndexError(f"index {key} out of range for a column of length {n}")
            return _pylist(self._data.slice(i, 1), self.dtype)[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return self._with(self._data.slice(start, max(stop - start, 0)))
            return self._with(self._data.take(pa.array(range(start, stop, step))))
        if isinstance(key, Column) and dt.is_boolean(key.dtype):
            return self.filter(key)
        if isinstance(key, (list, np.ndarray)) and len(key) and isinstance(key[0], (bool,
                                                                                    np.bool_)):
            return self.filter(key)
        if isinstance(key, (list, range, np.ndarray, Column)):
            if isinstance(key, Column):
                if not dt.is_integer(key.dtype) or key.null_count:
                    raise TypeError(f"a Column index must be integers without nulls, got "
                                    f"{key.dtype}")
                idx = key._data.cast(pa.int64())
            else:
                idx = pa.array(list(key) if isinstance(key, range) else key, type=pa.int64())
            if len(idx) and (pc.min(idx).as_py() < 0 or pc.max(idx).as_py() >= len(self)):
                raise IndexError(f"indices out of range for a column of length {len(self)}")
            return self._with(self._data.take(idx))
        raise TypeError(f"Column indices must be int, slice, boolean mask or index list, "
                        f"got {type(key).__name__}")

    def _with(self, arr: pa.Array, dtype: dt.DType | None = None) -> Column:
        """A column over ``arr`` keeping this dtype (or ``dtype``), nullable if nulls appear."""
        return Column(arr, dtype or self.dtype)

    def _derived(self, arr: pa.Array, dtype: dt.DType) -> Column:
        """A computed column: nullable when this one is (TorchArrow's propagation)."""
        return Column(arr, dtype.with_null(self.dtype.nullable or arr.null_count > 0))

    # ------------------------------------------------------------------ conversion
    def to_arrow(self) -> pa.Array:
        """The underlying Arrow array (no copy)."""
        return self._data

    def to_pylist(self) -> list:
        """Python values; structs become named tuples, maps dicts, nulls None."""
        return _pylist(self._data, self.dtype)

    def to_numpy(self) -> np.ndarray:
        return self._data.to_numpy(zero_copy_only=False)

    def cast(self, dtype: dt.DType) -> Column:
        """This column converted to ``dtype``."""
        if not isinstance(dtype, dt.DType):
            raise TypeError(f"cast(): dtype must be an ember.arrow dtype, got {dtype!r}")
        if self.null_count and not dtype.nullable:
            raise TypeError(f"cast(): the column holds {self.null_count} null(s) but {dtype} "
                            "is not nullable")
        try:
            arr = self._data.cast(dt.to_arrow_type(dtype))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise TypeError(f"cast(): cannot convert {self.dtype} to {dtype}: {e}") from None
        return Column(arr, dtype)

    def compile(self) -> Column:
        """Evaluate this lazy expression through ``ember.core.compile`` as one kernel."""
        if self._expr is None:
            return self
        out = Column._lazy(self._expr, self._len)
        out._fn = lazy.compile_expr(self._expr)
        return out

    # ------------------------------------------------------------------ nulls
    def isnull(self) -> Column:
        return Column(pc.is_null(self._data), dt.boolean)

    def fill_null(self, fill_value) -> Column:
        """Nulls replaced by ``fill_value``; the result is not nullable."""
        if fill_value is None:
            raise ValueError("fill_null(): fill_value must not be None")
        try:
            scalar = pa.scalar(fill_value, type=self._data.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            raise TypeError(f"fill_null(): {fill_value!r} does not fit dtype "
                            f"{self.dtype}") from None
        return Column(pc.fill_null(self._data, scalar), self.dtype.with_null(False))

    def drop_null(self) -> Column:
        return Column(pc.drop_null(self._data), self.dtype.with_null(False))

    # ------------------------------------------------------------------ operators
    def _binary(self, other, op: str, reflected: bool = False):
        if defers_column_operators(other):
            return NotImplemented
        if isinstance(other, Column) and len(other) != len(self):
            raise ValueError(f"operator {op}: columns have different lengths "
                             f"({len(self)} and {len(other)})")
        num = dt.is_boolean_or_numerical
        if num(self.dtype) and ((isinstance(other, Column) and num(other.dtype))
                                or _is_scalar(other)):
            a, b = _operand(self), _operand(other)
            return Column._lazy(lazy.Expr(op, (b, a) if reflected else (a, b)), len(self))
        return _eager_binary(self, other, op, reflected)

    def __add__(self, o):
        return self._binary(o, "add")

    def __radd__(self, o):
        return self._binary(o, "add", True)

    def __sub__(self, o):
        return self._binary(o, "sub")

    def __rsub__(self, o):
        return self._binary(o, "sub", True)

    def __mul__(self, o):
        return self._binary(o, "mul")

    def __rmul__(self, o):
        return self._binary(o, "mul", True)

    def __truediv__(self, o):
        return self._binary(o, "truediv")

    def __rtruediv__(self, o):
        return self._binary(o, "truediv", True)

    def __floordiv__(self, o):
        return self._binary(o, "floordiv")

    def __rfloordiv__(self, o):
        return self._binary(o, "floordiv", True)

    def __mod__(self, o):
        return self._binary(o, "mod")

    def __rmod__(self, o):
        return self._binary(o, "mod", True)

    def __pow__(self, o):
        return self._binary(o, "pow")

    def __rpow__(self, o):
        return self._binary(o, "pow", True)

    def __eq__(self, o):  # type: ignore[override]
        return self._binary(o, "eq")

    def __ne__(self, o):  # type: ignore[override]
        return self._binary(o, "ne")

    def __lt__(self, o):
        return self._binary(o, "lt")

    def __le__(self, o):
        return self._binary(o, "le")

    def __gt__(self, o):
        return self._binary(o, "gt")

    def __ge__(self, o):
        return self._binary(o, "ge")

    def __and__(self, o):
        return self._binary(o, "and")

    def __rand__(self, o):
        return self._binary(o, "and", True)

    def __or__(self, o):
        return self._binary(o, "or")

    def __ror__(self, o):
        return self._binary(o, "or", True)

    def __xor__(self, o):
        return self._binary(o, "xor")

    def __rxor__(self, o):
        return self._binary(o, "xor", True)

    def _unary(self, op: str, *args) -> Column:
        if not dt.is_boolean_or_numerical(self.dtype):
            raise TypeError(f"{op} needs a numeric or boolean column, got {self.dtype}")
        return Column._lazy(lazy.Expr(op, (_operand(self), *args)), len(self))

    def __invert__(self):
        return self._unary("invert")

    def __neg__(self):
        return self._unary("neg")

    def __pos__(self):
        return self

    def __abs__(self):
        return self._unary("abs")

    def abs(self) -> Column:
        return self._unary("abs")

    def ceil(self) -> Column:
        return self._unary("ceil")

    def floor(self) -> Column:
        return self._unary("floor")

    def round(self) -> Column:
        return self._unary("round")

    def log(self) -> Column:
        return self._unary("log")

    def exp(self) -> Column:
        return self._unary("exp")

    def sqrt(self) -> Column:
        return self._unary("sqrt")

    def clip(self, lower=None, upper=None) -> Column:
        """Values limited to ``[lower, upper]`` (either may be None)."""
        for name, v in (("lower", lower), ("upper", upper)):
            if v is not None and not _is_scalar(v):
                raise TypeError(f"clip(): {name} must be a number or None, got {v!r}")
        if lower is None and upper is None:
            return self
        return self._unary("clip", lazy.as_numpy_scalar(lower), lazy.as_numpy_scalar(upper))

    # ------------------------------------------------------------------ reductions
    def _reduce(self, fn: str, **kw):
        if not (dt.is_boolean_or_numerical(self.dtype) or fn in ("min", "max", "count")):
            raise TypeError(f"{fn}() needs a numeric column, got {self.dtype}")
        return getattr(pc, fn)(self._data, **kw).as_py()

    def sum(self):
        return self._reduce("sum")

    def mean(self):
        return self._reduce("mean")

    def min(self):
        return self._reduce("min")

    def max(self):
        return self._reduce("max")

    def std(self, ddof: int = 1):
        return self._reduce("stddev", ddof=ddof)

    def count(self) -> int:
        """Number of non-null values."""
        return len(self) - self.null_count

    def all(self) -> bool:
        return bool(self._reduce("all"))

    def any(self) -> bool:
        return bool(self._reduce("any"))

    # ------------------------------------------------------------------ selection
    def filter(self, predicate) -> Column:
        """Rows where ``predicate`` (boolean column/list, or row function) is true."""
        mask = _mask(predicate, self, len(self))
        return self._with(pc.filter(self._data, mask, null_selection_behavior="drop"))

    def head(self, n: int = 5) -> Column:
        return self[:n]

    def tail(self, n: int = 5) -> Column:
        return self[max(len(self) - n, 0):]

    def sort(self, ascending: bool = True, na_position: str = "last") -> Column:
        if na_position not in ("first", "last"):
            raise ValueError(f"sort(): na_position must be 'first' or 'last', got "
                             f"{na_position!r}")
        order = "ascending" if ascending else "descending"
        nulls = "at_start" if na_position == "first" else "at_end"
        idx = pc.sort_indices(self._data, sort_keys=[("", order, nulls)])
        return self._with(self._data.take(idx))

    def unique(self) -> Column:
        return self._with(pc.unique(self._data))

    def append(self, values) -> Column:
        other = values if isinstance(values, Column) else column(list(values), self.dtype)
        arr = pa.concat_arrays([self._data, other._data.cast(self._data.type)])
        return self._with(arr)

    # ------------------------------------------------------------------ UDFs
    def map(self, arg, na_action: str | None = None, dtype: dt.DType | None = None) -> Column:
        """Apply a dict lookup or a row function to each value (a row UDF).

        ``na_action="ignore"`` keeps nulls without calling the function; ``dtype`` is the
        result's dtype (inferred from the results when None).
        """
        if na_action not in (None, "ignore"):
            raise ValueError(f"map(): na_action must be None or 'ignore', got {na_action!r}")
        if isinstance(arg, dict):
            return _map_dict(self, arg, dtype)
        if not callable(arg):
            raise TypeError(f"map(): arg must be a dict or callable, got {type(arg).__name__}")
        values = self.to_pylist()
        if na_action == "ignore":
            out = [None if v is None else arg(v) for v in values]
        else:
            out = [arg(v) for v in values]
        return column(out, dtype)

    def transform(self, func: Callable, dtype: dt.DType | None = None,
                  format: str = "column") -> Column:
        """Apply a batch UDF: ``format`` is column (Column in), python (list in) or torch."""
        if format == "column":
            out = func(self)
        elif format == "python":
            out = func(self.to_pylist())
        elif format == "torch":
            return converter("from_tensor")(func(self.to_tensor()), dtype)
        else:
            raise ValueError(f"transform(): format must be 'column', 'python' or 'torch', got "
                             f"{format!r}")
        if not isinstance(out, Column):
            out = column(out, dtype)
        if len(out) != len(self):
            raise ValueError(f"transform(): the UDF returned {len(out)} rows for {len(self)}")
        return out if dtype is None or out.dtype == dtype else out.cast(dtype)

    # ------------------------------------------------------------------ structs
    def field(self, name: str) -> Column:
        """One field of a struct column."""
        if not dt.is_struct(self.dtype):
            raise TypeError(f".field() needs a struct column, got {self.dtype}")
        try:
            self.dtype.get(name)
        except KeyError:
            raise KeyError(f"struct column has no field {name!r}; fields: "
                           f"{[f.name for f in self.dtype.fields]}") from None
        index = [f.name for f in self.dtype.fields].index(name)
        return Column(self._data.flatten()[index])  # null struct rows give null fields


# ---------------------------------------------------------------------- helpers

def _operand(x):
    """A column as an expression argument: its tree if lazy (so trees fuse), else itself."""
    if isinstance(x, Column):
        return x._expr if x._expr is not None else x
    return lazy.as_numpy_scalar(x)


_PC_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
               "gt": "greater", "ge": "greater_equal"}


def _eager_binary(a: Column, b, op: str, reflected: bool):
    """Operators on non-numeric columns (strings, dates): comparisons and string concat."""
    rhs = b._data if isinstance(b, Column) else b
    lhs = a._data
    if reflected:
        lhs, rhs = rhs, lhs
    try:
        if op in _PC_COMPARE:
            arr = getattr(pc, _PC_COMPARE[op])(lhs, rhs)
            return Column(arr, dt.Boolean(a.dtype.nullable or arr.null_count > 0))
        if op == "add" and dt.is_string(a.dtype):
            arr = pc.binary_join_element_wise(lhs, rhs, "")
            return a._derived(arr, dt.string)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    other = b.dtype if isinstance(b, Column) else type(b).__name__
    raise TypeError(f"operator {op} is not supported between {a.dtype} and {other}")


def _mask(predicate, col, n: int) -> pa.Array:
    if callable(predicate) and not isinstance(predicate, Column):
        predicate = [bool(predicate(v)) for v in col]
    if isinstance(predicate, Column):
        if not dt.is_boolean(predicate.dtype):
            raise TypeError(f"filter mask must be boolean, got {predicate.dtype}")
        arr = predicate._data
    else:
        arr = pa.array(predicate, type=pa.bool_())
    if len(arr) != n:
        raise ValueError(f"filter mask has {len(arr)} rows, the data has {n}")
    return arr


def _map_dict(col: Column, mapping: dict, dtype: dt.DType | None) -> Column:
    keys = python_to_arrow(list(mapping.keys()), col.dtype.with_null(), "map() keys")
    values = python_to_arrow(list(mapping.values()), dtype, "map() values")
    idx = pc.index_in(col._data, value_set=keys)
    arr = values.take(idx)
    return Column(arr, None if dtype is None else dtype.with_null(arr.null_count > 0))


def _pylist(arr: pa.Array, dtype: dt.DType) -> list:
    if isinstance(dtype, dt.Struct):
        tup = dt.struct_tuple_type(dtype)
        children = [_pylist(pc.struct_field(arr, f.name), f.dtype) for f in dtype.fields]
        valid = arr.is_valid().to_pylist() if arr.null_count else None
        return [tup(*row) if valid is None or valid[i] else None
                for i, row in enumerate(zip(*children))] if children else [
                    tup() for _ in range(len(arr))]
    return arr.to_pylist(maps_as_pydicts="strict")
