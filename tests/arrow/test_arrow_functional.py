"""ember.arrow.functional: TorchArrow's published values and brute-force Python references."""

import bisect
import math
from collections import Counter

import numpy as np
import pytest

import ember.arrow as ea
from ember.arrow import dtypes as dt
from ember.arrow import functional as F


def test_bucketize_matches_torcharrow_example_and_bisect():
    a = ea.column([1, 2, 3, 5, 8, 10, 11])
    out = F.bucketize(a, [2, 5, 10])
    assert out.dtype == dt.int32 and out.to_pylist() == [0, 0, 1, 1, 2, 2, 3]
    rng = np.random.default_rng(0)
    vals = rng.normal(size=300).round(1).tolist()
    borders = sorted(rng.normal(size=7).round(1).tolist())
    borders = [b for i, b in enumerate(borders) if borders[:i].count(b) < 2]
    assert F.bucketize(ea.column(vals, dt.float64), borders).to_pylist() == [
        bisect.bisect_left(borders, v) for v in vals]
    lists = ea.column([[1, 6], None, [11]])
    assert F.bucketize(lists, [2, 5, 10]).to_pylist() == [[0, 2], None, [3]]
    assert F.bucketize(ea.column([1, None]), [0]).to_pylist() == [1, None]
    with pytest.raises(ValueError, match="non-decreasing"):
        F.bucketize(a, [3, 1])
    with pytest.raises(ValueError, match="more than twice"):
        F.bucketize(a, [1, 1, 1])
    with pytest.raises(TypeError, match="numeric"):
        F.bucketize(ea.column(["x"]), [1])


def test_sigrid_hash_matches_torcharrow_values():
    out = F.sigrid_hash(ea.column(list(range(16))), 0, 100)
    assert out.dtype == dt.int64
    assert out.to_pylist() == [6, 60, 54, 54, 9, 4, 91, 11, 67, 79, 2, 25, 92, 98, 83, 66]
    lists = F.sigrid_hash(ea.column([[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]), 0, 100)
    assert lists.to_pylist() == [[6, 60, 54, 54], [9, 4, 91], [11, 67, 79]]
    doc = F.sigrid_hash(ea.column([1, 2, 3, 5, 8, 10, 11]), 0, 100)
    assert doc.to_pylist() == [60, 54, 54, 4, 67, 2, 25]
    salted = F.sigrid_hash(ea.column(list(range(1000))), 7, 13).to_pylist()
    assert all(0 <= v < 13 for v in salted) and len(set(salted)) == 13
    assert salted != F.sigrid_hash(ea.column(list(range(1000))), 8, 13).to_pylist()
    assert F.sigrid_hash(ea.column([5, None]), 0, 1).to_pylist() == [0, None]
    with pytest.raises(ValueError, match="max_value"):
        F.sigrid_hash(ea.column([1]), 0, 0)


def test_firstx():
    col = ea.column([[1, 2, 3], [5, 8], [13], None])
    assert F.firstx(col, 2).to_pylist() == [[1, 2], [5, 8], [13], None]
    assert F.firstx(col, 3).to_pylist() == [[1, 2, 3], [5, 8], [13], None]


# TorchArrow's compute_score test data and expected values
IDS = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 10, 11, 12]]
ID_SCORES = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [10.0, 10.0, 11.0, 12.0]]
MATCH = [[1, 2, 3], [0, 10], [7, 10, 10], [10, 10, 11, 13]]
MATCH_SCORES = [[1.0, 2.0, 3.0], [0.0, 10.0], [7.0, 10.0, 10.0], [10.0, 10.0, 11.0, 13.0]]


@pytest.fixture
def score_cols():
    return (ea.column(IDS), ea.column(ID_SCORES, dt.List(dt.float32)), ea.column(MATCH),
            ea.column(MATCH_SCORES, dt.List(dt.float32)))


def _close(col, expected):
    got = col.to_pylist()
    assert col.dtype == dt.float32
    assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in zip(got, expected)), \
        (got, expected)


def test_overlap_features_match_torcharrow(score_cols):
    ids, id_scores, match, match_scores = score_cols
    _close(F.has_id_overlap(ids, match), [1.0, 0.0, 1.0, 1.0])
    _close(F.id_overlap_count(ids, match), [3.0, 0.0, 1.0, 3.0])
    _close(F.get_max_count(ids, match), [3.0, 0.0, 1.0, 3.0])
    _close(F.get_jaccard_similarity(ids, match), [1.0, 0.0, 0.2, 0.6])
    _close(F.get_score_sum(ids, id_scores, match, match_scores), [6.0, 0.0, 7.0, 31.0])
    _close(F.get_score_min(ids, match, match_scores), [1.0, 0.0, 7.0, 10.0])
    _close(F.get_score_max(ids, match, match_scores), [3.0, 0.0, 7.0, 11.0])
    cos = [1.0, 0.0,
           49.0 / math.sqrt(49 + 64 + 81) / math.sqrt(49 + 400),
           (400 + 121) / math.sqrt(400 + 121 + 144) / math.sqrt(400 + 121 + 169)]
    _close(F.get_cosine_similarity(ids, id_scores, match, match_scores), cos)
    _close(F.compute_score(ids, match, match_scores, method="max"), [3.0, 0.0, 7.0, 11.0])
    with pytest.raises(ValueError, match="input_id_scores"):
        F.compute_score(ids, match, match_scores, method="sum")
    # TorchArrow's docstring example for get_max_count
    _close(F.get_max_count(ea.column([[1, 1, 2, 3], [5, 8], [13]]),
                           ea.column([[1, 2, 3], [2, 3], [13] * 5])), [4.0, 0.0, 5.0])


def test_overlap_features_match_python_on_random_lists():
    rng = np.random.default_rng(5)
    a = [rng.integers(0, 8, rng.integers(0, 6)).tolist() for _ in range(60)]
    b = [rng.integers(0, 8, rng.integers(0, 6)).tolist() for _ in range(60)]
    sb = [rng.random(len(x)).round(2).tolist() for x in b]
    ca, cb, csb = ea.column(a, dt.List(dt.int64)), ea.column(b, dt.List(dt.int64)), \
        ea.column(sb, dt.List(dt.float32))

    def inter(x, y):
        return sum((Counter(x) & Counter(y)).values())

    _close(F.id_overlap_count(ca, cb), [inter(x, y) for x, y in zip(a, b)])
    _close(F.has_id_overlap(ca, cb), [float(bool(set(x) & set(y))) for x, y in zip(a, b)])
    jac = [inter(x, y) / (len(x) + len(y) - inter(x, y)) if len(x) + len(y) - inter(x, y)
           else 0.0 for x, y in zip(a, b)]
    _close(F.get_jaccard_similarity(ca, cb), jac)

    def score_min(x, y, s):
        best = {}
        for i, v in zip(y, s):
            best[i] = min(best.get(i, v), v)
        found = [best[i] for i in x if i in best]
        return min(found) if found else 0.0

    ref = [score_min(x, y, s) for x, y, s in zip(a, b, sb)]
    got = F.get_score_min(ca, cb, csb).to_pylist()
    assert all(math.isclose(g, r, rel_tol=1e-6) for g, r in zip(got, ref))


def test_vocab_lookup_and_tokenize():
    vocab = F.Vocab(["<unk>", "Hello", "world", "How", "are", "you!"], default_index=0)
    text = ea.column([["Hello", "world"], ["How", "are", "you!", "OOV"]])
    assert F.lookup_indices(vocab, text).to_pylist() == [[1, 2], [3, 4, 5, 0]]
    assert F.lookup_indices({"a": 7, "b": 9}, ea.column(["a", "b"])).to_pylist() == [7, 9]
    with pytest.raises(ValueError, match="'zz' is not in the vocabulary"):
        F.lookup_indices(["a"], ea.column(["zz"]))
    sentences = ea.column(["Hello  world", None, " How are you! "])
    assert F.tokenize(sentences).to_pylist() == [["Hello", "world"], None,
                                                 ["How", "are", "you!"]]
    chars = F.tokenize(sentences, tokenizer=lambda s: list(s.replace(" ", "")))
    assert chars.to_pylist()[0] == list("Helloworld") and chars.to_pylist()[1] is None
    ids = F.lookup_indices(vocab, F.tokenize(ea.column(["Hello you!", "bye"])))
    assert ids.to_pylist() == [[1, 5], [0]]


def test_add_tokens_matches_torcharrow():
    indices = ea.column([[1, 2], [3, 4, 5]])
    out = F.add_tokens(F.add_tokens(indices, [0], begin=True), [6], begin=False)
    assert out.to_pylist() == [[0, 1, 2, 6], [0, 3, 4, 5, 6]]
    text = ea.column([["Hello", "world"], ["How", "are", "you!"]])
    out = F.add_tokens(F.add_tokens(text, ["<bos>"], begin=True), ["<eos>"], begin=False)
    assert out.to_pylist() == [["<bos>", "Hello", "world", "<eos>"],
                               ["<bos>", "How", "are", "you!", "<eos>"]]
    two = F.add_tokens(ea.column([[1], None, []])[1:], [8, 9], begin=False)
    assert two.to_pylist() == [None, [8, 9]]


def test_scale_to_0_1():
    assert F.scale_to_0_1(ea.column([2.0, 4.0, 6.0])).to_pylist() == [0.0, 0.5, 1.0]
    flat = F.scale_to_0_1(ea.column([0.0, 0.0])).to_pylist()
    assert flat == [0.5, 0.5]  # sigmoid(0) when min == max


def test_where_numeric_is_lazy_and_matches_numpy():
    rng = np.random.default_rng(5)
    x = rng.normal(size=200)
    y = rng.integers(-5, 5, 200)
    nulls = rng.random(200) < 0.2
    a = ea.column([None if m else v for v, m in zip(x.tolist(), nulls)])
    b = ea.column(y)
    out = F.where(a > 0, a * 2, b)
    assert out.is_lazy and out.dtype == dt.Float32(nullable=True)  # torch's promotion
    want = np.where(x > 0, x * 2, y).astype(np.float32)
    got = out.to_pylist()
    assert [v is None for v in got] == nulls.tolist()
    np.testing.assert_allclose([g for g in got if g is not None], want[~nulls], rtol=1e-6)
    scalars = F.where(b > 0, 1, 0)
    assert scalars.dtype == dt.int64 and scalars.to_pylist() == (y > 0).astype(int).tolist()


def test_where_strings_and_nulls_propagate():
    cond = ea.column([True, False, None, True])
    s = ea.column(["a", "b", "c", None])
    assert F.where(cond, s, "z").to_pylist() == ["a", "z", None, None]
    assert F.where(cond, "y", s).to_pylist() == ["y", "b", None, None]


def test_where_errors_name_the_argument():
    a = ea.column([1.0, 2.0])
    with pytest.raises(TypeError, match="condition must be boolean"):
        F.where(a, a, a)
    with pytest.raises(ValueError, match="other has 3 rows"):
        F.where(a > 1, a, ea.column([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="input must be a Column or a scalar"):
        F.where(a > 1, [1, 2], a)
    with pytest.raises(TypeError, match="no common dtype"):
        F.where(a > 1, ea.column(["x", "y"]), a)


def test_if_else_is_torcharrows_name_for_where():
    c = ea.column([True, False, True])
    assert ea.if_else(c, ea.column([1, 2, 3]), -1).to_pylist() == [1, -1, 3]
