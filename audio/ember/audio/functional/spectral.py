"""Spectral features: STFT spectrograms and their inverses, filterbanks, DCT, dB scaling.

Every function takes ``[..., time]`` (or ``[..., freq, time]``) tensors and works on any
device; all are written in plain torch ops so autograd and TorchDynamo see through them.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "DB_to_amplitude",
    "amplitude_to_DB",
    "create_dct",
    "griffinlim",
    "inverse_spectrogram",
    "linear_fbanks",
    "melscale_fbanks",
    "phase_vocoder",
    "spectrogram",
]


def _check_waveform(waveform: Tensor, name: str = "waveform") -> None:
    if not isinstance(waveform, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(waveform)}")
    if waveform.ndim < 1:
        raise ValueError(f"{name} must have shape (..., time), got a 0-d tensor")


def _spec_norms(normalized: bool | str) -> tuple[bool, bool]:
    """(frame_length_norm, window_norm) for torchaudio's ``normalized`` argument."""
    if normalized is True or normalized == "window":
        return False, True
    if normalized is False:
        return False, False
    if normalized == "frame_length":
        return True, False
    raise ValueError(f"normalized must be a bool, 'window' or 'frame_length', got {normalized!r}")


def _check_spectrogram_args(waveform: Tensor, pad: int, n_fft: int, power: float | None,
                            center: bool, pad_mode: str) -> None:
    _check_waveform(waveform)
    if power is not None and power <= 0:
        raise ValueError(f"power must be positive or None, got {power}")
    if center and pad_mode == "reflect" and waveform.shape[-1] + 2 * pad <= n_fft // 2:
        raise ValueError(f"waveform has {waveform.shape[-1]} samples; reflect padding with "
                         f"n_fft={n_fft} needs more than {n_fft // 2}")


def spectrogram(
    waveform: Tensor,
    pad: int,
    window: Tensor,
    n_fft: int,
    hop_length: int,
    win_length: int,
    power: float | None,
    normalized: bool | str,
    center: bool = True,
    pad_mode: str = "reflect",
    onesided: bool = True,
    return_complex: bool | None = None,
) -> Tensor:
    """Spectrogram ``[..., freq, frames]`` of ``[..., time]``: complex if ``power`` is None."""
    _check_spectrogram_args(waveform, pad, n_fft, power, center, pad_mode)
    if pad > 0:
        waveform = F.pad(waveform, (pad, pad), "constant")
    frame_length_norm, window_norm = _spec_norms(normalized)
    shape = waveform.shape
    spec = torch.stft(waveform.reshape(-1, shape[-1]), n_fft=n_fft, hop_length=hop_length,
                      win_length=win_length, window=window, center=center, pad_mode=pad_mode,
                      normalized=frame_length_norm, onesided=onesided, return_complex=True)
    spec = spec.reshape(shape[:-1] + spec.shape[-2:])
    if window_norm:
        spec = spec / window.pow(2.0).sum().sqrt()
    if power is None:
        return spec
    if power == 2.0:  # |z|^2 without the sqrt/square round trip
        return spec.real.square() + spec.imag.square()
    if power == 1.0:
        return spec.abs()
    return spec.abs().pow(power)


def inverse_spectrogram(
    spectrogram: Tensor,
    length: int | None,
    pad: int,
    window: Tensor,
    n_fft: int,
    hop_length: int,
    win_length: int,
    normalized: bool | str,
    center: bool = True,
    pad_mode: str = "reflect",
    onesided: bool = True,
) -> Tensor:
    """Waveform ``[..., time]`` from a complex spectrogram ``[..., freq, frames]`` (iSTFT)."""
    if not spectrogram.is_complex():
        raise ValueError(f"spectrogram must be complex, got dtype {spectrogram.dtype}")
    if spectrogram.ndim < 2:
        raise ValueError(f"spectrogram must have shape (..., freq, time), "
                         f"got {tuple(spectrogram.shape)}")
    frame_length_norm, window_norm = _spec_norms(normalized)
    if window_norm:
        spectrogram = spectrogram * window.pow(2.0).sum().sqrt()
    shape = spectrogram.shape
    flat = spectrogram.reshape(-1, shape[-2], shape[-1])
    out = torch.istft(flat, n_fft=n_fft, hop_length=hop_length, win_length=win_length,
                      window=window, center=center, normalized=frame_length_norm,
                      onesided=onesided, length=length + 2 * pad if length is not None else None,
                      return_complex=False)
    if pad > 0 and length is not None:  # as torchaudio: without a length the padding stays
        out = out[:, pad:-pad]
    return out.reshape(shape[:-2] + out.shape[-1:])


def griffinlim(
    specgram: Tensor,
    window: Tensor,
    n_fft: int,
    hop_length: int,
    win_length: int,
    power: float,
    n_iter: int,
    momentum: float,
    length: int | None,
    rand_init: bool,
) -> Tensor:
    """Waveform from a magnitude spectrogram by Griffin-Lim phase recovery with momentum."""
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if n_iter < 1:
        raise ValueError(f"n_iter must be >= 1, got {n_iter}")
    shape = specgram.shape
    mag = specgram.reshape(-1, shape[-2], shape[-1]).pow(1 / power)
    cdtype = torch.complex128 if mag.dtype == torch.float64 else torch.complex64
    if rand_init:
        angles = torch.rand(mag.shape, dtype=cdtype, device=mag.device)
    else:
        angles = torch.ones(mag.shape, dtype=cdtype, device=mag.device)
    stft_kw = dict(n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window)
    prev = torch.zeros_like(angles)
    for _ in range(n_iter):
        wav = torch.istft(mag * angles, length=length, **stft_kw)
        rebuilt = torch.stft(wav, center=True, pad_mode="reflect", normalized=False,
                             onesided=True, return_complex=True, **stft_kw)
        angles = rebuilt - prev * (momentum / (1 + momentum)) if momentum else rebuilt
        angles = angles / (angles.abs() + 1e-16)
        prev = rebuilt
    wav = torch.istft(mag * angles, length=length, **stft_kw)
    return wav.reshape(shape[:-2] + wav.shape[-1:])


def _hz_to_mel(freq: float | Tensor, mel_scale: str):
    if mel_scale == "htk":
        if isinstance(freq, Tensor):
            return 2595.0 * torch.log10(1.0 + freq / 700.0)
        return 2595.0 * math.log10(1.0 + freq / 700.0)
    # Slaney: linear below 1 kHz, logarithmic above
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    if isinstance(freq, Tensor):
        return torch.where(freq >= min_log_hz,
                           min_log_mel + torch.log(freq.clamp_min(1e-10) / min_log_hz) / logstep,
                           freq / f_sp)
    if freq >= min_log_hz:
        return min_log_mel + math.log(freq / min_log_hz) / logstep
    return freq / f_sp


def _mel_to_hz(mels: Tensor, mel_scale: str) -> Tensor:
    if mel_scale == "htk":
        return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return torch.where(mels >= min_log_mel, min_log_hz * torch.exp(logstep * (mels - min_log_mel)),
                       f_sp * mels)


def _triangular(all_freqs: Tensor, f_pts: Tensor) -> Tensor:
    """(n_freqs, n_filter) triangles whose corners are consecutive points of ``f_pts``."""
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return torch.clamp(torch.minimum(down, up), min=0.0)


def _check_fbank_args(n_freqs: int, f_min: float, f_max: float, n_filter: int,
                      sample_rate: int) -> None:
    if n_freqs < 2:
        raise ValueError(f"n_freqs must be >= 2, got {n_freqs}")
    if n_filter < 1:
        raise ValueError(f"n_mels/n_filter must be >= 1, got {n_filter}")
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    if not 0 <= f_min < f_max:
        raise ValueError(f"need 0 <= f_min < f_max, got f_min={f_min}, f_max={f_max}")


def melscale_fbanks(
    n_freqs: int,
    f_min: float,
    f_max: float,
    n_mels: int,
    sample_rate: int,
    norm: str | None = None,
    mel_scale: str = "htk",
) -> Tensor:
    """Triangular mel filterbank ``(n_freqs, n_mels)``; ``spec.mT @ fb`` maps STFT bins to mels."""
    if norm not in (None, "slaney"):
        raise ValueError(f"norm must be None or 'slaney', got {norm!r}")
    if mel_scale not in ("htk", "slaney"):
        raise ValueError(f"mel_scale must be 'htk' or 'slaney', got {mel_scale!r}")
    _check_fbank_args(n_freqs, f_min, f_max, n_mels, sample_rate)
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs, dtype=torch.float64)
    m_pts = torch.linspace(_hz_to_mel(f_min, mel_scale), _hz_to_mel(f_max, mel_scale),
                           n_mels + 2, dtype=torch.float64)
    f_pts = _mel_to_hz(m_pts, mel_scale)
    fb = _triangular(all_freqs, f_pts)
    if norm == "slaney":
        fb = fb * (2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels])).unsqueeze(0)
    if (fb.max(dim=0).values == 0.0).any():
        warnings.warn(f"at least one mel filterbank has all zero values; n_mels={n_mels} may be "
                      f"too high for n_freqs={n_freqs}", stacklevel=2)
    return fb.to(torch.get_default_dtype())


def linear_fbanks(n_freqs: int, f_min: float, f_max: float, n_filter: int,
                  sample_rate: int) -> Tensor:
    """Triangular filterbank ``(n_freqs, n_filter)`` with linearly spaced centres (for LFCC)."""
    _check_fbank_args(n_freqs, f_min, f_max, n_filter, sample_rate)
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs, dtype=torch.float64)
    f_pts = torch.linspace(f_min, f_max, n_filter + 2, dtype=torch.float64)
    return _triangular(all_freqs, f_pts).to(torch.get_default_dtype())


def create_dct(n_mfcc: int, n_mels: int, norm: str | None) -> Tensor:
    """DCT-II matrix ``(n_mels, n_mfcc)``; ``norm='ortho'`` makes it orthonormal."""
    if norm not in (None, "ortho"):
        raise ValueError(f"norm must be None or 'ortho', got {norm!r}")
    if not 0 < n_mfcc <= n_mels:
        raise ValueError(f"need 0 < n_mfcc <= n_mels, got n_mfcc={n_mfcc}, n_mels={n_mels}")
    n = torch.arange(n_mels, dtype=torch.float64)
    k = torch.arange(n_mfcc, dtype=torch.float64).unsqueeze(1)
    dct = torch.cos(math.pi / n_mels * (n + 0.5) * k)
    if norm is None:
        dct = dct * 2.0
    else:
        dct[0] *= 1.0 / math.sqrt(2.0)
        dct = dct * math.sqrt(2.0 / n_mels)
    return dct.t().to(torch.get_default_dtype())


def amplitude_to_DB(x: Tensor, multiplier: float, amin: float, db_multiplier: float,
                    top_db: float | None = None) -> Tensor:
    """``multiplier * log10(max(x, amin))`` in dB, clipped to ``top_db`` below each item's peak.

    As in torchaudio, the peak is taken per item over ``(channel, freq, time)``: the last three
    dims for inputs with more than two, the whole tensor for a 2-D spectrogram.
    """
    x_db = multiplier * torch.log10(torch.clamp(x, min=amin))
    x_db = x_db - multiplier * db_multiplier
    if top_db is not None:
        shape = x_db.shape
        channels = shape[-3] if x_db.ndim > 2 else 1
        packed = x_db.reshape(-1, channels, shape[-2], shape[-1])
        floor = packed.amax(dim=(-3, -2, -1)) - top_db
        x_db = torch.maximum(packed, floor.view(-1, 1, 1, 1)).reshape(shape)
    return x_db


def DB_to_amplitude(x: Tensor, ref: float, power: float) -> Tensor:
    """Inverse of ``amplitude_to_DB``: ``ref * (10 ** (x / 10)) ** power``."""
    return ref * torch.pow(torch.pow(10.0, 0.1 * x), power)


def phase_vocoder(complex_specgrams: Tensor, rate: float, phase_advance: Tensor) -> Tensor:
    """Stretch a complex spectrogram ``[..., freq, time]`` by ``1 / rate`` in time, same pitch."""
    if not complex_specgrams.is_complex():
        raise ValueError(f"complex_specgrams must be complex, got {complex_specgrams.dtype}")
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if rate == 1.0:
        return complex_specgrams
    shape = complex_specgrams.shape
    specs = complex_specgrams.reshape(-1, shape[-2], shape[-1])
    real_dtype = specs.real.dtype
    steps = torch.arange(0, specs.shape[-1], rate, device=specs.device, dtype=real_dtype)
    alphas = steps % 1.0
    phase_0 = specs[..., :1].angle()
    specs = F.pad(specs, [0, 2])
    s0 = specs.index_select(-1, steps.long())
    s1 = specs.index_select(-1, (steps + 1).long())
    phase = s1.angle() - s0.angle() - phase_advance
    phase = phase - 2 * math.pi * torch.round(phase / (2 * math.pi))
    phase = phase + phase_advance
    phase = torch.cat([phase_0, phase[..., :-1]], dim=-1)
    mag = alphas * s1.abs() + (1 - alphas) * s0.abs()
    out = torch.polar(mag, torch.cumsum(phase, -1))
    return out.reshape(shape[:-2] + out.shape[-2:])
