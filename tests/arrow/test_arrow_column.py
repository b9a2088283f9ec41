"""Column: numeric expressions vs pandas, string/list/map methods vs Python, nulls, errors."""

import re

import numpy as np
import pandas as pd
import pytest

import ember.arrow as ea
from ember.arrow import dtypes as dt


@pytest.fixture(params=[0, 1])
def num(request, rand_data):
    data = rand_data(request.param)
    a = ea.column(data["a"], dt.Int64(nullable=True))
    b = ea.column(data["b"], dt.Float64(nullable=True))
    return a, b, pd.Series(data["a"], dtype="Int64"), pd.Series(data["b"], dtype="Float64")


def test_arithmetic_matches_pandas(num, same):
    a, b, pa_, pb = num
    cases = [
        (a + b, pa_ + pb), (a - 3, pa_ - 3), (2 * a, 2 * pa_), (b * b - a, pb * pb - pa_),
        (a / 4, pa_ / 4), (a // 7, pa_ // 7), (a % 7, pa_ % 7), (-b, -pb), (abs(a), pa_.abs()),
        (7 - a, 7 - pa_), (b ** 2, pb ** 2),
    ]
    for ours, theirs in cases:
        same(ours.to_pylist(), theirs.tolist())


def test_comparisons_and_boolean_ops_match_pandas(num, same):
    a, b, pa_, pb = num
    for ours, theirs in [(a > 0, pa_ > 0), (a <= b, pa_ <= pb), (a == 3, pa_ == 3),
                         (a != 3, pa_ != 3)]:
        assert ours.dtype == dt.Boolean(nullable=True)
        same(ours.to_pylist(), theirs.tolist())
    # null propagation: any null operand gives null (pandas' Kleene logic differs for |/&)
    both = (a > 0) & (b < 0)
    exp = [None if x is pd.NA or y is pd.NA else bool(x > 0 and y < 0)
           for x, y in zip(pa_.tolist(), pb.tolist())]
    same(both.to_pylist(), exp)
    same((~(a > 0)).to_pylist(), [None if x is pd.NA else not x > 0 for x in pa_])


def test_expressions_are_lazy_and_fuse():
    a = ea.column([1.0, 2.0, 3.0, 4.0])
    b = ea.column([10.0, -20.0, 30.0, 0.5])
    e = (a * 2 + b).clip(0, 10)
    assert e.is_lazy and len(e) == 4 and e.dtype == dt.float32
    assert e.to_pylist() == [10.0, 0.0, 10.0, 8.5]
    assert not e.is_lazy
    # the tree of the second expression includes the first one's (unevaluated) ops
    f = a * 2
    g = f + 1
    assert g.to_pylist() == [3.0, 5.0, 7.0, 9.0]
    assert f.is_lazy


def test_promotion_follows_torch():
    i32 = ea.column([1, 2], dt.int32)
    assert (i32 + 1).dtype == dt.int32
    assert (i32 + ea.column([1, 2])).dtype == dt.int64
    assert (i32 / 2).dtype == dt.float32
    assert (ea.column([1.0], dt.float64) * 2).dtype == dt.float64
    assert (ea.column([True, False]) + 1).dtype == dt.int64


def test_integer_division_by_null_slot_does_not_raise():
    a = ea.column([7, 8, 9])
    b = ea.column([2, None, 4])  # the null slot holds 0 in the buffer
    assert (a // b).to_pylist() == [3, None, 2]
    assert (a % b).to_pylist() == [1, None, 1]


def test_reductions_match_pandas(num):
    a, b, pa_, pb = num
    assert a.sum() == int(pa_.sum())
    assert a.min() == int(pa_.min()) and a.max() == int(pa_.max())
    assert np.isclose(b.mean(), float(pb.mean()))
    assert np.isclose(b.std(), float(pb.std()))
    assert a.count() == int(pa_.count())


def test_null_handling():
    c = ea.column([1, None, 3])
    assert c.null_count == 1 and c.isnull().to_pylist() == [False, True, False]
    filled = c.fill_null(0)
    assert filled.to_pylist() == [1, 0, 3] and filled.dtype == dt.int64
    assert c.drop_null().to_pylist() == [1, 3]
    with pytest.raises(TypeError, match="does not fit"):
        c.fill_null("x")


def test_indexing_and_selection():
    c = ea.column([5, 3, None, 1, 4])
    assert c[0] == 5 and c[-1] == 4 and c[2] is None
    assert c[1:3].to_pylist() == [3, None]
    assert c[::2].to_pylist() == [5, None, 4]
    assert c[[4, 0]].to_pylist() == [4, 5]
    assert c[c > 2].to_pylist() == [5, 3, 4]
    assert c.filter(lambda v: v is not None and v % 2).to_pylist() == [5, 3, 1]
    assert c.sort().to_pylist() == [1, 3, 4, 5, None]
    assert c.sort(ascending=False, na_position="first").to_pylist() == [None, 5, 4, 3, 1]
    assert c.head(2).to_pylist() == [5, 3] and c.tail(2).to_pylist() == [1, 4]
    with pytest.raises(IndexError):
        c[5]
    with pytest.raises(ValueError, match="ambiguous"):
        bool(c > 1)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="different lengths"):
        ea.column([1, 2]) + ea.column([1, 2, 3])
    with pytest.raises(TypeError, match="not supported"):
        ea.column(["a"]) - 1
    with pytest.raises(TypeError, match="string column"):
        _ = ea.column([1]).str
    with pytest.raises(ValueError, match="rows"):
        ea.column([1, 2]).filter([True])


@pytest.fixture
def strings(rand_data):
    values = rand_data(3, 120)["s"] + ["", "ÄÖü été", "a,b,,c", "   "]
    return ea.column(values), values


def _py(values, fn):
    return [None if v is None else fn(v) for v in values]


@pytest.mark.parametrize("name, method, pyfn", [
    ("lower", lambda s: s.lower(), str.lower),
    ("upper", lambda s: s.upper(), str.upper),
    ("strip", lambda s: s.strip(), str.strip),
    ("length", lambda s: s.length(), len),
    ("slice", lambda s: s.slice(1, 4), lambda v: v[1:4]),
    ("slice_neg", lambda s: s.slice(-3), lambda v: v[-3:]),
    ("split", lambda s: s.split(), str.split),
    ("split_sep", lambda s: s.split(","), lambda v: v.split(",")),
    ("split_max", lambda s: s.split(" ", maxsplit=1), lambda v: v.split(" ", 1)),
    ("replace", lambda s: s.replace("a", "XY"), lambda v: v.replace("a", "XY")),
    ("find", lambda s: s.find("a"), lambda v: v.find("a")),
    ("find_unicode", lambda s: s.find("e"), lambda v: v.find("e")),
    ("match_re", lambda s: s.match_re("[a-z]+a"), lambda v: re.match("[a-z]+a", v) is not None),
    ("contains_re", lambda s: s.contains_re("ta"), lambda v: re.search("ta", v) is not None),
    ("startswith", lambda s: s.startswith("ga"), lambda v: v.startswith("ga")),
    ("isalpha", lambda s: s.isalpha(), str.isalpha),
])
def test_string_methods_match_python(strings, name, method, pyfn):
    col, values = strings
    assert method(col.str).to_pylist() == _py(values, pyfn), name


def test_string_concat_and_compare():
    a, b = ea.column(["x", None, "z"]), ea.column(["1", "2", "3"])
    assert (a + b).to_pylist() == ["x1", None, "z3"]
    assert (a == "z").to_pylist() == [False, None, True]
    assert ea.column(["Ab", "C d"]).str.lower().dtype == dt.string


def test_list_methods():
    values = [[1, 2, 3], [4], None, [], [5, 6]]
    col = ea.column(values)
    assert col.list.length().to_pylist() == _py(values, len)
    assert col.list.slice(1, 3).to_pylist() == _py(values, lambda v: v[1:3])
    assert col.list.get(1).to_pylist() == [2, None, None, None, 6]
    assert col.list.vmap(lambda x: x * 10).to_pylist() == _py(values,
                                                              lambda v: [x * 10 for x in v])
    sliced = col[3:]
    assert sliced.list.vmap(lambda x: x + 1).to_pylist() == [[], [6, 7]]
    words = ea.column([["a", "b"], ["c"]])
    assert words.list.join("-").to_pylist() == ["a-b", "c"]
    assert words.list.vmap(lambda s: s.str.upper()).to_pylist() == [["A", "B"], ["C"]]


def test_map_methods():
    values = [{"a": 1, "b": 2}, {"c": 3}, None]
    col = ea.column(values)
    assert col.dtype == dt.Map(dt.string, dt.int64, nullable=True)
    assert col.maps.keys().to_pylist() == [["a", "b"], ["c"], None]
    assert col.maps.values().to_pylist() == [[1, 2], [3], None]
    assert col.maps.get("a").to_pylist() == [1, None, None]
    assert col[1:].maps.keys().to_pylist() == [["c"], None]
    assert col.to_pylist() == values


def test_row_udf_and_batch_udf():
    c = ea.column([1, None, 3])
    assert c.map(lambda v: v * 2, na_action="ignore").to_pylist() == [2, None, 6]
    assert c.map({1: "one", 3: "three"}).to_pylist() == ["one", None, "three"]
    out = c.map(lambda v: -1 if v is None else v, dtype=dt.int32)
    assert out.dtype == dt.int32 and out.to_pylist() == [1, -1, 3]
    assert c.transform(lambda col: col.fill_null(0) + 1).to_pylist() == [2, 1, 4]
    assert c.transform(lambda xs: [str(x) for x in xs], format="python").to_pylist() == [
        "1", "None", "3"]
    t = ea.column([1.0, 4.0, 9.0])
    assert t.transform(lambda x: x.sqrt(), format="torch").to_pylist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="format"):
        c.transform(lambda x: x, format="numpy")


def test_struct_column_fields():
    dtype = dt.Struct([dt.Field("x", dt.int64), dt.Field("y", dt.string)])
    col = ea.column([(1, "a"), (2, "b")], dtype)
    assert col.field("y").to_pylist() == ["a", "b"]
    assert col[0] == (1, "a") and col[0].x == 1
    with pytest.raises(KeyError, match="no field"):
        col.field("z")


def test_expression_edge_semantics_match_torch():
    import torch

    ints = ea.column([-3, 0, 5])
    floats = ea.column([-1.5, 0.5, 2.5], dt.float64)
    assert ints.ceil().to_pylist() == [-3, 0, 5] and ints.ceil().dtype == dt.int64
    assert floats.round().to_pylist() == torch.tensor([-1.5, 0.5, 2.5]).round().tolist()
    ref = torch.sigmoid(torch.tensor([-1.5, 0.5, 2.5], dtype=torch.float64)).tolist()
    assert np.allclose(floats.exp().log().to_pylist(), [-1.5, 0.5, 2.5])
    from ember.arrow import functional as F

    flat = F.scale_to_0_1(ea.column([1.0, 1.0])).to_pylist()  # sigmoid when min == max
    assert np.allclose(flat, [1 / (1 + np.e ** -1)] * 2)
    assert np.allclose(ea.column([-1.5, 0.5, 2.5], dt.float64)._unary("sigmoid").to_pylist(),
                       ref)
    assert (ints // -2).to_pylist() == torch.tensor([-3, 0, 5]).floor_divide(-2).tolist()
    assert (ints % -2).to_pylist() == torch.tensor([-3, 0, 5]).remainder(-2).tolist()
    with pytest.raises(ZeroDivisionError):
        (ints // ea.column([1, 0, 1])).to_pylist()
    with pytest.raises(TypeError, match="numeric or boolean"):
        ea.column(["a"]).abs()


def test_shared_subexpressions_computed_once_and_buffers_not_clobbered():
    from ember.arrow import lazy

    x = np.arange(-6, 6, dtype=np.int64)
    a = ea.column(x)
    t = a * 2
    u = t.floor()  # an identity on integers: the same buffer as t
    out = (u * 3) + t + (t - 1)  # t is read after u's buffer could have been reused
    prog = lazy.program(lazy.plan(out._expr, lazy.leaves(out._expr)))
    assert [op for op, _ in prog.steps].count("mul") == 2  # a * 2 once, u * 3 once
    want = (x * 2) * 3 + x * 2 + (x * 2 - 1)
    assert out.to_pylist() == want.tolist()
    s = (a * 1.5).abs()
    assert (s + s * s).to_pylist() == pytest.approx(
        (np.abs(x * 1.5) + np.abs(x * 1.5) ** 2).tolist())


def test_clip_without_bounds_is_the_column():
    a = ea.column([1.0, None, -3.0])
    assert a.clip() is a


def test_lower_upper_ascii_fast_path_matches_python():
    values = ["ÄB", "Hello World", None, "MiXeD 123", "", "éTÉ"]
    col = ea.column(values)
    for lo, hi in [(1, 5), (0, 6), (2, 3)]:  # slices with and without non-ASCII rows
        part = col[lo:hi]
        assert part.str.lower().to_pylist() == _py(values[lo:hi], str.lower)
        assert part.str.upper().to_pylist() == _py(values[lo:hi], str.upper)
