"""`ember bench compile --quick` runs in seconds and every case matches eager."""


def test_bench_compile_quick_runs_and_is_correct():
    from ember.tools.bench.compile import CASES, run

    result = run(quick=True)
    assert len(CASES) >= 12
    assert result.rows and all(row[result.columns.index("ember ok")] == "yes"
                               for row in result.rows)
    assert any("geomean" in note for note in result.notes)
