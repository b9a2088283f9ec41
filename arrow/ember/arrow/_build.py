"""User data (Python sequences, NumPy, Arrow) as one Arrow array of a declared dtype."""

from __future__ import annotations

import pyarrow as pa

from ember.arrow import dtypes as dt
from ember.arrow._infer import array_or_sequence, infer_array


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
    if dtype is None:
        return infer_array(values, name)
    values = array_or_sequence(values, name)
    if isinstance(values, pa.Array):
        return _cast(values, dtype, name)
    if isinstance(dtype, dt.Struct):
        values = _tuples_to_dicts(values, dtype)
    try:
        arr = pa.array(values, type=dt.to_arrow_type(dtype), from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise TypeError(f"{name}: values do not fit dtype {dtype}: {e}") from None
    _check_no_undeclared_nulls(arr, dtype, name)
    return arr


def _cast(arr: pa.Array, dtype: dt.DType, name: str) -> pa.Array:
    target = dt.to_arrow_type(dtype)
    if arr.type != target and not (dt.is_string(dtype) and pa.types.is_large_string(arr.type)):
        try:
            arr = arr.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise TypeError(f"{name}: cannot convert {arr.type} to dtype {dtype}: {e}") from None
    _check_no_undeclared_nulls(arr, dtype, name)
    return arr
