"""Compiled column expressions: ember.core.compile over zero-copy views equals eager."""

import numpy as np
import pytest

import ember.arrow as ea
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
