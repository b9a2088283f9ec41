"""`ember bench arrow --quick` runs and reports every case against pandas and polars."""

import math

from ember.tools.bench import BENCHMARKS, run


def test_bench_arrow_quick():
    assert BENCHMARKS["arrow"][0] == "ember.tools.bench.arrow:run"
    result = run("arrow", quick=True)
    cases = [row[0] for row in result.rows]
    assert cases[:4] == ["filter + arithmetic", "groupby-agg (sum, mean)",
                         "string lower + split", "to_tensor (3 numeric columns)"]
    assert [c.split(",")[0] for c in cases[4:]] == ["features"] * (len(cases) - 4)
    assert any(c.startswith("features, eager") for c in cases)
    for row in result.rows:
        assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in row[1:6])
    assert "| filter + arithmetic |" in result.to_markdown()
