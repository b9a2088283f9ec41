"""SpecAugment-style masking of spectrogram bands along frequency or time."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["mask_along_axis", "mask_along_axis_iid"]


def _mask_param(mask_param: int, p: float, axis_length: int) -> int:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    return mask_param if p == 1.0 else min(mask_param, int(axis_length * p))


def _band(length: int, start: Tensor, width: Tensor, device) -> Tensor:
    pos = torch.arange(length, device=device)
    return (pos >= start) & (pos < start + width)


def mask_along_axis_iid(specgrams: Tensor, mask_param: int, mask_value: float, axis: int,
                        p: float = 1.0) -> Tensor:
    """One random band per item and channel of ``[batch, ..., freq, time]`` set to ``mask_value``.

    The band width is uniform in ``[0, mask_param)`` and its start uniform over what fits.
    """
    dim = specgrams.ndim
    if dim < 3:
        raise ValueError(f"specgrams must be at least 3-D (batch, freq, time), got {dim}-D")
    if axis not in (dim - 2, dim - 1):
        raise ValueError(f"axis must be {dim - 2} (freq) or {dim - 1} (time), got {axis}")
    size = specgrams.shape[axis]
    mask_param = _mask_param(mask_param, p, size)
    if mask_param < 1:
        return specgrams
    lead = specgrams.shape[: dim - 2]
    # drawn in the input's dtype, as torchaudio does: float64 inputs consume other random bits
    kw = dict(device=specgrams.device, dtype=specgrams.dtype if specgrams.is_floating_point()
              else None)
    value = torch.rand(lead, **kw) * mask_param
    start = torch.rand(lead, **kw) * (size - value)
    start, width = start.long()[..., None], value.long()[..., None]
    mask = _band(size, start, width, specgrams.device)  # (*lead, size)
    mask = mask.unsqueeze(-1) if axis == dim - 2 else mask.unsqueeze(-2)
    return specgrams.masked_fill(mask, mask_value)


def mask_along_axis(specgram: Tensor, mask_param: int, mask_value: float, axis: int,
                    p: float = 1.0) -> Tensor:
    """One random band, shared by every leading item, of ``[..., freq, time]`` masked."""
    dim = specgram.ndim
    if dim < 2:
        raise ValueError(f"specgram must be at least 2-D (freq, time), got {dim}-D")
    if axis not in (dim - 2, dim - 1):
        raise ValueError(f"axis must be {dim - 2} (freq) or {dim - 1} (time), got {axis}")
    size = specgram.shape[axis]
    mask_param = _mask_param(mask_param, p, size)
    if mask_param < 1:
        return specgram
    value = torch.rand((), device=specgram.device) * mask_param
    start = torch.rand((), device=specgram.device) * (size - value)
    mask = _band(size, start.long(), value.long(), specgram.device)
    mask = mask.unsqueeze(-1) if axis == dim - 2 else mask
    return specgram.masked_fill(mask, mask_value)
