"""Conversions between ember.arrow and Arrow, pandas and polars (zero-copy where possible).

The ``from_*`` functions are registered as converters for ``column()`` and ``dataframe()``,
and ``to_pandas`` as a method of Column and DataFrame.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ember.arrow import dtypes as dt
from ember.arrow._extend import register_converter, register_method
from ember.arrow._infer import one_array
from ember.arrow.column import Column, column
from ember.arrow.dataframe import DataFrame
from ember.core.extras import require


def _normalize(arr: pa.Array) -> pa.Array:
    """Arrow layouts our kernels and dtypes do not cover, cast to the plain ones."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _normalize(arr.dictionary_decode())
    if pa.types.is_string_view(t):
        return arr.cast(pa.large_string())
    if pa.types.is_large_list(t) or pa.types.is_list_view(t) or \
            pa.types.is_large_list_view(t):
        return _normalize(arr.cast(pa.list_(t.value_field)))
    if pa.types.is_list(t) and _needs_normalize(t.value_type):
        offsets = arr.offsets
        mask = arr.is_null() if arr.null_count else None
        return pa.ListArray.from_arrays(offsets, _normalize(arr.values), mask=mask)
    return arr


def _needs_normalize(t: pa.DataType) -> bool:
    return (pa.types.is_dictionary(t) or pa.types.is_string_view(t)
            or pa.types.is_large_list(t) or pa.types.is_list_view(t)
            or (pa.types.is_list(t) and _needs_normalize(t.value_type)))


@register_converter
def from_arrow(data: pa.Array | pa.ChunkedArray | pa.Table | pa.RecordBatch,
               dtype: dt.DType | None = None) -> Column | DataFrame:
    """A Column from an Arrow array, a DataFrame from a table or record batch.

    The data is not copied (chunked arrays with several chunks are concatenated). Dtypes
    are nullable exactly where nulls occur (Arrow schemas mark nearly every field
    nullable), so null-free numeric columns convert to plain tensors; pass ``dtype`` to
    declare nullability instead.
    """
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        cols = {}
        for f, arr in zip(data.schema, data.columns):
            if isinstance(arr, pa.ChunkedArray):
                arr = one_array(arr)
            cols[f.name] = Column(_normalize(arr))
        df = DataFrame(cols)
        return df if dtype is None else df.cast(dtype)
    if isinstance(data, pa.StructArray) and data.null_count == 0:
        return from_arrow(pa.RecordBatch.from_struct_array(data), dtype)
    if isinstance(data, pa.ChunkedArray):
        data = one_array(data)
    if not isinstance(data, pa.Array):
        raise TypeError(f"from_arrow(): expected a pyarrow Array, ChunkedArray, Table or "
                        f"RecordBatch, got {type(data).__name__}")
    col = Column(_normalize(data))
    return col if dtype is None else col.cast(dtype)


def _tight(df: DataFrame, dtype: dt.DType | None) -> DataFrame:
    return df if dtype is None else df.cast(dtype)


@register_converter
def from_pandas(data: Any, dtype: dt.DType | None = None) -> Column | DataFrame:
    """A DataFrame from a pandas DataFrame (a Column from a Series); NaN becomes null."""
    pd = require("pandas", "ember-arrow[pandas]", "from_pandas()")

    if isinstance(data, pd.Series):
        arr = _normalize(pa.array(data, from_pandas=True))
        if dtype is not None:
            return column(arr, dtype)
        return Column(arr)
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"from_pandas(): expected a pandas DataFrame or Series, got "
                        f"{type(data).__name__}")
    if dtype is not None:
        if not isinstance(dtype, dt.Struct):
            raise TypeError(f"from_pandas(): dtype must be a Struct, got {dtype}")
        schema = pa.schema([pa.field(f.name, dt.to_arrow_type(f.dtype)) for f in dtype.fields])
        table = pa.Table.from_pandas(data, schema=schema, preserve_index=False)
        return _tight(from_arrow(table), dtype)
    table = pa.Table.from_pandas(data, preserve_index=False)
    return _tight(from_arrow(table), None)


@register_converter
def from_polars(data: Any, dtype: dt.DType | None = None) -> Column | DataFrame:
    """A DataFrame from a polars DataFrame (a Column from a Series), sharing its buffers."""
    pl = require("polars", "ember-arrow[polars]", "from_polars()")

    if isinstance(data, pl.Series):
        col = Column(_normalize(data.to_arrow()))
        return col if dtype is None else col.cast(dtype)
    if not isinstance(data, pl.DataFrame):
        raise TypeError(f"from_polars(): expected a polars DataFrame or Series, got "
                        f"{type(data).__name__}")
    return _tight(from_arrow(data.to_arrow()), dtype)


def to_arrow(data: Column | DataFrame) -> pa.Array | pa.Table:
    """The Arrow array of a Column, or the Arrow table of a DataFrame (no copy)."""
    _check(data, "to_arrow")
    return data.to_arrow()


def _pandas_types(t: pa.DataType):
    pd = require("pandas", "ember-arrow[pandas]", "to_pandas()")

    mapping = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(),
               pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
               pa.bool_(): pd.BooleanDtype()}
    return mapping.get(t)


@register_method(Column, DataFrame)
def to_pandas(data: Column | DataFrame):
    """A pandas DataFrame (Series for a Column).

    Integer and boolean columns with nulls use pandas' nullable dtypes, so they keep their
    type; float nulls become NaN; maps become dicts.
    """
    _check(data, "to_pandas")
    if isinstance(data, Column):
        return data.to_arrow().to_pandas(types_mapper=_mapper(data),
                                         maps_as_pydicts="strict")
    table = data.to_arrow()
    return table.to_pandas(types_mapper=_mapper(data), maps_as_pydicts="strict")


def _mapper(data):
    cols = [data] if isinstance(data, Column) else list(data._cols.values())
    if not any(c.dtype.nullable for c in cols):
        return None
    return _pandas_types


def to_pylist(data: Column | DataFrame) -> list:
    """Python values (rows as named tuples for a DataFrame)."""
    _check(data, "to_pylist")
    return data.to_pylist()


def _check(data, fn: str) -> None:
    if not isinstance(data, (Column, DataFrame)):
        raise TypeError(f"{fn}(): expected a Column or DataFrame, got {type(data).__name__}")
