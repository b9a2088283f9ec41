"""phaser, flanger, detect_pitch_frequency, vad, Vad, PitchShift and compliance.kaldi without
torchaudio: against direct per-sample loops of SoX's recursions and known answers (sine
pitches, speech onsets, filterbank peaks). torchaudio itself is compared in
tests/peers/audio/test_parity_sox.py."""

import math

import pytest
import torch

from ember.audio import functional as F
from ember.audio import transforms as T
from ember.audio.compliance import kaldi
from ember.audio.functional.modulation import _lfo_table, _round_half_away

SR = 16000


def _rand(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=dtype) * 2 - 1) * 0.5


def _sine(freq, n, amp=0.5, dtype=torch.float64):
    return amp * torch.sin(2 * math.pi * freq * torch.arange(n, dtype=dtype) / SR)


def _speech_like(n, onset, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, generator=g, dtype=torch.float64) * 1e-3
    t = torch.arange(n - onset, dtype=torch.float64) / SR
    phase = 2 * math.pi * torch.cumsum(140 + 20 * torch.sin(2 * math.pi * 3 * t), 0) / SR
    voiced = sum(torch.sin(k * phase) / k for k in range(1, 15))
    x[:, onset:] += voiced * 0.3 * (0.6 + 0.4 * torch.sin(2 * math.pi * 4 * t))
    return x.float()


# ------------------------------------------------------------------ phaser / flanger

def _phaser_loop(x, sr, gain_in, gain_out, delay_ms, decay, mod_speed, sinusoidal):
    """SoX's phaser as written: a ring buffer read at a modulated offset, one sample a step."""
    length = int(delay_ms * 0.001 * sr + 0.5)
    mod_len = int(sr / mod_speed + 0.5)
    mod = _round_half_away(_lfo_table(not sinusoidal, mod_len, 1.0, float(length),
                                      math.pi / 2, x.device)).tolist()
    buf = [0.0] * length
    out = []
    pos = 0
    for i, v in enumerate(x.tolist()):
        read = buf[(pos + mod[i % mod_len]) % length]
        pos = (pos + 1) % length
        y = v * gain_in + read
        buf[pos] = y * decay
        out.append(y)
    return (torch.tensor(out, dtype=x.dtype) * gain_out).clamp(-1, 1)


@pytest.mark.parametrize("kw", [dict(), dict(decay=0.9, delay_ms=1.0, mod_speed=2.0,
                                             sinusoidal=False, gain_in=0.9)])
def test_phaser_equals_sox_loop(kw):
    x = _rand(700, seed=1)
    args = dict(gain_in=0.4, gain_out=0.74, delay_ms=3.0, decay=0.4, mod_speed=0.5,
                sinusoidal=True) | kw
    want = _phaser_loop(x, 8000, **args)
    torch.testing.assert_close(F.phaser(x, 8000, **args), want, atol=1e-13, rtol=0)
    batched = F.phaser(torch.stack([x, -x]).reshape(1, 2, -1), 8000, **args)
    assert batched.shape == (1, 2, 700)
    torch.testing.assert_close(batched[0, 0], want, atol=1e-13, rtol=0)


def _flanger_loop(x, sr, delay, depth, regen, width, speed, phase, triangular, quadratic):
    """SoX's flanger per sample on (channels, time): a ring buffer moving back a slot a step."""
    fb, gain = regen / 100, width / 100
    in_gain = 1 / (1 + gain)
    gain = gain / (1 + gain) * (1 - abs(fb))
    buf_len = int((delay + depth) / 1000 * sr + 0.5) + 2
    lfo_len = int(sr / speed)
    lfo = _lfo_table(triangular, lfo_len, float(math.floor(delay / 1000 * sr + 0.5)),
                     float(buf_len - 2), 3 * math.pi / 2, x.device).float().double().tolist()
    channels, n = x.shape
    bufs = [[0.0] * buf_len for _ in range(channels)]
    last = [0.0] * channels
    out = torch.zeros_like(x)
    pos = 0
    for i in range(n):
        pos = (pos + buf_len - 1) % buf_len
        for c in range(channels):
            sweep = lfo[(i % lfo_len + int(c * lfo_len * phase / 100 + 0.5)) % lfo_len]
            k, f = int(math.floor(sweep)), sweep - math.floor(sweep)
            bufs[c][pos] = x[c, i].item() + last[c] * fb
            d0, d1, d2 = (bufs[c][(pos + k + t) % buf_len] for t in range(3))
            if quadratic:
                a = (d2 - d0) * 0.5 - (d1 - d0)
                b = (d1 - d0) * 2 - (d2 - d0) * 0.5
                delayed = d0 + (a * f + b) * f
            else:
                delayed = d0 + (d1 - d0) * f
            last[c] = delayed
            out[c, i] = x[c, i].item() * in_gain + delayed * gain
    return out.clamp(-1, 1)


@pytest.mark.parametrize("kw", [dict(regen=60.0), dict(regen=-40.0, delay=2.0, quadratic=True),
                                dict(triangular=True, depth=5.0, speed=3.0, phase=50.0)])
def test_flanger_equals_sox_loop(kw):
    x = _rand(3, 500, seed=2)
    args = dict(delay=0.0, depth=2.0, regen=0.0, width=71.0, speed=0.5, phase=25.0,
                triangular=False, quadratic=False) | kw
    want = _flanger_loop(x, 8000, **args)
    got = F.flanger(x, 8000, args["delay"], args["depth"], args["regen"], args["width"],
                    args["speed"], args["phase"],
                    "triangular" if args["triangular"] else "sinusoidal",
                    "quadratic" if args["quadratic"] else "linear")
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_flanger_is_differentiable():
    x = _rand(2, 300, seed=3).requires_grad_()
    F.flanger(x, 8000, regen=50.0).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


# ------------------------------------------------------------------ pitch

# (torchaudio's NCCF, unnormalised by design, can pick the octave below where a period is a
# whole number of samples, e.g. 440 Hz after the first frames; ember keeps that behaviour)
@pytest.mark.parametrize("freq", [110.0, 220.0, 300.0, 500.0])
def test_detect_pitch_frequency_finds_a_sine(freq):
    x = torch.stack([_sine(freq, 8000), _sine(freq, 8037)[37:]]).float()   # two phases
    got = F.detect_pitch_frequency(x, SR)
    assert got.dtype == torch.float32 and got.shape == (2, 50 - 15)
    assert ((got - freq).abs() < 0.03 * freq).all()


def test_pitch_shift_moves_a_sine_an_octave():
    x = _sine(440.0, 8000).float()
    up = T.PitchShift(SR, 12, n_fft=1024)(x[None])[0]
    spectrum = torch.fft.rfft(up[1000:7000] * torch.hann_window(6000)).abs()
    assert abs(spectrum.argmax().item() * SR / 6000 - 880.0) < 5.0
    assert T.PitchShift(SR, 12, n_fft=1024).kernel.__class__.__name__ == "UninitializedParameter"


def test_pitch_shift_keeps_float64():
    x = _rand(2, 2000, seed=4)
    shifter = T.PitchShift(SR, -12, n_fft=256, wkwargs=dict(dtype=torch.float64))
    out = shifter(x)
    assert out.dtype == torch.float64 and out.shape == x.shape
    assert shifter.kernel.dtype == torch.float64
    window = torch.hann_window(256, dtype=torch.float64)
    torch.testing.assert_close(out, F.pitch_shift(x, SR, -12, n_fft=256, window=window))


# ------------------------------------------------------------------ vad

def test_vad_trims_leading_silence():
    onset = int(1.0 * SR)
    x = _speech_like(3 * SR, onset)
    out = F.vad(x, SR)
    start = x.shape[-1] - out.shape[-1]
    assert onset - int(0.3 * SR) <= start <= onset       # keeps the quiet lead-in bursts
    torch.testing.assert_close(out, x[:, start:], atol=0, rtol=0)
    torch.testing.assert_close(T.Vad(SR)(x), out, atol=0, rtol=0)
    assert F.vad(x[0], SR).shape == out.shape[1:]       # (time,) input


def test_vad_of_silence_keeps_only_the_pre_trigger():
    quiet = _rand(1, 2 * SR, seed=5).float() * 1e-4
    assert F.vad(quiet, SR).shape == (1, 0)
    assert F.vad(quiet, SR, pre_trigger_time=0.1).shape == (1, 1600)


# ------------------------------------------------------------------ compliance.kaldi

def test_kaldi_shapes_and_peaks():
    x = _sine(1000.0, SR, 0.3).float()[None]
    spec = kaldi.spectrogram(x)
    assert spec.shape == (98, 257)                         # 25 ms every 10 ms, 512-point FFT
    assert spec[:, 1:].mean(0).argmax().item() + 1 == 32   # 1000 Hz / (16000 / 512)
    fb = kaldi.fbank(x, num_mel_bins=40)
    assert fb.shape == (98, 40)
    _, centers = kaldi.get_mel_banks(40, 512, 16000.0, 20.0, 0.0, 100.0, -500.0, 1.0)
    peak = centers[fb.mean(0).argmax()].item()
    assert 800 < peak < 1200
    assert kaldi.mfcc(x).shape == (98, 13)
    assert kaldi.spectrogram(x, snip_edges=False).shape == (100, 257)


def test_kaldi_energy_column():
    x = _rand(1, 4000, seed=6).float()
    with_energy = kaldi.fbank(x, use_energy=True)
    frames = x[0].unfold(0, 400, 160)
    frames = frames - frames.mean(1, keepdim=True)
    torch.testing.assert_close(with_energy[:, 0], frames.pow(2).sum(1).log())
    torch.testing.assert_close(with_energy[:, 1:], kaldi.fbank(x))
    htk = kaldi.fbank(x, use_energy=True, htk_compat=True)
    torch.testing.assert_close(htk[:, -1], with_energy[:, 0])


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("call,name", [
    (lambda: F.flanger(torch.zeros(5, 100), SR), "channels"),
    (lambda: F.flanger(torch.zeros(2, 100), SR, modulation="square"), "modulation"),
    (lambda: F.flanger(torch.zeros(100), SR), "channel, time"),
    (lambda: F.phaser(torch.zeros(100), SR, delay_ms=0.0), "delay_ms"),
    (lambda: F.detect_pitch_frequency(torch.zeros(4000), SR, freq_high=100), "freq_high"),
    (lambda: F.detect_pitch_frequency(torch.zeros(400), SR), "win_length"),
    (lambda: F.vad(torch.zeros(4000), SR, hp_lifter_freq=3000.0), "hp_lifter_freq"),
    (lambda: kaldi.fbank(torch.zeros(1, 4000), window_type="kaiser"), "window_type"),
    (lambda: kaldi.fbank(torch.zeros(4000)), "waveform"),
    (lambda: kaldi.mfcc(torch.zeros(1, 100)), "frame_length"),
    (lambda: kaldi.mfcc(torch.zeros(1, 4000), num_ceps=30), "num_ceps"),
    (lambda: kaldi.spectrogram(torch.zeros(1, 4000), channel=1), "channel"),
])
def test_bad_arguments_raise_value_error(call, name):
    with pytest.raises(ValueError, match=name):
        call()
