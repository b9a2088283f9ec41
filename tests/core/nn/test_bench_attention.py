"""`ember bench attention --quick` runs and its memory probe sees the math path's L x S."""

import pytest

bench = pytest.importorskip("ember.tools.bench.attention")


def test_quick_bench_table():
    result = bench.run(quick=True)
    assert result.name == "attention"
    assert {row[2] for row in result.rows} == set(bench.CANDIDATES)
    assert {(row[0], row[1]) for row in result.rows} == {
        (length, p) for length in (64, 128) for p in ("fwd", "fwd+bwd")}
    ours = [row for row in result.rows if row[2] == "ember"]
    assert all(row[3] > 0 and row[4] > 0 for row in ours)
    assert any("ember bench attention-gpu" in note for note in result.notes)


def test_memory_probe_orders_math_above_ember():
    math = bench._peak_extra("math", 4096, 1, False)
    ours = bench._peak_extra("ember", 4096, 1, False)
    assert math is not None and ours is not None
    assert math >= 4096 * 4096 * 4  # at least one float32 score matrix
    assert ours < math / 3, (ours, math)
