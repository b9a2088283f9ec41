"""Numerical parity of spectral features with librosa (the reference implementation)."""

import numpy as np
import pytest
import torch

librosa = pytest.importorskip("librosa")

from ember.audio import functional as F  # noqa: E402
from ember.audio import transforms as T  # noqa: E402

SR = 16000


@pytest.fixture(scope="module")
def signal() -> np.ndarray:
    """Two tones, a chirp-like sweep and a little noise, 0.5 s at 16 kHz."""
    rng = np.random.default_rng(0)
    t = np.arange(SR // 2) / SR
    y = (0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 3100 * t)
         + 0.1 * np.sin(2 * np.pi * (200 + 4000 * t) * t) + 0.02 * rng.standard_normal(t.size))
    return y.astype(np.float32)


@pytest.mark.parametrize("n_fft,hop,win", [(400, 160, 400), (512, 128, 320)])
def test_spectrogram_matches_librosa_stft(signal, n_fft, hop, win):
    ours = T.Spectrogram(n_fft=n_fft, hop_length=hop, win_length=win)(torch.from_numpy(signal))
    ref = np.abs(librosa.stft(signal, n_fft=n_fft, hop_length=hop, win_length=win,
                              window="hann", center=True, pad_mode="reflect")) ** 2
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-4, rtol=1e-5)


def test_magnitude_spectrogram_matches_librosa(signal):
    ours = T.Spectrogram(n_fft=256, hop_length=64, power=1.0)(torch.from_numpy(signal))
    ref = np.abs(librosa.stft(signal, n_fft=256, hop_length=64, pad_mode="reflect"))
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("mel_scale", ["htk", "slaney"])
@pytest.mark.parametrize("norm", [None, "slaney"])
def test_melscale_fbanks_matches_librosa_filters(mel_scale, norm):
    fb = F.melscale_fbanks(n_freqs=257, f_min=30.0, f_max=7600.0, n_mels=64, sample_rate=SR,
                           norm=norm, mel_scale=mel_scale)
    ref = librosa.filters.mel(sr=SR, n_fft=512, n_mels=64, fmin=30.0, fmax=7600.0,
                              htk=mel_scale == "htk", norm=norm)
    assert fb.shape == (257, 64) and fb.dtype == torch.float32
    np.testing.assert_allclose(fb.numpy(), ref.T, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("mel_scale", ["htk", "slaney"])
@pytest.mark.parametrize("norm", [None, "slaney"])
def test_melspectrogram_matches_librosa(signal, mel_scale, norm):
    kw = dict(n_fft=512, hop_length=160, win_length=400, n_mels=64, f_min=20.0, f_max=8000.0)
    ours = T.MelSpectrogram(sample_rate=SR, norm=norm, mel_scale=mel_scale, **kw)(
        torch.from_numpy(signal))
    ref = librosa.feature.melspectrogram(
        y=signal, sr=SR, n_fft=512, hop_length=160, win_length=400, n_mels=64, fmin=20.0,
        fmax=8000.0, htk=mel_scale == "htk", norm=norm, pad_mode="reflect", power=2.0)
    np.testing.assert_allclose(ours.numpy(), ref, atol=5e-4, rtol=1e-5)


@pytest.mark.parametrize("mel_scale", ["htk", "slaney"])
def test_mfcc_matches_librosa(signal, mel_scale):
    melkwargs = dict(n_fft=512, hop_length=160, n_mels=40, mel_scale=mel_scale,
                     norm="slaney" if mel_scale == "slaney" else None)
    ours = T.MFCC(sample_rate=SR, n_mfcc=20, melkwargs=melkwargs)(torch.from_numpy(signal))
    mel = librosa.feature.melspectrogram(y=signal, sr=SR, n_fft=512, hop_length=160, n_mels=40,
                                         htk=mel_scale == "htk", norm=melkwargs["norm"],
                                         pad_mode="reflect")
    ref = librosa.feature.mfcc(S=librosa.power_to_db(mel, top_db=80.0), n_mfcc=20,
                               dct_type=2, norm="ortho")
    np.testing.assert_allclose(ours.numpy(), ref, atol=5e-4, rtol=1e-5)


def test_mfcc_default_librosa_path(signal):
    # librosa.feature.mfcc straight from the waveform uses slaney mels with slaney norm
    ours = T.MFCC(sample_rate=SR, n_mfcc=13, melkwargs=dict(
        n_fft=2048, hop_length=512, n_mels=128, mel_scale="slaney", norm="slaney"))(
        torch.from_numpy(signal))
    ref = librosa.feature.mfcc(y=signal, sr=SR, n_mfcc=13, pad_mode="reflect")
    np.testing.assert_allclose(ours.numpy(), ref, atol=5e-4, rtol=1e-5)


def test_amplitude_to_db_matches_power_to_db(signal):
    spec = np.abs(librosa.stft(signal, n_fft=256)) ** 2
    ours = T.AmplitudeToDB("power", top_db=80.0)(torch.from_numpy(spec))
    np.testing.assert_allclose(ours.numpy(), librosa.power_to_db(spec, top_db=80.0),
                               atol=1e-4, rtol=1e-5)
    mag = np.sqrt(spec)
    ours = T.AmplitudeToDB("magnitude")(torch.from_numpy(mag))
    np.testing.assert_allclose(ours.numpy(), librosa.amplitude_to_db(mag, top_db=None),
                               atol=1e-4, rtol=1e-5)


def test_compute_deltas_matches_librosa_delta(signal):
    mfcc = T.MFCC(sample_rate=SR, n_mfcc=13, melkwargs=dict(n_fft=400, n_mels=40))(
        torch.from_numpy(signal)).double()
    for width in (3, 5, 9):
        ours = F.compute_deltas(mfcc, win_length=width)
        ref = librosa.feature.delta(mfcc.numpy(), width=width, mode="nearest")
        np.testing.assert_allclose(ours.numpy(), ref, atol=1e-9)


@pytest.mark.parametrize("rate", [0.8, 1.5])
def test_time_stretch_matches_librosa_phase_vocoder(signal, rate):
    hop = 128
    stft = librosa.stft(signal.astype(np.float64), n_fft=512, hop_length=hop)
    ours = T.TimeStretch(hop_length=hop, n_freq=257)(torch.from_numpy(stft), rate)
    ref = librosa.phase_vocoder(stft, rate=rate, hop_length=hop)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-6)
