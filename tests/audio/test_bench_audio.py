"""`ember bench audio --quick` runs and reports every candidate (no timing is asserted)."""

import math

import pytest

pytest.importorskip("librosa")

from ember.tools.bench.audio import run


def test_quick_bench_reports_all_candidates():
    result = run(quick=True)
    assert result.name == "audio"
    candidates = [row[1] for row in result.rows]
    assert sum("librosa.feature.melspectrogram" in c for c in candidates) == 1
    assert sum("soxr_hq" in c for c in candidates) == 1
    assert sum(c == "ember.audio.load" for c in candidates) == 1
    for row in result.rows:
        assert row[2] > 0 and math.isfinite(row[3]) and row[3] > 0
    # the compared outputs agree, so the timings compare like with like
    mel_note = next(n for n in result.notes if n.startswith("MelSpectrogram max"))
    assert float(mel_note.rsplit("= ", 1)[1]) < 1e-4
