"""`ember bench audio`'s lfilter, fbank and Wav2Vec2 pieces at tiny sizes (no timing asserted)."""

import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from ember.tools.bench import audio_peers
from ember.tools.bench.audio import _clips
from ember.tools.bench.audio_filters import (
    fbank_rows,
    lfilter_rows,
    resonator_coefficients,
)

pytestmark = pytest.mark.usefixtures("one_thread")

PEER = audio_peers.PEER_PYTHON.exists()


def _err(row):
    return float(row[1].rsplit("err ", 1)[1])


def test_resonator_has_the_stated_poles_and_unit_dc_gain():
    b, a = resonator_coefficients()
    poles = np.roots(a)
    np.testing.assert_allclose(np.abs(poles), 0.95, rtol=1e-9)
    np.testing.assert_allclose(sorted(np.abs(np.angle(poles))), [0.1, 0.1, 0.15, 0.15, 0.2, 0.2],
                               rtol=1e-9)
    assert math.isclose(sum(b) / sum(a), 1.0, rel_tol=1e-12)


def test_lfilter_rows_report_time_and_accuracy():
    rows, notes = lfilter_rows(_clips(2, 0.05, 16000, seed=3), rounds=1, settle=0.0)
    assert len(rows) == (12 if PEER else 8)
    for row in rows:
        assert row[2] > 0 and math.isfinite(row[3]) and row[3] > 0
    by_name = {(r[0].split(",")[0], r[1].split(";")[0]): _err(r) for r in rows}
    assert by_name[("lfilter biquad", "scipy.signal.lfilter, float64")] == 0.0
    assert by_name[("lfilter biquad", "ember.audio.functional.lfilter, float64")] < 1e-10
    assert by_name[("lfilter biquad", "ember.audio.functional.lfilter, float32 in (float64 "
                                      "recursion)")] < 1e-5
    if PEER:
        assert by_name[("lfilter biquad", "torchaudio.functional.lfilter, float64")] < 1e-10
    assert any("err = max" in n for n in notes)


def test_peer_runs_say_why_without_the_environment(monkeypatch, tmp_path):
    monkeypatch.setattr(audio_peers, "PEER_PYTHON", tmp_path / "missing" / "python")
    assert "no .venv-peers-audio" in audio_peers.torchaudio_runs([], {}, 1)
    rows, notes = fbank_rows(_clips(1, 0.2, 16000, seed=4), rounds=1, settle=0.0)
    assert rows == [] and "not measured" in notes[0]


@pytest.mark.skipif(not PEER, reason="needs .venv-peers-audio")
def test_fbank_rows_match_torchaudio():
    rows, notes = fbank_rows(_clips(1, 0.2, 16000, seed=4), rounds=1, settle=0.0)
    assert [r[1] for r in rows] == ["ember.audio.compliance.kaldi.fbank",
                                    "torchaudio.compliance.kaldi.fbank"]
    assert float(notes[0].split("= ", 1)[1].split()[0]) < 1e-3


@pytest.mark.slow
def test_wav2vec2_rows_quick():
    from ember.tools.bench.audio_wav2vec2 import wav2vec2_rows

    rows, notes = wav2vec2_rows(1, 0.1, rounds=1, quick=True)
    assert [r[1].split("(")[0] for r in rows] == ["eager", "torch.compile", "torch.compile"]
    for note in notes:
        assert float(note.rsplit("= ", 1)[1]) < 1e-4
