"""generalized_box_iou_loss, distance_box_iou_loss and complete_box_iou_loss: elementwise
losses between matched XYXY boxes ``[..., 4]``, torchvision's formulas and reductions."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss"]


def _float(t: Tensor) -> Tensor:
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def _inter_union(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    x1, y1, x2, y2 = boxes1.unbind(-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(-1)
    iw, ih = torch.min(x2, x2g) - torch.max(x1, x1g), torch.min(y2, y2g) - torch.max(y1, y1g)
    inter = torch.where((iw > 0) & (ih > 0), iw * ih, torch.zeros_like(iw))
    return inter, (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - inter


def _hull(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    """Width and height of the smallest box enclosing each pair."""
    x1, y1, x2, y2 = boxes1.unbind(-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(-1)
    return torch.max(x2, x2g) - torch.min(x1, x1g), torch.max(y2, y2g) - torch.min(y1, y1g)


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _check(boxes1, boxes2, reduction):
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    for name, b in (("boxes1", boxes1), ("boxes2", boxes2)):
        if not isinstance(b, Tensor) or b.ndim < 1 or b.shape[-1] != 4:
            raise ValueError(f"{name} must be a Tensor[..., 4] of XYXY boxes, got "
                             f"{tuple(b.shape) if isinstance(b, Tensor) else type(b).__name__}")
    return _float(boxes1), _float(boxes2)


def generalized_box_iou_loss(boxes1: Tensor, boxes2: Tensor, reduction: str = "none",
                             eps: float = 1e-7) -> Tensor:
    """``1 - GIoU`` of each pair of boxes (0 for equal boxes, up to 2)."""
    boxes1, boxes2 = _check(boxes1, boxes2, reduction)
    inter, union = _inter_union(boxes1, boxes2)
    hw, hh = _hull(boxes1, boxes2)
    hull = hw * hh
    return _reduce(1 - (inter / (union + eps) - (hull - union) / (hull + eps)), reduction)


def _diou_loss(boxes1: Tensor, boxes2: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    inter, union = _inter_union(boxes1, boxes2)
    iou = inter / (union + eps)
    hw, hh = _hull(boxes1, boxes2)
    x1, y1, x2, y2 = boxes1.unbind(-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(-1)
    centres = ((x2 + x1) / 2 - (x1g + x2g) / 2) ** 2 + ((y2 + y1) / 2 - (y1g + y2g) / 2) ** 2
    return 1 - iou + centres / (hw ** 2 + hh ** 2 + eps), iou


def distance_box_iou_loss(boxes1: Tensor, boxes2: Tensor, reduction: str = "none",
                          eps: float = 1e-7) -> Tensor:
    """``1 - DIoU``: the IoU loss plus the squared centre distance over the squared
    diagonal of the enclosing box."""
    boxes1, boxes2 = _check(boxes1, boxes2, reduction)
    return _reduce(_diou_loss(boxes1, boxes2, eps)[0], reduction)


def complete_box_iou_loss(boxes1: Tensor, boxes2: Tensor, reduction: str = "none",
                          eps: float = 1e-7) -> Tensor:
    """``1 - CIoU``: the distance IoU loss plus ``alpha * v`` for the aspect-ratio mismatch
    (torchvision uses the default eps inside the distance term; so do we)."""
    boxes1, boxes2 = _check(boxes1, boxes2, reduction)
    loss, iou = _diou_loss(boxes1, boxes2, 1e-7)
    x1, y1, x2, y2 = boxes1.unbind(-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(-1)
    v = (4 / math.pi ** 2) * torch.pow(torch.atan((x2g - x1g) / (y2g - y1g))
                                       - torch.atan((x2 - x1) / (y2 - y1)), 2)
    with torch.no_grad():
        alpha = v / (1 - iou + v + eps)
    return _reduce(loss + alpha * v, reduction)
