"""Turn user data (Python sequences, NumPy, Arrow, pandas) into one Arrow array."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ember.arrow import dtypes as dt


def one_array(values: pa.ChunkedArray) -> pa.Array:
    """A chunked array as one array: its only chunk as is (no copy), else concatenated."""
    if values.num_chunks == 1:
        return values.chunk(0)
    return values.combine_chunks()


def _check_no_undeclared_nulls(arr: pa.Array, dtype: dt.DType, name: str) -> None:
    if not dtype.nullable and arr.null_count:
        raise TypeError(f"{name}: dtype {dtype} is not nullable but the data holds "
                        f"{arr.null_count} null(s); use {dtype.with_null()}")


def _tuples_to_dicts(values, dtype: dt.Struct):
    names = [f.name for f in dtype.fields]
    out = []
    for v in values:
        if isinstance(v, tuple):
            if len(v) != len(names):
                raise ValueError(f"tuple {v!r} has {len(v)} fields, dtype has {len(names)}")
            v = dict(zip(names, v))
        out.append(v)
    return out


def python_to_arrow(values, dtype: dt.DType | None, name: str = "data") -> pa.Array:
    """An Arrow array holding ``values``; ``dtype`` None infers as TorchArrow does."""
    if isinstance(values, pa.ChunkedArray):
        values = one_array(values)
    if isinstance(values, pa.Array):
        arr = values
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if dtype is not None:
            arr = _cast(arr, dtype, name)
        return arr
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {values.shape}")
        arr = pa.array(values) if values.dtype != object else pa.array(list(values))
        return _cast(arr, dtype, name) if dtype is not None else arr
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name}: expected a sequence of values, got {type(values).__name__}")
    if not isinstance(values, (list, tuple)):
        values = list(values)
    if dtype is None:
        if all(v is None for v in values):
            raise ValueError(f"{name}: cannot infer a dtype from {len(values)} value(s) that "
                             "are all None (or none at all); pass dtype=")
        if any(isinstance(v, tuple) for v in values):
            raise TypeError(f"{name}: tuples need an explicit Struct dtype")
        try:
            arr = pa.array(values, from_pandas=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise TypeError(f"{name}: cannot infer one dtype for the values: {e}") from None
        if pa.types.is_struct(arr.type) and any(isinstance(v, dict) for v in values):
            # Python dicts are maps in TorchArrow, not structs.
            arr = _dicts_to_map(values, name)
        if _has_null_type(arr.type):
            raise ValueError(f"{name}: cannot infer a dtype for values that are only empty or "
                             f"None at some nesting level ({arr.type}); pass dtype=")
        target = dt._float32_python_floats(arr.type)
        if target != arr.type:
            arr = arr.cast(target)
        return arr
    if isinstance(dtype, dt.Struct):
        values = _tuples_to_dicts(values, dtype)
    try:
        arr = pa.array(values, type=dt.to_arrow_type(dtype), from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise TypeError(f"{name}: values do not fit dtype {dtype}: {e}") from None
    _check_no_undeclared_nulls(arr, dtype, name)
    return arr


def _has_null_type(t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True
    return any(_has_null_type(t.field(i).type) for i in range(t.num_fields))


def _dicts_to_map(values, name: str) -> pa.Array:
    keys = [k for v in values if v for k in v]
    items = [x for v in values if v for x in v.values()]
    if not keys:
        raise ValueError(f"{name}: cannot infer a map dtype from empty dicts; pass dtype=")
    kt = pa.array(keys).type
    it = pa.array(items).type if any(x is not None for x in items) else pa.null()
    if it == pa.null():
        raise ValueError(f"{name}: cannot infer map items from all-None values; pass dtype=")
    return pa.array([None if v is None else list(v.items()) for v in values],
                    type=pa.map_(kt, it))


def _cast(arr: pa.Array, dtype: dt.DType, name: str) -> pa.Array:
    target = dt.to_arrow_type(dtype)
    if arr.type != target and not (dt.is_string(dtype) and pa.types.is_large_string(arr.type)):
        try:
            arr = arr.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise TypeError(f"{name}: cannot convert {arr.type} to dtype {dtype}: {e}") from None
    _check_no_undeclared_nulls(arr, dtype, name)
    return arr
