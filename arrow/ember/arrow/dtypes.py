"""Column data types (TorchArrow's names), each nullable, and their mapping to Arrow types.

A dtype is an immutable value: ``Int64(nullable=True)``, ``List(string)``,
``Struct([Field("a", int64)])``. Arrow arrays carry no per-array nullability, so a Column
keeps its dtype beside its ``pyarrow.Array``. A Struct's rows are named tuples
(``struct_tuple_type``).
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import re
import typing as ty
from collections import namedtuple
from dataclasses import dataclass

import pyarrow as pa

from ember.arrow._infer import infer_array

__all__ = [
    "DType", "Boolean", "Int8", "Int16", "Int32", "Int64", "Float32", "Float64", "String",
    "Date", "Timestamp", "List", "Map", "Struct", "Field",
    "boolean", "int8", "int16", "int32", "int64", "float32", "float64", "string", "date",
    "timestamp",
    "is_boolean", "is_integer", "is_floating", "is_numerical", "is_boolean_or_numerical",
    "is_string", "is_list", "is_map", "is_struct", "is_temporal", "is_primitive",
    "to_arrow_type", "from_arrow_type", "dtype_of_array", "infer_dtype", "common_dtype",
]


@dataclass(frozen=True)
class DType:
    """Base of all dtypes; ``nullable`` says whether the column may hold nulls."""

    nullable: bool = False
    name: ty.ClassVar[str] = "dtype"

    def with_null(self, nullable: bool = True) -> DType:
        return dataclasses.replace(self, nullable=nullable)

    def __str__(self) -> str:
        return f"{type(self).__name__}(nullable=True)" if self.nullable else self.name

    __repr__ = __str__


def _primitive(cls_name: str, type_name: str, arrow: pa.DataType) -> type[DType]:
    cls = dataclass(frozen=True, repr=False)(
        type(cls_name, (DType,), {"name": type_name, "__module__": __name__,
                                  "__annotations__": {}, "_arrow": arrow}))
    return cls


Boolean = _primitive("Boolean", "boolean", pa.bool_())
Int8 = _primitive("Int8", "int8", pa.int8())
Int16 = _primitive("Int16", "int16", pa.int16())
Int32 = _primitive("Int32", "int32", pa.int32())
Int64 = _primitive("Int64", "int64", pa.int64())
Float32 = _primitive("Float32", "float32", pa.float32())
Float64 = _primitive("Float64", "float64", pa.float64())
String = _primitive("String", "string", pa.string())
Date = _primitive("Date", "date", pa.date32())


@dataclass(frozen=True, repr=False, init=False)
class Timestamp(DType):
    """Time points; ``unit`` is one of s, ms, us, ns and ``tz`` an optional time zone."""

    unit: str = "us"
    tz: str | None = None
    name: ty.ClassVar[str] = "timestamp"

    def __init__(self, unit: str = "us", tz: str | None = None, nullable: bool = False):
        if unit not in ("s", "ms", "us", "ns"):
            raise ValueError(f"Timestamp unit must be s, ms, us or ns, got {unit!r}")
        object.__setattr__(self, "unit", unit)
        object.__setattr__(self, "tz", tz)
        object.__setattr__(self, "nullable", nullable)

    def __str__(self) -> str:
        null = ", nullable=True" if self.nullable else ""
        tz = f", tz={self.tz!r}" if self.tz else ""
        return f"Timestamp({self.unit!r}{tz}{null})"

    __repr__ = __str__


@dataclass(frozen=True, repr=False, init=False)
class List(DType):
    """Variable-length lists of ``item_dtype``."""

    item_dtype: DType = None  # type: ignore[assignment]
    name: ty.ClassVar[str] = "List"

    def __init__(self, item_dtype: DType, nullable: bool = False):
        if not isinstance(item_dtype, DType):
            raise TypeError(f"List item_dtype must be a DType, got {item_dtype!r}")
        object.__setattr__(self, "item_dtype", item_dtype)
        object.__setattr__(self, "nullable", nullable)

    def __str__(self) -> str:
        null = ", nullable=True" if self.nullable else ""
        return f"List({self.item_dtype}{null})"

    __repr__ = __str__


@dataclass(frozen=True, repr=False, init=False)
class Map(DType):
    """Maps from ``key_dtype`` to ``item_dtype`` (Arrow map: a list of key/item pairs)."""

    key_dtype: DType = None  # type: ignore[assignment]
    item_dtype: DType = None  # type: ignore[assignment]
    name: ty.ClassVar[str] = "Map"

    def __init__(self, key_dtype: DType, item_dtype: DType, nullable: bool = False):
        for arg, v in (("key_dtype", key_dtype), ("item_dtype", item_dtype)):
            if not isinstance(v, DType):
                raise TypeError(f"Map {arg} must be a DType, got {v!r}")
        object.__setattr__(self, "key_dtype", key_dtype)
        object.__setattr__(self, "item_dtype", item_dtype)
        object.__setattr__(self, "nullable", nullable)

    def __str__(self) -> str:
        null = ", nullable=True" if self.nullable else ""
        return f"Map({self.key_dtype}, {self.item_dtype}{null})"

    __repr__ = __str__


@dataclass(frozen=True)
class Field:
    """A named member of a Struct."""

    name: str
    dtype: DType

    def __str__(self) -> str:
        return f"Field({self.name!r}, {self.dtype})"


@dataclass(frozen=True, repr=False, init=False)
class Struct(DType):
    """Named fields; a DataFrame's dtype is a Struct."""

    fields: tuple[Field, ...] = ()
    name: ty.ClassVar[str] = "Struct"

    def __init__(self, fields: ty.Sequence[Field], nullable: bool = False):
        fields = tuple(fields)
        for f in fields:
            if not isinstance(f, Field):
                raise TypeError(f"Struct fields must be Field objects, got {f!r}")
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise ValueError(f"Struct field names must be unique, got {names}")
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "nullable", nullable)

    def get(self, name: str) -> DType:
        for f in self.fields:
            if f.name == name:
                return f.dtype
        raise KeyError(f"no field {name!r} among {[f.name for f in self.fields]}")

    def __str__(self) -> str:
        null = ", nullable=True" if self.nullable else ""
        return f"Struct([{', '.join(str(f) for f in self.fields)}]{null})"

    __repr__ = __str__


boolean, int8, int16, int32, int64 = Boolean(), Int8(), Int16(), Int32(), Int64()
float32, float64, string, date, timestamp = Float32(), Float64(), String(), Date(), Timestamp()

_INTEGERS = (Int8, Int16, Int32, Int64)
_FLOATS = (Float32, Float64)


def is_boolean(t: DType) -> bool:
    return isinstance(t, Boolean)


def is_integer(t: DType) -> bool:
    return isinstance(t, _INTEGERS)


def is_floating(t: DType) -> bool:
    return isinstance(t, _FLOATS)


def is_numerical(t: DType) -> bool:
    return isinstance(t, _INTEGERS + _FLOATS)


def is_boolean_or_numerical(t: DType) -> bool:
    return is_boolean(t) or is_numerical(t)


def is_string(t: DType) -> bool:
    return isinstance(t, String)


def is_list(t: DType) -> bool:
    return isinstance(t, List)


def is_map(t: DType) -> bool:
    return isinstance(t, Map)


def is_struct(t: DType) -> bool:
    return isinstance(t, Struct)


def is_temporal(t: DType) -> bool:
    return isinstance(t, (Date, Timestamp))


def is_primitive(t: DType) -> bool:
    return not isinstance(t, (List, Map, Struct))


# ---------------------------------------------------------------------------- arrow mapping

def to_arrow_type(t: DType) -> pa.DataType:
    """The Arrow type that stores ``t``."""
    if isinstance(t, List):
        return pa.list_(pa.field("item", to_arrow_type(t.item_dtype), t.item_dtype.nullable))
    if isinstance(t, Map):
        return pa.map_(to_arrow_type(t.key_dtype),
                       pa.field("value", to_arrow_type(t.item_dtype), t.item_dtype.nullable))
    if isinstance(t, Struct):
        return pa.struct([pa.field(f.name, to_arrow_type(f.dtype), f.dtype.nullable)
                          for f in t.fields])
    if isinstance(t, Timestamp):
        return pa.timestamp(t.unit, t.tz)
    arrow = getattr(type(t), "_arrow", None)
    if arrow is None:
        raise TypeError(f"dtype {t} has no Arrow type")
    return arrow


_FROM_ARROW: dict[pa.DataType, type[DType]] = {
    pa.bool_(): Boolean, pa.int8(): Int8, pa.int16(): Int16, pa.int32(): Int32,
    pa.int64(): Int64, pa.float32(): Float32, pa.float64(): Float64, pa.string(): String,
    pa.large_string(): String, pa.date32(): Date,
}


def from_arrow_type(t: pa.DataType, nullable: bool = True) -> DType:
    """The dtype for Arrow type ``t``; nested nullability comes from the Arrow fields."""
    if t in _FROM_ARROW:
        return _FROM_ARROW[t](nullable=nullable)
    if pa.types.is_timestamp(t):
        return Timestamp(t.unit, t.tz, nullable=nullable)
    if pa.types.is_map(t):
        return Map(from_arrow_type(t.key_type, False),
                   from_arrow_type(t.item_type, t.item_field.nullable), nullable)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return List(from_arrow_type(t.value_type, t.value_field.nullable), nullable)
    if pa.types.is_struct(t):
        return Struct([Field(f.name, from_arrow_type(f.type, f.nullable)) for f in t], nullable)
    if pa.types.is_dictionary(t):
        return from_arrow_type(t.value_type, nullable)
    raise TypeError(f"Arrow type {t} is not supported; supported: boolean, int8-int64, "
                    "float32/64, string, date32, timestamp, list, map, struct")


def dtype_of_array(arr: pa.Array) -> DType:
    """The tightest dtype of ``arr``: nullable exactly where nulls occur."""
    nullable = arr.null_count > 0
    t = arr.type
    if pa.types.is_map(t):
        return Map(dtype_of_array(arr.keys), dtype_of_array(arr.items), nullable)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return List(dtype_of_array(arr.flatten()), nullable)
    if pa.types.is_struct(t):  # flatten(): a null struct row makes its fields null
        return Struct([Field(t.field(i).name, dtype_of_array(child))
                       for i, child in enumerate(arr.flatten())], nullable)
    return from_arrow_type(t, nullable)


def infer_dtype(values: ty.Sequence) -> DType:
    """Infer a dtype from Python values as TorchArrow does.

    ``[1, 2, None]`` is ``Int64(nullable=True)``, Python floats are float32, dicts are
    maps, lists are lists; an all-None or empty sequence cannot be inferred.
    """
    return dtype_of_array(infer_array(values))


@functools.lru_cache(maxsize=256)
def _tuple_type(names: tuple[str, ...]):
    fixed = []
    for i, n in enumerate(names):
        n = re.sub(r"\W", "_", n)
        if not n or n[0].isdigit() or n.startswith("_") or keyword.iskeyword(n) or n in fixed:
            n = f"f_{i}_{n}" if n else f"f_{i}"
        fixed.append(n)
    return namedtuple("Row", fixed)


def struct_tuple_type(dtype: Struct):
    """The named-tuple class for rows of ``dtype`` (names made valid identifiers)."""
    return _tuple_type(tuple(f.name for f in dtype.fields))


def common_dtype(a: DType, b: DType) -> DType | None:
    """The dtype both ``a`` and ``b`` convert to without loss, or None."""
    nullable = a.nullable or b.nullable
    if a.with_null(False) == b.with_null(False):
        return a.with_null(nullable)
    order = [Boolean, Int8, Int16, Int32, Int64, Float32, Float64]
    if type(a) in order and type(b) in order:
        wider = max(order.index(type(a)), order.index(type(b)))
        return order[wider](nullable=nullable)
    return None
