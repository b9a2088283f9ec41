"""Waveform-domain transforms: resampling, companding, emphasis, convolution, deltas."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ember.audio.functional import amplitude as FA
from ember.audio.functional import filtering as FF
from ember.audio.functional import resampling as FR

__all__ = ["ComputeDeltas", "Convolve", "Deemphasis", "FFTConvolve", "MuLawDecoding",
           "MuLawEncoding", "Preemphasis", "Resample"]


class Resample(nn.Module):
    """Resample ``[..., time]`` from ``orig_freq`` to ``new_freq``; the kernel is built once."""

    def __init__(self, orig_freq: int = 16000, new_freq: int = 16000,
                 resampling_method: str = "sinc_interp_hann", lowpass_filter_width: int = 6,
                 rolloff: float = 0.99, beta: float | None = None, *,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.orig_freq, self.new_freq = FR._check_rates(orig_freq, new_freq)
        self.resampling_method = resampling_method
        self.lowpass_filter_width, self.rolloff, self.beta = lowpass_filter_width, rolloff, beta
        if self.orig_freq != self.new_freq:
            kernel, self.width = FR.sinc_resample_kernel(
                self.orig_freq, self.new_freq, lowpass_filter_width, rolloff, resampling_method,
                beta, dtype or torch.float32)
            self.register_buffer("kernel", kernel.clone())
            self.plan = FR.polyphase_plan(self.orig_freq, self.new_freq, lowpass_filter_width,
                                          rolloff)

    def forward(self, waveform: Tensor) -> Tensor:
        if self.orig_freq == self.new_freq:
            return waveform
        if not waveform.is_floating_point():
            raise TypeError(f"waveform must be floating point, got {waveform.dtype}")
        return FR.apply_sinc_resample_kernel(waveform, self.orig_freq, self.new_freq,
                                             self.kernel.to(waveform.dtype), self.width,
                                             self.plan)


class MuLawEncoding(nn.Module):
    """Floats in [-1, 1] -> mu-law codes in ``[0, quantization_channels)``."""

    def __init__(self, quantization_channels: int = 256) -> None:
        super().__init__()
        self.quantization_channels = quantization_channels

    def forward(self, x: Tensor) -> Tensor:
        return FA.mu_law_encoding(x, self.quantization_channels)


class MuLawDecoding(nn.Module):
    """Mu-law codes -> floats in [-1, 1]."""

    def __init__(self, quantization_channels: int = 256) -> None:
        super().__init__()
        self.quantization_channels = quantization_channels

    def forward(self, x_mu: Tensor) -> Tensor:
        return FA.mu_law_decoding(x_mu, self.quantization_channels)


class Preemphasis(nn.Module):
    """``y[n] = x[n] - coeff * x[n-1]``."""

    def __init__(self, coeff: float = 0.97) -> None:
        super().__init__()
        self.coeff = coeff

    def forward(self, waveform: Tensor) -> Tensor:
        return FF.preemphasis(waveform, self.coeff)


class Deemphasis(nn.Module):
    """``y[n] = x[n] + coeff * y[n-1]`` (inverse of Preemphasis)."""

    def __init__(self, coeff: float = 0.97) -> None:
        super().__init__()
        self.coeff = coeff

    def forward(self, waveform: Tensor) -> Tensor:
        return FF.deemphasis(waveform, self.coeff)


class Convolve(nn.Module):
    """Convolve along the last dim directly (mode 'full', 'valid' or 'same')."""

    def __init__(self, mode: str = "full") -> None:
        super().__init__()
        if mode not in FF._CONVOLVE_MODES:
            raise ValueError(f"mode must be one of {FF._CONVOLVE_MODES}, got {mode!r}")
        self.mode = mode

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return FF.convolve(x, y, self.mode)


class FFTConvolve(nn.Module):
    """Convolve along the last dim via FFT (mode 'full', 'valid' or 'same')."""

    def __init__(self, mode: str = "full") -> None:
        super().__init__()
        if mode not in FF._CONVOLVE_MODES:
            raise ValueError(f"mode must be one of {FF._CONVOLVE_MODES}, got {mode!r}")
        self.mode = mode

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return FF.fftconvolve(x, y, self.mode)


class ComputeDeltas(nn.Module):
    """Delta (derivative) coefficients of a spectrogram along time."""

    def __init__(self, win_length: int = 5, mode: str = "replicate") -> None:
        super().__init__()
        if win_length < 3:
            raise ValueError(f"win_length must be >= 3, got {win_length}")
        self.win_length, self.mode = win_length, mode

    def forward(self, specgram: Tensor) -> Tensor:
        return FF.compute_deltas(specgram, self.win_length, self.mode)
