"""DataPipe integration: rows -> DataFrames, Parquet/CSV loaders, DataLoader2 with workers."""

import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ember.arrow as ea
from ember.arrow import dtypes as dt
from ember.data import DataLoader2, InProcessReadingService, MultiProcessingReadingService
from ember.data.datapipes.iter import IterableWrapper

ROWS = [{"id": i, "name": f"n{i}", "score": i / 2 if i % 3 else None} for i in range(10)]
ROW_TYPE = dt.Struct([dt.Field("id", dt.int64), dt.Field("name", dt.string),
                      dt.Field("score", dt.Float64(nullable=True))])


def add_total(df):
    df = df.copy()
    df["total"] = df.id * 10
    return df


def test_dataframe_functional_batches_rows():
    frames = list(IterableWrapper(ROWS).dataframe(dataframe_size=4))
    assert [len(f) for f in frames] == [4, 4, 2]
    assert all(isinstance(f, ea.DataFrame) for f in frames)
    assert frames[0].columns == ["id", "name", "score"]
    assert [r.id for f in frames for r in f] == list(range(10))
    dtype = dt.Struct([dt.Field("a", dt.int32), dt.Field("b", dt.string)])
    typed = list(IterableWrapper([(1, "x"), (2, "y"), (3, "z")]).dataframe(
        dataframe_size=2, dtype=dtype))
    assert typed[0].dtype == dtype and typed[1].to_pylist() == [(3, "z")]
    named = list(IterableWrapper([(1, 2)]).dataframe(columns=["p", "q"]))
    assert named[0].to_pylist() == [(1, 2)]
    with pytest.raises(TypeError, match="dtype= or columns="):
        list(IterableWrapper([(1, 2)]).dataframe())
    with pytest.raises(ValueError, match="dataframe_size"):
        IterableWrapper(ROWS).dataframe(dataframe_size=0)


def test_frames_pickle_and_survive_dataloader2_workers():
    df = ea.dataframe({"x": [1, None, 3], "l": [[1], [], [2, 3]]})
    lazy = df.x * 2
    assert pickle.loads(pickle.dumps(df)).to_pylist() == df.to_pylist()
    assert pickle.loads(pickle.dumps(lazy)).to_pylist() == [2, None, 6]
    # a shard's batch may hold only None scores: the dtype makes that well defined
    pipe = IterableWrapper(ROWS).sharding_filter().dataframe(
        dataframe_size=3, dtype=ROW_TYPE).map(add_total)
    for rs in (InProcessReadingService(), MultiProcessingReadingService(2, timeout=60)):
        dl = DataLoader2(pipe, reading_service=rs)
        try:
            frames = list(dl)
        finally:
            dl.shutdown()
        ids = sorted(r.id for f in frames for r in f)
        assert ids == list(range(10))
        assert all(f["total"].to_pylist() == [i * 10 for i in f["id"].to_pylist()]
                   for f in frames)


def test_load_parquet_as_df_one_frame_per_row_group(tmp_path):
    table = pa.table({"id": list(range(7)), "s": ["a", None, "c", "d", "e", "f", "g"]})
    path = tmp_path / "part.parquet"
    pq.write_table(table, path, row_group_size=3)
    frames = list(IterableWrapper([str(path)]).load_parquet_as_df())
    assert [len(f) for f in frames] == [3, 3, 1]
    assert [r for f in frames for r in f.to_pylist()] == [
        (i, s) for i, s in zip(table["id"].to_pylist(), table["s"].to_pylist())]
    only = list(IterableWrapper([str(path)]).load_parquet_as_df(columns=["s"]))
    assert only[0].columns == ["s"]
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(RuntimeError, match="bad.parquet"):
        list(IterableWrapper([str(bad)]).load_parquet_as_df())


def test_load_csv_as_df(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,x\n2,\n3,z\n")
    (df,) = list(IterableWrapper([str(path)]).load_csv_as_df())
    assert df.to_pylist() == [(1, "x"), (2, None), (3, "z")]
    dtype = dt.Struct([dt.Field("a", dt.int32), dt.Field("b", dt.String(nullable=True))])
    parts = list(IterableWrapper([str(path)]).load_csv_as_df(dtype=dtype, dataframe_size=2))
    assert [len(p) for p in parts] == [2, 1] and parts[0].dtype == dtype
    with pytest.raises(RuntimeError, match="missing.csv"):
        list(IterableWrapper([str(tmp_path / "missing.csv")]).load_csv_as_df())
