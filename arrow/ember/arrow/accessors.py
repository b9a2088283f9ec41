"""The vectorised methods behind ``col.str``, ``col.list`` and ``col.maps``, registered on
Column here.

String methods run on Arrow's UTF-8 kernels; list and map methods work on the flat child
arrays and offsets, so no method loops over rows in Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ember.arrow import dtypes as dt
from ember.arrow._extend import register_accessor
from ember.arrow.column import Column


def _drop_empty_parts(arr: pa.Array) -> pa.Array:
    """Remove empty strings from lists of strings (whitespace split of padded text)."""
    offsets, flat = list_parts(arr)
    keep = pc.not_equal(flat, "")
    if pc.all(keep).as_py() in (True, None):
        return arr
    rows = pc.list_parent_indices(arr)
    kept_rows = pc.filter(rows, keep)
    counts = np.bincount(kept_rows.to_numpy(), minlength=len(arr)).astype(np.int32)
    new_offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    mask = arr.is_null() if arr.null_count else None
    return pa.ListArray.from_arrays(new_offsets, pc.filter(flat, keep), mask=mask)


def _is_ascii(arr: pa.Array) -> bool:
    """Whether every byte the string array's rows span is ASCII (one pass over the bytes).

    Arrow's UTF-8 case kernels decode every code point; on ASCII text its ASCII kernels
    give the same strings about ten times faster.
    """
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return False
    if len(arr) == 0 or arr.buffers()[2] is None:
        return True
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=width, count=len(arr) + 1,
                            offset=arr.offset * np.dtype(width).itemsize)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    return data.size == 0 or int(data.max()) < 128


def _as_int64(col: Column, arr: pa.Array) -> Column:
    return col._derived(arr.cast(pa.int64()), dt.int64)


@register_accessor(Column, "str", dt.is_string, "a string column")
class StringMethods:
    """Vectorised string functions (``col.str``) over Arrow's UTF-8 kernels."""

    def __init__(self, col: Column):
        self._col = col
        self._arr = col._data

    def _s(self, arr: pa.Array) -> Column:
        return self._col._derived(arr, dt.string)

    def _b(self, arr: pa.Array) -> Column:
        return self._col._derived(arr, dt.boolean)

    def lower(self) -> Column:
        fn = pc.ascii_lower if _is_ascii(self._arr) else pc.utf8_lower
        return self._s(fn(self._arr))

    def upper(self) -> Column:
        """Upper case by simple Unicode case mapping (one code point each: ß -> ẞ)."""
        fn = pc.ascii_upper if _is_ascii(self._arr) else pc.utf8_upper
        return self._s(fn(self._arr))

    def strip(self) -> Column:
        return self._s(pc.utf8_trim_whitespace(self._arr))

    def lstrip(self) -> Column:
        return self._s(pc.utf8_ltrim_whitespace(self._arr))

    def rstrip(self) -> Column:
        return self._s(pc.utf8_rtrim_whitespace(self._arr))

    def length(self) -> Column:
        return _as_int64(self._col, pc.utf8_length(self._arr))

    def slice(self, start: int | None = None, stop: int | None = None) -> Column:
        """Substrings ``s[start:stop]`` (code points, negative indices allowed)."""
        arr = pc.utf8_slice_codeunits(self._arr, start=start or 0,
                                      stop=stop if stop is not None else 2**62)
        return self._s(arr)

    def split(self, sep: str | None = None, maxsplit: int = -1) -> Column:
        """Lists of parts; ``sep=None`` splits on runs of whitespace as ``str.split``."""
        limit = None if maxsplit is None or maxsplit < 0 else maxsplit
        if sep is None:  # as str.split(): no empty parts at the ends
            stripped = pc.utf8_ltrim_whitespace(self._arr)
            arr = pc.utf8_split_whitespace(stripped, max_splits=limit)
            arr = _drop_empty_parts(arr)
        else:
            if sep == "":
                raise ValueError("split(): empty separator")
            arr = pc.split_pattern(self._arr, pattern=sep, max_splits=limit)
        return self._col._derived(arr, dt.List(dt.string))

    def replace(self, old: str, new: str, regex: bool = False) -> Column:
        fn = pc.replace_substring_regex if regex else pc.replace_substring
        return self._s(fn(self._arr, pattern=old, replacement=new))

    def replace_re(self, pattern: str, repl: str) -> Column:
        return self.replace(pattern, repl, regex=True)

    def find(self, sub: str) -> Column:
        """Index of the first ``sub`` in each string, -1 if absent (as ``str.find``)."""
        if pc.all(pc.string_is_ascii(self._arr)).as_py() in (True, None):
            return _as_int64(self._col, pc.find_substring(self._arr, pattern=sub))
        # Arrow reports byte offsets; count code points of the prefix instead.
        byte = pc.find_substring(self._arr, pattern=sub)
        prefix = pc.binary_slice(pc.cast(self._arr, pa.binary()), 0, 2**31 - 1)
        out = [-1 if b is None or b < 0 else len(p[:b].decode("utf-8"))
               for b, p in zip(byte.to_pylist(), prefix.to_pylist())]
        arr = pa.array(out, type=pa.int64(), mask=pc.is_null(self._arr).to_numpy(
            zero_copy_only=False))
        return self._col._derived(arr, dt.int64)

    def count(self, sub: str) -> Column:
        return _as_int64(self._col, pc.count_substring(self._arr, pattern=sub))

    def startswith(self, prefix: str) -> Column:
        return self._b(pc.starts_with(self._arr, pattern=prefix))

    def endswith(self, suffix: str) -> Column:
        return self._b(pc.ends_with(self._arr, pattern=suffix))

    def contains(self, sub: str) -> Column:
        return self._b(pc.match_substring(self._arr, pattern=sub))

    def match_re(self, pattern: str) -> Column:
        """True where the regex matches at the start of the string (as ``re.match``)."""
        re.compile(pattern)  # a clear error for an invalid pattern
        return self._b(pc.match_substring_regex(self._arr, pattern=f"^(?:{pattern})"))

    def contains_re(self, pattern: str) -> Column:
        """True where the regex matches anywhere (as ``re.search``)."""
        re.compile(pattern)
        return self._b(pc.match_substring_regex(self._arr, pattern=pattern))

    def isalpha(self) -> Column:
        return self._b(pc.utf8_is_alpha(self._arr))

    def isalnum(self) -> Column:
        return self._b(pc.utf8_is_alnum(self._arr))

    def isdigit(self) -> Column:
        return self._b(pc.utf8_is_digit(self._arr))

    def isnumeric(self) -> Column:
        return self._b(pc.utf8_is_numeric(self._arr))

    def isspace(self) -> Column:
        return self._b(pc.utf8_is_space(self._arr))

    def islower(self) -> Column:
        return self._b(pc.utf8_is_lower(self._arr))

    def isupper(self) -> Column:
        return self._b(pc.utf8_is_upper(self._arr))

    def cat(self, others: Column | str, sep: str = "") -> Column:
        rhs = others._data if isinstance(others, Column) else others
        return self._s(pc.binary_join_element_wise(self._arr, rhs, sep))


def list_parts(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Offsets starting at 0 and the flat child values of a (possibly sliced) list array."""
    offsets = arr.offsets
    if len(offsets) and offsets[0].as_py() != 0:
        offsets = pc.subtract(offsets, offsets[0])
    return offsets, arr.flatten()


def map_parts(arr: pa.MapArray) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Offsets starting at 0, keys and items of a (possibly sliced) map array."""
    offsets = arr.offsets
    start = offsets[0].as_py() if len(offsets) else 0
    end = offsets[-1].as_py() if len(offsets) else 0
    if start:
        offsets = pc.subtract(offsets, offsets[0])
    return offsets, arr.keys.slice(start, end - start), arr.items.slice(start, end - start)


def rebuild_list(col: Column, values: pa.Array, item: dt.DType) -> Column:
    """Lists with ``col``'s offsets and nulls around new flat ``values``."""
    arr = col._data
    offsets, _ = list_parts(arr)
    mask = arr.is_null() if arr.null_count else None
    out = pa.ListArray.from_arrays(offsets, values, mask=mask)
    return col._derived(out, dt.List(item))


@register_accessor(Column, "list", dt.is_list, "a list column")
class ListMethods:
    """Vectorised list functions (``col.list``)."""

    def __init__(self, col: Column):
        self._col = col
        self._arr = col._data

    def length(self) -> Column:
        return _as_int64(self._col, pc.list_value_length(self._arr))

    def slice(self, start: int = 0, stop: int | None = None) -> Column:
        if start < 0 or (stop is not None and stop < 0):
            raise ValueError("list.slice(): start and stop must be non-negative")
        arr = pc.list_slice(self._arr, start, stop)
        return self._col._derived(arr, self._col.dtype.with_null(False))

    def get(self, i: int) -> Column:
        """Element ``i`` (>= 0) of each list, null where the list is shorter or null."""
        if i < 0:
            raise ValueError("list.get(): index must be non-negative")
        one = pc.list_slice(self._arr, i, i + 1)
        has = pc.equal(pc.list_value_length(one), 1).fill_null(False)
        pos = pc.subtract(pc.cumulative_sum(pc.cast(has, pa.int64())), 1)
        pos = pc.if_else(has, pos, pa.scalar(None, pa.int64()))
        arr = one.flatten().take(pos)
        return Column(arr, self._col.dtype.item_dtype.with_null())

    def vmap(self, fn: Callable[[Column], Column]) -> Column:
        """Apply a column function to all items at once, keeping the list structure."""
        flat = Column(self._arr.flatten(), self._col.dtype.item_dtype)
        out = fn(flat)
        if not isinstance(out, Column) or len(out) != len(flat):
            raise ValueError("list.vmap(): the function must return a Column with one value "
                             "per list item")
        return rebuild_list(self._col, out._data, out.dtype)

    def join(self, sep: str) -> Column:
        if not dt.is_string(self._col.dtype.item_dtype):
            raise TypeError("list.join() needs lists of strings")
        return self._col._derived(pc.binary_join(self._arr, sep), dt.string)

    def flatten(self) -> Column:
        return Column(self._arr.flatten(), self._col.dtype.item_dtype)


@register_accessor(Column, "maps", dt.is_map, "a map column")
class MapMethods:
    """Map functions (``col.maps``)."""

    def __init__(self, col: Column):
        self._col = col
        self._arr = col._data

    def _lists(self, part: int, item: dt.DType) -> Column:
        offsets, keys, items = map_parts(self._arr)
        mask = self._arr.is_null() if self._arr.null_count else None
        arr = pa.ListArray.from_arrays(offsets, (keys, items)[part], mask=mask)
        return self._col._derived(arr, dt.List(item))

    def keys(self) -> Column:
        return self._lists(0, self._col.dtype.key_dtype)

    def values(self) -> Column:
        return self._lists(1, self._col.dtype.item_dtype)

    def get(self, key, default=None) -> Column:
        """The value under ``key`` in each map, ``default`` where it is missing."""
        t = self._col.dtype
        arr = pc.map_lookup(self._arr, pa.scalar(key, dt.to_arrow_type(t.key_dtype)), "first")
        out = Column(arr, t.item_dtype.with_null())
        return out if default is None else out.fill_null(default)
