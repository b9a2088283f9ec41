"""ember.audio's SoX-style effects, pitch detection, voice activity detection and
compliance.kaldi against the real torchaudio 2.9 (issue #22).

Same conventions as test_parity.py: runs in `.venv-peers-audio`, each test names the shared
API it covers in ``compares`` (read by test_coverage.py), and tolerances are the measured
difference or zero where the same arithmetic gives bit-equal results. Inputs are random and
sine (or speech-like) waveforms, float32 and float64, single and batched.
"""

from __future__ import annotations

import math

import pytest

torchaudio = pytest.importorskip("torchaudio")

import torch  # noqa: E402
import torchaudio.compliance.kaldi as TAK  # noqa: E402
import torchaudio.functional as TAF  # noqa: E402
import torchaudio.transforms as TAT  # noqa: E402

import ember.audio.compliance.kaldi as EK  # noqa: E402
import ember.audio.functional as EF  # noqa: E402
import ember.audio.transforms as ET  # noqa: E402

SR = 16000
DTYPES = [torch.float32, torch.float64]


def wave(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * 1.6 - 0.8).to(dtype)


def sines(freqs, n, dtype=torch.float32, amp=0.5):
    t = torch.arange(n, dtype=torch.float64) / SR
    return torch.stack([amp * torch.sin(2 * math.pi * f * t) for f in freqs]).to(dtype)


def speech_like(n, onset, seed, channels=1, dtype=torch.float32):
    """Faint noise, then from ``onset`` a gliding harmonic tone with a 4 Hz envelope."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(channels, n, generator=g, dtype=torch.float64) * 1e-3
    t = torch.arange(n - onset, dtype=torch.float64) / SR
    phase = 2 * math.pi * torch.cumsum(140 + 20 * torch.sin(2 * math.pi * 3 * t), 0) / SR
    voiced = sum(torch.sin(k * phase) / k for k in range(1, 15))
    x[:, onset:] += voiced * 0.3 * (0.6 + 0.4 * torch.sin(2 * math.pi * 4 * t))
    return x.to(dtype)


def assert_same(ours, theirs, atol=0.0, rtol=0.0):
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (
        ours.dtype, ours.shape, theirs.dtype, theirs.shape)
    torch.testing.assert_close(ours, theirs, atol=atol, rtol=rtol)


# ------------------------------------------------------------------ phaser

PHASER = [dict(), dict(sinusoidal=False), dict(gain_in=0.9, gain_out=1.0, delay_ms=1.0,
                                               decay=0.9, mod_speed=2.0),
          dict(delay_ms=5.0, decay=0.2, mod_speed=0.1)]


# torchaudio runs the recursion sample by sample, ember sums each echo chain by pointer
# doubling: the same terms in another order (measured 6.6e-7 float32, 1.0e-15 float64)
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-6), (torch.float64, 1e-13)])
@pytest.mark.parametrize("kw", PHASER, ids=str)
def test_phaser(kw, dtype, atol):
    for x in (wave(2, 3, 3000, seed=1, dtype=dtype), sines([220.0], 3000, dtype)[0]):
        assert_same(EF.phaser(x, SR, **kw), TAF.phaser(x, SR, **kw), atol=atol)


test_phaser.compares = ("functional:phaser",)


def test_phaser_gradient():
    x = wave(2, 800, seed=2, dtype=torch.float64) * 0.3
    grads = []
    for lib in (EF, TAF):
        leaf = x.clone().requires_grad_()
        lib.phaser(leaf, 8000, decay=0.7).pow(2).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-13, rtol=0)


test_phaser_gradient.compares = ("functional:phaser",)


# ------------------------------------------------------------------ flanger

FLANGER = [dict(), dict(regen=50.0), dict(delay=3.0, regen=-30.0, interpolation="quadratic"),
           dict(modulation="triangular", regen=20.0, delay=1.0, depth=5.0, phase=60.0,
                speed=2.0, width=40.0),
           dict(interpolation="quadratic", depth=10.0, speed=10.0)]


# the same arithmetic per sample: bit-equal, feedback included
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", FLANGER, ids=str)
def test_flanger(kw, dtype):
    for x in (wave(2, 2, 1500, seed=3, dtype=dtype), sines([150.0, 900.0], 1500, dtype)):
        assert_same(EF.flanger(x, SR, **kw), TAF.flanger(x, SR, **kw))


test_flanger.compares = ("functional:flanger",)


def test_flanger_gradient():
    x = wave(1, 2, 600, seed=4, dtype=torch.float64) * 0.3
    grads = []
    for lib in (EF, TAF):
        leaf = x.clone().requires_grad_()
        lib.flanger(leaf, 8000, regen=40.0, delay=1.0).pow(2).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-13, rtol=0)


test_flanger_gradient.compares = ("functional:flanger",)


# ------------------------------------------------------------------ detect_pitch_frequency

PITCH = [dict(), dict(frame_time=0.02, win_length=5, freq_low=60, freq_high=1000),
         dict(win_length=4, freq_low=100, freq_high=2000)]


# the NCCF sums run in torchaudio's order, so even the ties between the lags of a pure sine
# resolve alike: bit-equal
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", PITCH, ids=str)
def test_detect_pitch_frequency(kw, dtype):
    tones = sines([110.0, 220.0, 440.0, 1000.0], 12000, dtype).reshape(2, 2, -1)
    for x in (tones, wave(3, 6000, seed=5, dtype=dtype), wave(6000, seed=6, dtype=dtype)):
        assert_same(EF.detect_pitch_frequency(x, SR, **kw),
                    TAF.detect_pitch_frequency(x, SR, **kw))


test_detect_pitch_frequency.compares = ("functional:detect_pitch_frequency",)


# ------------------------------------------------------------------ vad / Vad

VAD = [
    (lambda dt: speech_like(3 * SR, int(1.3 * SR), 1, dtype=dt), dict()),
    (lambda dt: speech_like(3 * SR, int(0.7 * SR), 2, channels=2, dtype=dt),
     dict(pre_trigger_time=0.1)),
    (lambda dt: speech_like(2 * SR, 9000, 3, dtype=dt)[0],
     dict(trigger_level=5.0, search_time=0.5, allowed_gap=0.1)),
    (lambda dt: speech_like(3 * SR, int(1.1 * SR), 4, dtype=dt),
     dict(measure_freq=10.0, boot_time=0.5, noise_reduction_amount=0.5)),
    (lambda dt: wave(2, 20000, seed=7, dtype=dt), dict()),                  # loud noise
    (lambda dt: wave(1, 30000, seed=8, dtype=dt) * 1e-4, dict()),           # never triggers
    (lambda dt: wave(1, 30000, seed=9, dtype=dt) * 1e-4, dict(pre_trigger_time=0.2)),
]


# both detect in float32 with the same operations and return a slice of the input: equal
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make,kw", VAD, ids=[str(i) for i in range(len(VAD))])
def test_vad(make, kw, dtype):
    x = make(dtype)
    assert_same(EF.vad(x, SR, **kw), TAF.vad(x, SR, **kw))


test_vad.compares = ("functional:vad",)


def test_vad_transform():
    x = speech_like(3 * SR, int(1.2 * SR), 10, channels=2)
    ours = ET.Vad(SR, trigger_level=6.0, pre_trigger_time=0.05)
    theirs = TAT.Vad(SR, trigger_level=6.0, pre_trigger_time=0.05)
    assert_same(ours(x), theirs(x))
    ours.load_state_dict(theirs.state_dict(), strict=True)   # no state, on either side
    theirs.load_state_dict(ours.state_dict(), strict=True)


test_vad_transform.compares = ("transforms:Vad",)


# ------------------------------------------------------------------ PitchShift

PITCH_SHIFTS = [((SR, 12), {}), ((SR, -12), dict(n_fft=256)),
                ((8000, 2, 1), dict(win_length=400, hop_length=100, n_fft=512,
                                    window_fn=torch.hamming_window)),
                ((SR, 0), {})]


# float32 (torchaudio's PitchShift kernel is always float32, so it fails on float64 input):
# the resampling GEMMs sum in another order than its conv1d (measured 3.6e-7); state_dicts
# (window and the lazily built kernel) load both ways after the first call
@pytest.mark.parametrize("args,kw", PITCH_SHIFTS, ids=str)
def test_pitch_shift_transform(args, kw):
    x = wave(2, 3, 4000, seed=11)
    ours, theirs = ET.PitchShift(*args, **kw), TAT.PitchShift(*args, **kw)
    assert_same(ours(x), theirs(x), atol=2e-6)
    fresh = ET.PitchShift(*args, **kw)
    fresh.load_state_dict(theirs.state_dict(), strict=True)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    assert_same(fresh(x), theirs(x), atol=2e-6)


# float64: ours keeps the input's dtype; compared with torchaudio's functional pitch_shift
@pytest.mark.parametrize("args,kw", PITCH_SHIFTS, ids=str)
def test_pitch_shift_transform_float64(args, kw):
    x = wave(2, 4000, seed=12, dtype=torch.float64)
    ours = ET.PitchShift(*args, **kw, wkwargs=dict(dtype=torch.float64))
    theirs = TAF.pitch_shift(x, args[0], *args[1:], n_fft=ours.n_fft,
                             win_length=ours.win_length, hop_length=ours.hop_length,
                             window=ours.window)
    assert_same(ours(x), theirs, atol=1e-12)


test_pitch_shift_transform.compares = ("transforms:PitchShift",)
test_pitch_shift_transform_float64.compares = ("transforms:PitchShift",)


def test_pitch_shift_float64():
    x = wave(3, 4000, seed=13, dtype=torch.float64)
    for n, bpo in [(12, 12), (-12, 12), (-6, 6)]:
        window = torch.hann_window(512, dtype=torch.float64)
        assert_same(EF.pitch_shift(x, SR, n, bpo, window=window),
                    TAF.pitch_shift(x, SR, n, bpo, window=window), atol=1e-12)


test_pitch_shift_float64.compares = ("functional:pitch_shift",)


# ------------------------------------------------------------------ compliance.kaldi

KALDI_COMMON = [
    dict(),
    dict(channel=1),
    dict(snip_edges=False, window_type="hamming", round_to_power_of_two=False,
         frame_length=20.0, frame_shift=7.0),
    dict(window_type="blackman", preemphasis_coefficient=0.0, remove_dc_offset=False,
         raw_energy=False, subtract_mean=True, energy_floor=0.0),
    dict(window_type="hanning", snip_edges=False, frame_length=5.0, frame_shift=12.0),
    dict(sample_frequency=8000.0, window_type="rectangular", blackman_coeff=0.3),
]
KALDI_MEL = [
    dict(use_energy=True, htk_compat=True, num_mel_bins=40, low_freq=60.0, high_freq=-400.0),
    dict(use_energy=True, vtln_warp=1.1),
    dict(vtln_warp=0.9, htk_compat=True, vtln_low=200.0, vtln_high=6000.0),
]
KALDI = ([("spectrogram", kw) for kw in KALDI_COMMON]
         + [("fbank", kw) for kw in KALDI_COMMON + KALDI_MEL
            + [dict(use_log_fbank=False, use_power=False)]]
         + [("mfcc", kw) for kw in KALDI_COMMON + KALDI_MEL
            + [dict(num_ceps=20, num_mel_bins=30, cepstral_lifter=0.0),
               dict(num_ceps=10, cepstral_lifter=30.0, subtract_mean=True)]])


# the same float32 filterbank, DCT and lifter and the same torch ops: bit-equal
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,kw", KALDI, ids=[f"{n}-{i}" for i, (n, _) in enumerate(KALDI)])
def test_kaldi(name, kw, dtype):
    inputs = [wave(2, 16000, seed=14, dtype=dtype) * 0.5]
    if kw.get("channel", -1) < 1:
        inputs.append(sines([440.0], 12345, dtype, amp=0.3))
    for x in inputs:
        assert_same(getattr(EK, name)(x, **kw), getattr(TAK, name)(x, **kw))


test_kaldi.compares = ("compliance.kaldi:spectrogram", "compliance.kaldi:fbank",
                       "compliance.kaldi:mfcc")


def test_kaldi_dither_draws_like_torchaudio():
    x = wave(1, 8000, seed=15)
    outs = []
    for lib in (EK, TAK):
        torch.manual_seed(3)
        outs.append(lib.fbank(x, dither=1.0))
    assert_same(*outs)


test_kaldi_dither_draws_like_torchaudio.compares = ("compliance.kaldi:fbank",)


def test_kaldi_helpers():
    hz = torch.linspace(0, 8000, 101)
    for name in ("mel_scale", "inverse_mel_scale"):
        assert_same(getattr(EK, name)(hz), getattr(TAK, name)(hz))
    for name in ("mel_scale_scalar", "inverse_mel_scale_scalar"):
        assert getattr(EK, name)(1234.5) == getattr(TAK, name)(1234.5)
    for args in [(23, 512, 16000.0, 20.0, 0.0, 100.0, -500.0, 1.0),
                 (40, 1024, 22050.0, 60.0, 8000.0, 200.0, 7000.0, 1.07),
                 (30, 256, 8000.0, 0.0, -200.0, 150.0, -600.0, 0.93)]:
        for a, b in zip(EK.get_mel_banks(*args), TAK.get_mel_banks(*args)):
            assert_same(a, b)
    assert_same(EK.vtln_warp_freq(100.0, 7000.0, 20.0, 8000.0, 1.1, hz),
                TAK.vtln_warp_freq(100.0, 7000.0, 20.0, 8000.0, 1.1, hz))
    mel = EK.mel_scale(hz)
    assert_same(EK.vtln_warp_mel_freq(100.0, 7000.0, 20.0, 8000.0, 0.9, mel),
                TAK.vtln_warp_mel_freq(100.0, 7000.0, 20.0, 8000.0, 0.9, mel))


test_kaldi_helpers.compares = tuple(f"compliance.kaldi:{n}" for n in (
    "mel_scale", "inverse_mel_scale", "mel_scale_scalar", "inverse_mel_scale_scalar",
    "get_mel_banks", "vtln_warp_freq", "vtln_warp_mel_freq"))


# ------------------------------------------------------------------ errors

ERRORS = [
    ("flanger 5 channels", lambda L: L.F.flanger(wave(5, 100), SR)),
    ("flanger modulation", lambda L: L.F.flanger(wave(2, 100), SR, modulation="square")),
    ("flanger interpolation", lambda L: L.F.flanger(wave(2, 100), SR, interpolation="cubic")),
    ("vad empty cepstrum", lambda L: L.F.vad(wave(1, 4000), SR, hp_lifter_freq=3000.0)),
    ("kaldi window_type", lambda L: L.K.fbank(wave(1, 4000), window_type="kaiser")),
    ("kaldi channel", lambda L: L.K.spectrogram(wave(1, 4000), channel=2)),
    ("kaldi frame_length", lambda L: L.K.mfcc(wave(1, 100))),
    ("kaldi preemphasis", lambda L: L.K.fbank(wave(1, 4000), preemphasis_coefficient=1.5)),
    ("kaldi num_ceps", lambda L: L.K.mfcc(wave(1, 4000), num_ceps=30)),
    ("kaldi mel bins", lambda L: L.K.fbank(wave(1, 4000), num_mel_bins=3)),
    ("kaldi vtln", lambda L: L.K.fbank(wave(1, 4000), vtln_warp=1.1, vtln_low=10.0)),
]


class _Lib:
    def __init__(self, F, K):
        self.F, self.K = F, K


@pytest.mark.parametrize("build", [e[1] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_raises_where_torchaudio_raises(build):
    with pytest.raises(Exception):  # noqa: B017 - torchaudio raises ValueError or asserts
        build(_Lib(TAF, TAK))
    with pytest.raises(ValueError):
        build(_Lib(EF, EK))
