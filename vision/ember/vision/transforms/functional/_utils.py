"""Shared helpers of the functional kernels: shapes, dtypes, per-sample parameters."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import torch

from ember.core import parallel


class InterpolationMode(enum.Enum):
    """Resampling filters (torchvision names). NEAREST is torch's floor rule, not Pillow's;
    BOX and HAMMING resize PIL images only, as in torchvision."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


# Pillow's resampling codes, which torchvision accepts as ints
_PIL_CODES = {0: InterpolationMode.NEAREST, 1: InterpolationMode.LANCZOS,
              2: InterpolationMode.BILINEAR, 3: InterpolationMode.BICUBIC,
              4: InterpolationMode.BOX, 5: InterpolationMode.HAMMING}


def as_interpolation(mode: InterpolationMode | str | int) -> InterpolationMode:
    """Our mode for ``mode``: ours, a name or value string, a Pillow code, or another
    library's enum with the same values (torchvision's ``InterpolationMode``)."""
    if isinstance(mode, InterpolationMode):
        return mode
    if isinstance(mode, enum.Enum) and isinstance(mode.value, str):
        mode = mode.value
    if isinstance(mode, int) and not isinstance(mode, bool) and mode in _PIL_CODES:
        return _PIL_CODES[mode]
    if isinstance(mode, str):
        for m in InterpolationMode:
            if mode.lower() in (m.value, m.name.lower()):
                return m
    raise ValueError(f"interpolation must be one of {[m.name for m in InterpolationMode]}, "
                     f"got {mode!r}")


def max_value(dtype: torch.dtype) -> float:
    """The value of full intensity: 1.0 for floats, the integer maximum otherwise."""
    if dtype.is_floating_point:
        return 1.0
    if dtype == torch.bool:
        return 1
    return torch.iinfo(dtype).max


class ValueTypeError(ValueError, TypeError):
    """A bad argument: a ValueError, and the TypeError torchvision raises for it."""


class ValueRuntimeError(ValueError, RuntimeError):
    """A bad argument: a ValueError, and the RuntimeError torchvision (torch) raises for it."""


class TypeRuntimeError(TypeError, RuntimeError):
    """An input of the wrong type: a TypeError, and torchvision's RuntimeError for it."""


class ChannelCountError(ValueTypeError):
    """An image with a channel count the op does not take (torchvision: TypeError)."""


def check_image(img: torch.Tensor, name: str = "image", channels: Sequence[int] | None = None):
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(img).__name__}")
    if img.ndim < 3:
        raise ValueError(f"{name} must have shape [..., C, H, W], got {tuple(img.shape)}")
    if channels is not None and img.shape[-3] not in channels:
        raise ChannelCountError(f"{name} must have {' or '.join(map(str, channels))} "
                                f"channels, got {img.shape[-3]}")


def flatten_batch(x: torch.Tensor, keep: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """View ``x`` as ``[N, *last keep dims]``; return it with the leading shape."""
    lead = tuple(x.shape[:-keep])
    return x.reshape((-1,) + tuple(x.shape[-keep:])), lead


def per_sample(value, like: torch.Tensor) -> torch.Tensor | float:
    """A scalar stays a float; a 1-d tensor of length N broadcasts over dim 0 of ``like``."""
    if isinstance(value, torch.Tensor):
        if value.ndim == 0:
            return value.to(like.device, torch.float32)
        if value.ndim != 1 or value.shape[0] != like.shape[0]:
            raise ValueError(f"a per-sample parameter must have shape [{like.shape[0]}] "
                             f"(the batch size), got {tuple(value.shape)}")
        return value.to(like.device, torch.float32).view((-1,) + (1,) * (like.ndim - 1))
    return float(value)


def is_batched_param(*values) -> bool:
    return any(isinstance(v, torch.Tensor) and v.ndim > 0 for v in values)


def from_float(out: torch.Tensor, dtype: torch.dtype, *, round_: bool = True) -> torch.Tensor:
    """Back to ``dtype``: integer outputs are rounded (or truncated) and clamped to range."""
    if dtype.is_floating_point:
        return out.to(dtype)
    if round_:
        out = out.round()
    return out.clamp_(0, max_value(dtype)).to(dtype)


def per_image_parallel(fn: Callable[[int], None], n: int) -> None:
    """Run ``fn(i)`` for i < n on torch's thread count of threads, one intra-op thread each:
    small per-image kernels lose badly to OpenMP spin-waits and team wake-ups otherwise."""
    parallel.run(fn, n, workers=min(torch.get_num_threads(), n))
