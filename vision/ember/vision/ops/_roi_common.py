"""What the RoI ops share: argument checks, the box-list -> ``[K, 5]`` conversion, and the
vectorised sampling pieces of their torch-op kernels."""

from __future__ import annotations

import torch
from torch import Tensor


def pair(value, name: str = "output_size") -> tuple[int, int]:
    """``output_size`` as ``(height, width)``: an int means a square."""
    if isinstance(value, int):
        out = (value, value)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        out = (int(value[0]), int(value[1]))
    else:
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    if min(out) <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return out


def convert_boxes_to_roi_format(boxes: list[Tensor]) -> Tensor:
    """Per-image boxes ``[L_i, 4]`` -> ``[K, 5]`` rows ``(image index, x1, y1, x2, y2)``."""
    ids = [torch.full_like(b[:, :1], i) for i, b in enumerate(boxes)]
    return torch.cat([torch.cat(ids, 0), torch.cat(list(boxes), 0)], 1)


def check_roi_boxes_shape(boxes) -> None:
    """``boxes`` is a ``[K, 5]`` tensor or a list of ``[L, 4]`` tensors."""
    if isinstance(boxes, (list, tuple)):
        for b in boxes:
            if not isinstance(b, Tensor) or b.ndim != 2 or b.shape[1] != 4:
                raise ValueError("boxes: each tensor of the list must have shape [L, 4], got "
                                 f"{tuple(b.shape) if isinstance(b, Tensor) else type(b)}")
    elif isinstance(boxes, Tensor):
        if boxes.ndim != 2 or boxes.shape[1] != 5:
            raise ValueError(f"boxes must be a Tensor[K, 5], got shape {tuple(boxes.shape)}")
    else:
        raise TypeError(f"boxes must be a Tensor[K, 5] or a list of Tensor[L, 4], got "
                        f"{type(boxes).__name__}")


def as_rois(input: Tensor, boxes) -> Tensor:
    """Checked ``[K, 5]`` rois for ``input`` ``[N, C, H, W]`` (same dtype and device)."""
    if not isinstance(input, Tensor) or input.ndim != 4:
        raise ValueError("input must be a Tensor[N, C, H, W], got "
                         f"{tuple(input.shape) if isinstance(input, Tensor) else type(input)}")
    check_roi_boxes_shape(boxes)
    rois = boxes if isinstance(boxes, Tensor) else convert_boxes_to_roi_format(boxes)
    if rois.dtype != input.dtype:
        raise TypeError(f"boxes must have the dtype of input ({input.dtype}), got {rois.dtype}")
    if rois.device != input.device:
        raise ValueError(f"boxes must be on the device of input ({input.device}), got "
                         f"{rois.device}")
    return rois


def batch_index(rois: Tensor, n: int) -> Tensor:
    """Column 0 of ``rois`` as image indices (truncated, as torchvision); ``ValueError`` when
    one is not an image of the batch (one device sync)."""
    first = rois[:, 0]
    if not bool(((first > -1) & (first < n)).all()):
        raise ValueError("rois: a batch index (column 0) is not an image of the input")
    return first.long()


def round_half_away(x: Tensor) -> Tensor:
    """C's ``round``: halves away from zero (``torch.round`` rounds them to even)."""
    t = torch.trunc(x)
    return torch.where((x - t).abs() >= 0.5, t + torch.sign(x), t)


def bilinear_1d(coord: Tensor, size: int, inside: Tensor | None = None):
    """torchvision's per-axis bilinear rule: ``(low, high, weight_low, weight_high)``; a
    coordinate beyond ``[-1, size]`` gets zero weights (low/high stay valid indices)."""
    ok = (coord >= -1) & (coord <= size)
    if inside is not None:
        ok = ok & inside
    c = torch.nan_to_num(coord, nan=-2.0).clamp(min=0)
    low = c.floor().clamp(max=size - 1)
    last = low >= size - 1
    c = torch.where(last, low, c)
    high = torch.where(last, low, low + 1)
    frac = c - low
    zero = torch.zeros((), dtype=coord.dtype, device=coord.device)
    return (low.long(), high.long(), torch.where(ok, 1 - frac, zero),
            torch.where(ok, frac, zero))


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels compute in: float32 for half precisions, else ``dtype``."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32
