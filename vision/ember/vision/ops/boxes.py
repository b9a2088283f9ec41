"""Box utilities and non-maximum suppression.

``nms`` is declared through ``ember.core.kernels`` (op ``ember_vision::nms``) with a CPU
kernel and a portable torch-ops kernel, plus a fake implementation, so it compiles without
graph breaks.
"""

from __future__ import annotations

import numpy as np
import torch

from ember.core import kernels


def _check_boxes(boxes: torch.Tensor, name: str = "boxes") -> None:
    if not isinstance(boxes, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(boxes).__name__}")
    if boxes.ndim != 2 or boxes.shape[-1] != 4:
        raise ValueError(f"{name} must have shape [N, 4], got {tuple(boxes.shape)}")


def box_area(boxes: torch.Tensor) -> torch.Tensor:
    """Areas of XYXY boxes [N, 4] -> [N]."""
    _check_boxes(boxes)
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU [N, M] of XYXY boxes."""
    _check_boxes(boxes1, "boxes1")
    _check_boxes(boxes2, "boxes2")
    a1, a2 = box_area(boxes1), box_area(boxes2)
    lt = torch.maximum(boxes1[:, None, :2], boxes2[None, :, :2])
    rb = torch.minimum(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (a1[:, None] + a2[None, :] - inter)


def _xyxy(boxes: torch.Tensor, fmt: str) -> torch.Tensor:
    a, b, c, d = boxes.unbind(-1)
    if fmt == "xywh":
        return torch.stack([a, b, a + c, b + d], -1)
    if fmt == "cxcywh":
        return torch.stack([a - 0.5 * c, b - 0.5 * d, a + 0.5 * c, b + 0.5 * d], -1)
    return boxes


def box_convert(boxes: torch.Tensor, in_fmt: str, out_fmt: str) -> torch.Tensor:
    """Convert between 'xyxy', 'xywh' and 'cxcywh' with torch's type promotion, as
    torchvision does: a conversion that halves (to or from a centre) gives integer boxes a
    float result (float32), sums and differences keep the integer dtype."""
    fmts = ("xyxy", "xywh", "cxcywh")
    if in_fmt not in fmts or out_fmt not in fmts:
        raise ValueError(f"in_fmt and out_fmt must be one of {list(fmts)}, got {in_fmt!r}, "
                         f"{out_fmt!r}")
    if not isinstance(boxes, torch.Tensor) or boxes.ndim < 1 or boxes.shape[-1] != 4:
        raise ValueError(f"boxes must be a tensor [..., 4], got "
                         f"{tuple(boxes.shape) if isinstance(boxes, torch.Tensor) else boxes!r}")
    if in_fmt == out_fmt:
        return boxes.clone()
    x1, y1, x2, y2 = _xyxy(boxes, in_fmt).unbind(-1)
    if out_fmt == "xyxy":
        return torch.stack([x1, y1, x2, y2], -1)
    if out_fmt == "xywh":
        return torch.stack([x1, y1, x2 - x1, y2 - y1], -1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], -1)


def clip_boxes_to_image(boxes: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Clip XYXY boxes to an image of ``size`` (height, width)."""
    h, w = size
    x = boxes[..., 0::2].clamp(0, w)
    y = boxes[..., 1::2].clamp(0, h)
    return torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], -1)


def remove_small_boxes(boxes: torch.Tensor, min_size: float) -> torch.Tensor:
    """Indices of the boxes whose sides are both >= ``min_size``."""
    ws, hs = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    return torch.where((ws >= min_size) & (hs >= min_size))[0]


_nms = kernels.define("ember_vision::nms",
                      "(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor")


@_nms.register_fake
def _(boxes, scores, iou_threshold):
    n = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((n,), dtype=torch.long)


def _order_and_overlap(boxes, scores, iou_threshold):
    order = torch.argsort(scores, descending=True, stable=True)
    b = boxes[order].to(torch.float32)
    return order, box_iou(b, b) > iou_threshold


@_nms.register_kernel("cpu")
def _(boxes, scores, iou_threshold):
    """Greedy NMS in O(N) memory: each kept box suppresses the lower-scoring rest in one
    vectorised row of IoUs."""
    if boxes.shape[0] == 0:
        return boxes.new_empty((0,), dtype=torch.long)
    order = torch.argsort(scores, descending=True, stable=True)
    # IoUs in the boxes' precision (float32 unless float64), as torchvision's kernel
    dtype = torch.float64 if boxes.dtype == torch.float64 else torch.float32
    b = boxes.detach()[order].to(dtype).numpy()
    x1, y1, x2, y2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    removed = np.zeros(b.shape[0], dtype=bool)
    keep = []
    for i in range(b.shape[0]):
        if removed[i]:
            continue
        keep.append(i)
        w = np.clip(np.minimum(x2[i], x2[i + 1:]) - np.maximum(x1[i], x1[i + 1:]), 0, None)
        h = np.clip(np.minimum(y2[i], y2[i + 1:]) - np.maximum(y1[i], y1[i + 1:]), 0, None)
        inter = w * h
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = inter / (areas[i] + areas[i + 1:] - inter)
        removed[i + 1:] |= iou > iou_threshold
    return order[torch.as_tensor(keep, dtype=torch.long)]


@_nms.register_kernel("portable")
def _(boxes, scores, iou_threshold):
    """Greedy NMS as a fixed point on the device: a box is kept when no kept, higher-scoring
    box overlaps it; iterate until the keep mask stops changing (at most N steps)."""
    if boxes.shape[0] == 0:
        return boxes.new_empty((0,), dtype=torch.long)
    order, over = _order_and_overlap(boxes, scores, iou_threshold)
    n = over.shape[0]
    earlier = torch.ones(n, n, dtype=torch.bool, device=boxes.device).triu(1)
    sup = (over & earlier).to(torch.float32)  # sup[j, i]: j outranks and overlaps i
    keep = torch.ones(n, dtype=torch.float32, device=boxes.device)
    for _ in range(n):
        new = (keep @ sup == 0).to(torch.float32)
        if torch.equal(new, keep):
            break
        keep = new
    return order[keep.bool()]


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the XYXY boxes kept by greedy non-maximum suppression, by decreasing score."""
    _check_boxes(boxes)
    if scores.ndim != 1 or scores.shape[0] != boxes.shape[0]:
        raise ValueError(f"scores must have shape [{boxes.shape[0]}], got {tuple(scores.shape)}")
    return _nms(boxes, scores, float(iou_threshold))


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor,
                iou_threshold: float) -> torch.Tensor:
    """NMS within each category of ``idxs``: boxes of different categories never suppress
    each other (done by offsetting each category to its own region)."""
    _check_boxes(boxes)
    if idxs.shape != scores.shape:
        raise ValueError(f"idxs must have the shape of scores {tuple(scores.shape)}, "
                         f"got {tuple(idxs.shape)}")
    if boxes.numel() == 0:
        return boxes.new_empty((0,), dtype=torch.long)
    # torchvision's switch: many boxes go category by category (offsetting them to far
    # coordinates would round their IoUs); compiled code keeps the loop-free offsets
    limit = 4000 if boxes.device.type == "cpu" else 100_000
    if boxes.numel() > limit and not torch.compiler.is_compiling():
        keep = torch.zeros_like(scores, dtype=torch.bool)
        for category in torch.unique(idxs):
            members = torch.where(idxs == category)[0]
            keep[members[nms(boxes[members], scores[members], iou_threshold)]] = True
        kept = torch.where(keep)[0]
        return kept[scores[kept].sort(descending=True)[1]]
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return nms(boxes + offsets[:, None], scores, iou_threshold)
