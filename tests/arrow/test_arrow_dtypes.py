"""dtypes: TorchArrow's inference, Arrow mapping, and round trips of every dtype."""

import datetime as _dt

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import ember.arrow as ea
from ember.arrow import dtypes as dt


@pytest.mark.parametrize("values, expected", [
    ([1, 2, 3], dt.int64),
    ([1, 2, None], dt.Int64(nullable=True)),
    ([1.5, 2], dt.float32),  # TorchArrow infers Python floats as float32
    ([True, None], dt.Boolean(nullable=True)),
    (["a", "b"], dt.string),
    ([[1, 2], [3]], dt.List(dt.int64)),
    ([[1, None], None], dt.List(dt.Int64(nullable=True), nullable=True)),
    ([{"a": 1.0}, {"b": 2.0}], dt.Map(dt.string, dt.float32)),
    ([_dt.date(2020, 1, 1)], dt.date),
    ([_dt.datetime(2020, 1, 1, 12)], dt.timestamp),
])
def test_inference_matches_torcharrow(values, expected):
    assert ea.column(values).dtype == expected


def test_inference_errors():
    with pytest.raises(ValueError, match="all None"):
        ea.column([None, None])
    with pytest.raises(ValueError, match="pass dtype="):
        ea.column([[], None])
    assert ea.column([[], None], dt.List(dt.int64, nullable=True)).to_pylist() == [[], None]
    with pytest.raises(TypeError, match="cannot infer"):
        ea.column([1, "a"])
    with pytest.raises(TypeError, match="not nullable"):
        ea.column([1, None], dt.int64)
    with pytest.raises(TypeError, match="do not fit"):
        ea.column(["x"], dt.int64)


def test_dtype_values_and_predicates():
    assert dt.Int64(nullable=True) == dt.int64.with_null()
    assert dt.int64 != dt.int32
    assert str(dt.Int64(nullable=True)) == "Int64(nullable=True)"
    assert str(dt.List(dt.string)) == "List(string)"
    assert dt.is_numerical(dt.float32) and not dt.is_numerical(dt.boolean)
    assert dt.is_list(dt.List(dt.int8)) and dt.is_map(dt.Map(dt.string, dt.int8))
    s = dt.Struct([dt.Field("a", dt.int64), dt.Field("b", dt.string)])
    assert s.get("b") == dt.string
    with pytest.raises(KeyError):
        s.get("c")
    with pytest.raises(ValueError, match="unique"):
        dt.Struct([dt.Field("a", dt.int64), dt.Field("a", dt.int64)])
    with pytest.raises(ValueError, match="unit"):
        dt.Timestamp("h")
    assert dt.common_dtype(dt.int32, dt.Float64(nullable=True)) == dt.Float64(nullable=True)
    assert dt.common_dtype(dt.string, dt.int64) is None


# one column per dtype, each with a null
ALL_DTYPES = {
    "bool": ([True, None, False], dt.Boolean(nullable=True)),
    "i8": ([1, None, -3], dt.Int8(nullable=True)),
    "i16": ([1, None, 300], dt.Int16(nullable=True)),
    "i32": ([1, None, 70000], dt.Int32(nullable=True)),
    "i64": ([1, None, 2**40], dt.Int64(nullable=True)),
    "f32": ([1.5, None, -2.25], dt.Float32(nullable=True)),
    "f64": ([1.5, None, 1e300], dt.Float64(nullable=True)),
    "str": (["a", None, "ü"], dt.String(nullable=True)),
    "date": ([_dt.date(2020, 1, 2), None, _dt.date(1969, 12, 31)], dt.Date(nullable=True)),
    "ts": ([_dt.datetime(2020, 1, 2, 3, 4, 5), None, _dt.datetime(2001, 1, 1)],
           dt.Timestamp("us", nullable=True)),
    "list": ([[1, 2], None, []], dt.List(dt.int64, nullable=True)),
    "map": ([{"x": 1.0}, None, {}], dt.Map(dt.string, dt.float64, nullable=True)),
    "struct": ([{"p": 1, "q": "a"}, None, {"p": 2, "q": "b"}],
               dt.Struct([dt.Field("p", dt.Int64(nullable=True)),
                          dt.Field("q", dt.String(nullable=True))], nullable=True)),
}


@pytest.fixture
def all_dtypes_frame():
    return ea.dataframe({n: v for n, (v, _) in ALL_DTYPES.items()},
                        dtype=dt.Struct([dt.Field(n, t) for n, (_, t) in ALL_DTYPES.items()]))


def test_every_dtype_roundtrips_through_arrow(all_dtypes_frame):
    table = ea.to_arrow(all_dtypes_frame)
    assert isinstance(table, pa.Table)
    back = ea.from_arrow(table)
    assert back.dtype == all_dtypes_frame.dtype
    assert back.to_pylist() == all_dtypes_frame.to_pylist()
    for name, (values, dtype) in ALL_DTYPES.items():
        col = ea.column(values, dtype)
        again = ea.from_arrow(col.to_arrow())
        assert again.to_pylist() == col.to_pylist(), name


def test_every_dtype_roundtrips_through_pandas(all_dtypes_frame):
    pdf = ea.to_pandas(all_dtypes_frame)
    assert isinstance(pdf, pd.DataFrame)
    assert str(pdf["i64"].dtype) == "Int64"  # nullable ints keep their type
    back = ea.from_pandas(pdf, dtype=all_dtypes_frame.dtype)
    assert back.dtype == all_dtypes_frame.dtype
    assert back.to_pylist() == all_dtypes_frame.to_pylist()


def test_from_pandas_infers_tight_nullability():
    pdf = pd.DataFrame({"a": [1, 2], "b": [1.0, float("nan")], "s": ["x", None]})
    df = ea.from_pandas(pdf)
    assert df.dtype == dt.Struct([dt.Field("a", dt.int64), dt.Field("b", dt.Float64(True)),
                                  dt.Field("s", dt.String(nullable=True))])
    assert df["b"].to_pylist() == [1.0, None]
    s = ea.from_pandas(pd.Series([1, None], dtype="Int32"))
    assert s.dtype == dt.Int32(nullable=True)


def test_from_polars_shares_buffers():
    pdf = pl.DataFrame({"a": [1, 2, 3], "s": ["x", None, "z"], "l": [[1], [2, 3], []]})
    df = ea.from_polars(pdf)
    assert df.dtype == dt.Struct([dt.Field("a", dt.int64), dt.Field("s", dt.String(True)),
                                  dt.Field("l", dt.List(dt.int64))])
    assert df.to_pylist() == [(1, "x", [1]), (2, None, [2, 3]), (3, "z", [])]
    assert ea.dataframe(pdf).to_pylist() == df.to_pylist()
    assert ea.from_polars(pdf["a"]).to_pylist() == [1, 2, 3]
