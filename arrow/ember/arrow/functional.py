"""ML preprocessing functions over columns (TorchArrow's ``functional``), vectorised.

Recommendation ops (bucketize, sigrid_hash, firstx, id overlap and score features) and
text ops (tokenize, vocabulary lookup, add_tokens). Per-list set logic runs as Arrow
group-by/join over ``(row, id)`` pairs, not as a Python loop per row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ember.arrow import dtypes as dt
from ember.arrow import lazy
from ember.arrow.accessors import list_parts, rebuild_list
from ember.arrow.column import Column, _operand, column

__all__ = [
    "bucketize", "sigrid_hash", "firstx", "has_id_overlap", "id_overlap_count",
    "get_max_count", "get_jaccard_similarity", "get_cosine_similarity", "get_score_sum",
    "get_score_min", "get_score_max", "compute_score", "Vocab", "lookup_indices",
    "tokenize", "add_tokens", "scale_to_0_1", "where", "if_else",
]


def _check_column(col, name: str, pred=None, what: str = "") -> None:
    if not isinstance(col, Column):
        raise TypeError(f"{name} must be a Column, got {type(col).__name__}")
    if pred is not None and not pred(col.dtype):
        raise TypeError(f"{name} must be {what}, got {col.dtype}")


def _on_items(col: Column, fn: Callable[[pa.Array], pa.Array], item: dt.DType) -> Column:
    """Apply ``fn`` to a numeric column, or to every item of a list column."""
    if dt.is_list(col.dtype):
        flat = col._data.flatten()
        return rebuild_list(col, fn(flat), item)
    return col._derived(fn(col._data), item)


def _is_numeric_or_list(t: dt.DType) -> bool:
    return dt.is_numerical(t) or (dt.is_list(t) and dt.is_numerical(t.item_dtype))


# ---------------------------------------------------------------------- dense -> sparse

def bucketize(value_col: Column, borders: Sequence[float] | Column) -> Column:
    """Bucket id of each value: the number of borders strictly below it (int32).

    Borders must be non-decreasing and may repeat a value at most twice, as TorchArrow's.
    Works on numeric columns and on lists of numbers.
    """
    _check_column(value_col, "bucketize(): value_col", _is_numeric_or_list,
                  "numeric or a list of numbers")
    b = np.asarray(borders.to_pylist() if isinstance(borders, Column) else list(borders),
                   dtype=np.float64)
    if b.size == 0:
        raise ValueError("bucketize(): borders must not be empty")
    if np.any(np.diff(b) < 0):
        raise ValueError("bucketize(): borders must be non-decreasing")
    if b.size > 2 and np.any((b[2:] == b[1:-1]) & (b[1:-1] == b[:-2])):
        raise ValueError("bucketize(): borders must not repeat a value more than twice")

    def fn(arr: pa.Array) -> pa.Array:
        vals = arr.to_numpy(zero_copy_only=False).astype(np.float64)
        ids = np.searchsorted(b, vals, side="left").astype(np.int32)
        return pa.array(ids, mask=arr.is_null().to_numpy(zero_copy_only=False)
                        if arr.null_count else None)

    return _on_items(value_col, fn, dt.int32)


_U = np.uint64


def _twang_mix64(k: np.ndarray) -> np.ndarray:
    """folly's 64-bit integer mixer (wrapping uint64 arithmetic)."""
    k = (~k) + (k << _U(21))
    k = k ^ (k >> _U(24))
    k = k + (k << _U(3)) + (k << _U(8))
    k = k ^ (k >> _U(14))
    k = k + (k << _U(2)) + (k << _U(4))
    k = k ^ (k >> _U(28))
    return k + (k << _U(31))


def _hash_128_to_64(upper: np.uint64, lower: np.ndarray) -> np.ndarray:
    """folly's Murmur-style combination of two 64-bit hashes."""
    mul = _U(0x9DDFEA08EB382D69)
    a = (lower ^ upper) * mul
    a ^= a >> _U(47)
    b = (upper ^ a) * mul
    b ^= b >> _U(47)
    return b * mul


def sigrid_hash(value_col: Column, salt: int, max_value: int) -> Column:
    """Hash ids into ``[0, max_value)`` seeded by ``salt`` (TorchArrow's/folly's values).

    Works on integer columns and lists of integers; the result is int64.
    """
    _check_column(value_col, "sigrid_hash(): value_col",
                  lambda t: dt.is_integer(t) or (dt.is_list(t) and dt.is_integer(t.item_dtype)),
                  "integer or a list of integers")
    if not isinstance(max_value, (int, np.integer)) or max_value <= 0:
        raise ValueError(f"sigrid_hash(): max_value must be a positive int, got {max_value!r}")
    seed = np.array([salt], dtype=np.int64).view(np.uint64)[0]

    def fn(arr: pa.Array) -> pa.Array:
        ids = arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        with np.errstate(over="ignore"):
            h = _hash_128_to_64(seed, _twang_mix64(ids.view(np.uint64))).view(np.int64)
        out = np.mod(h, np.int64(max_value))  # floor modulo, as the reference's division
        return pa.array(out, mask=arr.is_null().to_numpy(zero_copy_only=False)
                        if arr.null_count else None)

    return _on_items(value_col, fn, dt.int64)


def firstx(col: Column, num_to_copy: int) -> Column:
    """The first ``num_to_copy`` items of each list."""
    _check_column(col, "firstx(): col", dt.is_list, "a list column")
    if num_to_copy < 0:
        raise ValueError(f"firstx(): num_to_copy must be >= 0, got {num_to_copy}")
    return col.list.slice(0, num_to_copy)


# ---------------------------------------------------------------------- id overlap / scores

def _pairs(ids: Column, scores: Column | None, name: str) -> pa.Table:
    """One row per list item: (row, id[, score]); null lists contribute nothing."""
    _check_column(ids, name, lambda t: dt.is_list(t) and dt.is_integer(t.item_dtype),
                  "a list of integers")
    arr = ids._data
    cols = {"row": pc.list_parent_indices(arr), "id": arr.flatten().cast(pa.int64())}
    if scores is not None:
        _check_column(scores, f"{name} scores",
                      lambda t: dt.is_list(t) and dt.is_numerical(t.item_dtype),
                      "a list of numbers")
        if len(scores) != len(ids) or pc.all(pc.equal(
                pc.list_value_length(arr).fill_null(0),
                pc.list_value_length(scores._data).fill_null(0))).as_py() not in (True, None):
            raise ValueError(f"{name}: ids and scores must have the same list lengths")
        cols["score"] = scores._data.flatten().cast(pa.float64())
    return pa.table(cols)


def _per_id(pairs: pa.Table, agg: str) -> pa.Table:
    """Per (row, id): the item count, or the scores aggregated by ``agg``."""
    if agg == "count":
        return pairs.group_by(["row", "id"], use_threads=False).aggregate([([], "count_all")])
    return pairs.group_by(["row", "id"], use_threads=False).aggregate([("score", agg)])


def _per_row(values: pa.Array, rows: pa.Array, n: int, how: str, empty: float) -> np.ndarray:
    """Reduce ``values`` by ``rows`` into an array of ``n`` (``empty`` for rows without any)."""
    out = np.full(n, empty, dtype=np.float64)
    if len(values):
        t = pa.table({"row": rows, "v": values}).group_by("row", use_threads=False) \
            .aggregate([("v", how)])
        out[t.column("row").to_numpy()] = t.column(f"v_{how}").to_numpy()
    return out


def _float_col(values: np.ndarray, *cols: Column) -> Column:
    mask = None
    for c in cols:
        if c.null_count:
            m = c._data.is_null().to_numpy(zero_copy_only=False)
            mask = m if mask is None else mask | m
    arr = pa.array(values.astype(np.float32), mask=mask)
    return Column(arr, dt.Float32(nullable=any(c.dtype.nullable for c in cols)))


def _matched_counts(input_ids: Column, matching_ids: Column) -> pa.Table:
    if len(input_ids) != len(matching_ids):
        raise ValueError(f"input_ids has {len(input_ids)} rows, matching_ids "
                         f"{len(matching_ids)}")
    a = _per_id(_pairs(input_ids, None, "input_ids"), "count")
    b = _per_id(_pairs(matching_ids, None, "matching_ids"), "count")
    return a.join(b, keys=["row", "id"], join_type="inner", left_suffix="_a",
                  right_suffix="_b", use_threads=False)


def id_overlap_count(input_ids: Column, matching_ids: Column) -> Column:
    """Size of the multiset intersection of the two id lists, per row (float32)."""
    m = _matched_counts(input_ids, matching_ids)
    inter = pc.min_element_wise(m.column("count_all_a"), m.column("count_all_b"))
    vals = _per_row(inter.combine_chunks(), m.column("row").combine_chunks(),
                    len(input_ids), "sum", 0.0)
    return _float_col(vals, input_ids, matching_ids)


def has_id_overlap(input_ids: Column, matching_ids: Column) -> Column:
    """1.0 where the two id lists share an id, else 0.0 (float32)."""
    counts = id_overlap_count(input_ids, matching_ids)
    vals = (counts.to_numpy() > 0).astype(np.float64)
    return _float_col(vals, input_ids, matching_ids)


def get_max_count(input_ids: Column, matching_ids: Column) -> Column:
    """Sum over shared ids of the larger of the two occurrence counts (float32)."""
    m = _matched_counts(input_ids, matching_ids)
    big = pc.max_element_wise(m.column("count_all_a"), m.column("count_all_b"))
    vals = _per_row(big.combine_chunks(), m.column("row").combine_chunks(),
                    len(input_ids), "sum", 0.0)
    return _float_col(vals, input_ids, matching_ids)


def get_jaccard_similarity(input_ids: Column, matching_ids: Column) -> Column:
    """overlap / (len(input) + len(matching) - overlap), per row (float32)."""
    inter = id_overlap_count(input_ids, matching_ids).to_numpy().astype(np.float64)
    la = input_ids.list.length().fill_null(0).to_numpy().astype(np.float64)
    lb = matching_ids.list.length().fill_null(0).to_numpy().astype(np.float64)
    denom = la + lb - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        vals = np.where(denom > 0, inter / np.where(denom > 0, denom, 1), 0.0)
    return _float_col(vals, input_ids, matching_ids)


def _scored(input_ids, input_scores, matching_ids, matching_scores, agg_a, agg_b):
    if len(input_ids) != len(matching_ids):
        raise ValueError(f"input_ids has {len(input_ids)} rows, matching_ids "
                         f"{len(matching_ids)}")
    a = _pairs(input_ids, input_scores, "input_ids")
    a = _per_id(a, agg_a) if input_scores is not None else _per_id(a, "count")
    b = _per_id(_pairs(matching_ids, matching_scores, "matching_ids"), agg_b)
    return a, b, a.join(b, keys=["row", "id"], join_type="inner", left_suffix="_a",
                        right_suffix="_b", use_threads=False)


def get_cosine_similarity(input_ids: Column, input_id_scores: Column, matching_ids: Column,
                          matching_id_scores: Column) -> Column:
    """Cosine between the id->summed-score vectors of the two sides (float32)."""
    a, b, m = _scored(input_ids, input_id_scores, matching_ids, matching_id_scores,
                      "sum", "sum")
    n = len(input_ids)
    dot = _per_row(pc.multiply(m.column("score_sum_a"), m.column("score_sum_b"))
                   .combine_chunks(), m.column("row").combine_chunks(), n, "sum", 0.0)
    na = _per_row(pc.multiply(a.column(2), a.column(2)).combine_chunks(),
                  a.column("row").combine_chunks(), n, "sum", 0.0)
    nb = _per_row(pc.multiply(b.column(2), b.column(2)).combine_chunks(),
                  b.column("row").combine_chunks(), n, "sum", 0.0)
    norm = np.sqrt(na) * np.sqrt(nb)
    with np.errstate(invalid="ignore", divide="ignore"):
        vals = np.where(norm > 0, dot / np.where(norm > 0, norm, 1), 0.0)
    return _float_col(vals, input_ids, matching_ids)


def get_score_sum(input_ids: Column, input_id_scores: Column, matching_ids: Column,
                  matching_id_scores: Column) -> Column:
    """Sum of the matching scores whose id also occurs in ``input_ids`` (float32)."""
    _, _, m = _scored(input_ids, input_id_scores, matching_ids, matching_id_scores,
                      "sum", "sum")
    vals = _per_row(m.column("score_sum_b").combine_chunks(), m.column("row").combine_chunks(),
                    len(input_ids), "sum", 0.0)
    return _float_col(vals, input_ids, matching_ids)


def _score_extreme(input_ids, matching_ids, matching_id_scores, how: str) -> Column:
    _, _, m = _scored(input_ids, None, matching_ids, matching_id_scores, None, how)
    vals = _per_row(m.column(f"score_{how}").combine_chunks(),
                    m.column("row").combine_chunks(), len(input_ids), how, 0.0)
    return _float_col(vals, input_ids, matching_ids)


def get_score_min(input_ids: Column, matching_ids: Column,
                  matching_id_scores: Column) -> Column:
    """Smallest matching score over ids also in ``input_ids``; 0 when none (float32)."""
    return _score_extreme(input_ids, matching_ids, matching_id_scores, "min")


def get_score_max(input_ids: Column, matching_ids: Column,
                  matching_id_scores: Column) -> Column:
    """Largest matching score over ids also in ``input_ids``; 0 when none (float32)."""
    return _score_extreme(input_ids, matching_ids, matching_id_scores, "max")


_SCORES = {"sum": get_score_sum, "min": get_score_min, "max": get_score_max,
           "cosine": get_cosine_similarity}


def compute_score(input_ids: Column, matching_ids: Column, matching_id_scores: Column,
                  method: str = "sum", input_id_scores: Column | None = None) -> Column:
    """One entry point for the score features: ``method`` sum, min, max or cosine."""
    if method not in _SCORES:
        raise ValueError(f"compute_score(): method must be one of {sorted(_SCORES)}, got "
                         f"{method!r}")
    if method in ("sum", "cosine"):
        if input_id_scores is None:
            raise ValueError(f"compute_score(method={method!r}) needs input_id_scores")
        return _SCORES[method](input_ids, input_id_scores, matching_ids, matching_id_scores)
    return _SCORES[method](input_ids, matching_ids, matching_id_scores)


def scale_to_0_1(col: Column) -> Column:
    """Values scaled to [0, 1] by min and max (sigmoid when all values are equal)."""
    _check_column(col, "scale_to_0_1(): col", dt.is_numerical, "numeric")
    lo, hi = col.min(), col.max()
    if lo is not None and lo < hi:
        return (col - lo) / (hi - lo)
    return Column._lazy(lazy.Expr("sigmoid", (col.cast(dt.Float32(col.dtype.nullable)),)),
                        len(col))


def where(condition: Column, input, other) -> Column:
    """``input`` where ``condition`` holds, else ``other`` (``torch.where``'s semantics).

    ``input`` and ``other`` are columns or scalars; a null in any argument gives a null row.
    On numeric columns the result is lazy, so it fuses with the expression around it.
    """
    _check_column(condition, "where(): condition", dt.is_boolean, "boolean")
    n = len(condition)
    for name, v in (("input", input), ("other", other)):
        if isinstance(v, Column):
            if len(v) != n:
                raise ValueError(f"where(): {name} has {len(v)} rows, condition has {n}")
        elif v is None or isinstance(v, (list, tuple, dict, np.ndarray, pa.Array)):
            raise TypeError(f"where(): {name} must be a Column or a scalar, got "
                            f"{type(v).__name__}")

    def numeric(v):
        if isinstance(v, Column):
            return dt.is_boolean_or_numerical(v.dtype)
        return isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating))

    if numeric(input) and numeric(other):
        args = (_operand(condition), _operand(input), _operand(other))
        return Column._lazy(lazy.Expr("where", args), n)
    arrays = [v._data if isinstance(v, Column) else v for v in (condition, input, other)]
    try:
        out = pc.if_else(*arrays)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise TypeError(f"where(): input and other have no common dtype: {e}") from None
    valid = [v._data.is_valid() for v in (condition, input, other)
             if isinstance(v, Column) and v.null_count]
    if valid:  # nulls propagate from every argument, as in the numeric (lazy) case
        keep = valid[0]
        for v in valid[1:]:
            keep = pc.and_(keep, v)
        out = pc.if_else(keep, out, pa.scalar(None, out.type))
    return column(out)


def if_else(cond: Column, left, right) -> Column:
    """TorchArrow's name for ``where``: ``left`` where ``cond`` holds, else ``right``."""
    return where(cond, left, right)


# ---------------------------------------------------------------------- text

class Vocab:
    """Token -> index, with ``default_index`` for tokens not in the vocabulary."""

    def __init__(self, tokens: Sequence[str] | Mapping[str, int],
                 default_index: int | None = None):
        if isinstance(tokens, Mapping):
            items = sorted(tokens.items(), key=lambda kv: kv[1])
            self._tokens = pa.array([k for k, _ in items], pa.string())
            self._indices = pa.array([v for _, v in items], pa.int64())
        else:
            toks = list(tokens)
            if len(set(toks)) != len(toks):
                raise ValueError("Vocab: tokens must be unique")
            self._tokens = pa.array(toks, pa.string())
            self._indices = pa.array(np.arange(len(toks), dtype=np.int64))
        self.default_index = default_index

    def __len__(self) -> int:
        return len(self._tokens)

    def lookup(self, tokens: pa.Array) -> pa.Array:
        """Indices of ``tokens``; ``default_index`` (or an error) for unknown ones."""
        pos = pc.index_in(tokens, value_set=self._tokens)
        out = self._indices.take(pos)
        unknown = pc.and_(pc.is_null(out), pc.is_valid(tokens))
        if pc.any(unknown).as_py():
            if self.default_index is None:
                missing = tokens.filter(unknown)[0].as_py()
                raise ValueError(f"Vocab: token {missing!r} is not in the vocabulary and no "
                                 "default_index was set")
            out = pc.if_else(unknown, pa.scalar(self.default_index, pa.int64()), out)
        return out


def lookup_indices(vocab: Vocab | Sequence[str] | Mapping[str, int], col: Column) -> Column:
    """Vocabulary indices of each token in a list-of-strings (or string) column."""
    if not isinstance(vocab, Vocab):
        vocab = Vocab(vocab)
    _check_column(col, "lookup_indices(): col",
                  lambda t: dt.is_string(t) or (dt.is_list(t) and dt.is_string(t.item_dtype)),
                  "a string or list-of-strings column")
    return _on_items(col, vocab.lookup, dt.int64)


def tokenize(col: Column, tokenizer: Callable[[str], list[str]] | None = None) -> Column:
    """Split each string into tokens: on whitespace by default (vectorised), or with any
    ``tokenizer(str) -> list[str]`` callable (called once per row)."""
    _check_column(col, "tokenize(): col", dt.is_string, "a string column")
    if tokenizer is None:
        return col.str.split()
    if not callable(tokenizer):
        raise TypeError(f"tokenize(): tokenizer must be callable, got {tokenizer!r}")
    return col.map(tokenizer, na_action="ignore", dtype=dt.List(dt.string, col.dtype.nullable))


def add_tokens(col: Column, tokens: Sequence, begin: bool = True) -> Column:
    """Each list with ``tokens`` prepended (``begin``) or appended."""
    _check_column(col, "add_tokens(): col", dt.is_list, "a list column")
    tokens = list(tokens)
    arr = col._data
    offsets, flat = list_parts(arr)
    extra = column(tokens, col.dtype.item_dtype)._data.cast(flat.type)
    n, k = len(arr), len(tokens)
    lengths = np.diff(offsets.to_numpy()).astype(np.int64)
    new_offsets = np.concatenate([[0], np.cumsum(lengths + k)]).astype(np.int32)
    # Positions of the old items and the inserted tokens in the new flat array.
    row_of_item = np.repeat(np.arange(n), lengths)
    old_pos = np.arange(len(flat)) + k * (row_of_item + (1 if begin else 0))
    start = new_offsets[:-1] + (0 if begin else lengths)
    tok_pos = (start[:, None] + np.arange(k)[None, :]).reshape(-1)
    order = np.empty(len(flat) + n * k, dtype=np.int64)
    order[old_pos] = np.arange(len(flat))
    order[tok_pos] = len(flat) + np.tile(np.arange(k), n)
    values = pa.concat_arrays([flat, extra]).take(pa.array(order))
    mask = arr.is_null() if arr.null_count else None
    out = pa.ListArray.from_arrays(pa.array(new_offsets), values, mask=mask)
    return col._derived(out, col.dtype.with_null(False))
