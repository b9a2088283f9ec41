"""`ember bench data --quick` runs and reports every loader on the same workload."""

from ember.tools.bench import registry


def test_quick_bench_reports_all_loaders():
    result = registry.run("data", quick=True)
    assert result.name == "data" and result.rows
    for row in result.rows:
        assert row[1] in (0, 2)
        assert all(isinstance(v, float) and v > 0 for v in row[2:6])
