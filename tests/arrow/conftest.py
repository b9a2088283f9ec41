"""Fixtures for ember.arrow tests."""

from __future__ import annotations

import pytest
from arrow_testutil import random_data, to_pandas_frame


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
