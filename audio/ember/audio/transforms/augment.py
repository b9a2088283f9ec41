"""Augmentations: SpecAugment masks, fades, volume, noise."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ember.audio.functional import amplitude as FA
from ember.audio.functional import filtering as FF
from ember.audio.functional import masking as FM

__all__ = ["AddNoise", "Fade", "FrequencyMasking", "SpecAugment", "TimeMasking", "Vol"]


class _AxisMasking(nn.Module):
    # axis counts from the end of a (channel, freq, time) layout: 1 = freq, 2 = time
    def __init__(self, mask_param: int, axis: int, iid_masks: bool, p: float = 1.0) -> None:
        super().__init__()
        if mask_param < 0:
            raise ValueError(f"mask_param must be >= 0, got {mask_param}")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.mask_param, self.axis, self.iid_masks, self.p = mask_param, axis, iid_masks, p

    def forward(self, specgram: Tensor, mask_value: float = 0.0) -> Tensor:
        axis = self.axis + specgram.ndim - 3
        if self.iid_masks and specgram.ndim >= 3:
            return FM.mask_along_axis_iid(specgram, self.mask_param, mask_value, axis, self.p)
        return FM.mask_along_axis(specgram, self.mask_param, mask_value, axis, self.p)


class FrequencyMasking(_AxisMasking):
    """Mask a random band of up to ``freq_mask_param`` frequency bins (per item if iid_masks)."""

    def __init__(self, freq_mask_param: int, iid_masks: bool = False) -> None:
        super().__init__(freq_mask_param, 1, iid_masks)


class TimeMasking(_AxisMasking):
    """Mask a random span of up to ``time_mask_param`` frames (at most ``p`` of the length)."""

    def __init__(self, time_mask_param: int, iid_masks: bool = False, p: float = 1.0) -> None:
        super().__init__(time_mask_param, 2, iid_masks, p)


class SpecAugment(nn.Module):
    """Several time and frequency masks, filled with zeros or the spectrogram mean."""

    def __init__(self, n_time_masks: int, time_mask_param: int, n_freq_masks: int,
                 freq_mask_param: int, iid_masks: bool = True, p: float = 1.0,
                 zero_masking: bool = False) -> None:
        super().__init__()
        self.n_time_masks, self.time_mask_param = n_time_masks, time_mask_param
        self.n_freq_masks, self.freq_mask_param = n_freq_masks, freq_mask_param
        self.iid_masks, self.p, self.zero_masking = iid_masks, p, zero_masking

    def forward(self, specgram: Tensor) -> Tensor:
        value = 0.0 if self.zero_masking else specgram.mean()
        time_dim = specgram.ndim - 1
        mask = FM.mask_along_axis_iid if specgram.ndim > 2 and self.iid_masks \
            else FM.mask_along_axis
        for _ in range(self.n_time_masks):
            specgram = mask(specgram, self.time_mask_param, value, time_dim, p=self.p)
        for _ in range(self.n_freq_masks):
            specgram = mask(specgram, self.freq_mask_param, value, time_dim - 1, p=self.p)
        return specgram


class Fade(nn.Module):
    """Fade in and out with a linear, exponential, logarithmic, quarter- or half-sine shape."""

    def __init__(self, fade_in_len: int = 0, fade_out_len: int = 0,
                 fade_shape: str = "linear") -> None:
        super().__init__()
        if fade_shape not in FA.FADE_SHAPES:
            raise ValueError(f"fade_shape must be one of {FA.FADE_SHAPES}, got {fade_shape!r}")
        self.fade_in_len, self.fade_out_len, self.fade_shape = fade_in_len, fade_out_len, fade_shape

    def forward(self, waveform: Tensor) -> Tensor:
        env = FA.fade_envelope(waveform.shape[-1], self.fade_in_len, self.fade_out_len,
                               self.fade_shape, waveform.dtype, waveform.device)
        return env * waveform


class Vol(nn.Module):
    """Scale the volume by an amplitude ratio, a power ratio or decibels; clamp to [-1, 1]."""

    def __init__(self, gain: float, gain_type: str = "amplitude") -> None:
        super().__init__()
        if gain_type not in ("amplitude", "power", "db"):
            raise ValueError(f"gain_type must be 'amplitude', 'power' or 'db', got {gain_type!r}")
        if gain_type in ("amplitude", "power") and gain < 0:
            raise ValueError(f"gain must be >= 0 for gain_type={gain_type!r}, got {gain}")
        self.gain, self.gain_type = gain, gain_type

    def forward(self, waveform: Tensor) -> Tensor:
        if self.gain_type == "amplitude":
            waveform = waveform * self.gain
        elif self.gain_type == "db":
            waveform = FA.gain(waveform, self.gain)
        else:
            waveform = FA.gain(waveform, 10 * math.log10(self.gain))
        return torch.clamp(waveform, -1, 1)


class AddNoise(nn.Module):
    """Mix ``noise`` into ``waveform`` at a signal-to-noise ratio of ``snr`` dB."""

    def forward(self, waveform: Tensor, noise: Tensor, snr: Tensor,
                lengths: Tensor | None = None) -> Tensor:
        return FF.add_noise(waveform, noise, snr, lengths)
