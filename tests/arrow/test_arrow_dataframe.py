"""DataFrame operations on seeded random frames with nulls, checked against pandas."""

import pandas as pd
import pytest

import ember.arrow as ea
from ember.arrow import dtypes as dt
from ember.arrow import me


@pytest.fixture
def assert_frame(same):
    """``assert_frame(ours, theirs)``: same column names, lengths and values as pandas."""

    def check(ours: ea.DataFrame, theirs: pd.DataFrame) -> None:
        assert ours.columns == list(theirs.columns)
        assert len(ours) == len(theirs)
        for name in ours.columns:
            same(ours[name].to_pylist(), theirs[name].astype(object).tolist())

    return check


def test_construction_and_access(frames, assert_frame):
    df, pdf = frames
    assert df.columns == ["a", "b", "k", "s"] and len(df) == len(pdf) and df.shape[1] == 4
    assert df["a"] is df.a
    assert isinstance(df[0], tuple) and df[0].k == pdf["k"][0]
    assert df.dtype.get("b") == dt.Float64(nullable=True)
    assert_frame(df, pdf)
    rows = ea.dataframe([(1, "x"), (2, None)],
                        dtype=dt.Struct([dt.Field("n", dt.int64),
                                         dt.Field("t", dt.String(nullable=True))]))
    assert rows.to_pylist() == [(1, "x"), (2, None)]
    assert ea.dataframe([(1, "x")], columns=["n", "t"])["t"].to_pylist() == ["x"]


def test_filter_and_arithmetic_match_pandas(frames, assert_frame, same):
    df, pdf = frames
    ours = df[(df.a > 0) & (df.b < 0.5)]
    mask = ((pdf.a > 0) & (pdf.b < 0.5)).fillna(False)
    theirs = pdf[(pdf.a > 0).fillna(False) & (pdf.b < 0.5).fillna(False)]
    assert len(mask) == len(pdf)
    assert_frame(ours, theirs.reset_index(drop=True))
    ours["c"] = ours.a * 2 + ours.b
    same(ours["c"].to_pylist(), (theirs.a * 2 + theirs.b).tolist())
    # where() and filter() with an expression give the same rows
    assert df.where(me["a"] > 0, me["b"] < 0.5).to_pylist() == ours.drop("c").to_pylist()
    assert df.filter(me["a"] > 0).to_pylist() == df[df.a > 0].to_pylist()


def test_symbolic_expressions(frames, same):
    df, pdf = frames
    assert df[me["a"] > 3].to_pylist() == df[df.a > 3].to_pylist()
    out = df.select("k", twice=me["a"] * 2, low=me["s"].str.lower())
    assert out.columns == ["k", "twice", "low"]
    same(out["twice"].to_pylist(), (pdf.a * 2).tolist())
    same(out["low"].to_pylist(), pdf.s.str.lower().tolist())
    assert repr(me["a"] > 3) == "me['a'].__gt__(3)"
    with pytest.raises(KeyError, match="unknown column 'zz'"):
        df[me["zz"] > 1]


def test_sort_matches_pandas(frames, assert_frame):
    df, pdf = frames
    ours = df.sort(by=["k", "a"], ascending=[True, False])
    theirs = pdf.sort_values(["k", "a"], ascending=[True, False], na_position="last",
                             kind="stable").reset_index(drop=True)
    assert_frame(ours, theirs)
    ours = df.sort(by="b", na_position="first")
    theirs = pdf.sort_values("b", na_position="first", kind="stable").reset_index(drop=True)
    assert_frame(ours, theirs)


@pytest.mark.parametrize("fn", ["sum", "mean", "min", "max", "count"])
def test_groupby_agg_matches_pandas(frames, fn, assert_frame):
    df, pdf = frames
    ours = df.select("k", "a", "b").groupby("k", sort=True).agg(fn)
    g = pdf[["k", "a", "b"]].groupby("k", sort=True)
    theirs = (g.sum(min_count=1) if fn == "sum" else getattr(g, fn)()).reset_index()
    assert_frame(ours, theirs)


def test_groupby_list_and_multi(frames):
    df, pdf = frames
    ours = df.groupby(["k"], sort=True).agg({"a": ["list", "max"], "s": "count"})
    assert ours.columns == ["k", "a.list", "a.max", "s"]
    for k, lst, mx, cnt in ours:
        sub = pdf[pdf.k == k]
        assert lst == [None if v is pd.NA else v for v in sub.a.astype(object)]
        assert cnt == sub.s.count()
        assert mx == (None if sub.a.count() == 0 else sub.a.max())
    assert df.groupby("k").size()["size"].sum() == len(df)
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        df.groupby("k").agg("median")
    with pytest.raises(TypeError, match="column 's'"):
        df.groupby("k").agg({"s": "sum"})
    with pytest.raises(KeyError, match="unknown column 'nope'"):
        df.groupby("nope")


def test_groupby_drops_null_keys_like_pandas(frames, assert_frame):
    df, pdf = frames
    ours = df.select("s", "k").groupby("s", sort=True).sum()
    theirs = pdf[["s", "k"]].groupby("s", sort=True).sum().reset_index()
    assert_frame(ours, theirs)


@pytest.mark.parametrize("how", ["inner", "left"])
def test_join_matches_pandas(frames, how, assert_frame):
    df, pdf = frames
    right = ea.dataframe({"k": [0, 1, 1, 3, 9], "w": [10, 11, 12, 13, 19],
                          "s": ["r0", "r1", "r1b", "r3", "r9"]})
    pright = right.to_pandas()
    ours = df.join(right, on="k", how=how)
    theirs = pdf.merge(pright, on="k", how=how, suffixes=("_x", "_y"))
    assert_frame(ours, theirs)
    with pytest.raises(ValueError, match="how"):
        df.join(right, on="k", how="outer")


def test_nulls_dedup_and_fill(frames, assert_frame, same):
    df, pdf = frames
    assert_frame(df.drop_null(), pdf.dropna().reset_index(drop=True))
    assert_frame(df.drop_duplicates(subset=["k", "s"]),
                 pdf.drop_duplicates(subset=["k", "s"]).reset_index(drop=True))
    assert_frame(df.drop_duplicates(subset=["k"], keep="last"),
                 pdf.drop_duplicates(subset=["k"], keep="last").reset_index(drop=True))
    filled = df.fill_null({"a": 0, "s": "?"})
    assert filled["a"].null_count == 0 and filled["a"].dtype == dt.int64
    same(filled["s"].to_pylist(), pdf.s.fillna("?").tolist())
    with pytest.raises(TypeError, match="column 'a'"):
        df.fill_null("text")


def test_describe_matches_pandas(frames, same):
    df, pdf = frames
    ours = df.describe()
    theirs = pdf[["a", "b", "k"]].astype("float64").describe()
    assert ours["metric"].to_pylist() == list(theirs.index)
    for c in ["a", "b", "k"]:
        same(ours[c].to_pylist(), theirs[c].tolist())


def test_column_get_set_and_errors(frames):
    df, _ = frames
    df = df.copy()
    df["z"] = df.k + 1
    df["one"] = 1
    assert df["one"].to_pylist() == [1] * len(df)
    del df["one"]
    assert "one" not in df and "z" in df
    with pytest.raises(ValueError, match="column 'bad' has 2 rows"):
        df["bad"] = [1, 2]
    with pytest.raises(KeyError, match="unknown column 'nope'"):
        df["nope"]
    with pytest.raises(KeyError, match="unknown column 'nope'"):
        df.select("a", "nope")
    with pytest.raises(ValueError, match="different lengths"):
        ea.dataframe({"a": [1, 2], "b": [1]})
    with pytest.raises(TypeError, match="column 'b'"):
        ea.dataframe({"a": [1], "b": [1, "x"]})
    with pytest.raises(AttributeError):
        _ = df.not_a_column


def test_frame_arithmetic():
    df = ea.dataframe({"x": [1, 2], "y": [3.0, 4.0]})
    assert (df * 2).to_pylist() == [(2, 6.0), (4, 8.0)]
    assert (df + df).to_pylist() == [(2, 6.0), (4, 8.0)]
    assert (df > 1.5).to_pylist() == [(False, True), (True, True)]
    assert (-df).to_pylist() == [(-1, -3.0), (-2, -4.0)]


def test_map_and_transform():
    df = ea.dataframe({"x": [1, 2, 3], "y": [10, 20, None]})
    assert df.map(lambda x, y: x + (y or 0)).to_pylist() == [11, 22, 3]
    assert df.map(lambda x, y: x + y, na_action="ignore").to_pylist() == [11, 22, None]
    assert df.map({1: "a"}, columns=["x"]).to_pylist() == ["a", None, None]
    out = df.transform(lambda x, y: x * 10 + y.fill_null(0))
    assert out.to_pylist() == [20, 40, 30]
    out = df.transform(lambda xs: {"sq": [v * v for v in xs]}, format="python",
                       columns=["x"])
    assert isinstance(out, ea.DataFrame) and out["sq"].to_pylist() == [1, 4, 9]
    out = df.transform(lambda x: x * 2, format="torch", columns=["x"])
    assert out.to_pylist() == [2, 4, 6]
    with pytest.raises(ValueError, match="returned 1 rows"):
        df.transform(lambda x, y: [1])


def test_head_tail_iteration_repr():
    df = ea.dataframe({"x": list(range(20))})
    assert df.head(3).to_pylist() == [(0,), (1,), (2,)]
    assert [r.x for r in df.tail(2)] == [18, 19]
    text = repr(df)
    assert "count: 20" in text and "..." in text


def test_filter_defers_columns_until_read():
    df = ea.dataframe({"x": [1, 2, 3, 4], "s": ["a", "b", None, "d"]})
    out = df[df.x > 1]
    assert len(out) == 3 and out["s"].is_lazy and out["x"].is_lazy
    assert out["x"].to_pylist() == [2, 3, 4]
    assert out["s"].is_lazy  # still untouched
    assert out["s"].to_pylist() == ["b", None, "d"] and not out["s"].is_lazy
    masked = df[ea.column([True, None, False, True])]  # a null mask entry drops the row
    assert masked.to_pylist() == [(1, "a"), (4, "d")]


def test_errors_name_the_column():
    df = ea.dataframe({"a": [1, 2]})
    with pytest.raises(ValueError, match="unknown column 'b'"):  # also a KeyError
        df.sort("b")
    with pytest.raises(ea.ColumnNotFoundError):
        df.groupby("b")
    with pytest.raises(TypeError, match="column 'a': .*not fit dtype int64"):
        ea.dataframe({"a": ["x"]}, dtype=dt.Struct([dt.Field("a", dt.int64)]))
    with pytest.raises(TypeError, match="column 'a': .*not nullable"):
        ea.dataframe({"a": [1, None]}, dtype=dt.Struct([dt.Field("a", dt.int64)]))
    with pytest.raises(TypeError, match="column 'a'"):
        ea.dataframe({"a": ["x"]}).cast(dt.Struct([dt.Field("a", dt.int64)]))
    with pytest.raises(ValueError, match="do not match dtype fields"):
        ea.dataframe({"a": [1]}, dtype=dt.Struct([dt.Field("z", dt.int64)]))


def test_join_null_keys_never_match():
    left = ea.dataframe({"k": [1, None], "x": [10, 20]})
    right = ea.dataframe({"k": [1, None], "y": ["a", "b"]})
    assert left.join(right, on="k").to_pylist() == [(1, 10, "a")]
    assert left.join(right, on="k", how="left").to_pylist() == [(1, 10, "a"), (None, 20, None)]
