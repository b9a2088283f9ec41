"""lfilter, biquads, emphasis, FFT convolution and noise mixing against scipy/numpy."""

import math

import numpy as np
import pytest
import scipy.signal as ss
import torch

from ember.audio import functional as F
from ember.audio import transforms as T

SR = 16000


def _tone(freq: float, n: int = 8000, amp: float = 0.5) -> torch.Tensor:
    return amp * torch.sin(2 * math.pi * freq * torch.arange(n, dtype=torch.float64) / SR)


def _rms(x: torch.Tensor) -> float:
    return x[..., 2000:].pow(2).mean().sqrt().item()  # after the filter settles


@pytest.mark.parametrize("order", [1, 2, 4, 8])
def test_lfilter_matches_scipy(order):
    b, a = ss.butter(order, 0.2)
    x = np.random.default_rng(order).uniform(-1, 1, (3, 2, 1000))
    ours = F.lfilter(torch.from_numpy(x), torch.from_numpy(a), torch.from_numpy(b), clamp=False)
    np.testing.assert_allclose(ours.numpy(), ss.lfilter(b, a, x, axis=-1), atol=1e-10)


def test_lfilter_unnormalised_a0_fir_and_clamp():
    x = np.random.default_rng(0).uniform(-1, 1, 300)
    a, b = np.array([2.0, -0.5, 0.1]), np.array([0.6, 0.2, 0.1])
    ours = F.lfilter(torch.from_numpy(x), torch.from_numpy(a), torch.from_numpy(b), clamp=False)
    np.testing.assert_allclose(ours.numpy(), ss.lfilter(b, a, x), atol=1e-12)
    fir_a, fir_b = np.array([1.0, 0.0, 0.0]), np.array([0.5, 0.3, 0.2])
    ours = F.lfilter(torch.from_numpy(x), torch.from_numpy(fir_a), torch.from_numpy(fir_b))
    np.testing.assert_allclose(ours.numpy(), np.convolve(x, fir_b)[:300], atol=1e-12)
    loud = F.lfilter(torch.full((50,), 0.9), torch.tensor([1.0, -0.9]), torch.tensor([1.0, 0.0]))
    assert loud.max() == 1.0  # clamp=True by default, as torchaudio


def test_lfilter_filter_bank_batching():
    x = np.random.default_rng(1).uniform(-1, 1, (4, 2, 500))
    (b1, a1), (b2, a2) = ss.butter(2, 0.1), ss.butter(2, 0.4, "high")
    a = torch.tensor(np.stack([a1, a2]))
    b = torch.tensor(np.stack([b1, b2]))
    ours = F.lfilter(torch.from_numpy(x), a, b, clamp=False)
    np.testing.assert_allclose(ours[:, 0].numpy(), ss.lfilter(b1, a1, x[:, 0]), atol=1e-10)
    np.testing.assert_allclose(ours[:, 1].numpy(), ss.lfilter(b2, a2, x[:, 1]), atol=1e-10)
    stacked = F.lfilter(torch.from_numpy(x[:, 0]), a, b, clamp=False, batching=False)
    assert stacked.shape == (4, 2, 500)
    np.testing.assert_allclose(stacked[:, 1].numpy(), ss.lfilter(b2, a2, x[:, 0]), atol=1e-10)


def test_lfilter_gradients():
    x = torch.randn(1, 24, dtype=torch.float64, requires_grad=True)
    a = torch.tensor([1.0, -0.5, 0.2], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.3, 0.2, 0.1], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, a, b: F.lfilter(x, a, b, clamp=False), (x, a, b),
                                    fast_mode=True)


def _clustered_sixth_order():
    """A stable all-pole filter with poles 0.95 e^(+-0.1i, +-0.15i, +-0.2i): its direct-form
    coefficients are badly conditioned (a float32 blocked recursion once overflowed on it)."""
    poles = [0.95 * np.exp(1j * t) for t in (0.1, 0.15, 0.2)]
    poles += [p.conjugate() for p in poles]
    a = np.real(np.poly(poles))
    b = np.zeros_like(a)
    b[0] = 1.0
    return poles, a, b


def test_lfilter_float32_stays_finite_and_exact_on_a_clustered_sixth_order_filter():
    _, a, b = _clustered_sixth_order()
    x = np.random.default_rng(0).standard_normal(20000).astype(np.float32) * 1e-3
    ours = F.lfilter(torch.from_numpy(x), torch.tensor(a, dtype=torch.float32),
                     torch.tensor(b, dtype=torch.float32), clamp=False)
    assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
    # the filter float32 inputs describe, run in float64: only the output rounding remains
    a32, b32 = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    ref = ss.lfilter(b32, a32, x.astype(np.float64))
    assert np.abs(ours.double().numpy() - ref).max() <= 1e-6 * np.abs(ref).max()


def test_lfilter_float64_accuracy_on_a_clustered_sixth_order_filter():
    poles, a, b = _clustered_sixth_order()
    x = np.random.default_rng(1).standard_normal(20000) * 1e-3
    ref = ss.sosfilt(ss.zpk2sos([], poles, 1.0), x)  # cascaded biquads: well conditioned
    ours = F.lfilter(torch.from_numpy(x), torch.from_numpy(a), torch.from_numpy(b), clamp=False)
    assert np.abs(ours.numpy() - ref).max() <= 1e-7 * np.abs(ref).max()


def test_lowpass_biquad_float32_is_accurate_at_20_hz():
    """torchaudio 2.9's float32 result is 8.6e-4 from float64 on this case."""
    sr = 44100
    x = np.random.default_rng(2).standard_normal(sr) * 0.3
    ref = F.lowpass_biquad(torch.from_numpy(x), sr, 20.0).numpy()
    ours = F.lowpass_biquad(torch.from_numpy(x).float(), sr, 20.0)
    assert ours.dtype == torch.float32
    assert np.abs(ours.double().numpy() - ref).max() < 1e-4


def test_lfilter_bad_shapes():
    with pytest.raises(ValueError, match="same shape"):
        F.lfilter(torch.randn(10), torch.ones(3), torch.ones(2))
    with pytest.raises(ValueError, match="num_filters"):
        F.lfilter(torch.randn(3, 10), torch.ones(2, 3), torch.ones(2, 3))


def test_biquads_shape_the_spectrum():
    low, high = _tone(200), _tone(6000)
    lp = lambda x: F.lowpass_biquad(x, SR, 1000.0)
    hp = lambda x: F.highpass_biquad(x, SR, 1000.0)
    assert _rms(lp(low)) > 0.95 * _rms(low) and _rms(lp(high)) < 0.05 * _rms(high)
    assert _rms(hp(high)) > 0.95 * _rms(high) and _rms(hp(low)) < 0.1 * _rms(low)
    centre = _tone(2000)
    assert _rms(F.bandreject_biquad(centre, SR, 2000.0, Q=2.0)) < 0.01 * _rms(centre)
    assert _rms(F.bandpass_biquad(centre, SR, 2000.0)) == pytest.approx(_rms(centre), rel=0.02)
    assert _rms(F.bandpass_biquad(low, SR, 2000.0, Q=4.0)) < 0.1 * _rms(low)
    # SoX 'band' is two-pole: unit gain at the centre, skirts falling 6 dB/octave
    assert _rms(F.band_biquad(centre, SR, 2000.0, Q=4.0)) == pytest.approx(_rms(centre), rel=0.02)
    assert _rms(F.band_biquad(low, SR, 2000.0, Q=4.0)) < 0.3 * _rms(low)
    # all-pass keeps the level at every frequency
    for x in (low, centre, high):
        assert _rms(F.allpass_biquad(x, SR, 1500.0)) == pytest.approx(_rms(x), rel=0.02)


def test_gain_biquads_reach_their_gain():
    quiet = 0.1
    for fn, freq, tone in [(F.bass_biquad, 100, 50.0), (F.treble_biquad, 3000, 7000.0)]:
        x = _tone(tone, amp=quiet)
        boosted = fn(x, SR, 6.0, freq)
        assert 20 * math.log10(_rms(boosted) / _rms(x)) == pytest.approx(6.0, abs=0.8)
    x = _tone(1000, amp=quiet)
    y = F.equalizer_biquad(x, SR, 1000.0, gain=-6.0, Q=1.0)
    assert 20 * math.log10(_rms(y) / _rms(x)) == pytest.approx(-6.0, abs=0.1)


def test_biquad_matches_scipy_with_same_coefficients():
    x = np.random.default_rng(2).uniform(-0.5, 0.5, 400)
    b, a = [0.2, 0.3, 0.1], [1.2, -0.4, 0.1]
    ours = F.biquad(torch.from_numpy(x), *b, *a)
    np.testing.assert_allclose(ours.numpy(), np.clip(ss.lfilter(b, a, x), -1, 1), atol=1e-12)


def test_emphasis_round_trip():
    x = torch.randn(2, 3, 500) * 0.05
    pre = F.preemphasis(x, 0.9)
    torch.testing.assert_close(pre[..., 1:], x[..., 1:] - 0.9 * x[..., :-1])
    torch.testing.assert_close(pre[..., 0], x[..., 0])
    torch.testing.assert_close(T.Deemphasis(0.9)(T.Preemphasis(0.9)(x)), x, atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
def test_fftconvolve_matches_scipy_with_broadcasting(mode):
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((3, 1, 100)), rng.standard_normal((1, 2, 31))
    ours = F.fftconvolve(torch.from_numpy(x), torch.from_numpy(y), mode)
    assert ours.shape[:2] == (3, 2)
    torch.testing.assert_close(F.convolve(torch.from_numpy(x), torch.from_numpy(y), mode), ours)
    # "same" keeps the first argument's length even when it is the shorter one
    short_first = F.convolve(torch.from_numpy(y[0]), torch.from_numpy(x[0]), mode)
    np.testing.assert_allclose(short_first.numpy(), ss.fftconvolve(y[0], x[0], mode),
                               atol=1e-10)
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose(ours[i, j].numpy(),
                                       ss.fftconvolve(x[i, 0], y[0, j], mode), atol=1e-10)
    with pytest.raises(ValueError, match="mode"):
        T.FFTConvolve("circular")
    with pytest.raises(ValueError, match="broadcast"):
        F.fftconvolve(torch.randn(3, 10), torch.randn(2, 5))


def test_add_noise_reaches_requested_snr():
    g = torch.Generator().manual_seed(0)
    wav, noise = torch.randn(4, 1000, generator=g), torch.randn(4, 1000, generator=g)
    snr = torch.tensor([0.0, 5.0, 10.0, 20.0])
    out = F.add_noise(wav, noise, snr)
    added = out - wav
    got = 10 * torch.log10(wav.pow(2).sum(-1) / added.pow(2).sum(-1))
    torch.testing.assert_close(got, snr, atol=1e-4, rtol=0)
    lengths = torch.tensor([1000, 500, 800, 1000])
    out = T.AddNoise()(wav, noise, snr, lengths)
    for i, n in enumerate(lengths.tolist()):
        added = out[i, :n] - wav[i, :n]
        got = 10 * torch.log10(wav[i, :n].pow(2).sum() / added.pow(2).sum())
        assert got.item() == pytest.approx(snr[i].item(), abs=1e-3)
    with pytest.raises(ValueError, match="snr"):
        F.add_noise(wav, noise, torch.tensor(3.0))


def test_add_noise_broadcasts_leading_dims():
    # as torchaudio: one noise row (or one snr) for a batch; equal to the expanded call
    g = torch.Generator().manual_seed(1)
    wav, noise = torch.randn(3, 2, 500, generator=g), torch.randn(1, 2, 500, generator=g)
    snr, lengths = torch.tensor([[0.0], [6.0], [12.0]]), torch.tensor([[500, 300]])
    expect = F.add_noise(wav, noise.expand(3, 2, 500), snr.expand(3, 2),
                         lengths.expand(3, 2))
    torch.testing.assert_close(F.add_noise(wav, noise, snr, lengths), expect, rtol=0, atol=0)
    added = F.add_noise(wav, noise, snr) - wav
    got = 10 * torch.log10(wav.pow(2).sum(-1) / added.pow(2).sum(-1))
    torch.testing.assert_close(got, snr.expand(3, 2), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="broadcast"):
        F.add_noise(wav, torch.randn(2, 2, 500), snr)
    with pytest.raises(ValueError, match="length"):
        F.add_noise(wav, torch.randn(3, 2, 499), snr)
