"""User data given without a dtype as one Arrow array: TorchArrow's inference rules.

Arrow and NumPy data keep their own types; Python values are typed as TorchArrow infers
them (floats are float32, dicts are maps). Everything here is in Arrow types, so ``dtypes``
builds ``infer_dtype`` on top of it and ``_build`` adds declared dtypes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def one_array(values: pa.ChunkedArray) -> pa.Array:
    """A chunked array as one array: its only chunk as is (no copy), else concatenated."""
    if values.num_chunks == 1:
        return values.chunk(0)
    return values.combine_chunks()


def array_or_sequence(values, name: str) -> pa.Array | list | tuple:
    """Arrow data (dictionaries decoded) and 1-D NumPy arrays as an Arrow array; any other
    iterable of values as a list (a tuple stays a tuple)."""
    if isinstance(values, pa.ChunkedArray):
        values = one_array(values)
    if isinstance(values, pa.Array):
        if pa.types.is_dictionary(values.type):
            return values.dictionary_decode()
        return values
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {values.shape}")
        return pa.array(values) if values.dtype != object else pa.array(list(values))
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name}: expected a sequence of values, got {type(values).__name__}")
    if not isinstance(values, (list, tuple)):
        values = list(values)
    return values


def infer_array(values, name: str = "data") -> pa.Array:
    """An Arrow array holding ``values``, typed as TorchArrow infers it."""
    values = array_or_sequence(values, name)
    if isinstance(values, pa.Array):
        return values
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
    target = _float32_python_floats(arr.type)
    if target != arr.type:
        arr = arr.cast(target)
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


def _float32_python_floats(t: pa.DataType) -> pa.DataType:
    """TorchArrow infers Python floats as float32: rewrite float64 (nested too)."""
    if pa.types.is_float64(t):
        return pa.float32()
    if pa.types.is_map(t):
        return pa.map_(_float32_python_floats(t.key_type),
                       pa.field("value", _float32_python_floats(t.item_type)))
    if pa.types.is_list(t):
        return pa.list_(_float32_python_floats(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _float32_python_floats(f.type)) for f in t])
    return t
