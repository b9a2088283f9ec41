"""Sample-wise amplitude maps: gain, mu-law companding, fade envelopes."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["fade_envelope", "gain", "mu_law_decoding", "mu_law_encoding"]


def gain(waveform: Tensor, gain_db: float = 1.0) -> Tensor:
    """Scale by ``gain_db`` decibels."""
    if gain_db == 0:
        return waveform
    return waveform * 10 ** (gain_db / 20)


def mu_law_encoding(x: Tensor, quantization_channels: int) -> Tensor:
    """Mu-law compand ``x`` in [-1, 1] to integer codes in ``[0, quantization_channels)``."""
    if quantization_channels < 2:
        raise ValueError(f"quantization_channels must be >= 2, got {quantization_channels}")
    mu = quantization_channels - 1.0
    if not x.is_floating_point():
        x = x.to(torch.float)
    x_mu = torch.sign(x) * torch.log1p(mu * torch.abs(x)) / math.log1p(mu)
    return ((x_mu + 1) / 2 * mu + 0.5).to(torch.int64)


def mu_law_decoding(x_mu: Tensor, quantization_channels: int) -> Tensor:
    """Inverse of ``mu_law_encoding``: codes -> floats in [-1, 1]."""
    if quantization_channels < 2:
        raise ValueError(f"quantization_channels must be >= 2, got {quantization_channels}")
    mu = quantization_channels - 1.0
    if not x_mu.is_floating_point():
        x_mu = x_mu.to(torch.float)
    x = (x_mu / mu) * 2 - 1.0
    return torch.sign(x) * (torch.exp(torch.abs(x) * math.log1p(mu)) - 1.0) / mu


def _fade_in_curve(ramp: Tensor, shape: str) -> Tensor:
    curves = {
        "linear": lambda f: f,
        "exponential": lambda f: torch.pow(2, f - 1) * f,
        "logarithmic": lambda f: torch.log10(0.1 + f) + 1,
        "quarter_sine": lambda f: torch.sin(f * math.pi / 2),
        "half_sine": lambda f: torch.sin(f * math.pi - math.pi / 2) / 2 + 0.5,
    }
    return curves[shape](ramp)


def _fade_out_curve(ramp: Tensor, shape: str) -> Tensor:
    curves = {
        "linear": lambda f: 1 - f,
        "exponential": lambda f: torch.pow(2, -f) * (1 - f),
        "logarithmic": lambda f: torch.log10(1.1 - f) + 1,
        "quarter_sine": lambda f: torch.sin(f * math.pi / 2 + math.pi / 2),
        "half_sine": lambda f: torch.sin(f * math.pi + math.pi / 2) / 2 + 0.5,
    }
    return curves[shape](ramp)


FADE_SHAPES = ("linear", "exponential", "logarithmic", "quarter_sine", "half_sine")


def fade_envelope(length: int, fade_in_len: int, fade_out_len: int, fade_shape: str,
                  dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """Gain envelope of ``length`` samples: a fade-in ramp, ones, then a fade-out ramp."""
    if fade_shape not in FADE_SHAPES:
        raise ValueError(f"fade_shape must be one of {FADE_SHAPES}, got {fade_shape!r}")
    if fade_in_len < 0 or fade_out_len < 0:
        raise ValueError(f"fade lengths must be >= 0, got {fade_in_len}, {fade_out_len}")
    if fade_in_len > length or fade_out_len > length:
        raise ValueError(f"fade lengths ({fade_in_len}, {fade_out_len}) exceed the waveform "
                         f"length {length}")
    kw = dict(dtype=dtype, device=device)
    fin = _fade_in_curve(torch.linspace(0, 1, fade_in_len, **kw), fade_shape)
    fin = torch.cat([fin, torch.ones(length - fade_in_len, **kw)]).clamp(0, 1)
    fout = _fade_out_curve(torch.linspace(0, 1, fade_out_len, **kw), fade_shape)
    fout = torch.cat([torch.ones(length - fade_out_len, **kw), fout]).clamp(0, 1)
    return fin * fout
