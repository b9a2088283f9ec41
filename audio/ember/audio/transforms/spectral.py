"""Spectral transforms as ``nn.Module``s (torchaudio.transforms names, arguments, buffers)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ember.audio.functional import spectral as FS
from ember.audio.functional._framed_power import PAD_MODES, stft_power_project

__all__ = [
    "LFCC",
    "MFCC",
    "AmplitudeToDB",
    "GriffinLim",
    "InverseMelScale",
    "InverseSpectrogram",
    "MelScale",
    "MelSpectrogram",
    "Spectrogram",
    "TimeStretch",
]

WindowFn = Callable[..., Tensor]


def _frame_args(n_fft: int, win_length: int | None, hop_length: int | None) -> tuple[int, int]:
    if n_fft < 1:
        raise ValueError(f"n_fft must be positive, got {n_fft}")
    win_length = win_length if win_length is not None else n_fft
    hop_length = hop_length if hop_length is not None else win_length // 2
    if not 0 < win_length <= n_fft:
        raise ValueError(f"win_length must be in [1, n_fft={n_fft}], got {win_length}")
    if hop_length < 1:
        raise ValueError(f"hop_length must be positive, got {hop_length}")
    return win_length, hop_length


class Spectrogram(nn.Module):
    """Waveform ``[..., time]`` -> spectrogram ``[..., n_fft // 2 + 1, frames]``."""

    def __init__(self, n_fft: int = 400, win_length: int | None = None,
                 hop_length: int | None = None, pad: int = 0,
                 window_fn: WindowFn = torch.hann_window, power: float | None = 2.0,
                 normalized: bool | str = False, wkwargs: dict | None = None,
                 center: bool = True, pad_mode: str = "reflect", onesided: bool = True,
                 return_complex: bool | None = None) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.win_length, self.hop_length = _frame_args(n_fft, win_length, hop_length)
        self.register_buffer("window", window_fn(self.win_length, **(wkwargs or {})))
        self.pad, self.power, self.normalized = pad, power, normalized
        self.center, self.pad_mode, self.onesided = center, pad_mode, onesided
        FS._spec_norms(normalized)

    def forward(self, waveform: Tensor) -> Tensor:
        return FS.spectrogram(waveform, self.pad, self.window, self.n_fft, self.hop_length,
                              self.win_length, self.power, self.normalized, self.center,
                              self.pad_mode, self.onesided)


class InverseSpectrogram(nn.Module):
    """Complex spectrogram ``[..., freq, frames]`` -> waveform ``[..., time]``."""

    def __init__(self, n_fft: int = 400, win_length: int | None = None,
                 hop_length: int | None = None, pad: int = 0,
                 window_fn: WindowFn = torch.hann_window, normalized: bool | str = False,
                 wkwargs: dict | None = None, center: bool = True, pad_mode: str = "reflect",
                 onesided: bool = True) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.win_length, self.hop_length = _frame_args(n_fft, win_length, hop_length)
        self.register_buffer("window", window_fn(self.win_length, **(wkwargs or {})))
        self.pad, self.normalized = pad, normalized
        self.center, self.pad_mode, self.onesided = center, pad_mode, onesided

    def forward(self, spectrogram: Tensor, length: int | None = None) -> Tensor:
        return FS.inverse_spectrogram(spectrogram, length, self.pad, self.window, self.n_fft,
                                      self.hop_length, self.win_length, self.normalized,
                                      self.center, self.pad_mode, self.onesided)


class GriffinLim(nn.Module):
    """Magnitude/power spectrogram -> waveform by iterative phase recovery."""

    def __init__(self, n_fft: int = 400, n_iter: int = 32, win_length: int | None = None,
                 hop_length: int | None = None, window_fn: WindowFn = torch.hann_window,
                 power: float = 2.0, wkwargs: dict | None = None, momentum: float = 0.99,
                 length: int | None = None, rand_init: bool = True) -> None:
        super().__init__()
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.n_fft, self.n_iter = n_fft, n_iter
        self.win_length, self.hop_length = _frame_args(n_fft, win_length, hop_length)
        self.register_buffer("window", window_fn(self.win_length, **(wkwargs or {})))
        self.power, self.momentum = power, momentum
        self.length, self.rand_init = length, rand_init

    def forward(self, specgram: Tensor) -> Tensor:
        return FS.griffinlim(specgram, self.window, self.n_fft, self.hop_length,
                             self.win_length, self.power, self.n_iter, self.momentum,
                             self.length, self.rand_init)


class MelScale(nn.Module):
    """Linear-frequency spectrogram ``[..., n_stft, time]`` -> mel ``[..., n_mels, time]``."""

    def __init__(self, n_mels: int = 128, sample_rate: int = 16000, f_min: float = 0.0,
                 f_max: float | None = None, n_stft: int = 201, norm: str | None = None,
                 mel_scale: str = "htk") -> None:
        super().__init__()
        self.n_mels, self.sample_rate = n_mels, sample_rate
        self.f_max = f_max if f_max is not None else float(sample_rate // 2)
        self.f_min, self.norm, self.mel_scale = f_min, norm, mel_scale
        if f_min > self.f_max:
            raise ValueError(f"f_min ({f_min}) must be <= f_max ({self.f_max})")
        self.register_buffer("fb", FS.melscale_fbanks(n_stft, f_min, self.f_max, n_mels,
                                                      sample_rate, norm, mel_scale))

    def forward(self, specgram: Tensor) -> Tensor:
        if specgram.ndim < 2 or specgram.shape[-2] != self.fb.shape[0]:
            raise ValueError(f"specgram must have shape (..., {self.fb.shape[0]}, time), "
                             f"got {tuple(specgram.shape)}")
        return torch.matmul(self.fb.t(), specgram)


class InverseMelScale(nn.Module):
    """Mel spectrogram -> linear-frequency spectrogram by least squares, clipped at 0.

    ``driver`` is accepted for torchaudio compatibility; the solve uses the pseudo-inverse.
    """

    def __init__(self, n_stft: int, n_mels: int = 128, sample_rate: int = 16000,
                 f_min: float = 0.0, f_max: float | None = None, norm: str | None = None,
                 mel_scale: str = "htk", driver: str = "gels") -> None:
        super().__init__()
        if driver not in ("gels", "gelsy", "gelsd", "gelss"):
            raise ValueError(f"driver must be one of gels, gelsy, gelsd, gelss; got {driver!r}")
        self.n_mels, self.sample_rate, self.driver = n_mels, sample_rate, driver
        self.f_max = f_max if f_max is not None else float(sample_rate // 2)
        self.f_min = f_min
        self.register_buffer("fb", FS.melscale_fbanks(n_stft, f_min, self.f_max, n_mels,
                                                      sample_rate, norm, mel_scale))
        # The least-squares solution of fb^T X = M for every M is pinv(fb^T) @ M: one matmul
        # at run time (traceable, differentiable), and still defined when empty filters
        # (n_mels too high) make fb rank-deficient, where gels would fail.
        pinv = torch.linalg.pinv(self.fb.t().double()).to(self.fb.dtype)
        self.register_buffer("_pinv", pinv, persistent=False)

    def forward(self, melspec: Tensor) -> Tensor:
        if melspec.ndim < 2 or melspec.shape[-2] != self.n_mels:
            raise ValueError(f"melspec must have shape (..., {self.n_mels}, time), "
                             f"got {tuple(melspec.shape)}")
        shape = melspec.shape
        flat = melspec.reshape(-1, shape[-2], shape[-1])
        sol = torch.matmul(self._pinv.to(flat.dtype), flat)
        return torch.relu(sol).reshape(shape[:-2] + sol.shape[-2:])


class AmplitudeToDB(nn.Module):
    """Power or magnitude -> decibels, optionally clipped ``top_db`` below the peak."""

    def __init__(self, stype: str = "power", top_db: float | None = None) -> None:
        super().__init__()
        if stype not in ("power", "magnitude"):
            raise ValueError(f"stype must be 'power' or 'magnitude', got {stype!r}")
        if top_db is not None and top_db < 0:
            raise ValueError(f"top_db must be non-negative, got {top_db}")
        self.stype, self.top_db = stype, top_db
        self.multiplier = 10.0 if stype == "power" else 20.0
        self.amin, self.ref_value = 1e-10, 1.0
        self.db_multiplier = math.log10(max(self.amin, self.ref_value))

    def forward(self, x: Tensor) -> Tensor:
        return FS.amplitude_to_DB(x, self.multiplier, self.amin, self.db_multiplier, self.top_db)


class MelSpectrogram(nn.Module):
    """Waveform ``[..., time]`` -> mel spectrogram ``[..., n_mels, frames]``."""

    def __init__(self, sample_rate: int = 16000, n_fft: int = 400,
                 win_length: int | None = None, hop_length: int | None = None,
                 f_min: float = 0.0, f_max: float | None = None, pad: int = 0,
                 n_mels: int = 128, window_fn: WindowFn = torch.hann_window,
                 power: float = 2.0, normalized: bool | str = False,
                 wkwargs: dict | None = None, center: bool = True, pad_mode: str = "reflect",
                 onesided: bool | None = None, norm: str | None = None,
                 mel_scale: str = "htk") -> None:
        super().__init__()
        self.sample_rate, self.n_fft, self.n_mels = sample_rate, n_fft, n_mels
        self.f_min, self.f_max, self.pad, self.power = f_min, f_max, pad, power
        self.spectrogram = Spectrogram(n_fft=n_fft, win_length=win_length,
                                       hop_length=hop_length, pad=pad, window_fn=window_fn,
                                       power=power, normalized=normalized, wkwargs=wkwargs,
                                       center=center, pad_mode=pad_mode, onesided=True)
        self.win_length, self.hop_length = self.spectrogram.win_length, self.spectrogram.hop_length
        self.mel_scale = MelScale(n_mels, sample_rate, f_min, f_max, n_fft // 2 + 1, norm,
                                  mel_scale)

    def forward(self, waveform: Tensor) -> Tensor:
        if not self._blocked_cpu_path(waveform):
            return self.mel_scale(self.spectrogram(waveform))
        spec = self.spectrogram
        FS._check_spectrogram_args(waveform, spec.pad, spec.n_fft, self.power, spec.center,
                                   spec.pad_mode)
        frame_length_norm, window_norm = FS._spec_norms(spec.normalized)
        scale = (1.0 / spec.n_fft if frame_length_norm else 1.0) * (
            1.0 / float(spec.window.pow(2).sum()) if window_norm else 1.0)
        projection = self.mel_scale.fb.t() * scale if scale != 1.0 else self.mel_scale.fb.t()
        shape = waveform.shape
        out = stft_power_project(waveform.reshape(-1, shape[-1]), spec.window, spec.n_fft,
                                 spec.hop_length, spec.pad, spec.center, spec.pad_mode,
                                 projection)
        return out.reshape(shape[:-1] + out.shape[-2:])

    def _blocked_cpu_path(self, waveform: Tensor) -> bool:
        """Inference on CPU float input: the blocked, threaded power-spectrum path. Anything
        else (autograd, tracing, other devices) takes the plain torch.stft composition."""
        spec = self.spectrogram
        if (self.power != 2.0 or torch.compiler.is_compiling()
                or not isinstance(waveform, Tensor) or waveform.device.type != "cpu"
                or waveform.dtype not in (torch.float32, torch.float64)
                or spec.window.dtype != waveform.dtype or spec.window.device.type != "cpu"
                or spec.pad_mode not in PAD_MODES or waveform.ndim < 1):
            return False
        if torch.is_grad_enabled() and (waveform.requires_grad or spec.window.requires_grad
                                        or self.mel_scale.fb.requires_grad):
            return False
        padded = waveform.shape[-1] + 2 * spec.pad + (2 * (spec.n_fft // 2) if spec.center else 0)
        return padded >= spec.n_fft


def _dct_type(dct_type: int) -> None:
    if dct_type != 2:
        raise ValueError(f"only dct_type=2 is supported, got {dct_type}")


class MFCC(nn.Module):
    """Waveform -> mel-frequency cepstral coefficients ``[..., n_mfcc, frames]``."""

    def __init__(self, sample_rate: int = 16000, n_mfcc: int = 40, dct_type: int = 2,
                 norm: str | None = "ortho", log_mels: bool = False,
                 melkwargs: dict | None = None) -> None:
        super().__init__()
        _dct_type(dct_type)
        self.sample_rate, self.n_mfcc, self.dct_type = sample_rate, n_mfcc, dct_type
        self.norm, self.log_mels, self.top_db = norm, log_mels, 80.0
        self.amplitude_to_DB = AmplitudeToDB("power", self.top_db)
        self.MelSpectrogram = MelSpectrogram(sample_rate=sample_rate, **(melkwargs or {}))
        n_mels = self.MelSpectrogram.n_mels
        if n_mfcc > n_mels:
            raise ValueError(f"n_mfcc ({n_mfcc}) cannot exceed the number of mel bins ({n_mels})")
        self.register_buffer("dct_mat", FS.create_dct(n_mfcc, n_mels, norm))

    def forward(self, waveform: Tensor) -> Tensor:
        mel = self.MelSpectrogram(waveform)
        mel = torch.log(mel + 1e-6) if self.log_mels else self.amplitude_to_DB(mel)
        return torch.matmul(self.dct_mat.t(), mel)


class LFCC(nn.Module):
    """Waveform -> linear-frequency cepstral coefficients ``[..., n_lfcc, frames]``."""

    def __init__(self, sample_rate: int = 16000, n_filter: int = 128, f_min: float = 0.0,
                 f_max: float | None = None, n_lfcc: int = 40, dct_type: int = 2,
                 norm: str | None = "ortho", log_lf: bool = False,
                 speckwargs: dict | None = None) -> None:
        super().__init__()
        _dct_type(dct_type)
        if n_lfcc > n_filter:
            raise ValueError(f"n_lfcc ({n_lfcc}) cannot exceed n_filter ({n_filter})")
        self.sample_rate, self.n_filter, self.n_lfcc = sample_rate, n_filter, n_lfcc
        self.f_min = f_min
        self.f_max = f_max if f_max is not None else float(sample_rate // 2)
        self.dct_type, self.norm, self.log_lf, self.top_db = dct_type, norm, log_lf, 80.0
        self.amplitude_to_DB = AmplitudeToDB("power", self.top_db)
        self.Spectrogram = Spectrogram(**(speckwargs or {}))
        n_freqs = self.Spectrogram.n_fft // 2 + 1
        self.register_buffer("filter_mat", FS.linear_fbanks(n_freqs, f_min, self.f_max,
                                                            n_filter, sample_rate))
        self.register_buffer("dct_mat", FS.create_dct(n_lfcc, n_filter, norm))

    def forward(self, waveform: Tensor) -> Tensor:
        spec = torch.matmul(self.filter_mat.t(), self.Spectrogram(waveform))
        spec = torch.log(spec + 1e-6) if self.log_lf else self.amplitude_to_DB(spec)
        return torch.matmul(self.dct_mat.t(), spec)


class TimeStretch(nn.Module):
    """Speed up or slow down a complex spectrogram by ``rate`` without changing pitch."""

    def __init__(self, hop_length: int | None = None, n_freq: int = 201,
                 fixed_rate: float | None = None) -> None:
        super().__init__()
        self.fixed_rate = fixed_rate
        n_fft = (n_freq - 1) * 2
        hop_length = hop_length if hop_length is not None else n_fft // 2
        self.register_buffer("phase_advance",
                             torch.linspace(0, math.pi * hop_length, n_freq)[..., None])

    def forward(self, complex_specgrams: Tensor, overriding_rate: float | None = None) -> Tensor:
        rate = overriding_rate if overriding_rate is not None else self.fixed_rate
        if rate is None:
            raise ValueError("rate is unset: pass fixed_rate to TimeStretch or overriding_rate")
        return FS.phase_vocoder(complex_specgrams, rate, self.phase_advance)
