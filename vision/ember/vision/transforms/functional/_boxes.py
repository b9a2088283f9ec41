"""Bounding-box format conversion and clamping."""

from __future__ import annotations

import torch

from ember.vision import tv_tensors
from ember.vision.transforms.functional._registry import dispatcher, register_boxes, register_raw
from ember.vision.tv_tensors import BoundingBoxFormat, _as_format


def to_xyxy(boxes: torch.Tensor, fmt: BoundingBoxFormat) -> torch.Tensor:
    if fmt == BoundingBoxFormat.XYXY:
        return boxes.clone()
    a, b, c, d = boxes.unbind(-1)
    if fmt == BoundingBoxFormat.XYWH:
        return torch.stack([a, b, a + c, b + d], dim=-1)
    return torch.stack([a - c / 2, b - d / 2, a + c / 2, b + d / 2], dim=-1)  # CXCYWH


def from_xyxy(boxes: torch.Tensor, fmt: BoundingBoxFormat) -> torch.Tensor:
    if fmt == BoundingBoxFormat.XYXY:
        return boxes
    x1, y1, x2, y2 = boxes.unbind(-1)
    if fmt == BoundingBoxFormat.XYWH:
        return torch.stack([x1, y1, x2 - x1, y2 - y1], dim=-1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


def in_xyxy(fn):
    """Run a box kernel written for float XYXY boxes on any format and dtype."""
    def kernel(boxes, fmt, canvas_size, *args, **kwargs):
        dtype = boxes.dtype
        xyxy = to_xyxy(boxes.to(torch.float32) if not dtype.is_floating_point else boxes, fmt)
        out, canvas = fn(xyxy, canvas_size, *args, **kwargs)
        out = from_xyxy(out, fmt)
        if not dtype.is_floating_point:
            out = out.round()
        return out.to(dtype), canvas
    return kernel


def clamp_xyxy(xyxy: torch.Tensor, canvas_size: tuple[int, int]) -> torch.Tensor:
    h, w = canvas_size
    x = xyxy[..., 0::2].clamp(0, w)
    y = xyxy[..., 1::2].clamp(0, h)
    return torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], dim=-1)


@dispatcher
def convert_bounding_box_format(inpt, new_format, old_format=None):
    """Boxes in ``new_format``; ``old_format`` is needed only for plain tensors."""


def _convert_plain(boxes, new_format, old_format=None):
    if old_format is None:
        raise ValueError("old_format is required when boxes is a plain tensor")
    old, new = _as_format(old_format), _as_format(new_format)
    dtype = boxes.dtype
    out = from_xyxy(to_xyxy(boxes.to(torch.float32), old), new)
    return (out.round() if not dtype.is_floating_point else out).to(dtype)


def _convert_typed(boxes, new_format, old_format=None):
    new = _as_format(new_format)
    out = _convert_plain(tv_tensors.unwrap(boxes), new, boxes.format)
    return tv_tensors.wrap(out, like=boxes, format=new)


@dispatcher
def clamp_bounding_boxes(inpt, format=None, canvas_size=None):
    """Clip boxes to their canvas; ``format`` and ``canvas_size`` only for plain tensors."""


def _clamp_plain(boxes, format=None, canvas_size=None):
    if format is None or canvas_size is None:
        raise ValueError("format and canvas_size are required when boxes is a plain tensor")
    out, _ = in_xyxy(lambda b, c: (clamp_xyxy(b, c), c))(boxes, _as_format(format), canvas_size)
    return out


register_raw(convert_bounding_box_format, torch.Tensor, _convert_plain)
register_raw(convert_bounding_box_format, tv_tensors.BoundingBoxes, _convert_typed)
register_raw(clamp_bounding_boxes, torch.Tensor, _clamp_plain)
register_boxes(clamp_bounding_boxes, in_xyxy(lambda b, c: (clamp_xyxy(b, c), c)))
