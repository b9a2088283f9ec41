"""What higher modules attach to Column and DataFrame when ember.arrow is imported: accessors,
to_pandas/to_tensor, describe, operator deferral, and the converters the constructors use."""

import sys

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
import torch

import ember.arrow as ea
from ember.arrow import dtypes as dt
from ember.arrow.accessors import ListMethods, MapMethods, StringMethods


@pytest.mark.parametrize("name, methods, data, needs", [
    ("str", StringMethods, ["a", None], "a string column"),
    ("list", ListMethods, [[1], None], "a list column"),
    ("maps", MapMethods, [{"a": 1}, None], "a map column"),
])
def test_accessors_check_the_dtype(name, methods, data, needs):
    assert getattr(ea.Column, name) is methods
    assert isinstance(getattr(ea.column(data), name), methods)
    with pytest.raises(TypeError, match=rf"^\.{name} needs {needs}, got int64$"):
        getattr(ea.column([1, 2]), name)


def test_conversion_methods_on_column_and_frame():
    col = ea.column([1, None])
    assert col.to_pandas().tolist()[0] == 1 and col.to_pandas().isna().tolist() == [False, True]
    assert isinstance(col.to_tensor(), ea.WithPresence)
    df = ea.dataframe({"a": [1, 2], "s": ["x", "y"]})
    assert df.to_pandas().to_dict("list") == {"a": [1, 2], "s": ["x", "y"]}
    out = df.to_tensor()
    assert out.a.tolist() == [1, 2] and out.s == ["x", "y"]


def test_column_constructor_takes_pandas_and_torch_data():
    assert ea.column(pd.Series([1, None], dtype="Int64")).dtype == dt.Int64(nullable=True)
    assert ea.column(pd.Series([1, 2]), dt.float32).to_pylist() == [1.0, 2.0]
    col = ea.column(torch.tensor([1, 2]), dt.float64)
    assert col.dtype == dt.float64 and col.to_pylist() == [1.0, 2.0]
    assert ea.column(torch.tensor([[1, 2], [3, 4]])).to_pylist() == [[1, 2], [3, 4]]


def test_frame_constructor_takes_pandas_polars_and_arrow_data():
    expected = [(1, "x"), (None, "y")]
    for data in (pd.DataFrame({"a": pd.array([1, None], dtype="Int64"), "s": ["x", "y"]}),
                 pl.DataFrame({"a": [1, None], "s": ["x", "y"]}),
                 pa.table({"a": [1, None], "s": ["x", "y"]}),
                 pa.record_batch({"a": [1, None], "s": ["x", "y"]})):
        assert ea.dataframe(data).to_pylist() == expected, type(data)
    nulls = ea.dataframe(pa.array([{"a": 1}, None]))
    assert isinstance(nulls, ea.Column) and nulls.to_pylist()[1] is None


def test_setitem_and_transform_convert_pandas_and_torch_results():
    df = ea.dataframe({"a": [1, 2]})
    df["b"] = pd.Series([5, 6])
    assert df["b"].to_pylist() == [5, 6]
    assert ea.column([1, 2]).transform(lambda c: torch.tensor([3, 4])).to_pylist() == [3, 4]
    out = ea.column([1.0, None]).transform(lambda t: t, format="torch")
    assert out.dtype == dt.Float32(nullable=True) and out.to_pylist() == [1.0, None]


def test_column_describe_is_a_frame():
    out = ea.column([1.0, 2.0, 4.0]).describe()
    assert isinstance(out, ea.DataFrame) and out.columns == ["metric", "value"]
    assert out["metric"].to_pylist()[:2] == ["count", "mean"]
    assert out["value"].to_pylist()[:2] == [3.0, pytest.approx(7 / 3)]


def test_column_operators_with_a_frame_apply_per_column():
    df = ea.dataframe({"a": [1, 2], "b": [3, 4]})
    out = ea.column([10, 20]) + df
    assert isinstance(out, ea.DataFrame) and out.to_pylist() == [(11, 13), (22, 24)]
    assert (ea.column(["x"]) == ea.dataframe({"s": ["x"]})).to_pylist() == [(True,)]
    with pytest.raises(TypeError, match="operator add is not supported"):
        ea.column([1]) + ea.me["a"]


def test_infer_dtype():
    assert dt.infer_dtype([1, None]) == dt.Int64(nullable=True)
    assert dt.infer_dtype([1.5]) == dt.float32
    assert dt.infer_dtype([{"a": [1.0]}]) == dt.Map(dt.string, dt.List(dt.float32))
    assert dt.infer_dtype(pa.array([1])) == dt.int64
    with pytest.raises(ValueError, match="^data: cannot infer a dtype from 1 value"):
        dt.infer_dtype([None])


@pytest.mark.parametrize("module,call", [("pandas", "from_pandas"), ("polars", "from_polars")])
def test_missing_optional_dependency_names_the_extra(monkeypatch, module, call):
    from ember.arrow import interop

    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=rf"pip install 'ember-arrow\[{module}\]'"):
        getattr(interop, call)(object())
