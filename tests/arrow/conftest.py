"""Fixtures for ember.arrow tests: seeded random data with nulls, null-aware comparison.

Tests run in pytest's importlib mode, so helpers reach them as fixtures, not imports.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest


def _null(v) -> bool:
    if v is None or v is pd.NA:
        return True
    return isinstance(v, float) and math.isnan(v)


def same_values(ours, theirs, rel: float = 1e-6) -> bool:
    """Element-wise equality with None/NaN/NA as one null and floats compared closely."""
    ours, theirs = list(ours), list(theirs)
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs):
        if _null(a) or _null(b):
            if not (_null(a) and _null(b)):
                return False
        elif isinstance(a, float) or isinstance(b, float):
            if not math.isclose(a, b, rel_tol=rel, abs_tol=1e-9):
                return False
        elif a != b:
            return False
    return True


def assert_same(ours, theirs, rel: float = 1e-6) -> None:
    assert same_values(ours, theirs, rel), f"\nours:   {list(ours)}\ntheirs: {list(theirs)}"


WORDS = ["alpha", "Beta", "gamma ray", "  delta", "EPSILON ", "zeta-eta", "theta", "iota kappa"]


def random_data(seed: int, n: int = 200) -> dict[str, list]:
    """Columns a (int with nulls), b (float with nulls), k (small int key), s (str with nulls)."""
    rng = np.random.default_rng(seed)

    def nulls(values, p=0.15):
        mask = rng.random(n) < p
        return [None if m else v for v, m in zip(values, mask)]

    return {
        "a": nulls(rng.integers(-50, 50, n).tolist()),
        "b": nulls(np.round(rng.normal(size=n), 3).tolist()),
        "k": rng.integers(0, 6, n).tolist(),
        "s": nulls([WORDS[i] for i in rng.integers(0, len(WORDS), n)]),
    }


def to_pandas_frame(data: dict[str, list]) -> pd.DataFrame:
    return pd.DataFrame({
        "a": pd.array(data["a"], dtype="Int64"),
        "b": pd.array(data["b"], dtype="Float64"),
        "k": pd.array(data["k"], dtype="int64"),
        "s": pd.array(data["s"], dtype="string"),
    })


@pytest.fixture
def same():
    """``same(ours, theirs)`` asserts equal values (nulls and NaN equal, floats close)."""
    return assert_same


@pytest.fixture
def rand_data():
    """``rand_data(seed, n=200)``: columns a, b, k, s as Python lists with nulls."""
    return random_data


@pytest.fixture(params=[0, 1, 2])
def frames(request):
    """An ember DataFrame and the equal pandas DataFrame (float64 b, nullable a and s)."""
    import ember.arrow as ea
    from ember.arrow import dtypes as dt

    data = random_data(request.param)
    dtype = dt.Struct([dt.Field("a", dt.Int64(nullable=True)),
                       dt.Field("b", dt.Float64(nullable=True)),
                       dt.Field("k", dt.int64), dt.Field("s", dt.String(nullable=True))])
    return ea.dataframe(data, dtype=dtype), to_pandas_frame(data)
