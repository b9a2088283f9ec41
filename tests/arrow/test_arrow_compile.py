"""Compiled column expressions: ember.core.compile over zero-copy views equals eager."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import ember.arrow as ea
from ember.arrow import functional as F
from ember.arrow import lazy

pytestmark = pytest.mark.skipif(not lazy.compiler_available(),
                                reason="ember.core.compile is not available")


def _cols(n, seed=0, nulls=False):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n).astype(np.float32)
    b = rng.normal(size=n).astype(np.float32)
    if nulls:
        a = [None if i % 7 == 0 else float(v) for i, v in enumerate(a)]
        return ea.column(a, ea.dtypes.Float32(nullable=True)), ea.column(b)
    return ea.column(a), ea.column(b)


def _expr(a, b):
    return ((a * 2 + b).clip(0, 10) - a.abs()) * (a > b)


def test_compiled_expression_equals_eager():
    a, b = _cols(1000)
    compiled = _expr(a, b).compile()
    assert compiled.is_lazy and compiled.dtype == _expr(a, b).dtype
    np.testing.assert_allclose(compiled.to_pylist(), _expr(a, b).to_pylist(), rtol=1e-6)
    assert compiled.compile() is compiled  # evaluated: nothing left to compile
    # the same tree shape over other data of another length reuses the compiled function
    a2, b2 = _cols(257, seed=1)
    before = len(lazy._COMPILED)
    np.testing.assert_allclose(_expr(a2, b2).compile().to_pylist(), _expr(a2, b2).to_pylist(),
                               rtol=1e-6)
    assert len(lazy._COMPILED) == before


def test_compiled_expression_keeps_nulls():
    a, b = _cols(300, nulls=True)
    ours = (a * 3 - b).clip(-1, 1).compile().to_pylist()
    ref = (a * 3 - b).clip(-1, 1).to_pylist()
    assert [v is None for v in ours] == [v is None for v in ref]
    np.testing.assert_allclose([v for v in ours if v is not None],
                               [v for v in ref if v is not None], rtol=1e-6)


def test_compile_threshold():
    a, b = _cols(64)
    ref = (a * 2 + b).clip(0, 10).to_pylist()
    ea.set_compile_threshold(10)
    try:
        out = (a * 2 + b).clip(0, 10)
        np.testing.assert_allclose(out.to_pylist(), ref, rtol=1e-6)
    finally:
        ea.set_compile_threshold(None)
    with pytest.raises(ValueError, match="rows"):
        ea.set_compile_threshold(-1)


def _order_lines(n, seed=3):
    """price float32, qty int32, discount float32 with nulls, age float32 (as the bench)."""
    rng = np.random.default_rng(seed)
    discount = rng.uniform(0, 0.5, n).astype(np.float32)
    return {
        "price": rng.lognormal(3, 1, n).astype(np.float32),
        "qty": rng.integers(1, 20, n, dtype=np.int32),
        "discount": pa.array(discount, mask=rng.random(n) < 0.1),
        "age": rng.uniform(18, 80, n).astype(np.float32),
    }


def _features(price, qty, discount, age):
    net = price * qty * (1 - discount)
    scaled = ((net + 1).log() - 3) / 2
    young = (age < 25) & (net > 50)
    return F.where(young, scaled * 1.5, scaled).clip(-3, 3)


def test_compiled_features_match_eager_and_pandas(monkeypatch):
    # small chunks, so the compiled path runs several calls and a ragged last chunk
    monkeypatch.setattr(lazy, "_CHUNK_MIN_ROWS", 64)
    monkeypatch.setattr(lazy, "_CHUNK_BYTES", 1024)
    data = _order_lines(1000)
    df = ea.dataframe(data)
    cols = [df[c] for c in data]
    expr = _features(*cols)
    assert expr.dtype == ea.dtypes.Float32(nullable=True)  # no float64 promotion
    # net and scaled are shared: each op appears once in the program
    prog = lazy.program(lazy.plan(expr._expr, lazy.leaves(expr._expr)))
    assert [op for op, _ in prog.steps].count("log") == 1
    eager = expr.to_arrow()
    compiled = _features(*cols).compile().to_arrow()
    assert compiled.type == pa.float32() and compiled.null_count == eager.null_count > 0
    assert compiled.is_null().equals(eager.is_null())
    np.testing.assert_allclose(compiled.to_numpy(zero_copy_only=False),
                               eager.to_numpy(zero_copy_only=False), rtol=1e-6, atol=1e-6)
    p = pd.DataFrame({k: np.asarray(v) if not isinstance(v, pa.Array)
                      else v.to_numpy(zero_copy_only=False) for k, v in data.items()})
    net = p.price * p.qty * (1 - p.discount)
    scaled = (np.log(net + 1) - 3) / 2
    ref = (scaled * 1.5).where((p.age < 25) & (net > 50), scaled).clip(-3, 3)
    # pandas computes in float64: nulls in the same rows, values within float32 rounding
    ours = compiled.to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(np.isnan(ours), ref.isna().to_numpy())
    np.testing.assert_allclose(ours, ref.to_numpy(), rtol=1e-5, atol=1e-5)


def test_compiled_nulls_from_several_sliced_columns():
    a = ea.column([None if i % 5 == 0 else float(i) for i in range(300)])
    b = ea.column([None if i % 7 == 0 else float(-i) for i in range(300)])
    a, b = a[13:250], b[13:250]  # Arrow offsets that are not byte-aligned
    expr = (a * 3 - b).clip(-100, 100)
    ours, ref = expr.compile().to_pylist(), expr.to_pylist()
    want = [None if (i % 5 == 0 or i % 7 == 0) else min(100.0, max(-100.0, 4.0 * i))
            for i in range(13, 250)]
    assert ours == ref == want


def test_compiled_clip_keeps_nan():
    a = ea.column(np.array([np.nan, -5.0, 0.5, 7.0, np.inf], dtype=np.float32))
    out = (a * 1 + 0).clip(0, 1)
    np.testing.assert_array_equal(out.compile().to_numpy(), out.to_numpy())
    np.testing.assert_array_equal(out.to_numpy(), [np.nan, 0, 0.5, 1, 1])
