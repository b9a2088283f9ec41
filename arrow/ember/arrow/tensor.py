"""Columns to torch data and back, by TorchArrow's conventions.

Non-null numeric -> ``Tensor`` (a zero-copy view of the Arrow buffer where it is
contiguous and not boolean); nullable -> ``WithPresence(values, presence)``; list ->
``PackedList(offsets, values)`` (or a padded tensor with ``PadSequence``); map ->
``PackedMap``; struct and DataFrame -> named tuple; string -> list of str.
``from_tensor`` builds Arrow arrays from the tensors' memory, never through Python lists.
``to_tensor`` is registered as a method of Column and DataFrame, ``from_tensor`` as the
converter ``column()`` and ``transform(format="torch")`` use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ember.arrow import dtypes as dt
from ember.arrow import lazy
from ember.arrow._extend import register_converter, register_method
from ember.arrow._infer import infer_array
from ember.arrow.accessors import map_parts
from ember.arrow.column import Column
from ember.arrow.dataframe import DataFrame

T = TypeVar("T")
KT = TypeVar("KT")


@dataclass
class WithPresence(Generic[T]):
    """Values of a nullable column and a 1-D bool ``presence`` (True where not null)."""

    values: T
    presence: torch.Tensor


@dataclass
class PackedList(Generic[T]):
    """Lists as ``offsets`` (1-D int32, length rows + 1) into flat ``values``."""

    offsets: torch.Tensor
    values: T


@dataclass
class PackedMap(Generic[KT, T]):
    """Maps as ``offsets`` into flat ``keys`` and ``values``."""

    offsets: torch.Tensor
    keys: KT
    values: T


class PadSequence:
    """A conversion for numeric list columns: one tensor padded with ``padding_value``,
    ``[rows, longest]`` when ``batch_first`` else ``[longest, rows]``."""

    def __init__(self, *, batch_first: bool = True, padding_value: float = 0.0):
        self.batch_first = batch_first
        self.padding_value = padding_value

    def __call__(self, col) -> torch.Tensor:
        if not dt.is_list(col.dtype) or not dt.is_boolean_or_numerical(col.dtype.item_dtype):
            raise TypeError(f"PadSequence needs a list column of numbers, got {col.dtype}")
        arr = col._data.fill_null(pa.scalar([], col._data.type)) if col.null_count else \
            col._data
        lengths = torch.from_numpy(pc.list_value_length(arr).to_numpy(zero_copy_only=False)
                                   .astype(np.int64))
        flat = arr.flatten()
        if flat.null_count:
            raise ValueError("PadSequence: list items hold nulls; fill_null them first")
        values = lazy.values_tensor(flat)
        rows = len(arr)
        longest = int(lengths.max()) if rows else 0
        out = torch.full((rows, longest), self.padding_value, dtype=values.dtype)
        row = torch.repeat_interleave(torch.arange(rows), lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        pos = torch.arange(len(values)) - starts[row]
        out[row, pos] = values
        return out if self.batch_first else out.T.contiguous()


# ---------------------------------------------------------------------- to_tensor

def _presence(arr: pa.Array) -> torch.Tensor:
    return torch.from_numpy(arr.is_valid().to_numpy(zero_copy_only=False))


def _offsets(arr: pa.Array) -> torch.Tensor:
    offsets = arr.offsets
    if len(offsets) and offsets[0].as_py() != 0:
        offsets = pc.subtract(offsets, offsets[0])
    return lazy.values_tensor(offsets.cast(pa.int32()))


def _convert(arr: pa.Array, dtype: dt.DType):
    if isinstance(dtype, dt.String):
        return arr.to_pylist()
    if dtype.nullable and not isinstance(dtype, dt.String):
        filled = _fill_default(arr, dtype) if arr.null_count else arr
        return WithPresence(_convert(filled, dtype.with_null(False)), _presence(arr))
    if dt.is_boolean_or_numerical(dtype):
        return lazy.values_tensor(arr)
    if dt.is_temporal(dtype):  # days or time units since the epoch
        phys = pa.int32() if isinstance(dtype, dt.Date) else pa.int64()
        return lazy.values_tensor(arr.view(phys))
    if isinstance(dtype, dt.List):
        return PackedList(_offsets(arr), _convert(arr.flatten(), dtype.item_dtype))
    if isinstance(dtype, dt.Map):
        offsets, keys, items = map_parts(arr)
        return PackedMap(lazy.values_tensor(offsets.cast(pa.int32())),
                         _convert(keys, dtype.key_dtype), _convert(items, dtype.item_dtype))
    if isinstance(dtype, dt.Struct):
        tup = dt.struct_tuple_type(dtype)
        return tup(*(_convert(child, f.dtype) for child, f in zip(arr.flatten(), dtype.fields)))
    raise TypeError(f"to_tensor(): no tensor form for dtype {dtype} ({Column.__name__})")


def _fill_default(arr: pa.Array, dtype: dt.DType) -> pa.Array:
    """Null slots given the dtype's default (0, False, empty list) so values are defined."""
    if isinstance(dtype, dt.List):
        return arr.fill_null(pa.scalar([], arr.type))
    if isinstance(dtype, dt.Map):
        return arr.fill_null(pa.scalar([], arr.type))
    if isinstance(dtype, dt.Struct):
        return arr  # children carry their own presence
    if dt.is_boolean(dtype):
        return arr.fill_null(False)
    return arr.fill_null(pa.scalar(0, arr.type).cast(arr.type))


@register_method(Column, DataFrame)
def to_tensor(data, conversion=None):
    """Torch data for a Column or DataFrame by TorchArrow's conventions.

    ``conversion`` (e.g. ``PadSequence(...)``) replaces the default for a Column; for a
    DataFrame it applies to every column, or is a dict of conversions by column name.
    """
    if isinstance(data, DataFrame):
        if isinstance(conversion, dict):
            for n in conversion:
                data._col(n)
            conv = conversion
        else:
            conv = dict.fromkeys(data.columns, conversion)
        tup = dt.struct_tuple_type(data.dtype)
        return tup(*(to_tensor(c, conv.get(n)) for n, c in data._cols.items()))
    if not isinstance(data, Column):
        raise TypeError(f"to_tensor(): expected a Column or DataFrame, got "
                        f"{type(data).__name__}")
    if conversion is not None:
        if not callable(conversion):
            raise TypeError(f"to_tensor(): conversion must be callable, got {conversion!r}")
        return conversion(data)
    return _convert(data._data, data.dtype)


# ---------------------------------------------------------------------- from_tensor

def _tensor_array(t: torch.Tensor, mask: np.ndarray | None = None) -> pa.Array:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.ndim != 1:
        raise ValueError(f"from_tensor(): expected a 1-D tensor, got shape {tuple(t.shape)}")
    if t.dtype not in lazy._TORCH_TO_DTYPE:
        raise TypeError(f"from_tensor(): unsupported tensor dtype {t.dtype}")
    return pa.array(t.contiguous().numpy(), mask=mask)


def _offsets_array(offsets: Any, what: str) -> pa.Array:
    if not isinstance(offsets, torch.Tensor) or offsets.dtype not in (
            torch.int16, torch.int32, torch.int64):
        raise TypeError(f"from_tensor(): {what}.offsets must be an integer tensor")
    return _tensor_array(offsets.to(torch.int32))


def _build(data: Any) -> pa.Array:
    if isinstance(data, WithPresence):
        presence = data.presence
        if not isinstance(presence, torch.Tensor) or presence.dtype != torch.bool:
            raise TypeError("from_tensor(): WithPresence.presence must be a bool tensor")
        inner = _build(data.values)
        if len(presence) != len(inner):
            raise ValueError(f"from_tensor(): presence has {len(presence)} rows, values "
                             f"{len(inner)}")
        mask = pa.array(~presence.cpu().numpy())
        if isinstance(inner, pa.StructArray):
            return pa.StructArray.from_arrays(inner.flatten(), fields=list(inner.type),
                                              mask=mask)
        if isinstance(inner, (pa.ListArray, pa.MapArray)):
            cls = type(inner)
            if cls is pa.MapArray:
                return pa.MapArray.from_arrays(inner.offsets, inner.keys, inner.items,
                                               mask=mask)
            return pa.ListArray.from_arrays(inner.offsets, inner.flatten(), mask=mask)
        # Primitive values: reuse the tensor's buffer, add a validity bitmap.
        bits = pa.array(presence.cpu().numpy()).buffers()[1]
        return pa.Array.from_buffers(inner.type, len(inner), [bits, inner.buffers()[1]],
                                     offset=inner.offset)
    if isinstance(data, torch.Tensor):
        if data.ndim == 2:  # rows of equal length: a list column over the same memory
            rows, width = data.shape
            flat = _tensor_array(data.contiguous().reshape(-1))
            offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32)
                               if rows else np.zeros(1, np.int32))
            return pa.ListArray.from_arrays(offsets, flat)
        return _tensor_array(data)
    if isinstance(data, PackedList):
        offsets = _offsets_array(data.offsets, "PackedList")
        return pa.ListArray.from_arrays(offsets, _build(data.values))
    if isinstance(data, PackedMap):
        offsets = _offsets_array(data.offsets, "PackedMap")
        return pa.MapArray.from_arrays(offsets, _build(data.keys), _build(data.values))
    if isinstance(data, tuple):
        names = getattr(data, "_fields", None) or [f"f_{i}" for i in range(len(data))]
        children = [_build(x) for x in data]
        return pa.StructArray.from_arrays(children, names=list(names))
    if isinstance(data, list):
        return infer_array(data, "from_tensor()")
    raise TypeError(f"from_tensor(): unsupported data of type {type(data).__name__}")


def _nullable_dtype(data: Any, arr: pa.Array) -> dt.DType:
    base = dt.dtype_of_array(arr)
    return base.with_null(isinstance(data, WithPresence) or base.nullable)


@register_converter
def from_tensor(data: Any, dtype: dt.DType | None = None):
    """A Column (DataFrame for a named tuple) from torch data in to_tensor's forms."""
    arr = _build(data)
    if isinstance(arr, pa.StructArray) and not isinstance(data, WithPresence):
        df = DataFrame({f.name: Column(arr.field(i)) for i, f in enumerate(arr.type)})
        return df if dtype is None else df.cast(dtype)
    col = Column(arr, _nullable_dtype(data, arr))
    if dtype is not None and col.dtype != dtype:
        if isinstance(data, WithPresence) and not dtype.nullable:
            raise TypeError(f"from_tensor(): WithPresence data needs a nullable dtype, got "
                            f"{dtype}")
        col = col.cast(dtype)
    return col
