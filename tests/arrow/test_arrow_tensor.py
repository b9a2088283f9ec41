"""to_tensor / from_tensor: TorchArrow's conventions, zero-copy checks, round trips."""

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.nn.utils.rnn import pad_sequence

import ember.arrow as ea
from ember.arrow import dtypes as dt


@pytest.mark.parametrize("dtype, tdtype", [(dt.int8, torch.int8), (dt.int32, torch.int32),
                                           (dt.int64, torch.int64), (dt.float32, torch.float32),
                                           (dt.float64, torch.float64)])
def test_numeric_to_tensor_is_zero_copy(dtype, tdtype):
    col = ea.column(list(range(10)), dtype)
    t = col.to_tensor()
    assert t.dtype == tdtype and t.tolist() == list(range(10))
    buf = col.to_arrow().buffers()[1]
    assert t.data_ptr() == buf.address
    # a sliced column still shares memory: the pointer moves by the slice offset
    part = col[3:7].to_tensor()
    assert part.data_ptr() == buf.address + 3 * t.element_size()
    assert part.tolist() == [3, 4, 5, 6]


def test_zero_copy_from_numpy_through_to_tensor():
    arr = np.arange(1000, dtype=np.float32)
    col = ea.column(arr)
    assert col.to_tensor().data_ptr() == arr.ctypes.data


def test_nullable_gives_with_presence():
    col = ea.column([1.5, None, 3.0])
    out = col.to_tensor()
    assert isinstance(out, ea.WithPresence)
    assert out.presence.tolist() == [True, False, True]
    assert out.values.tolist() == [1.5, 0.0, 3.0]  # null slots hold the default value
    bools = ea.column([True, None]).to_tensor()
    assert bools.values.dtype == torch.bool and bools.presence.tolist() == [True, False]


def test_list_gives_packed_list_and_pad_sequence():
    values = [[1, 2, 3], [4], [], [5, 6]]
    col = ea.column(values)
    packed = col.to_tensor()
    assert isinstance(packed, ea.PackedList)
    assert packed.offsets.dtype == torch.int32
    assert packed.offsets.tolist() == [0, 3, 4, 4, 6]
    assert packed.values.tolist() == [1, 2, 3, 4, 5, 6]
    ref = pad_sequence([torch.tensor(v, dtype=torch.int64) for v in values],
                       batch_first=True, padding_value=-1)
    assert torch.equal(col.to_tensor(ea.PadSequence(padding_value=-1)), ref)
    ref_t = pad_sequence([torch.tensor(v, dtype=torch.int64) for v in values])
    assert torch.equal(col.to_tensor(ea.PadSequence(batch_first=False)), ref_t)
    sliced = col[1:].to_tensor()
    assert sliced.offsets.tolist() == [0, 1, 1, 3] and sliced.values.tolist() == [4, 5, 6]


def test_struct_frame_and_strings():
    df = ea.dataframe({"id": [1, 2], "name": ["a", None], "score": [0.5, None],
                       "tags": [[1], [2, 3]]})
    out = df.to_tensor()
    assert out._fields == ("id", "name", "score", "tags")
    assert out.id.tolist() == [1, 2]
    assert out.name == ["a", None]
    assert isinstance(out.score, ea.WithPresence)
    assert isinstance(out.tags, ea.PackedList)
    padded = df.to_tensor({"tags": ea.PadSequence()})
    assert padded.tags.tolist() == [[1, 0], [2, 3]]
    with pytest.raises(KeyError, match="unknown column"):
        df.to_tensor({"nope": ea.PadSequence()})


def test_map_and_dates():
    m = ea.column([{"a": 1.0}, {"b": 2.0, "c": 3.0}])
    out = m.to_tensor()
    assert isinstance(out, ea.PackedMap)
    assert out.offsets.tolist() == [0, 1, 3] and out.keys == ["a", "b", "c"]
    assert out.values.tolist() == [1.0, 2.0, 3.0]
    import datetime

    d = ea.column([datetime.date(1970, 1, 3)])
    assert d.to_tensor().tolist() == [2]


def test_from_tensor_wraps_memory():
    t = torch.arange(10, dtype=torch.float32)
    col = ea.from_tensor(t)
    assert col.dtype == dt.float32 and col.to_pylist() == t.tolist()
    assert col.to_arrow().buffers()[1].address == t.data_ptr()  # no copy, no Python list
    values = torch.tensor([1, 2, 3])
    wp = ea.from_tensor(ea.WithPresence(values, torch.tensor([True, False, True])))
    assert wp.dtype == dt.Int64(nullable=True) and wp.to_pylist() == [1, None, 3]
    assert wp.to_arrow().buffers()[1].address == values.data_ptr()


@pytest.mark.parametrize("values, dtype", [
    ([1, 2, 3], None),
    ([1.5, None], None),
    ([[1, 2], [], [3]], None),
    ([[1.0, None], None], None),
    ([{"k": 1}, {"a": 2, "b": 3}], None),
    ([True, False], None),
])
def test_to_tensor_from_tensor_roundtrip(values, dtype):
    col = ea.column(values, dtype)
    back = ea.from_tensor(col.to_tensor(), col.dtype)
    assert back.dtype == col.dtype and back.to_pylist() == col.to_pylist()


def test_from_tensor_frames_and_2d():
    df = ea.dataframe({"x": [1, 2], "y": [0.5, 1.5]})
    back = ea.from_tensor(df.to_tensor())
    assert isinstance(back, ea.DataFrame) and back.to_pylist() == df.to_pylist()
    grid = ea.from_tensor(torch.arange(6).reshape(3, 2))
    assert grid.dtype == dt.List(dt.int64) and grid.to_pylist() == [[0, 1], [2, 3], [4, 5]]


def test_from_tensor_errors():
    with pytest.raises(TypeError, match="integer tensor"):
        ea.from_tensor(ea.PackedList(torch.tensor([0.0, 1.0]), torch.tensor([1])))
    with pytest.raises(TypeError, match="bool tensor"):
        ea.from_tensor(ea.WithPresence(torch.tensor([1]), torch.tensor([1])))
    with pytest.raises(ValueError, match="1-D"):
        ea.from_tensor(torch.zeros(2, 2, 2))
    with pytest.raises(TypeError, match="unsupported"):
        ea.from_tensor(torch.zeros(2, dtype=torch.complex64))


def test_to_tensor_validates():
    with pytest.raises(TypeError, match="PadSequence"):
        ea.column(["a"]).to_tensor(ea.PadSequence())
    with pytest.raises(TypeError, match="Column or DataFrame"):
        ea.to_tensor(pa.array([1]))


def test_from_arrow_table_gives_plain_tensors_for_null_free_columns():
    table = pa.table({"x": np.arange(5.0), "y": pa.array([1, None, 3, 4, 5])})
    df = ea.from_arrow(table)  # Arrow marks both fields nullable; only y holds a null
    assert df.dtype.get("x") == dt.float64 and df.dtype.get("y") == dt.Int64(nullable=True)
    out = df.to_tensor()
    assert isinstance(out.x, torch.Tensor)
    assert out.x.data_ptr() == table.column("x").chunk(0).buffers()[1].address
    assert isinstance(out.y, ea.WithPresence)
    declared = ea.from_arrow(table, dt.Struct([dt.Field("x", dt.Float64(nullable=True)),
                                               dt.Field("y", dt.Int64(nullable=True))]))
    assert isinstance(declared.to_tensor().x, ea.WithPresence)


def test_roundtrips_hold_for_random_nested_data():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    ints = st.one_of(st.none(), st.integers(-2**31, 2**31 - 1))
    values = st.one_of(
        st.lists(ints, min_size=1, max_size=20),
        st.lists(st.one_of(st.none(), st.lists(ints, max_size=5)), min_size=1, max_size=20),
        st.lists(st.one_of(st.none(), st.floats(allow_nan=False, width=32)), min_size=1,
                 max_size=20),
    )

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(values)
    def check(data):
        try:
            col = ea.column(data)
        except ValueError as e:  # nothing to infer a (nested) dtype from, e.g. [[], None]
            assert "pass dtype=" in str(e)
            return
        assert col.to_pylist() == data
        assert ea.from_tensor(col.to_tensor(), col.dtype).to_pylist() == data
        assert ea.from_arrow(col.to_arrow()).to_pylist() == data
        if not dt.is_list(col.dtype):
            assert ea.from_pandas(col.to_pandas(), col.dtype).to_pylist() == data

    check()
