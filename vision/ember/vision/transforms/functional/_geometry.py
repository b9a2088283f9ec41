"""Geometric functionals: flips, resize, crops, pad, rotate, affine and perspective warps.

Scalar parameters act on every image; 1-d tensor parameters of length N (``top``,
``angle``, ...) act per sample along dim 0, vectorised on the input's device.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence

import PIL.Image
import torch
import torch.nn.functional as tF

from ember.core import kernels
from ember.vision import tv_tensors
from ember.vision.transforms.functional._boxes import _clamp_arith, in_xyxy
from ember.vision.transforms.functional._registry import (
    dispatcher,
    register_boxes,
    register_image,
    register_mask,
    register_raw,
)
from ember.vision.transforms.functional._type_conversion import (
    PILImage,
    check_pil_mode,
    image_as_pil,
    pil_kernel,
    pil_to_tensor,
)
from ember.vision.transforms.functional._utils import (
    InterpolationMode,
    ValueRuntimeError,
    as_interpolation,
    flatten_batch,
    from_float,
    is_batched_param,
    max_value,
    per_image_parallel,
)


def _size_of(inpt) -> tuple[int, int]:
    if isinstance(inpt, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
        return inpt.canvas_size
    if isinstance(inpt, PIL.Image.Image):
        return inpt.height, inpt.width
    if not isinstance(inpt, torch.Tensor) or inpt.ndim < 2:
        raise TypeError(f"expected an image, video, mask or boxes tensor, "
                        f"got {type(inpt).__name__}")
    return int(inpt.shape[-2]), int(inpt.shape[-1])


def get_size(inpt) -> list[int]:
    """``[height, width]`` of an image, video, mask or the canvas of boxes."""
    return list(_size_of(inpt))


def _vec(v, trailing: int = 0) -> torch.Tensor:
    """A parameter as a float64 CPU tensor with a leading batch dim (1 for a scalar)."""
    t = torch.as_tensor(v, dtype=torch.float64).cpu()
    return t.unsqueeze(0) if t.ndim == trailing else t


def _coord(v, xyxy: torch.Tensor) -> torch.Tensor:
    """A scalar or [N] parameter broadcast to the box dims ``xyxy.shape[:-1]``."""
    t = torch.as_tensor(v, dtype=xyxy.dtype, device=xyxy.device)
    if t.ndim == 1:
        t = t.view((-1,) + (1,) * (xyxy.ndim - 2))
    return t.expand(xyxy.shape[:-1])


# ----------------------------------------------------------------------------- flips

@dispatcher
def horizontal_flip(inpt):
    """Mirror left-right."""


@dispatcher
def vertical_flip(inpt):
    """Mirror top-bottom."""


def _hflip_boxes(xyxy, canvas):
    x1, y1, x2, y2 = xyxy.unbind(-1)
    return torch.stack([canvas[1] - x2, y1, canvas[1] - x1, y2], -1), canvas


def _vflip_boxes(xyxy, canvas):
    x1, y1, x2, y2 = xyxy.unbind(-1)
    return torch.stack([x1, canvas[0] - y2, x2, canvas[0] - y1], -1), canvas


register_image(horizontal_flip, lambda x: x.flip(-1))
register_mask(horizontal_flip, lambda x: x.flip(-1))
register_boxes(horizontal_flip, in_xyxy(_hflip_boxes))
register_image(vertical_flip, lambda x: x.flip(-2))
register_mask(vertical_flip, lambda x: x.flip(-2))
register_boxes(vertical_flip, in_xyxy(_vflip_boxes))


# ----------------------------------------------------------------------------- resize

def _check_size(size, name="size", allow_none=False):
    if size is None and allow_none:
        return None
    if isinstance(size, int):
        size = [size]
    if (not isinstance(size, (list, tuple)) or len(size) not in (1, 2)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size)):
        raise ValueRuntimeError(f"{name} must be a positive int or a sequence of 1 or 2 "
                                f"positive ints, got {size!r}")
    return list(size)


def output_size(h: int, w: int, size, max_size: int | None = None) -> tuple[int, int]:
    """Resize's output (height, width) for an input of (h, w), with torchvision's rules."""
    size = _check_size(size, allow_none=max_size is not None)
    if max_size is not None and (not isinstance(max_size, int) or max_size <= 0):
        raise ValueError(f"max_size must be a positive int or None, got {max_size!r}")
    if size is None:
        scale = max_size / max(h, w)
        return max(1, int(h * scale)), max(1, int(w * scale))
    if len(size) == 2:
        if max_size is not None:
            raise ValueError("max_size is only supported when size is a single int")
        return size[0], size[1]
    short, long = (h, w) if h <= w else (w, h)
    new_short, new_long = size[0], int(size[0] * long / short)
    if max_size is not None:
        if max_size <= size[0]:
            raise ValueError(f"max_size ({max_size}) must be larger than size ({size[0]})")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_short, new_long) if h <= w else (new_long, new_short)


def _nearest_index(n_in: int, n_out: int, exact: bool, device) -> torch.Tensor:
    i = torch.arange(n_out, device=device, dtype=torch.float64)
    src = ((i + 0.5) if exact else i) * (n_in / n_out)
    return src.floor().long().clamp_(0, n_in - 1)


def _resize_nearest(x: torch.Tensor, oh: int, ow: int, exact: bool = False) -> torch.Tensor:
    h, w = x.shape[-2:]
    rows = _nearest_index(h, oh, exact, x.device)
    cols = _nearest_index(w, ow, exact, x.device)
    return x.index_select(-2, rows).index_select(-1, cols)


def _check_tensor_mode(mode: InterpolationMode, antialias) -> None:
    """torchvision's rules for tensors: BOX and HAMMING are PIL-only, LANCZOS antialiases."""
    if mode in _PIL_ONLY:
        raise ValueError(f"interpolation {mode.name} is supported for PIL images only (as in "
                         f"torchvision); use BILINEAR, BICUBIC or LANCZOS for tensors")
    if mode == InterpolationMode.LANCZOS and not antialias:
        raise ValueError("InterpolationMode.LANCZOS requires antialias=True")


def _resize_image(img, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                  antialias=True):
    mode = as_interpolation(interpolation)
    if mode not in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        _check_tensor_mode(mode, antialias)
    if img.ndim < 3:
        raise ValueError(f"image must have shape [..., C, H, W], got {tuple(img.shape)}")
    h, w = img.shape[-2:]
    oh, ow = output_size(h, w, size, max_size)
    if (oh, ow) == (h, w):
        return img.clone()
    x, lead = flatten_batch(img, 3)
    if x.numel() == 0:
        return img.new_empty(lead + (img.shape[-3], oh, ow))
    if mode in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        out = _resize_nearest(x, oh, ow, mode == InterpolationMode.NEAREST_EXACT)
    else:
        aa = bool(antialias)
        if x.dtype == torch.uint8 and x.device.type == "cpu" and mode in (
                InterpolationMode.BILINEAR, InterpolationMode.BICUBIC,
                InterpolationMode.LANCZOS):
            # torch's uint8 channels-last kernel is Pillow's fixed-point algorithm; bicubic
            # with or without antialias goes through it in torchvision too
            out = tF.interpolate(x.contiguous(memory_format=torch.channels_last), size=(oh, ow),
                                 mode=mode.value, align_corners=False, antialias=aa).contiguous()
        elif not x.dtype.is_floating_point and aa:
            # Pillow's separable filters (bicubic a=-0.5), exact to 1 level on integer images
            n = x.shape[0]
            full = [torch.zeros(n, device=x.device), torch.zeros(n, device=x.device),
                    torch.full((n,), h, device=x.device), torch.full((n,), w, device=x.device)]
            out = _resized_crop_dense(x, *full, oh, ow, mode, True)
        else:
            xf = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
            out = tF.interpolate(xf, size=(oh, ow), mode=mode.value, align_corners=False,
                                 antialias=aa)
            if not img.dtype.is_floating_point:
                out = from_float(out, img.dtype)
            else:
                out = out.to(img.dtype)
    return out.reshape(lead + out.shape[-3:])


def _resize_mask(mask, size, interpolation=None, max_size=None, antialias=None):
    h, w = mask.shape[-2:]
    oh, ow = output_size(h, w, size, max_size)
    return _resize_nearest(mask, oh, ow)


def _resize_boxes(xyxy, canvas, size, interpolation=None, max_size=None, antialias=None):
    oh, ow = output_size(canvas[0], canvas[1], size, max_size)
    scale = xyxy.new_tensor([ow / canvas[1], oh / canvas[0]] * 2)
    return xyxy * scale, (oh, ow)


@dispatcher
def resize(inpt, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
    """Resize to ``size`` ([h, w], or the shorter edge); antialiased bilinear by default."""


# Pillow's resampling filter numbers, as torchvision maps the modes for PIL images
_PIL_FILTER = {InterpolationMode.NEAREST: 0, InterpolationMode.NEAREST_EXACT: 0,
               InterpolationMode.BILINEAR: 2, InterpolationMode.BICUBIC: 3,
               InterpolationMode.BOX: 4, InterpolationMode.HAMMING: 5,
               InterpolationMode.LANCZOS: 1}


def _resize_pil(pic, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                antialias=True):
    """PIL images: Pillow's own resize, as torchvision's (its filters, its pass order, RGBA
    and LA resampled with premultiplied alpha); Pillow always antialiases."""
    check_pil_mode(pic, "resize")
    mode = as_interpolation(interpolation)
    if antialias is False:
        warnings.warn("antialias=False is ignored for PIL images: Pillow always antialiases "
                      "(as in torchvision)", UserWarning, stacklevel=2)
    oh, ow = output_size(pic.height, pic.width, size, max_size)
    if (oh, ow) == (pic.height, pic.width):
        return pic.copy()
    return pic.resize((ow, oh), resample=_PIL_FILTER[mode])


def _resize_pil_image(img, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                      antialias=True):
    """Images from PIL inside a transform (``PILImage``): resized by Pillow, as the PIL image
    itself would be (other shapes and dtypes: the tensor kernel)."""
    raw = tv_tensors.unwrap(img)
    if raw.ndim != 3 or raw.dtype not in (torch.uint8, torch.uint16, torch.int32,
                                          torch.float32):
        return tv_tensors.wrap(_resize_image(raw, size, interpolation, max_size, antialias),
                               like=img)
    out = _resize_pil(image_as_pil(img), size, interpolation, max_size, antialias)
    return tv_tensors.wrap(pil_to_tensor(out), like=img)


def _resized_crop_pil_image(img, top, left, height, width, size,
                            interpolation=InterpolationMode.BILINEAR, antialias=True):
    """Images from PIL: crop, then resize by Pillow (``_resize_pil_image``)."""
    if is_batched_param(top, left, height, width):
        return _resized_crop_image(img, top, left, height, width, size, interpolation,
                                   antialias)
    cropped = _crop_any(tv_tensors.unwrap(img), int(top), int(left), int(height), int(width))
    return _resize_pil_image(tv_tensors.wrap(cropped, like=img), size, interpolation,
                             antialias=antialias)


register_image(resize, _resize_image)
register_raw(resize, PILImage, _resize_pil_image)
register_raw(resize, PIL.Image.Image, _resize_pil)
register_mask(resize, _resize_mask)
register_boxes(resize, in_xyxy(_resize_boxes))


# ----------------------------------------------------------------------------- crop

def _crop_per_sample(x, top, left, height: int, width: int):
    n = x.shape[0]
    h, w = x.shape[-2:]
    dev = x.device
    rows = top.to(dev).long().view(n, 1) + torch.arange(height, device=dev)
    cols = left.to(dev).long().view(n, 1) + torch.arange(width, device=dev)
    flat = x.reshape(n, -1, h, w)
    m = flat.shape[1]
    out = flat.gather(2, rows.clamp(0, h - 1)[:, None, :, None].expand(n, m, height, w))
    out = out.gather(3, cols.clamp(0, w - 1)[:, None, None, :].expand(n, m, height, width))
    inside = (((rows >= 0) & (rows < h))[:, None, :, None]
              & ((cols >= 0) & (cols < w))[:, None, None])
    out = torch.where(inside, out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out.reshape(x.shape[:-2] + (height, width))


def _crop_any(x, top, left, height, width):
    if not isinstance(height, int) or not isinstance(width, int) or height < 0 or width < 0:
        raise ValueError(f"height and width must be non-negative ints, got {height!r}, {width!r}")
    if is_batched_param(top, left):
        if x.ndim < 3:
            raise ValueError("per-sample crop needs a batch dimension (dim 0) on the input")
        if x.shape[0] == 0:
            return x.new_empty(x.shape[:-2] + (height, width))
        return _crop_per_sample(x, torch.as_tensor(top), torch.as_tensor(left), height, width)
    top, left = int(top), int(left)
    h, w = x.shape[-2:]
    if top >= 0 and left >= 0 and top + height <= h and left + width <= w:
        return x[..., top:top + height, left:left + width].clone()
    out = x.new_zeros(x.shape[:-2] + (height, width))
    y0, y1 = max(top, 0), min(top + height, h)
    x0, x1 = max(left, 0), min(left + width, w)
    if y1 > y0 and x1 > x0:
        out[..., y0 - top:y1 - top, x0 - left:x1 - left] = x[..., y0:y1, x0:x1]
    return out


def _crop_boxes(xyxy, canvas, top, left, height, width):
    lft, tp = _coord(left, xyxy), _coord(top, xyxy)
    out = xyxy - torch.stack([lft, tp, lft, tp], -1)
    return out, (height, width)


@dispatcher
def crop(inpt, top, left, height, width):
    """Cut the window at (top, left) of (height, width); outside the input is zero."""


register_image(crop, _crop_any)
register_mask(crop, _crop_any)
register_boxes(crop, in_xyxy(_crop_boxes, clamps=True))


def center_crop(inpt, output_size: int | Sequence[int]):
    """The central window of ``output_size``, zero-padded when larger than the input."""
    size = _check_size(output_size, "output_size")
    oh, ow = (size[0], size[0]) if len(size) == 1 else size
    h, w = _size_of(inpt)
    return crop(inpt, _center_offset(h, oh), _center_offset(w, ow), oh, ow)


def _center_offset(size: int, crop_size: int) -> int:
    """Where the central window starts: half the excess rounded half-to-even inside the
    input; when the window is larger, the padding before is the floor of half the excess
    (torchvision's image kernel: pad (excess // 2, (excess + 1) // 2), then crop)."""
    if crop_size > size:
        return -((crop_size - size) // 2)
    return int(round((size - crop_size) / 2.0))


def five_crop(inpt, size: int | Sequence[int]):
    """The four corner crops and the central crop: (tl, tr, bl, br, center)."""
    s = _check_size(size)
    ch, cw = (s[0], s[0]) if len(s) == 1 else s
    h, w = _size_of(inpt)
    if ch > h or cw > w:
        raise ValueError(f"size {(ch, cw)} is larger than the input size {(h, w)}")
    return (crop(inpt, 0, 0, ch, cw), crop(inpt, 0, w - cw, ch, cw),
            crop(inpt, h - ch, 0, ch, cw), crop(inpt, h - ch, w - cw, ch, cw),
            center_crop(inpt, [ch, cw]))


_FLIP = {False: horizontal_flip, True: vertical_flip}


def ten_crop(inpt, size: int | Sequence[int], vertical_flip: bool = False):
    """``five_crop`` of the input, then ``five_crop`` of its horizontal (or, with
    ``vertical_flip``, vertical) flip: ten crops."""
    return five_crop(inpt, size) + five_crop(_FLIP[bool(vertical_flip)](inpt), size)


# ----------------------------------------------------------------------------- resized crop

def _filter_bilinear(x):
    return (1 - x.abs()).clamp_(min=0)


def _filter_bicubic(x, a=-0.5):
    x = x.abs()
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


def _filter_box(x):
    return ((x > -0.5) & (x <= 0.5)).to(x.dtype)


def _sinc(x):
    return torch.special.sinc(x)


def _filter_hamming(x):
    return torch.where(x.abs() < 1, _sinc(x) * (0.54 + 0.46 * torch.cos(math.pi * x)),
                       torch.zeros_like(x))


def _filter_lanczos(x):
    return torch.where(x.abs() < 3, _sinc(x) * _sinc(x / 3), torch.zeros_like(x))


# Pillow's resampling filters and their supports
_FILTERS = {InterpolationMode.BILINEAR: (_filter_bilinear, 1.0),
            InterpolationMode.BICUBIC: (_filter_bicubic, 2.0),
            InterpolationMode.BOX: (_filter_box, 0.5),
            InterpolationMode.HAMMING: (_filter_hamming, 1.0),
            InterpolationMode.LANCZOS: (_filter_lanczos, 3.0)}
_PIL_ONLY = (InterpolationMode.BOX, InterpolationMode.HAMMING)


def _resample_weights(n_in: int, start, length, n_out: int, mode, antialias: bool, device):
    """Dense [N, n_out, n_in] Pillow-style weights resampling the windows [start, start+length)."""
    fn, support = _FILTERS[mode]
    start = start.to(device, torch.float64).view(-1, 1, 1)
    length = length.to(device, torch.float64).view(-1, 1, 1)
    scale = length / n_out
    ss = (1.0 / scale.clamp(min=1.0)) if antialias else torch.ones_like(scale)
    sup = support / ss
    center = (torch.arange(n_out, device=device, dtype=torch.float64).view(1, -1, 1) + 0.5) * scale
    j = torch.arange(n_in, device=device, dtype=torch.float64).view(1, 1, -1) - start
    lo = (center - sup + 0.5).floor().clamp(min=0)
    hi = torch.minimum((center + sup + 0.5).floor(), length)
    wts = fn((j - center + 0.5) * ss) * ((j >= lo) & (j < hi))
    return (wts / wts.sum(-1, keepdim=True).clamp(min=1e-12)).to(torch.float32)


def _resized_crop_image(img, top, left, height, width, size,
                        interpolation=InterpolationMode.BILINEAR, antialias=True):
    mode = as_interpolation(interpolation)
    if not is_batched_param(top, left, height, width):
        return _resize_image(_crop_any(img, int(top), int(left), int(height), int(width)), size,
                             mode, antialias=antialias)
    s = _check_size(size)
    oh, ow = (s[0], s[0]) if len(s) == 1 else s
    n = img.shape[0]
    if n == 0:
        return img.new_empty(img.shape[:-2] + (oh, ow))
    params = [torch.as_tensor(v, device=img.device).expand(n) for v in (top, left, height, width)]
    if mode in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        return _resized_crop_nearest(img, *params, oh, ow)
    _check_tensor_mode(mode, antialias)
    if img.requires_grad:  # the op below has no autograd formula; torch ops do
        return _resized_crop_dense(img, *params, oh, ow, mode, bool(antialias))
    return _resized_crop_op(img, *params, oh, ow, mode.value, bool(antialias))


# Per-sample resized crop as one op: compiled graphs call the fast CPU kernel as an extern
# (the windows are data-dependent) instead of tracing dense weight matrices.
_resized_crop_op = kernels.define(
    "ember_vision::resized_crop",
    "(Tensor img, Tensor top, Tensor left, Tensor height, Tensor width, SymInt oh, SymInt ow, "
    "str mode, bool antialias) -> Tensor")


@_resized_crop_op.register_fake
def _(img, top, left, height, width, oh, ow, mode, antialias):
    return img.new_empty(tuple(img.shape[:-2]) + (oh, ow))


@_resized_crop_op.register_kernel("cpu")
def _(img, top, left, height, width, oh, ow, mode, antialias):
    """One torch interpolate call per window over the thread pool (for uint8 bilinear that
    is Pillow's fixed-point algorithm); other integer cases take the dense weights."""
    m = InterpolationMode(mode)
    if (m not in (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC)
            if img.dtype == torch.uint8
            else img.dtype not in (torch.float32, torch.float64)):
        return _resized_crop_dense(img, top, left, height, width, oh, ow, m, antialias)
    n = img.shape[0]
    t, lf, hh, ww = (p.tolist() for p in (top, left, height, width))
    flat = img.reshape((n, -1) + tuple(img.shape[-3:]))
    out = img.new_empty(flat.shape[:-2] + (oh, ow))

    def one(i: int) -> None:
        win = flat[i, :, :, t[i]:t[i] + hh[i], lf[i]:lf[i] + ww[i]]
        win = win.contiguous(memory_format=torch.channels_last)
        out[i] = tF.interpolate(win, size=(oh, ow), mode=mode, align_corners=False,
                                antialias=antialias)

    per_image_parallel(one, n)
    return out.reshape(tuple(img.shape[:-2]) + (oh, ow))


@_resized_crop_op.register_kernel("portable")
def _(img, top, left, height, width, oh, ow, mode, antialias):
    return _resized_crop_dense(img, top, left, height, width, oh, ow, InterpolationMode(mode),
                               antialias)


def _resized_crop_dense(img, top, left, height, width, oh, ow, mode, antialias):
    """Vectorised per-sample crop + resize: two batched matmuls with separable weights."""
    n, h, w = img.shape[0], img.shape[-2], img.shape[-1]
    wy = _resample_weights(h, top, height, oh, mode, antialias, img.device)
    wx = _resample_weights(w, left, width, ow, mode, antialias, img.device)
    x = img.reshape(n, -1, h, w)
    xf = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
    # horizontal pass first, rounded for integer images, as Pillow does
    tmp = torch.matmul(xf, wx.to(xf.dtype).transpose(-1, -2)[:, None])
    if not img.dtype.is_floating_point:
        tmp = (tmp + 0.5).floor_().clamp_(0, max_value(img.dtype))
    out = torch.matmul(wy.to(xf.dtype)[:, None], tmp).reshape(img.shape[:-2] + (oh, ow))
    return out.to(img.dtype) if img.dtype.is_floating_point else from_float(out, img.dtype)


def _resized_crop_nearest(x, top, left, height, width, oh, ow):
    n = x.shape[0]
    dev = x.device
    fy = (torch.arange(oh, device=dev, dtype=torch.float64) * (height.view(n, 1).double() / oh))
    fx = (torch.arange(ow, device=dev, dtype=torch.float64) * (width.view(n, 1).double() / ow))
    rows = (top.view(n, 1).long() + fy.floor().long())
    cols = (left.view(n, 1).long() + fx.floor().long())
    h, w = x.shape[-2:]
    flat = x.reshape(n, -1, h, w)
    m = flat.shape[1]
    out = flat.gather(2, rows.clamp(0, h - 1)[:, None, :, None].expand(n, m, oh, w))
    out = out.gather(3, cols.clamp(0, w - 1)[:, None, None, :].expand(n, m, oh, ow))
    return out.reshape(x.shape[:-2] + (oh, ow))


def _resized_crop_mask(mask, top, left, height, width, size, interpolation=None, antialias=None):
    s = _check_size(size)
    oh, ow = (s[0], s[0]) if len(s) == 1 else s
    if not is_batched_param(top, left, height, width):
        cropped = _crop_any(mask, int(top), int(left), int(height), int(width))
        return _resize_nearest(cropped, oh, ow)
    n = mask.shape[0]
    params = [torch.as_tensor(v, device=mask.device).expand(n) for v in (top, left, height, width)]
    return _resized_crop_nearest(mask, *params, oh, ow)


def _resized_crop_boxes(xyxy, canvas, top, left, height, width, size, interpolation=None,
                        antialias=None):
    s = _check_size(size)
    oh, ow = (s[0], s[0]) if len(s) == 1 else s
    lft, tp = _coord(left, xyxy), _coord(top, xyxy)
    out = xyxy - torch.stack([lft, tp, lft, tp], -1)
    sx, sy = ow / _coord(width, xyxy), oh / _coord(height, xyxy)
    out = out * torch.stack([sx, sy, sx, sy], -1)
    return out, (oh, ow)


@dispatcher
def resized_crop(inpt, top, left, height, width, size, interpolation=InterpolationMode.BILINEAR,
                 antialias=True):
    """Crop the window (top, left, height, width), then resize it to ``size``."""


register_image(resized_crop, _resized_crop_image)
register_raw(resized_crop, PILImage, _resized_crop_pil_image)
register_mask(resized_crop, _resized_crop_mask)
register_boxes(resized_crop, in_xyxy(_resized_crop_boxes, clamps=True))


# ----------------------------------------------------------------------------- pad

def parse_padding(padding) -> tuple[int, int, int, int]:
    """int / [lr, tb] / [l, t, r, b] -> (left, top, right, bottom); negative sides crop, as
    in torchvision."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        padding = [padding]
    if (not isinstance(padding, (list, tuple)) or len(padding) not in (1, 2, 4)
            or not all(isinstance(p, int) and not isinstance(p, bool) for p in padding)):
        raise ValueError(f"padding must be an int or a sequence of 1, 2 or 4 of them, "
                         f"got {padding!r}")
    if len(padding) == 1:
        return (padding[0],) * 4
    if len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    return tuple(padding)


_PAD_MODES = ("constant", "edge", "reflect", "symmetric")


def _pad_index(n: int, before: int, after: int, mode: str, device) -> torch.Tensor:
    idx = torch.arange(-before, n + after, device=device)
    if mode == "edge" or n == 1:
        return idx.clamp(0, n - 1)
    if mode == "reflect":
        p = 2 * (n - 1)
        m = idx % p
        return torch.where(m < n, m, p - m)
    p = 2 * n
    m = idx % p
    return torch.where(m < n, m, p - 1 - m)


def _fill_tensor(fill, x: torch.Tensor, channel_dim: bool) -> torch.Tensor | float:
    if fill is None:
        return 0
    if isinstance(fill, (int, float)):
        return fill
    f = torch.as_tensor(fill, dtype=x.dtype, device=x.device)
    if f.ndim != 1 or (channel_dim and f.shape[0] not in (1, x.shape[-3])):
        raise ValueError(f"fill must be a number or one value per channel, got {fill!r}")
    return f.view(-1, 1, 1) if channel_dim else f


def _pad_any(x, padding, fill=None, padding_mode="constant", channel_dim=True):
    if padding_mode not in _PAD_MODES:
        raise ValueError(f"padding_mode must be one of {_PAD_MODES}, got {padding_mode!r}")
    left, top, right, bottom = parse_padding(padding)
    if min(left, top, right, bottom) < 0:   # negative sides crop first, then pad the rest
        h, w = x.shape[-2:]
        x = x[..., max(-top, 0):h - max(-bottom, 0), max(-left, 0):w - max(-right, 0)]
        left, top, right, bottom = (max(v, 0) for v in (left, top, right, bottom))
    h, w = x.shape[-2:]
    if padding_mode == "constant":
        out = x.new_empty(x.shape[:-2] + (h + top + bottom, w + left + right))
        f = _fill_tensor(fill, x, channel_dim and x.ndim >= 3)
        if isinstance(f, torch.Tensor):
            out.copy_(f.expand(out.shape))
        else:
            out.fill_(f)
        out[..., top:top + h, left:left + w] = x
        return out
    if h == 0 or w == 0:
        raise ValueError(f"padding_mode {padding_mode!r} needs a non-empty image")
    if padding_mode == "reflect" and (max(top, bottom) >= h or max(left, right) >= w):
        raise ValueRuntimeError("reflect padding must be smaller than the image size")
    rows = _pad_index(h, top, bottom, padding_mode, x.device)
    cols = _pad_index(w, left, right, padding_mode, x.device)
    return x.index_select(-2, rows).index_select(-1, cols)


def _pad_boxes(boxes, padding, fill=None, padding_mode="constant"):
    """Shift by (left, top) in the boxes' own format and dtype, then clip to the padded
    canvas with the boxes' clamping mode (torchvision's arithmetic: a box reaching past the
    old canvas is cut at the new one; clamping_mode=None keeps it)."""
    if padding_mode not in _PAD_MODES:
        raise ValueError(f"padding_mode must be one of {_PAD_MODES}, got {padding_mode!r}")
    left, top, right, bottom = parse_padding(padding)
    far = (left, top) if boxes.format == tv_tensors.BoundingBoxFormat.XYXY else (0, 0)
    plain = tv_tensors.unwrap(boxes)
    shifted = plain + torch.tensor([left, top, *far], dtype=plain.dtype, device=plain.device)
    canvas = (boxes.canvas_size[0] + top + bottom, boxes.canvas_size[1] + left + right)
    out = _clamp_arith(shifted, boxes.format, canvas, boxes.clamping_mode)
    return tv_tensors.wrap(out, like=boxes, canvas_size=canvas)


@dispatcher
def pad(inpt, padding, fill=None, padding_mode="constant"):
    """Pad the borders: constant (``fill``), edge, reflect or symmetric."""


register_image(pad, _pad_any)
register_mask(pad, lambda x, padding, fill=None, padding_mode="constant":
              _pad_any(x, padding, 0 if fill is None else fill, padding_mode, channel_dim=False))
register_raw(pad, tv_tensors.BoundingBoxes, _pad_boxes)


# ----------------------------------------------------------------------------- affine warps

def affine_matrix(angle, translate, scale, shear, center) -> torch.Tensor:
    """Forward [B, 3, 3] matrices in pixel coordinates (x right, y down; angle clockwise)."""
    angle, scale = _vec(angle), _vec(scale)
    translate, shear, center = _vec(translate, 1), _vec(shear, 1), _vec(center, 1)
    rot = torch.deg2rad(angle)
    sx, sy = torch.deg2rad(shear[..., 0]), torch.deg2rad(shear[..., 1])
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -torch.cos(rot - sy) * torch.tan(sx) / torch.cos(sy) - torch.sin(rot)
    c = torch.sin(rot - sy) / torch.cos(sy)
    d = -torch.sin(rot - sy) * torch.tan(sx) / torch.cos(sy) + torch.cos(rot)
    a, b, c, d, s, tx, ty, cx, cy = torch.broadcast_tensors(
        a, b, c, d, scale, translate[..., 0], translate[..., 1], center[..., 0], center[..., 1])
    m = torch.zeros(a.shape + (3, 3), dtype=torch.float64)
    m[..., 0, 0], m[..., 0, 1] = a * s, b * s
    m[..., 1, 0], m[..., 1, 1] = c * s, d * s
    m[..., 0, 2] = cx + tx - (a * s * cx + b * s * cy)
    m[..., 1, 2] = cy + ty - (c * s * cx + d * s * cy)
    m[..., 2, 2] = 1.0
    return m


def _source_points(minv: torch.Tensor, oh: int, ow: int, device):
    """Source coordinates of the output pixel centres, computed on ``device``."""
    dtype = torch.float32 if torch.device(device).type == "mps" else torch.float64
    ys, xs = torch.meshgrid(torch.arange(oh, dtype=dtype, device=device) + 0.5,
                            torch.arange(ow, dtype=dtype, device=device) + 0.5, indexing="ij")
    pts = torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(-1, 3)
    src = pts @ minv.to(device, dtype).transpose(-1, -2)
    sx, sy = src[..., 0] / src[..., 2], src[..., 1] / src[..., 2]
    b = minv.shape[0]
    return sx.reshape(b, oh, ow), sy.reshape(b, oh, ow)


def _warp(x, minv, out_hw, interpolation, fill, channel_dim=True):
    """Sample ``x`` at ``minv`` applied to output pixel centres, Pillow's rules at the borders."""
    mode = as_interpolation(interpolation)
    h, w = x.shape[-2:]
    oh, ow = out_hw
    keep = 3 if channel_dim else 2
    flat, lead = flatten_batch(x, keep)
    n = flat.shape[0]
    if n == 0:
        return x.new_empty(lead + tuple(x.shape[-keep:-2]) + (oh, ow))
    if minv.shape[0] not in (1, n):
        raise ValueError(f"got {minv.shape[0]} per-sample parameters for a batch of {n}")
    sx, sy = _source_points(minv, oh, ow, x.device)
    inside = ((sx >= 0) & (sx < w) & (sy >= 0) & (sy < h))
    if not channel_dim:
        flat = flat.unsqueeze(1)
    if mode in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        ix = sx.floor().long().clamp_(0, w - 1)
        iy = sy.floor().long().clamp_(0, h - 1)
        lin = (iy * w + ix).reshape(minv.shape[0], 1, -1).expand(n, flat.shape[1], -1)
        out = flat.reshape(n, flat.shape[1], -1).gather(2, lin).reshape(n, -1, oh, ow)
    else:
        # torchvision's tensor kernel: samples past the border count as zero; with a fill,
        # a ones plane warped alongside says how much of each output pixel came from
        # inside and the fill is blended in by that weight (fill=None: no blending, the
        # border fades to zero); integer images are rounded
        grid = torch.stack([sx * 2 / w - 1, sy * 2 / h - 1], -1).to(torch.float32)
        xf = flat if flat.dtype in (torch.float32, torch.float64) else flat.to(torch.float32)
        c = xf.shape[1]
        if fill is not None:
            xf = torch.cat([xf, xf.new_ones((n, 1) + tuple(xf.shape[-2:]))], 1)
        warped = tF.grid_sample(xf, grid.expand(n, -1, -1, -1).to(xf.dtype),
                                mode=mode.value, padding_mode="zeros", align_corners=False)
        out = warped[:, :c]
        if fill is not None:
            f = torch.as_tensor(_fill_tensor(fill, out, True), dtype=out.dtype,
                                device=out.device)
            f = f.view(1, -1, 1, 1) if f.ndim else f
            out = (out - f) * warped[:, c:] + f
        out = out.to(x.dtype) if x.dtype.is_floating_point else from_float(out, x.dtype)
        if not channel_dim:
            out = out.squeeze(1)
        return out.reshape(lead + tuple(out.shape[1:]))
    f = _fill_tensor(fill, out, True)
    f = torch.as_tensor(f, dtype=out.dtype, device=out.device)
    out = torch.where(inside.unsqueeze(1), out, f.view(-1, 1, 1) if f.ndim else f)
    if not channel_dim:
        out = out.squeeze(1)
    return out.reshape(lead + tuple(out.shape[1:]))


def _per_sample_fits(x, m):
    if m.shape[0] > 1 and (x.ndim < 3 or x.shape[0] != m.shape[0]):
        raise ValueError(f"per-sample parameters for {m.shape[0]} samples need an input whose "
                         f"dim 0 is the batch, got shape {tuple(x.shape)}")


def _warp_typed(x, m, out_hw, interpolation, fill, channel_dim):
    _per_sample_fits(x, m)
    if m.shape[0] > 1:
        # per-sample: dim 0 is the batch, everything between it and the image dims is shared
        n = x.shape[0]
        keep = 3 if channel_dim else 2
        inner = x.reshape((n, -1) + tuple(x.shape[-keep:]))
        res = torch.stack([_warp(inner[:, j], torch.linalg.inv(m), out_hw, interpolation, fill,
                                 channel_dim) for j in range(inner.shape[1])], 1)
        return res.reshape(x.shape[:-2] + tuple(out_hw))
    return _warp(x, torch.linalg.inv(m), out_hw, interpolation, fill, channel_dim)


def _corners_xyxy(xyxy):
    x1, y1, x2, y2 = xyxy.unbind(-1)
    return torch.stack([torch.stack([x1, y1], -1), torch.stack([x2, y1], -1),
                        torch.stack([x1, y2], -1), torch.stack([x2, y2], -1)], -2)


def _transform_boxes(xyxy, m, out_hw):
    pts = _corners_xyxy(xyxy.to(torch.float64))  # [..., K, 4, 2]
    pts = torch.cat([pts, torch.ones_like(pts[..., :1])], -1)
    mm = m.to(xyxy.device)
    if mm.shape[0] > 1:
        mm = mm.view((mm.shape[0],) + (1,) * (pts.ndim - 3) + (3, 3))
    else:
        mm = mm[0]
    out = pts @ mm.transpose(-1, -2)
    xy = out[..., :2] / out[..., 2:]
    mins, maxs = xy.amin(-2), xy.amax(-2)
    res = torch.cat([mins, maxs], -1).to(xyxy.dtype)
    return res, out_hw


@dispatcher
def affine(inpt, angle, translate, scale, shear, interpolation=InterpolationMode.NEAREST,
           fill=None, center=None):
    """Affine warp about ``center`` (default the image centre); ``angle`` clockwise in degrees."""


def _shear_pair(shear):
    """torchvision's shear forms: a number shears x only, one value in a sequence both axes."""
    if isinstance(shear, (int, float)):
        return [float(shear), 0.0]
    if isinstance(shear, (list, tuple)):
        if len(shear) == 1:   # one value shears both axes, as torchvision
            shear = [shear[0], shear[0]]
        if len(shear) != 2:
            raise ValueError(f"shear must be a number or a sequence of 2 numbers, got {shear!r}")
        return shear
    if not isinstance(shear, torch.Tensor):
        raise TypeError(f"shear must be a number or a sequence of 2 numbers, got {shear!r}")
    return shear


def _affine_params(canvas, angle, translate, scale, shear, center):
    h, w = canvas
    shear = _shear_pair(shear)
    if center is None:
        center = [w * 0.5, h * 0.5]
    elif not isinstance(center, torch.Tensor) and len(center) != 2:
        raise ValueError(f"center must be a sequence of 2 numbers (x, y), got {center!r}")
    if not isinstance(translate, torch.Tensor) and len(translate) != 2:
        raise ValueError(f"translate must be a sequence of 2 numbers, got {translate!r}")
    if not isinstance(scale, torch.Tensor) and scale <= 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    return affine_matrix(angle, translate, scale, shear, center)


def _affine_image(img, angle, translate, scale, shear, interpolation=InterpolationMode.NEAREST,
                  fill=None, center=None, channel_dim=True):
    m = _affine_params(img.shape[-2:], angle, translate, scale, shear, center)
    return _warp_typed(img, m, tuple(img.shape[-2:]), interpolation, fill, channel_dim)


def _affine_boxes(xyxy, canvas, angle, translate, scale, shear, interpolation=None, fill=None,
                  center=None):
    return _transform_boxes(xyxy, _affine_params(canvas, angle, translate, scale, shear, center),
                            canvas)


register_image(affine, _affine_image)
def _affine_mask(mask, angle, translate, scale, shear, interpolation=None, fill=None,
                 center=None):
    return _affine_image(mask, angle, translate, scale, shear, InterpolationMode.NEAREST, fill,
                         center, channel_dim=False)


register_mask(affine, _affine_mask)
register_boxes(affine, in_xyxy(_affine_boxes, clamps=True))


def _expanded_canvas(h: int, w: int, angle: float, center) -> tuple[int, int]:
    """(height, width) of ``rotate(expand=True)``: Pillow's rule, which torchvision's tensor
    kernel follows too: a quarter turn about the middle swaps the sides; otherwise the
    corners of the canvas go through the output-to-input rotation about ``center`` (its
    cosine and sine rounded to 15 decimals) and the extent is rounded outwards."""
    angle = angle % 360.0
    if center is None and angle in (90.0, 270.0):
        return w, h
    cx, cy = (w / 2, h / 2) if center is None else (float(center[0]), float(center[1]))
    rad = -math.radians(angle)
    cos, sin = round(math.cos(rad), 15), round(math.sin(rad), 15)
    tx = cos * -cx + sin * -cy + cx
    ty = -sin * -cx + cos * -cy + cy
    xs = [cos * x + sin * y + tx for x, y in ((0, 0), (w, 0), (w, h), (0, h))]
    ys = [-sin * x + cos * y + ty for x, y in ((0, 0), (w, 0), (w, h), (0, h))]
    return (math.ceil(max(ys)) - math.floor(min(ys)),
            math.ceil(max(xs)) - math.floor(min(xs)))


def _rotate_params(canvas, angle, expand, center):
    h, w = canvas
    neg = -angle if isinstance(angle, torch.Tensor) else -float(angle)
    m = _affine_params(canvas, neg, [0.0, 0.0], 1.0, [0.0, 0.0], center)
    if not expand:
        return m, (h, w)
    if m.shape[0] > 1:
        raise ValueError("expand=True needs one angle for the batch (outputs must share a size)")
    nh, nw = _expanded_canvas(h, w, float(angle), center)
    shift = torch.eye(3, dtype=torch.float64)
    shift[0, 2], shift[1, 2] = (nw - w) / 2, (nh - h) / 2
    return shift @ m, (nh, nw)


@dispatcher
def rotate(inpt, angle, interpolation=InterpolationMode.NEAREST, expand=False, center=None,
           fill=None):
    """Rotate counter-clockwise by ``angle`` degrees; ``expand`` grows the canvas to fit."""


def _rotate_image(img, angle, interpolation=InterpolationMode.NEAREST, expand=False, center=None,
                  fill=None, channel_dim=True):
    m, out_hw = _rotate_params(tuple(img.shape[-2:]), angle, expand, center)
    return _warp_typed(img, m, out_hw, interpolation, fill, channel_dim)


def _rotate_boxes(xyxy, canvas, angle, interpolation=None, expand=False, center=None, fill=None):
    m, out_hw = _rotate_params(canvas, angle, expand, center)
    return _transform_boxes(xyxy, m, out_hw)


register_image(rotate, _rotate_image)
register_mask(rotate, lambda x, angle, interpolation=None, expand=False, center=None, fill=None:
              _rotate_image(x, angle, InterpolationMode.NEAREST, expand, center, fill,
                            channel_dim=False))
register_boxes(rotate, in_xyxy(_rotate_boxes, clamps=True))


def perspective_matrix(startpoints, endpoints) -> torch.Tensor:
    """Forward [B, 3, 3] homographies taking ``startpoints`` to ``endpoints`` ([B?, 4, 2])."""
    src = torch.as_tensor(startpoints, dtype=torch.float64)
    dst = torch.as_tensor(endpoints, dtype=torch.float64)
    if src.shape[-2:] != (4, 2) or dst.shape[-2:] != (4, 2):
        raise ValueError(f"startpoints and endpoints must have shape [..., 4, 2], got "
                         f"{tuple(src.shape)} and {tuple(dst.shape)}")
    src, dst = torch.broadcast_tensors(src.reshape(-1, 4, 2), dst.reshape(-1, 4, 2))
    x, y = src[..., 0], src[..., 1]
    u, v = dst[..., 0], dst[..., 1]
    z, o = torch.zeros_like(x), torch.ones_like(x)
    rows_u = torch.stack([x, y, o, z, z, z, -x * u, -y * u], -1)
    rows_v = torch.stack([z, z, z, x, y, o, -x * v, -y * v], -1)
    a = torch.cat([rows_u, rows_v], -2)
    b = torch.cat([u, v], -1)
    coef = torch.linalg.solve(a, b)
    return torch.cat([coef, torch.ones_like(coef[..., :1])], -1).reshape(-1, 3, 3)


def _perspective_forward(startpoints, endpoints, coefficients) -> torch.Tensor:
    """The forward homography from the point pairs, or from torchvision's ``coefficients``
    (the 8 entries of the output-to-input map, PIL's convention)."""
    if coefficients is None:
        if startpoints is None or endpoints is None:
            raise ValueError("perspective needs startpoints and endpoints, or coefficients")
        return perspective_matrix(startpoints, endpoints)
    if startpoints is not None or endpoints is not None:
        raise ValueError("perspective takes either startpoints and endpoints, or coefficients")
    c = torch.as_tensor(coefficients, dtype=torch.float64)
    if c.shape != (8,):
        raise ValueError(f"coefficients must be 8 numbers, got shape {tuple(c.shape)}")
    return torch.linalg.inv(torch.cat([c, c.new_ones(1)]).reshape(1, 3, 3))


@dispatcher
def perspective(inpt, startpoints, endpoints, interpolation=InterpolationMode.BILINEAR, fill=None,
                coefficients=None):
    """Warp so that the 4 ``startpoints`` land on ``endpoints`` (per-sample: [N, 4, 2])."""


def _perspective_image(img, startpoints, endpoints, interpolation=InterpolationMode.BILINEAR,
                       fill=None, coefficients=None, channel_dim=True):
    m = _perspective_forward(startpoints, endpoints, coefficients)
    return _warp_typed(img, m, tuple(img.shape[-2:]), interpolation, fill, channel_dim)


def _perspective_boxes(xyxy, canvas, startpoints, endpoints, interpolation=None, fill=None,
                       coefficients=None):
    return _transform_boxes(xyxy, _perspective_forward(startpoints, endpoints, coefficients),
                            canvas)


register_image(perspective, _perspective_image)
register_mask(perspective, lambda x, s, e, interpolation=None, fill=None, coefficients=None:
              _perspective_image(x, s, e, InterpolationMode.NEAREST, fill, coefficients,
                                 channel_dim=False))
register_boxes(perspective, in_xyxy(_perspective_boxes, clamps=True))


# ----------------------------------------------------------------------------- PIL warps
# PIL images are warped by Pillow itself, as torchvision's PIL kernels do: Image.rotate and
# Image.transform (AFFINE / PERSPECTIVE) with the same output-to-input maps in the same
# float64 arithmetic, so the pixels are Pillow's (RGBA and LA through Pillow's premultiplied
# alpha). Per-sample (1-d tensor) parameters keep the tensor kernels.

def _pil_fill(fill, pic):
    """``fill`` as Pillow's ``fillcolor`` under torchvision's rule: None is 0, a number or a
    1-element sequence fills every band, otherwise one value per band; integers (truncated)
    except for mode F."""
    bands = len(pic.getbands())
    if isinstance(fill, torch.Tensor):
        fill = fill.tolist()
    if fill is None:
        fill = 0
    if isinstance(fill, (list, tuple)):
        if len(fill) == 1:
            fill = list(fill) * bands
        elif len(fill) != bands:
            raise ValueError(f"fill has {len(fill)} values for an image of {bands} channels; "
                             f"give one value or one per channel")
        fill = tuple(fill)
    elif bands > 1:
        fill = (fill,) * bands
    if pic.mode == "F":
        return fill
    return tuple(int(v) for v in fill) if isinstance(fill, tuple) else int(fill)


def _number(v, name):
    """A Python number from a number or a one-element tensor."""
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ValueError(f"{name} must be one number for a PIL image, got shape "
                             f"{tuple(v.shape)}")
        return v.item()
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{name} must be a number, got {v!r}")
    return float(v)


def _numbers(v, name):
    return [_number(x, name) for x in (v.reshape(-1) if isinstance(v, torch.Tensor) else v)]


def _pil_affine_inverse(center, angle, translate, scale, shear) -> list[float]:
    """The output-to-input map Pillow's AFFINE transform takes (6 numbers): rotation by
    ``angle``, shears, ``scale`` about ``center``, then ``translate``, inverted in closed form
    (the rotation-shear block has determinant 1). The steps are torchvision's, so Pillow gets
    the same doubles."""
    rot = math.radians(angle)
    shx, shy = math.radians(shear[0]), math.radians(shear[1])
    cos_y, tan_x = math.cos(shy), math.tan(shx)
    # forward block [[a, b], [c, d]] without the scale
    a = math.cos(rot - shy) / cos_y
    b = -(a * tan_x + math.sin(rot))
    c = math.sin(rot - shy) / cos_y
    d = math.cos(rot) - c * tan_x
    cx, cy = center
    ox, oy = cx + translate[0], cy + translate[1]
    inv = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    inv[2] += cx - inv[0] * ox - inv[1] * oy
    inv[5] += cy - inv[3] * ox - inv[4] * oy
    return inv


def _affine_pil(pic, angle, translate, scale, shear, interpolation=InterpolationMode.NEAREST,
                fill=None, center=None):
    """PIL images: Pillow's affine transform (torchvision's PIL kernel)."""
    if is_batched_param(angle, scale) or any(isinstance(v, torch.Tensor) and v.ndim > 1
                                             for v in (translate, shear)):
        return pil_kernel(_affine_image)(pic, angle, translate, scale, shear, interpolation,
                                         fill, center)
    check_pil_mode(pic, "affine")
    _affine_params((pic.height, pic.width), angle, translate, scale, shear, center)  # checks
    shear = _numbers(_shear_pair(shear), "shear")
    center = [pic.width * 0.5, pic.height * 0.5] if center is None else _numbers(center,
                                                                                 "center")
    inv = _pil_affine_inverse(center, _number(angle, "angle"), _numbers(translate, "translate"),
                              _number(scale, "scale"), shear)
    return pic.transform(pic.size, PIL.Image.Transform.AFFINE, inv,
                         _PIL_FILTER[as_interpolation(interpolation)],
                         fillcolor=_pil_fill(fill, pic))


def _rotate_pil(pic, angle, interpolation=InterpolationMode.NEAREST, expand=False, center=None,
                fill=None):
    """PIL images: Pillow's rotate (torchvision's PIL kernel; its expanded canvas too)."""
    if is_batched_param(angle):
        return pil_kernel(_rotate_image)(pic, angle, interpolation, expand, center, fill)
    check_pil_mode(pic, "rotate")
    if center is not None:
        if len(center) != 2:
            raise ValueError(f"center must be a sequence of 2 numbers (x, y), got {center!r}")
        center = _numbers(center, "center")
    return pic.rotate(_number(angle, "angle"), _PIL_FILTER[as_interpolation(interpolation)],
                      expand=bool(expand), center=center, fillcolor=_pil_fill(fill, pic))


def _pil_perspective_coeffs(startpoints, endpoints, coefficients) -> list[float]:
    """The 8 output-to-input coefficients Pillow's PERSPECTIVE transform takes: given, or the
    least-squares (LAPACK gels, float64) fit of the 4 point pairs rounded to float32, as
    torchvision computes them."""
    if coefficients is not None:
        if startpoints is not None and endpoints is not None:
            raise ValueError("perspective takes either startpoints and endpoints, or "
                             "coefficients")
        c = _numbers(coefficients, "coefficients")
        if len(c) != 8:
            raise ValueError(f"coefficients must be 8 numbers, got {len(c)}")
        return c
    if startpoints is None or endpoints is None:
        raise ValueError("perspective needs startpoints and endpoints, or coefficients")
    src = [_numbers(p, "startpoints") for p in startpoints]
    dst = [_numbers(p, "endpoints") for p in endpoints]
    if len(src) != 4 or len(dst) != 4 or any(len(p) != 2 for p in src + dst):
        raise ValueError(f"startpoints and endpoints must be 4 points (x, y) each, got "
                         f"{startpoints!r} and {endpoints!r}")
    rows = []
    for (u, v), (x, y) in zip(dst, src):
        # each row built from Python numbers as one tensor (int64, or the default float
        # dtype when a point is fractional), then widened: torchvision's values exactly
        rows.append(torch.tensor([u, v, 1, 0, 0, 0, -x * u, -x * v]))
        rows.append(torch.tensor([0, 0, 0, u, v, 1, -y * u, -y * v]))
    a = torch.stack([r.to(torch.float64) for r in rows])
    b = torch.tensor(src, dtype=torch.float64).reshape(8)
    sol = torch.linalg.lstsq(a, b, driver="gels").solution
    return sol.to(torch.float32).tolist()


def _perspective_pil(pic, startpoints, endpoints, interpolation=InterpolationMode.BILINEAR,
                     fill=None, coefficients=None):
    """PIL images: Pillow's perspective transform (torchvision's PIL kernel)."""
    if any(isinstance(p, torch.Tensor) and p.ndim > 2 for p in (startpoints, endpoints)):
        return pil_kernel(_perspective_image)(pic, startpoints, endpoints, interpolation, fill,
                                              coefficients)
    check_pil_mode(pic, "perspective")
    coeffs = _pil_perspective_coeffs(startpoints, endpoints, coefficients)
    return pic.transform(pic.size, PIL.Image.Transform.PERSPECTIVE, coeffs,
                         _PIL_FILTER[as_interpolation(interpolation)],
                         fillcolor=_pil_fill(fill, pic))


def _via_pil(pil_fn, tensor_fn):
    """The ``PILImage`` kernel (a PIL image inside a transform) of a PIL kernel: back to
    PIL, ``pil_fn``, back to a tensor image (shapes and dtypes no PIL mode holds, after
    an earlier step of the same transform: ``tensor_fn``)."""
    def run(img, *args, **kwargs):
        raw = tv_tensors.unwrap(img)
        if raw.ndim != 3 or (raw.shape[0], raw.dtype) not in _PIL_LAYOUTS:
            return tv_tensors.wrap(tensor_fn(raw, *args, **kwargs), like=img)
        return tv_tensors.wrap(pil_to_tensor(pil_fn(image_as_pil(img), *args, **kwargs)),
                               like=img)

    return run


_PIL_LAYOUTS = {(1, torch.uint8), (2, torch.uint8), (3, torch.uint8), (4, torch.uint8),
                (1, torch.uint16), (1, torch.int32), (1, torch.float32)}


register_raw(affine, PIL.Image.Image, _affine_pil)
register_raw(affine, PILImage, _via_pil(_affine_pil, _affine_image))
register_raw(rotate, PIL.Image.Image, _rotate_pil)
register_raw(rotate, PILImage, _via_pil(_rotate_pil, _rotate_image))
register_raw(perspective, PIL.Image.Image, _perspective_pil)
register_raw(perspective, PILImage, _via_pil(_perspective_pil, _perspective_image))
