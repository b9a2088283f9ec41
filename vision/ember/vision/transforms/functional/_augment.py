"""Elastic distortion, JPEG round trips and Gaussian noise."""

from __future__ import annotations

import torch
import torch.nn.functional as tF

from ember.vision import tv_tensors
from ember.vision.transforms.functional._boxes import _clamp_arith, _convert_arith
from ember.vision.transforms.functional._registry import (
    dispatcher,
    register_image,
    register_mask,
    register_passthrough,
    register_raw,
)
from ember.vision.transforms.functional._utils import (
    InterpolationMode,
    TypeRuntimeError,
    as_interpolation,
    check_image,
    per_image_parallel,
)
from ember.vision.tv_tensors import BoundingBoxFormat, _as_format

# ------------------------------------------------------------------------------- elastic


def identity_grid(h: int, w: int, dtype: torch.dtype, device) -> torch.Tensor:
    """[1, h, w, 2] normalised (x, y) of the pixel centres (grid_sample, align_corners=False)."""
    xs = torch.linspace((1 - w) / w, (w - 1) / w, w, dtype=dtype, device=device)
    ys = torch.linspace((1 - h) / h, (h - 1) / h, h, dtype=dtype, device=device)
    return torch.stack(torch.broadcast_tensors(xs.view(1, w), ys.view(h, 1)), -1).unsqueeze(0)


def _check_displacement(displacement, h: int, w: int) -> None:
    if not isinstance(displacement, torch.Tensor):
        raise TypeError(f"displacement must be a tensor, got {type(displacement).__name__}")
    if tuple(displacement.shape) != (1, h, w, 2):
        raise ValueError(f"displacement must have shape (1, {h}, {w}, 2) for a {h}x{w} input, "
                         f"got {tuple(displacement.shape)}")


def _sample(img: torch.Tensor, grid: torch.Tensor, mode: InterpolationMode, fill):
    """grid_sample of [..., C, H, W] at ``grid`` [1, h, w, 2], zeros outside; a ``fill``
    (number or one per channel) replaces what lies outside: by the inside share for
    bilinear, where less than half is inside for nearest. Integer results are rounded."""
    c, h, w = img.shape[-3:]
    oh, ow = grid.shape[1:3]
    flat = img.reshape(-1, c, h, w)
    n = flat.shape[0]
    if n == 0 or img.numel() == 0:
        return img.new_empty(img.shape[:-2] + (oh, ow))
    fp = flat.dtype == grid.dtype
    x = flat if fp else flat.to(grid.dtype)
    if fill is not None:
        x = torch.cat([x, x.new_ones((n, 1, h, w))], 1)
    out = tF.grid_sample(x, grid.expand(n, -1, -1, -1), mode=mode.value, padding_mode="zeros",
                         align_corners=False)
    if fill is not None:
        out, inside = out[:, :c], out[:, c:]
        f = torch.as_tensor(fill, dtype=out.dtype, device=out.device).reshape(-1)
        if f.numel() not in (1, c):
            raise ValueError(f"fill must be a number or one value per channel ({c}), "
                             f"got {fill!r}")
        f = f.view(1, -1, 1, 1)
        if mode == InterpolationMode.NEAREST:
            out = torch.where(inside < 0.5, f.expand_as(out), out)
        else:
            out = (out - f) * inside + f
    if not fp:  # clamped (torchvision casts without clamping: bicubic overshoot wraps)
        out = out.round_().clamp_(*_int_range(img.dtype)).to(img.dtype)
    return out.reshape(img.shape[:-2] + (oh, ow))


def _int_range(dtype: torch.dtype) -> tuple[int, int]:
    if dtype == torch.bool:
        return 0, 1
    info = torch.iinfo(dtype)
    return info.min, info.max


def elastic_image(image: torch.Tensor, displacement: torch.Tensor,
                  interpolation=InterpolationMode.BILINEAR, fill=None) -> torch.Tensor:
    """Sample ``image`` at its pixel centres moved by ``displacement`` [1, H, W, 2]
    (normalised units, x then y; grid_sample's convention)."""
    check_image(image)
    mode = as_interpolation(interpolation)
    if mode not in (InterpolationMode.NEAREST, InterpolationMode.BILINEAR,
                    InterpolationMode.BICUBIC):
        raise ValueError(f"elastic supports NEAREST, BILINEAR and BICUBIC, got {mode.name}")
    h, w = image.shape[-2:]
    _check_displacement(displacement, h, w)
    dtype = image.dtype if image.dtype in (torch.float32, torch.float64) else torch.float32
    grid = identity_grid(h, w, dtype, image.device).add_(displacement.to(image.device, dtype))
    out = _sample(image if image.dtype != torch.float16 else image.float(), grid, mode, fill)
    return out.to(image.dtype)


def elastic_mask(mask: torch.Tensor, displacement: torch.Tensor, fill=None) -> torch.Tensor:
    squeeze = mask.ndim < 3
    m = mask.unsqueeze(0) if squeeze else mask
    out = elastic_image(m, displacement, InterpolationMode.NEAREST, fill)
    return out.squeeze(0) if squeeze else out


def elastic_bounding_boxes(bounding_boxes: torch.Tensor, format, canvas_size,
                           displacement: torch.Tensor, clamping_mode="soft") -> torch.Tensor:
    """Boxes under ``elastic``: the four corners (ceiled) moved by an approximate inverse of
    the displacement (identity minus displacement, torchvision's approximation), their
    enclosing box clamped to the canvas. Integer boxes are converted with integer
    arithmetic and the result truncated to their dtype, as torchvision does."""
    fmt = _as_format(format)
    h, w = canvas_size
    _check_displacement(displacement, h, w)
    if bounding_boxes.numel() == 0:
        return bounding_boxes
    dtype = bounding_boxes.dtype if bounding_boxes.is_floating_point() else torch.float32
    xyxy = _convert_arith(bounding_boxes, fmt, BoundingBoxFormat.XYXY).reshape(-1, 4)
    inv = identity_grid(h, w, dtype, xyxy.device).sub_(displacement.to(xyxy.device, dtype))
    pts = xyxy[:, [[0, 1], [2, 1], [2, 3], [0, 3]]].reshape(-1, 2)
    if pts.is_floating_point():
        pts = pts.ceil()
    ix = pts[:, 0].long().clamp(0, w - 1)
    iy = pts[:, 1].long().clamp(0, h - 1)
    scale = torch.tensor([w, h], dtype=dtype, device=xyxy.device)
    moved = ((inv[0, iy, ix, :] + 1) * (0.5 * scale) - 0.5).reshape(-1, 4, 2)
    out = torch.cat([moved.amin(1), moved.amax(1)], 1).to(xyxy.dtype)
    out = _clamp_arith(out, BoundingBoxFormat.XYXY, (h, w), clamping_mode)
    return _convert_arith(out, BoundingBoxFormat.XYXY, fmt).reshape(bounding_boxes.shape)


def _elastic_boxes_typed(boxes, displacement, interpolation=None, fill=None):
    out = elastic_bounding_boxes(tv_tensors.unwrap(boxes), boxes.format, boxes.canvas_size,
                                 displacement, boxes.clamping_mode)
    return tv_tensors.wrap(out, like=boxes)


@dispatcher
def elastic(inpt, displacement, interpolation=InterpolationMode.BILINEAR, fill=None):
    """Elastic distortion by a displacement field; masks (nearest) and boxes follow."""


elastic_transform = elastic

register_image(elastic, elastic_image)
register_mask(elastic, lambda m, displacement, interpolation=None, fill=None:
              elastic_mask(m, displacement, fill))
register_raw(elastic, tv_tensors.BoundingBoxes, _elastic_boxes_typed)

# ---------------------------------------------------------------------------------- JPEG


def jpeg_image(image: torch.Tensor, quality: int) -> torch.Tensor:
    """Every image of [..., C, H, W] uint8 (C = 1 or 3) encoded as JPEG at ``quality`` and
    decoded back."""
    from ember.vision.io import decode_jpeg, encode_jpeg

    check_image(image, channels=(1, 3))
    if image.dtype != torch.uint8:
        raise TypeRuntimeError(f"jpeg needs a uint8 image, got {image.dtype}")
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality must be an int in [1, 100], got {quality!r}")
    flat = image.reshape((-1,) + tuple(image.shape[-3:]))
    if flat.shape[0] == 0:
        return image.clone()
    src = flat if flat.device.type == "cpu" else flat.cpu()
    out = torch.empty_like(src)

    def one(i: int) -> None:
        out[i] = decode_jpeg(encode_jpeg(src[i].contiguous(), quality=quality))

    per_image_parallel(one, src.shape[0])
    return out.to(image.device).reshape(image.shape)


@dispatcher
def jpeg(image, quality):
    """JPEG compression artefacts: encode at ``quality`` (1-100) and decode."""


register_image(jpeg, jpeg_image)
register_passthrough(jpeg, tv_tensors.Mask, tv_tensors.BoundingBoxes)

# ------------------------------------------------------------------------ gaussian noise


def gaussian_noise_image(image: torch.Tensor, mean: float = 0.0, sigma: float = 0.1,
                         clip: bool = True) -> torch.Tensor:
    """``image + mean + sigma * N(0, 1)`` in [0, 1] units (uint8: the noise scaled by 255
    and truncated to an integer, then added), clipped to the range when ``clip``."""
    if sigma < 0:
        raise ValueError(f"sigma must be non-negative, got {sigma!r}")
    if image.is_floating_point():
        out = image + (mean + torch.randn_like(image) * sigma)
        return out.clamp_(0, 1) if clip else out
    if image.dtype != torch.uint8:
        raise ValueError(f"gaussian_noise needs a uint8 or float image, got {image.dtype}")
    noise = (mean * 255 + torch.randn_like(image, dtype=torch.float32) * (sigma * 255))
    out = image.to(torch.int16) + noise.to(torch.int16)
    if clip:
        out = out.clamp_(0, 255)
    return out.to(torch.uint8)  # without clip, values wrap around as in torchvision


@dispatcher
def gaussian_noise(inpt, mean=0.0, sigma=0.1, clip=True):
    """Additive Gaussian noise."""


register_image(gaussian_noise, gaussian_noise_image)
register_passthrough(gaussian_noise, tv_tensors.Mask, tv_tensors.BoundingBoxes)
