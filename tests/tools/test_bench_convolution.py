"""`ember bench conv`: its rows state the routing rule's decision and both errors."""

import pytest

from ember.core.nn import winograd_conv as wg
from ember.tools.bench import convolution


@pytest.mark.skipif(not wg.available(), reason="no C++ compiler or no oneDNN")
def test_quick_rows_carry_the_rule_and_small_errors(monkeypatch):
    monkeypatch.setattr(convolution, "QUICK_SHAPES",
                        [("routed", 2, 256, 256, 20), ("kept", 1, 16, 16, 8)])
    result = convolution.run(quick=True)
    col = result.columns.index
    routed = {r[col("shape")]: r[col("routed frozen / unfrozen")] for r in result.rows}
    assert routed == {"routed": "yes / yes", "kept": "no / no"}
    for row in result.rows:
        assert row[col("error direct")] < 5e-6 and row[col("error winograd")] < 5e-6
        assert row[col("tiles")] == (200 if row[col("shape")] == "routed" else 16)
