"""Generalised, distance and complete IoU between two sets of XYXY boxes (pairwise [..., N, M]),
and masks_to_boxes; torchvision's formulas, dtypes and batch dimensions."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["generalized_box_iou", "distance_box_iou", "complete_box_iou", "masks_to_boxes"]


def upcast(t: Tensor) -> Tensor:
    """float16/bfloat16 -> float32, small integers -> int32: products must not overflow."""
    if t.is_floating_point():
        return t if t.dtype in (torch.float32, torch.float64) else t.float()
    return t if t.dtype in (torch.int32, torch.int64) else t.int()


def _area(b: Tensor) -> Tensor:
    b = upcast(b)
    return (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])


def _enclosing(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Width and height ``[..., N, M, 2]`` of the smallest box enclosing each pair."""
    lt = torch.min(boxes1[..., None, :2], boxes2[..., None, :, :2])
    rb = torch.max(boxes1[..., None, 2:], boxes2[..., None, :, 2:])
    return upcast(rb - lt).clamp(min=0)


def _iou(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    """Pairwise IoU and union."""
    lt = torch.max(boxes1[..., None, :2], boxes2[..., None, :, :2])
    rb = torch.min(boxes1[..., None, 2:], boxes2[..., None, :, 2:])
    wh = upcast(rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = _area(boxes1)[..., None] + _area(boxes2)[..., None, :] - inter
    return inter / union, union


def _check(boxes1: Tensor, boxes2: Tensor) -> None:
    for name, b in (("boxes1", boxes1), ("boxes2", boxes2)):
        if not isinstance(b, Tensor) or b.ndim < 1 or b.shape[-1] != 4:
            raise ValueError(f"{name} must be a Tensor[..., 4] of XYXY boxes, got "
                             f"{tuple(b.shape) if isinstance(b, Tensor) else type(b).__name__}")


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """IoU minus the share of the enclosing box that the union leaves empty (in [-1, 1])."""
    _check(boxes1, boxes2)
    iou, union = _iou(boxes1, boxes2)
    wh = _enclosing(boxes1, boxes2)
    hull = wh[..., 0] * wh[..., 1]
    return iou - (hull - union) / hull


def _diou(boxes1: Tensor, boxes2: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    iou, _ = _iou(boxes1, boxes2)
    wh = _enclosing(boxes1, boxes2)
    diagonal = wh[..., 0] ** 2 + wh[..., 1] ** 2 + eps
    cx1, cy1 = (boxes1[..., 0] + boxes1[..., 2]) / 2, (boxes1[..., 1] + boxes1[..., 3]) / 2
    cx2, cy2 = (boxes2[..., 0] + boxes2[..., 2]) / 2, (boxes2[..., 1] + boxes2[..., 3]) / 2
    centres = (upcast(cx1[..., None] - cx2[..., None, :]) ** 2
               + upcast(cy1[..., None] - cy2[..., None, :]) ** 2)
    return iou - centres / diagonal, iou


def distance_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """IoU minus the squared centre distance over the enclosing box's squared diagonal."""
    _check(boxes1, boxes2)
    return _diou(upcast(boxes1), upcast(boxes2), eps)[0]


def complete_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Distance IoU minus ``alpha * v``, ``v`` the aspect-ratio mismatch (``alpha`` is not
    differentiated, as in the paper)."""
    _check(boxes1, boxes2)
    boxes1, boxes2 = upcast(boxes1), upcast(boxes2)
    diou, iou = _diou(boxes1, boxes2, eps)
    w1 = boxes1[..., None, 2] - boxes1[..., None, 0]
    h1 = boxes1[..., None, 3] - boxes1[..., None, 1]
    w2 = boxes2[..., None, :, 2] - boxes2[..., None, :, 0]
    h2 = boxes2[..., None, :, 3] - boxes2[..., None, :, 1]
    v = (4 / math.pi ** 2) * torch.pow(torch.atan(w1 / h1) - torch.atan(w2 / h2), 2)
    with torch.no_grad():
        alpha = v / (1 - iou + v + eps)
    return diou - alpha * v


def masks_to_boxes(masks: Tensor) -> Tensor:
    """Tight XYXY boxes (float32, inclusive pixel indices) around masks ``[N, H, W]``; an
    empty mask gives ``[0, 0, 0, 0]``."""
    if not isinstance(masks, Tensor):
        raise TypeError(f"masks must be a Tensor[N, H, W], got {type(masks).__name__}")
    if masks.numel() == 0:
        return torch.zeros((0, 4), device=masks.device, dtype=torch.float)
    if masks.ndim != 3:
        raise ValueError(f"masks must have shape [N, H, W], got {tuple(masks.shape)}")
    _, h, w = masks.shape
    m = masks.bool()
    rows, cols = m.any(2).float(), m.any(1).float()
    y1, x1 = rows.argmax(1), cols.argmax(1)
    y2, x2 = (h - 1) - rows.flip(1).argmax(1), (w - 1) - cols.flip(1).argmax(1)
    boxes = torch.stack([x1, y1, x2, y2], 1).float()
    return torch.where(rows.any(1)[:, None], boxes, torch.zeros((), device=boxes.device))
