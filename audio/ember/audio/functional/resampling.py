"""Band-limited resampling by windowed-sinc interpolation (torchaudio's ``resample``).

The polyphase kernel for a rate pair is built once (float64, then cast) and cached per
(rates, filter settings, dtype, device); applying it is one strided ``conv1d``.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["resample", "sinc_resample_kernel"]

_METHODS = ("sinc_interp_hann", "sinc_interp_kaiser")
_KAISER_BETA = 14.769656459379492  # torchaudio's default: ~ -120 dB stopband


def _check_rates(orig_freq, new_freq) -> tuple[int, int]:
    for name, value in (("orig_freq", orig_freq), ("new_freq", new_freq)):
        if isinstance(value, bool) or not float(value).is_integer():
            raise ValueError(f"{name} must be an integer frequency, got {value!r}; reduce the "
                             f"ratio to integers (e.g. 8 -> 1 rather than 44100 -> 5512.5)")
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    return int(orig_freq), int(new_freq)


@functools.lru_cache(maxsize=64)
def _kernel_cached(orig: int, new: int, lowpass_filter_width: int, rolloff: float,
                   method: str, beta: float | None, dtype: torch.dtype,
                   device: str) -> tuple[Tensor, int]:
    base_freq = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base_freq)
    # t[phase, tap]: distance, in input samples scaled by base_freq, from output phase to tap
    idx = torch.arange(-width, width + orig, dtype=torch.float64) / orig
    t = (torch.arange(0, -new, -1, dtype=torch.float64)[:, None] / new + idx[None]) * base_freq
    t = t.clamp(-lowpass_filter_width, lowpass_filter_width)
    if method == "sinc_interp_hann":
        window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    else:
        b = torch.tensor(_KAISER_BETA if beta is None else float(beta), dtype=torch.float64)
        window = torch.special.i0(b * torch.sqrt(1 - (t / lowpass_filter_width) ** 2))
        window = window / torch.special.i0(b)
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / torch.where(t == 0, 1.0, t))
    kernel = sinc * window * (base_freq / orig)
    return kernel.unsqueeze(1).to(dtype=dtype, device=device), width


def sinc_resample_kernel(orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
                         rolloff: float = 0.99, resampling_method: str = "sinc_interp_hann",
                         beta: float | None = None, dtype: torch.dtype = torch.float32,
                         device: torch.device | str = "cpu") -> tuple[Tensor, int]:
    """Polyphase kernel ``(new/g, 1, taps)`` and its half-width for rates reduced by their gcd."""
    orig, new = _check_rates(orig_freq, new_freq)
    if resampling_method not in _METHODS:
        raise ValueError(f"resampling_method must be one of {_METHODS}, "
                         f"got {resampling_method!r}")
    if lowpass_filter_width <= 0:
        raise ValueError(f"lowpass_filter_width must be positive, got {lowpass_filter_width}")
    if not 0 < rolloff <= 1:
        raise ValueError(f"rolloff must be in (0, 1], got {rolloff}")
    g = math.gcd(orig, new)
    return _kernel_cached(orig // g, new // g, int(lowpass_filter_width), float(rolloff),
                          resampling_method, beta, dtype, str(torch.device(device)))


def apply_sinc_resample_kernel(waveform: Tensor, orig_freq: int, new_freq: int, kernel: Tensor,
                               width: int) -> Tensor:
    """Resample ``[..., time]`` with a kernel from :func:`sinc_resample_kernel`."""
    g = math.gcd(orig_freq, new_freq)
    orig, new = orig_freq // g, new_freq // g
    shape = waveform.shape
    x = waveform.reshape(-1, shape[-1])
    length = x.shape[-1]
    x = F.pad(x, (width, width + orig))
    out = F.conv1d(x[:, None], kernel, stride=orig)  # (batch, phases, steps)
    out = out.transpose(1, 2).reshape(x.shape[0], -1)
    target = -(-new * length // orig)  # ceil(new * length / orig)
    return out[..., :target].reshape(shape[:-1] + (target,))


def resample(waveform: Tensor, orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
             rolloff: float = 0.99, resampling_method: str = "sinc_interp_hann",
             beta: float | None = None) -> Tensor:
    """Resample ``[..., time]`` from ``orig_freq`` to ``new_freq`` Hz (windowed sinc)."""
    orig, new = _check_rates(orig_freq, new_freq)
    if not isinstance(waveform, Tensor) or waveform.ndim < 1:
        raise ValueError("waveform must be a tensor of shape (..., time)")
    if not waveform.is_floating_point():
        raise TypeError(f"waveform must be floating point, got {waveform.dtype}")
    if orig == new:
        return waveform
    kernel, width = sinc_resample_kernel(orig, new, lowpass_filter_width, rolloff,
                                         resampling_method, beta, waveform.dtype,
                                         waveform.device)
    return apply_sinc_resample_kernel(waveform, orig, new, kernel, width)
