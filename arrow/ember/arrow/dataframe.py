"""DataFrame: named Columns of equal length, with TorchArrow's operations.

Relational work (sort, groupby, join, dedup) is done by Arrow's engine on a zero-copy
``pyarrow.Table`` view of the columns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ember.arrow import dtypes as dt
from ember.arrow._build import python_to_arrow
from ember.arrow._extend import converter, defer_column_operators, register_method
from ember.arrow._infer import one_array
from ember.arrow.column import Column, _is_scalar, _mask, column
from ember.arrow.expression import Expression, bind

_REPR_ROWS = 10


def dataframe(data: Any = None, dtype: dt.Struct | None = None,
              columns: Sequence[str] | None = None) -> DataFrame:
    """A DataFrame from a dict of sequences, rows (tuples) with a Struct dtype, an Arrow
    table, a pandas or polars frame, or a DataFrame."""
    if isinstance(data, DataFrame):
        return data if dtype is None else data.cast(dtype)
    module = type(data).__module__
    if module.startswith(("pandas", "polars")):
        df = converter("from_pandas" if module.startswith("pandas") else "from_polars")(data)
        return df if dtype is None else df.cast(dtype)
    if isinstance(data, (pa.Table, pa.RecordBatch, pa.StructArray)):
        df = converter("from_arrow")(data)
        return df if dtype is None else df.cast(dtype)
    if dtype is not None and not isinstance(dtype, dt.Struct):
        raise TypeError(f"dataframe(): dtype must be a Struct, got {dtype}")
    if data is None:
        data = {} if dtype is None else {f.name: [] for f in dtype.fields}
    if isinstance(data, Mapping):
        types = {f.name: f.dtype for f in dtype.fields} if dtype else {}
        if dtype is not None and set(types) != set(data):
            raise ValueError(f"dataframe(): data columns {list(data)} do not match dtype "
                             f"fields {list(types)}")
        cols = {}
        for name, values in data.items():
            if not isinstance(name, str):
                raise TypeError(f"dataframe(): column names must be str, got {name!r}")
            cols[name] = _to_column(values, types.get(name), name)
        return DataFrame(cols)
    rows = list(data)
    if dtype is None:
        if columns is None:
            raise TypeError("dataframe(): rows need a Struct dtype or columns=[...] names")
        names = list(columns)
        return dataframe({n: [r[i] for r in rows] for i, n in enumerate(names)})
    arr = python_to_arrow(rows, dtype, "dataframe()")
    return DataFrame({f.name: Column(arr.field(i), f.dtype)
                      for i, f in enumerate(dtype.fields)})


class ColumnNotFoundError(KeyError, ValueError):
    """An unknown column name: a KeyError (as pandas) and a ValueError (bad argument)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _to_column(values, dtype: dt.DType | None, name: str) -> Column:
    if isinstance(values, Column):
        return values if dtype is None or values.dtype == dtype else values.cast(dtype)
    try:
        return column(values, dtype)
    except (TypeError, ValueError) as e:
        raise type(e)(f"column {name!r}: {e}") from None


@defer_column_operators
class DataFrame:
    """Named columns of equal length; ``df["a"]`` and ``df.a`` give a Column.

    ``to_pandas`` (``interop``) and ``to_tensor`` (``tensor``) are attached by those modules
    when ``ember.arrow`` imports them.
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, columns: Mapping[str, Column] | None = None):
        cols = dict(columns or {})
        lengths = {name: len(c) for name, c in cols.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"columns have different lengths: {lengths}")
        for name, c in cols.items():
            if not isinstance(c, Column):
                raise TypeError(f"column {name!r} must be a Column, got {type(c).__name__}")
        object.__setattr__(self, "_cols", cols)
        object.__setattr__(self, "_n", next(iter(lengths.values()), 0))

    def __reduce__(self):
        return (DataFrame, (self._cols,))

    # ------------------------------------------------------------------ basics
    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    @property
    def dtype(self) -> dt.Struct:
        return dt.Struct([dt.Field(n, c.dtype) for n, c in self._cols.items()])

    def __len__(self) -> int:
        return self._n

    @property
    def shape(self) -> tuple[int, int]:
        return (self._n, len(self._cols))

    def _col(self, name: str) -> Column:
        try:
            return self._cols[name]
        except KeyError:
            raise ColumnNotFoundError(f"unknown column {name!r}; columns: "
                                      f"{self.columns}") from None

    def __getattr__(self, name: str) -> Column:
        if name.startswith("_"):
            raise AttributeError(name)
        cols = self.__dict__.get("_cols", {})
        if name in cols:
            return cols[name]
        raise AttributeError(f"DataFrame has no attribute or column {name!r}")

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("set columns with df[name] = values")

    def __getitem__(self, key):
        if isinstance(key, Expression):
            key = bind(key, self)
        if isinstance(key, str):
            return self._col(key)
        if isinstance(key, (int, np.integer)):
            n = self._n
            i = int(key) + n if key < 0 else int(key)
            if not 0 <= i < n:
                raise IndexError(f"row {key} out of range for {n} rows")
            return self[i:i + 1].to_pylist()[0]
        if isinstance(key, slice):
            return DataFrame({n: c[key] for n, c in self._cols.items()})
        if isinstance(key, Column):
            return self.filter(key)
        if isinstance(key, list) and all(isinstance(k, str) for k in key):
            return self.select(*key)
        if isinstance(key, (list, np.ndarray)):
            if len(key) and isinstance(key[0], (bool, np.bool_)):
                return self.filter(list(key))
            return DataFrame({n: c[key] for n, c in self._cols.items()})
        raise TypeError(f"DataFrame indices must be a column name, list of names, boolean "
                        f"mask, expression, row or slice, got {type(key).__name__}")

    def __setitem__(self, name: str, value) -> None:
        if not isinstance(name, str):
            raise TypeError(f"column names must be str, got {name!r}")
        if isinstance(value, Expression):
            value = bind(value, self)
        if _is_scalar(value) or isinstance(value, str):
            value = column([value] * self._n) if self._n else column([value])[:0]
        col = _to_column(value, None, name)
        if self._cols and len(col) != self._n:
            raise ValueError(f"column {name!r} has {len(col)} rows, the frame has {self._n}")
        self._cols[name] = col
        if len(self._cols) == 1:
            object.__setattr__(self, "_n", len(col))

    def __delitem__(self, name: str) -> None:
        self._col(name)
        del self._cols[name]

    def __contains__(self, name: str) -> bool:
        return name in self._cols

    def __iter__(self):
        return iter(self.to_pylist())

    def __bool__(self):
        raise ValueError("the truth value of a DataFrame is ambiguous")

    def __repr__(self) -> str:
        head = self.head(_REPR_ROWS)
        names = ["index", *self.columns]
        cells = [[str(i), *(repr(v) for v in row)] for i, row in enumerate(head.to_pylist())]
        widths = [max([len(n)] + [len(r[j]) for r in cells]) for j, n in enumerate(names)]
        lines = ["  ".join(n.rjust(w) for n, w in zip(names, widths)),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
        if self._n > _REPR_ROWS:
            lines.append("...")
        lines.append(f"dtype: {self.dtype}, count: {self._n}, null_count: "
                     f"{sum(c.null_count for c in self._cols.values())}")
        return "\n".join(lines)

    def copy(self) -> DataFrame:
        return DataFrame(self._cols)

    # ------------------------------------------------------------------ conversion
    def to_arrow(self) -> pa.Table:
        """The columns as a ``pyarrow.Table`` (no copy)."""
        return pa.table({n: c._data for n, c in self._cols.items()},
                        schema=pa.schema([pa.field(n, c._data.type, c.dtype.nullable)
                                          for n, c in self._cols.items()]))

    def to_pylist(self) -> list[tuple]:
        """Rows as named tuples."""
        tup = dt.struct_tuple_type(self.dtype)
        return [tup(*row) for row in zip(*(c.to_pylist() for c in self._cols.values()))]

    def cast(self, dtype: dt.Struct) -> DataFrame:
        if not isinstance(dtype, dt.Struct):
            raise TypeError(f"cast(): dtype must be a Struct, got {dtype}")
        if [f.name for f in dtype.fields] != self.columns:
            raise ValueError(f"cast(): dtype fields {[f.name for f in dtype.fields]} do not "
                             f"match columns {self.columns}")
        out = {}
        for f in dtype.fields:
            try:
                out[f.name] = self._cols[f.name].cast(f.dtype)
            except TypeError as e:
                raise TypeError(f"column {f.name!r}: {e}") from None
        return DataFrame(out)

    # ------------------------------------------------------------------ projection
    def select(self, *args: str, **kwargs) -> DataFrame:
        """Columns by name (``"*"`` is all) plus new columns given as keyword expressions."""
        names: list[str] = []
        for a in args:
            if a == "*":
                names += self.columns
            elif isinstance(a, str):
                self._col(a)
                names.append(a)
            else:
                raise TypeError(f"select(): positional arguments are column names, got {a!r}")
        out = DataFrame({n: self._cols[n] for n in names})
        for name, value in kwargs.items():
            out[name] = bind(value, self)
        return out

    def drop(self, columns: str | Iterable[str]) -> DataFrame:
        drop = [columns] if isinstance(columns, str) else list(columns)
        for n in drop:
            self._col(n)
        return DataFrame({n: c for n, c in self._cols.items() if n not in drop})

    def rename(self, mapping: Mapping[str, str]) -> DataFrame:
        for n in mapping:
            self._col(n)
        return DataFrame({mapping.get(n, n): c for n, c in self._cols.items()})

    # ------------------------------------------------------------------ rows
    def filter(self, predicate, columns: Sequence[str] | None = None) -> DataFrame:
        """Rows where ``predicate`` holds: a boolean Column, list, expression, or a row
        function called with the row's values of ``columns`` (all by default)."""
        if isinstance(predicate, Expression):
            predicate = bind(predicate, self)
        if callable(predicate) and not isinstance(predicate, Column):
            rows = self.select(*(columns or self.columns)).to_pylist()
            predicate = [bool(predicate(*r)) for r in rows]
        mask = _mask(predicate, None, self._n)
        if mask.null_count:
            mask = pc.fill_null(mask, False)
        n = pc.sum(mask).as_py() or 0
        return DataFrame({name: Column._deferred(functools.partial(_filtered, c, mask), c.dtype, n)
                          for name, c in self._cols.items()})

    def where(self, *conditions) -> DataFrame:
        """Rows where every condition (boolean Column or expression) is true."""
        if not conditions:
            return self
        mask = None
        for c in conditions:
            c = bind(c, self)
            mask = c if mask is None else mask & c
        return self.filter(mask)

    def head(self, n: int = 5) -> DataFrame:
        return self[:n]

    def tail(self, n: int = 5) -> DataFrame:
        return self[max(self._n - n, 0):]

    def sort(self, by: str | Sequence[str] | None = None,
             ascending: bool | Sequence[bool] = True, na_position: str = "last") -> DataFrame:
        """Rows ordered by the ``by`` columns (all columns when None); stable."""
        keys = self.columns if by is None else [by] if isinstance(by, str) else list(by)
        for k in keys:
            self._col(k)
        asc = [ascending] * len(keys) if isinstance(ascending, bool) else list(ascending)
        if len(asc) != len(keys):
            raise ValueError(f"sort(): {len(asc)} ascending flags for {len(keys)} keys")
        if na_position not in ("first", "last"):
            raise ValueError(f"sort(): na_position must be 'first' or 'last', got "
                             f"{na_position!r}")
        nulls = "at_start" if na_position == "first" else "at_end"
        sort_keys = [(k, "ascending" if a else "descending", nulls) for k, a in zip(keys, asc)]
        idx = pc.sort_indices(self.to_arrow(), sort_keys=sort_keys)
        return self._take(idx)

    def _take(self, idx) -> DataFrame:
        return DataFrame({n: c._with(c._data.take(idx)) for n, c in self._cols.items()})

    # ------------------------------------------------------------------ nulls
    def fill_null(self, value) -> DataFrame:
        """Nulls replaced by ``value`` (a scalar for every column, or a dict by name)."""
        if isinstance(value, Mapping):
            for n in value:
                self._col(n)
            return DataFrame({n: c.fill_null(value[n]) if n in value else c
                              for n, c in self._cols.items()})
        out = {}
        for n, c in self._cols.items():
            try:
                out[n] = c.fill_null(value) if c.null_count else c
            except TypeError as e:
                raise TypeError(f"column {n!r}: {e}") from None
        return DataFrame(out)

    def drop_null(self, how: str = "any") -> DataFrame:
        """Rows without nulls (``how="all"``: drop only rows that are all null)."""
        if how not in ("any", "all"):
            raise ValueError(f"drop_null(): how must be 'any' or 'all', got {how!r}")
        valid = [pc.is_valid(c._data) for c in self._cols.values()]
        if not valid:
            return self
        combine = pc.and_ if how == "any" else pc.or_
        mask = valid[0]
        for v in valid[1:]:
            mask = combine(mask, v)
        return self.filter(Column(mask, dt.boolean))

    def isnull(self) -> DataFrame:
        return DataFrame({n: c.isnull() for n, c in self._cols.items()})

    def drop_duplicates(self, subset: Sequence[str] | None = None,
                        keep: str = "first") -> DataFrame:
        """Rows whose ``subset`` values were not seen before (``keep="last"``: after)."""
        if keep not in ("first", "last"):
            raise ValueError(f"drop_duplicates(): keep must be 'first' or 'last', got {keep!r}")
        keys = self.columns if subset is None else list(subset)
        for k in keys:
            self._col(k)
        table = self.select(*keys).to_arrow().append_column(
            "__row", pa.array(np.arange(self._n, dtype=np.int64)))
        agg = table.group_by(keys, use_threads=False).aggregate(
            [("__row", "min" if keep == "first" else "max")])
        idx = pc.sort_indices(agg.column(f"__row_{'min' if keep == 'first' else 'max'}"))
        return self._take(one_array(agg.column(-1)).take(idx))

    # ------------------------------------------------------------------ relational
    def groupby(self, by: str | Sequence[str], sort: bool = False,
                dropna: bool = True) -> GroupedDataFrame:
        """Group rows by the ``by`` columns (first-appearance order unless ``sort``)."""
        keys = [by] if isinstance(by, str) else list(by)
        if not keys:
            raise ValueError("groupby(): pass at least one key column")
        for k in keys:
            self._col(k)
        return GroupedDataFrame(self, keys, sort, dropna)

    def join(self, other: DataFrame, on: str | Sequence[str] | None = None,
             how: str = "inner", left_on=None, right_on=None,
             suffixes: tuple[str, str] = ("_x", "_y")) -> DataFrame:
        """Rows of both frames matched on keys (``how`` inner or left), in left-row order.

        Shared non-key names get ``suffixes`` (pandas' defaults). Unlike pandas, null keys
        never match (SQL semantics).
        """
        if not isinstance(other, DataFrame):
            raise TypeError(f"join(): other must be a DataFrame, got {type(other).__name__}")
        types = {"inner": "inner", "left": "left outer"}
        if how not in types:
            raise ValueError(f"join(): how must be 'inner' or 'left', got {how!r}")
        if on is not None:
            left_on = right_on = on
        if left_on is None:
            left_on = right_on = [c for c in self.columns if c in other.columns]
            if not left_on:
                raise ValueError("join(): the frames share no column; pass on=")
        lk = [left_on] if isinstance(left_on, str) else list(left_on)
        rk = [right_on] if isinstance(right_on, str) else list(right_on)
        if len(lk) != len(rk):
            raise ValueError(f"join(): {len(lk)} left keys but {len(rk)} right keys")
        for k in lk:
            self._col(k)
        for k in rk:
            other._col(k)
        left = self.to_arrow().append_column("__l", pa.array(np.arange(self._n)))
        right = other.to_arrow().append_column("__r", pa.array(np.arange(len(other))))
        shared = (set(self.columns) & set(other.columns)) - (set(lk) & set(rk) if lk == rk
                                                            else set())
        rename = lambda t, names, suf: t.rename_columns(
            [n + suf if n in shared else n for n in names])
        left = rename(left, left.column_names, suffixes[0])
        right = rename(right, right.column_names, suffixes[1])
        lk2 = [k + suffixes[0] if k in shared else k for k in lk]
        rk2 = [k + suffixes[1] if k in shared else k for k in rk]
        joined = left.join(right, keys=lk2, right_keys=rk2, join_type=types[how],
                           use_threads=False, coalesce_keys=lk == rk)
        order = pc.sort_indices(joined, sort_keys=[("__l", "ascending", "at_end"),
                                                   ("__r", "ascending", "at_end")])
        joined = joined.take(order).drop_columns(["__l", "__r"])
        names = [c for c in left.column_names if c != "__l"] + [
            c for c in right.column_names if c != "__r" and c in joined.column_names
            and c not in left.column_names]
        return DataFrame({n: Column(one_array(joined.column(n))) for n in names})

    def describe(self, percentiles: Sequence[float] = (0.25, 0.5, 0.75)) -> DataFrame:
        """count, mean, std, min, percentiles and max of the numeric columns (float64)."""
        num = [n for n, c in self._cols.items() if dt.is_numerical(c.dtype)]
        if not num:
            raise ValueError("describe(): the frame has no numeric column")
        metrics = ["count", "mean", "std", "min",
                   *[f"{p * 100:g}%" for p in percentiles], "max"]
        out: dict[str, Column] = {"metric": column(metrics, dt.string)}
        for n in num:
            a = self._cols[n]._data
            q = pc.quantile(a, q=list(percentiles)).to_pylist() if a.null_count < len(a) \
                else [None] * len(percentiles)
            vals = [float(len(a) - a.null_count), pc.mean(a).as_py(),
                    pc.stddev(a, ddof=1).as_py(), pc.min(a).as_py(), *q, pc.max(a).as_py()]
            out[n] = column([None if v is None else float(v) for v in vals],
                            dt.Float64(nullable=any(v is None for v in vals)))
        return DataFrame(out)

    # ------------------------------------------------------------------ UDFs
    def map(self, arg: Callable | Mapping, na_action: str | None = None,
            dtype: dt.DType | None = None, columns: Sequence[str] | None = None):
        """Row UDF: ``arg(*row values of columns)`` per row; a Struct dtype gives a frame."""
        cols = list(columns or self.columns)
        if len(cols) == 1:
            out = self._col(cols[0]).map(arg, na_action=na_action, dtype=dtype)
        else:
            if not callable(arg):
                raise TypeError("map() over several columns needs a callable")
            rows = self.select(*cols).to_pylist()
            if na_action == "ignore":
                res = [None if any(v is None for v in r) else arg(*r) for r in rows]
            else:
                res = [arg(*r) for r in rows]
            out = column(res, dtype)
        return _struct_to_frame(out)

    def transform(self, func: Callable, dtype: dt.DType | None = None,
                  format: str = "column", columns: Sequence[str] | None = None):
        """Batch UDF over ``columns`` (all by default), each passed as one argument.

        ``format``: column (Columns in), python (lists in) or torch (to_tensor() results
        in); the result is a Column, or a DataFrame for a Struct dtype or a dict result.
        """
        cols = [self._col(n) for n in (columns or self.columns)]
        if format == "column":
            out = func(*cols)
        elif format == "python":
            out = func(*(c.to_pylist() for c in cols))
        elif format == "torch":
            out = converter("from_tensor")(func(*(c.to_tensor() for c in cols)), dtype)
        else:
            raise ValueError(f"transform(): format must be 'column', 'python' or 'torch', "
                             f"got {format!r}")
        if isinstance(out, Mapping):
            out = dataframe(dict(out), dtype)
        elif not isinstance(out, (Column, DataFrame)):
            out = column(out, dtype)
        if len(out) != self._n:
            raise ValueError(f"transform(): the UDF returned {len(out)} rows for {self._n}")
        return _struct_to_frame(out)

    # ------------------------------------------------------------------ operators
    def _elementwise(self, other, op: str) -> DataFrame:
        if isinstance(other, DataFrame):
            if other.columns != self.columns:
                raise ValueError(f"operator {op}: frames have different columns "
                                 f"{self.columns} and {other.columns}")
            return DataFrame({n: getattr(c, op)(other._cols[n])
                              for n, c in self._cols.items()})
        return DataFrame({n: getattr(c, op)(other) for n, c in self._cols.items()})


def _frame_op(op: str):
    def method(self, other=None):
        if op in ("__neg__", "__invert__", "__abs__"):
            return DataFrame({n: getattr(c, op)() for n, c in self._cols.items()})
        return self._elementwise(other, op)

    method.__name__ = op
    return method


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv",
            "rfloordiv", "mod", "rmod", "pow", "rpow", "eq", "ne", "lt", "le", "gt", "ge",
            "and", "rand", "or", "ror", "xor", "rxor", "neg", "invert", "abs"):
    setattr(DataFrame, f"__{_op}__", _frame_op(f"__{_op}__"))


@register_method(Column, name="describe")
def _describe_column(col: Column) -> DataFrame:
    """``DataFrame.describe`` of one column, as ``metric`` and ``value`` columns."""
    return DataFrame({"c": col}).describe().rename({"c": "value"})


def _filtered(col: Column, mask: pa.Array) -> pa.Array:
    return pc.filter(col._data, mask)


def _struct_to_frame(c):
    if isinstance(c, Column) and dt.is_struct(c.dtype) and c.null_count == 0:
        return DataFrame({f.name: c.field(f.name) for f in c.dtype.fields})
    return c


_AGGS = {"sum": "sum", "mean": "mean", "min": "min", "max": "max", "count": "count",
         "list": "list", "std": "stddev", "first": "first", "last": "last",
         "nunique": "count_distinct"}


class GroupedDataFrame:
    """The result of ``DataFrame.groupby``: aggregate with ``agg`` or the shortcuts."""

    def __init__(self, df: DataFrame, keys: list[str], sort: bool, dropna: bool):
        self._df, self._keys, self._sort, self._dropna = df, keys, sort, dropna

    def agg(self, func: str | Sequence[str] | Mapping[str, str | Sequence[str]]) -> DataFrame:
        """Aggregates per group: one function name for all value columns, a list (named
        ``col.func``), or a dict ``{column: name or list of names}``."""
        values = [c for c in self._df.columns if c not in self._keys]
        if isinstance(func, str):
            spec = {c: [func] for c in values}
            plain = set(values)
        elif isinstance(func, Mapping):
            spec = {c: [f] if isinstance(f, str) else list(f) for c, f in func.items()}
            plain = {c for c, f in func.items() if isinstance(f, str)}
        else:
            spec = {c: list(func) for c in values}
            plain = set()
        for c, fns in spec.items():
            if c in self._keys:
                raise ValueError(f"groupby.agg(): {c!r} is a group key")
            col = self._df._col(c)
            for f in fns:
                if f not in _AGGS:
                    raise ValueError(f"groupby.agg(): unknown aggregation {f!r} for column "
                                     f"{c!r}; known: {sorted(_AGGS)}")
                if f in ("sum", "mean", "std") and not dt.is_boolean_or_numerical(col.dtype):
                    raise TypeError(f"groupby.agg(): {f} needs a numeric column, column {c!r} "
                                    f"is {col.dtype}")
        df = self._df
        if self._dropna:
            df = _drop_null_rows(df, self._keys)
        table = df.to_arrow()
        aggs = [(c, _AGGS[f]) for c, fns in spec.items() for f in fns]
        # Threads reorder groups and list items: use them only when the output is sorted
        # anyway and no aggregation depends on row order.
        threads = self._sort and not any(f in ("list", "first", "last") for _, f in aggs)
        res = table.group_by(self._keys, use_threads=threads).aggregate(aggs)
        if self._sort:
            res = res.sort_by([(k, "ascending") for k in self._keys])
        out = {k: df._cols[k]._with(one_array(res.column(k))) for k in self._keys}
        for c, fns in spec.items():
            for f in fns:
                name = c if c in plain else f"{c}.{f}"
                out[name] = Column(one_array(res.column(f"{c}_{_AGGS[f]}")))
        return DataFrame(out)

    def sum(self) -> DataFrame:
        return self.agg("sum")

    def mean(self) -> DataFrame:
        return self.agg("mean")

    def min(self) -> DataFrame:
        return self.agg("min")

    def max(self) -> DataFrame:
        return self.agg("max")

    def count(self) -> DataFrame:
        return self.agg("count")

    def size(self) -> DataFrame:
        df = _drop_null_rows(self._df, self._keys) if self._dropna else self._df
        res = df.select(*self._keys).to_arrow().group_by(
            self._keys, use_threads=False).aggregate([([], "count_all")])
        if self._sort:
            res = res.sort_by([(k, "ascending") for k in self._keys])
        return DataFrame({**{k: Column(one_array(res.column(k))) for k in self._keys},
                          "size": Column(one_array(res.column("count_all")))})


def _drop_null_rows(df: DataFrame, keys: list[str]) -> DataFrame:
    if not any(df._cols[k].null_count for k in keys):
        return df
    mask = None
    for k in keys:
        v = pc.is_valid(df._cols[k]._data)
        mask = v if mask is None else pc.and_(mask, v)
    return df.filter(Column(mask, dt.boolean))
