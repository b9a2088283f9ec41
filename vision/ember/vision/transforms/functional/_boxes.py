"""Bounding-box format conversion and clamping."""

from __future__ import annotations

import torch

from ember.vision import tv_tensors
from ember.vision.transforms.functional._registry import dispatcher, register_raw
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


def in_xyxy(fn, clamps: bool = False):
    """Run a box kernel written for float XYXY boxes on any format and dtype; integer boxes
    are truncated back to their dtype, as torchvision's box kernels do. With ``clamps`` the
    result is clipped to the new canvas unless the boxes' ``clamping_mode`` is None."""
    def kernel(boxes, fmt, canvas_size, *args, clamping_mode="soft", **kwargs):
        dtype = boxes.dtype
        xyxy = to_xyxy(boxes.to(torch.float32) if not dtype.is_floating_point else boxes, fmt)
        out, canvas = fn(xyxy, canvas_size, *args, **kwargs)
        if clamps and clamping_mode is not None:
            out = clamp_xyxy(out, canvas)
        return from_xyxy(out, fmt).to(dtype), canvas
    return kernel


def clamp_xyxy(xyxy: torch.Tensor, canvas_size: tuple[int, int]) -> torch.Tensor:
    h, w = canvas_size
    x = xyxy[..., 0::2].clamp(0, w)
    y = xyxy[..., 1::2].clamp(0, h)
    return torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], dim=-1)


def _convert_arith(boxes: torch.Tensor, old: BoundingBoxFormat,
                   new: BoundingBoxFormat) -> torch.Tensor:
    """Convert with torchvision's arithmetic, integer boxes included: sums and differences
    stay integer, halving of an integer size floors, and a centre form goes through float32
    and truncates back to the integer dtype."""
    out = boxes.clone()
    if old == new:
        return out
    is_int = not boxes.is_floating_point()
    floor = "floor" if is_int else None
    if old == BoundingBoxFormat.XYWH and new == BoundingBoxFormat.CXCYWH:
        out[..., :2] += out[..., 2:].div(2, rounding_mode=floor)
        return out
    if old == BoundingBoxFormat.CXCYWH:
        f = out.float() if is_int else out
        xy = f[..., :2] - f[..., 2:] / 2
        far = xy + f[..., 2:]
        if is_int:
            xy, far = xy.to(boxes.dtype), far.to(boxes.dtype)
        if new == BoundingBoxFormat.XYWH:
            return torch.cat([xy, far - xy], dim=-1)
        out = torch.cat([xy, far], dim=-1)  # XYXY, then on to the requested format
    elif old == BoundingBoxFormat.XYWH:
        out[..., 2:] += out[..., :2]
    if new == BoundingBoxFormat.XYWH:
        out[..., 2:] -= out[..., :2]
    elif new == BoundingBoxFormat.CXCYWH:
        out[..., 2:] -= out[..., :2]
        out[..., :2] = (out[..., :2] * 2 + out[..., 2:]).div(2, rounding_mode=floor)
    return out


@dispatcher
def convert_bounding_box_format(inpt, old_format=None, new_format=None, inplace=False):
    """Boxes in ``new_format`` (torchvision's signature: ``old_format`` comes first and is
    given only for plain tensors; a ``BoundingBoxes`` carries its own)."""


def _check_new(new_format):
    if new_format is None:
        raise TypeError("convert_bounding_box_format() missing 1 required argument: "
                        "'new_format'")
    return _as_format(new_format)


def _finish(boxes, out, inplace):
    if inplace:
        boxes.copy_(out)
        return boxes
    return out


def _convert_plain(boxes, old_format=None, new_format=None, inplace=False):
    new = _check_new(new_format)
    if old_format is None:
        raise ValueError("convert_bounding_box_format: old_format is required when boxes is a "
                         "plain tensor")
    return _finish(boxes, _convert_arith(boxes, _as_format(old_format), new), inplace)


def _convert_typed(boxes, old_format=None, new_format=None, inplace=False):
    new = _check_new(new_format)
    if old_format is not None:
        raise ValueError("convert_bounding_box_format: old_format must not be passed for a "
                         "BoundingBoxes input (it carries its own format)")
    raw = tv_tensors.unwrap(boxes)
    out = _finish(raw, _convert_arith(raw, boxes.format, new), inplace)
    return tv_tensors.wrap(out, like=boxes, format=new)


_CLAMPING_MODES = ("soft", "hard", "auto", None)


def _check_clamping_mode(mode):
    if mode not in _CLAMPING_MODES:
        raise ValueError(f"clamping_mode must be 'soft', 'hard', 'auto' or None, got {mode!r}")
    return mode


def _clamp_arith(boxes, fmt, canvas_size, mode):
    """Clip to the canvas; for axis-aligned boxes 'soft' and 'hard' clip alike, None keeps."""
    if mode is None:
        return boxes.clone()
    xyxy = _convert_arith(boxes.float() if not boxes.is_floating_point() else boxes, fmt,
                          BoundingBoxFormat.XYXY)
    out = _convert_arith(clamp_xyxy(xyxy, canvas_size), BoundingBoxFormat.XYXY, fmt)
    return out.to(boxes.dtype)


@dispatcher
def clamp_bounding_boxes(inpt, format=None, canvas_size=None, clamping_mode="auto"):
    """Clip boxes to their canvas; ``format``, ``canvas_size`` and a ``clamping_mode`` other
    than 'auto' for plain tensors; 'auto' uses the ``BoundingBoxes``' own mode."""


def _clamp_plain(boxes, format=None, canvas_size=None, clamping_mode="auto"):
    _check_clamping_mode(clamping_mode)
    if format is None or canvas_size is None or clamping_mode == "auto":
        raise ValueError("clamp_bounding_boxes: format, canvas_size and a clamping_mode other "
                         "than 'auto' are required when boxes is a plain tensor")
    return _clamp_arith(boxes, _as_format(format), tuple(canvas_size), clamping_mode)


def _clamp_typed(boxes, format=None, canvas_size=None, clamping_mode="auto"):
    _check_clamping_mode(clamping_mode)
    if format is not None or canvas_size is not None:
        raise ValueError("clamp_bounding_boxes: format and canvas_size must not be passed for "
                         "a BoundingBoxes input (it carries its own)")
    if clamping_mode == "auto":
        clamping_mode = boxes.clamping_mode
    out = _clamp_arith(tv_tensors.unwrap(boxes), boxes.format, boxes.canvas_size, clamping_mode)
    return tv_tensors.wrap(out, like=boxes)


register_raw(convert_bounding_box_format, torch.Tensor, _convert_plain)
register_raw(convert_bounding_box_format, tv_tensors.BoundingBoxes, _convert_typed)
register_raw(clamp_bounding_boxes, torch.Tensor, _clamp_plain)
register_raw(clamp_bounding_boxes, tv_tensors.BoundingBoxes, _clamp_typed)


def sanitize_mask(boxes: torch.Tensor, fmt: BoundingBoxFormat, canvas_size, min_size=1.0,
                  min_area=1.0) -> torch.Tensor:
    """Which boxes [N, 4] to keep: both sides >= ``min_size``, area >= ``min_area``, all
    corners on the canvas (edges included) and finite."""
    if boxes.ndim != 2:
        raise ValueError(f"sanitizing works on unbatched boxes [N, 4], got {tuple(boxes.shape)}")
    xyxy = to_xyxy(boxes.to(torch.float32), fmt)
    ws, hs = xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]
    h, w = canvas_size
    valid = (ws >= min_size) & (hs >= min_size) & (ws * hs >= min_area)
    valid &= (xyxy >= 0).all(-1) & (xyxy[:, 0::2] <= w).all(-1) & (xyxy[:, 1::2] <= h).all(-1)
    return valid & torch.isfinite(xyxy).all(-1)


def sanitize_bounding_boxes(bounding_boxes, format=None, canvas_size=None, min_size=1.0,
                            min_area=1.0):
    """``(kept boxes, keep mask)``: the mask indexes the labels that go with the boxes.
    ``format`` and ``canvas_size`` are given for a plain tensor only."""
    if isinstance(bounding_boxes, tv_tensors.BoundingBoxes):
        if format is not None or canvas_size is not None:
            raise ValueError("sanitize_bounding_boxes: format and canvas_size must not be "
                             "passed for a BoundingBoxes input (it carries its own)")
        valid = sanitize_mask(tv_tensors.unwrap(bounding_boxes), bounding_boxes.format,
                              bounding_boxes.canvas_size, min_size, min_area)
        kept = tv_tensors.unwrap(bounding_boxes)[valid]
        return tv_tensors.wrap(kept, like=bounding_boxes), valid
    if not isinstance(bounding_boxes, torch.Tensor):
        raise TypeError(f"bounding_boxes must be a tensor, got {type(bounding_boxes).__name__}")
    if format is None or canvas_size is None:
        raise ValueError("sanitize_bounding_boxes: format and canvas_size are required when "
                         "bounding_boxes is a plain tensor")
    valid = sanitize_mask(bounding_boxes, _as_format(format), tuple(canvas_size), min_size,
                          min_area)
    return bounding_boxes[valid], valid
