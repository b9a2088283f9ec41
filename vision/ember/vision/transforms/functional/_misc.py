"""Normalize, dtype conversion, Gaussian blur and erasing."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as tF

from ember.vision import tv_tensors
from ember.vision.transforms.functional._registry import (
    dispatcher,
    register_image,
    register_passthrough,
    register_raw,
)
from ember.vision.transforms.functional._utils import (
    check_image,
    from_float,
    is_batched_param,
    max_value,
)


def _normalize(img, mean: Sequence[float], std: Sequence[float], inplace: bool = False):
    check_image(img)
    if not img.is_floating_point():
        raise TypeError(f"normalize needs a float image (use ToDtype first), got {img.dtype}")
    c = img.shape[-3]
    mean_t = torch.as_tensor(mean, dtype=img.dtype, device=img.device).reshape(-1)
    std_t = torch.as_tensor(std, dtype=img.dtype, device=img.device).reshape(-1)
    if mean_t.numel() not in (1, c) or std_t.numel() not in (1, c):
        raise ValueError(f"mean and std must have 1 or {c} values, "
                         f"got {list(mean)} and {list(std)}")
    if not torch.compiler.is_compiling() and bool((std_t == 0).any()):
        raise ValueError(f"std must not contain zeros, got {list(std)}")
    scale = (1.0 / std_t).view(-1, 1, 1)
    bias = (-mean_t / std_t).view(-1, 1, 1)
    if inplace:
        return img.mul_(scale).add_(bias)
    return torch.addcmul(bias, img, scale)  # one pass instead of clone, sub, div


@dispatcher
def normalize(inpt, mean, std, inplace=False):
    """``(image - mean) / std`` per channel, on float images."""


register_image(normalize, _normalize)
register_passthrough(normalize, tv_tensors.Mask, tv_tensors.BoundingBoxes)


def _value_bits(dtype: torch.dtype) -> int:
    info = torch.iinfo(dtype)
    return info.bits - (1 if info.min < 0 else 0)


def _to_dtype_image(img, dtype=torch.float32, scale=False):
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    if not scale or img.dtype == dtype:
        return img.to(dtype)
    if img.dtype == torch.bool or dtype == torch.bool:
        raise TypeError(f"to_dtype(scale=True) converts between numeric dtypes, got "
                        f"{img.dtype} -> {dtype}")
    src_f, dst_f = img.dtype.is_floating_point, dtype.is_floating_point
    if src_f and dst_f:
        return img.to(dtype)
    if src_f:
        if (img.dtype == torch.float32 and dtype in (torch.int32, torch.int64)) or (
                img.dtype == torch.float64 and dtype == torch.int64):
            raise RuntimeError(f"to_dtype: {img.dtype} -> {dtype} cannot be scaled exactly "
                               f"(the float has fewer mantissa bits than the integer range)")
        top = max_value(dtype)
        # [0, 1] -> [0, top]: times (top + 1 - eps), truncated; the clamp keeps 1.0 at top
        # for uint16 too (65535.999 would wrap to 0 in the cast)
        return img.mul(top + 1.0 - 1e-3).clamp_(0, top).to(dtype)
    if dst_f:
        return img.to(dtype).mul_(1.0 / max_value(img.dtype))
    # integer to integer: shift the value bits, computed in int64 (uint16 has no shifts)
    src_bits, dst_bits = _value_bits(img.dtype), _value_bits(dtype)
    wide = img.to(torch.int64)
    if src_bits > dst_bits:
        return wide.bitwise_right_shift_(src_bits - dst_bits).to(dtype)
    return wide.bitwise_left_shift_(dst_bits - src_bits).to(dtype)


@dispatcher
def to_dtype(inpt, dtype=torch.float32, scale=False):
    """Convert the dtype; ``scale`` maps value ranges (uint8 [0, 255] <-> float [0, 1])."""


register_image(to_dtype, _to_dtype_image)
for _cls in (tv_tensors.Mask, tv_tensors.BoundingBoxes):
    register_raw(to_dtype, _cls, lambda x, dtype=torch.float32, scale=False: x.to(dtype))


def _gaussian_kernels(size: int, sigma: torch.Tensor) -> torch.Tensor:
    x = torch.arange(size, dtype=torch.float32, device=sigma.device) - (size - 1) / 2
    k = torch.exp(-0.5 * (x / sigma.view(-1, 1)) ** 2)
    return k / k.sum(-1, keepdim=True)


def _pair(v, name, kind):
    if isinstance(v, torch.Tensor):
        return v, v
    if isinstance(v, (int, float)):
        v = [v, v]
    if not isinstance(v, (list, tuple)) or len(v) not in (1, 2):
        raise ValueError(f"{name} must be a {kind} or a sequence of 2, got {v!r}")
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _gaussian_blur_image(img, kernel_size, sigma=None):
    check_image(img)
    kx, ky = _pair(kernel_size, "kernel_size", "int")
    if not all(isinstance(k, int) and k > 0 and k % 2 == 1 for k in (kx, ky)):
        raise ValueError(f"kernel_size must be positive odd ints, got {kernel_size!r}")
    if sigma is None:
        sigma = [0.3 * ((kx - 1) * 0.5 - 1) + 0.8, 0.3 * ((ky - 1) * 0.5 - 1) + 0.8]
    sx, sy = _pair(sigma, "sigma", "number")
    n_lead = img.shape[:-3]
    c, h, w = img.shape[-3:]
    x = img.reshape(-1, c, h, w)
    n = x.shape[0]
    if n == 0:
        return img.clone()
    dev = img.device
    sx_t = torch.as_tensor(sx, dtype=torch.float32, device=dev).reshape(-1)
    sy_t = torch.as_tensor(sy, dtype=torch.float32, device=dev).reshape(-1)
    if not torch.compiler.is_compiling() and (bool((sx_t <= 0).any())
                                              or bool((sy_t <= 0).any())):
        raise ValueError(f"sigma must be positive, got {sigma!r}")
    if is_batched_param(sx, sy):
        lead = img.shape[0] if img.ndim > 3 else 1
        if sx_t.numel() != lead or sy_t.numel() != lead:
            raise ValueError(f"per-sample sigma must have {lead} values (dim 0 of the input), "
                             f"got {sx_t.numel()}")
        # every frame / inner image of a sample shares its sigma
        sx_t, sy_t = sx_t.repeat_interleave(n // lead), sy_t.repeat_interleave(n // lead)
    wx = _gaussian_kernels(kx, sx_t).expand(n, kx).repeat_interleave(c, 0)
    wy = _gaussian_kernels(ky, sy_t).expand(n, ky).repeat_interleave(c, 0)
    xf = x.to(torch.float32) if x.dtype != torch.float64 else x
    flat = xf.reshape(1, n * c, h, w)
    flat = tF.pad(flat, [kx // 2, kx // 2, ky // 2, ky // 2], mode="reflect")
    flat = tF.conv2d(flat, wx.view(n * c, 1, 1, kx).to(flat.dtype), groups=n * c)
    flat = tF.conv2d(flat, wy.view(n * c, 1, ky, 1).to(flat.dtype), groups=n * c)
    out = flat.reshape(n_lead + (c, h, w))
    return out.to(img.dtype) if img.dtype.is_floating_point else from_float(out, img.dtype)


@dispatcher
def gaussian_blur(inpt, kernel_size, sigma=None):
    """Separable Gaussian blur with reflect borders; ``sigma`` may be per-sample [N]."""


register_image(gaussian_blur, _gaussian_blur_image)
register_passthrough(gaussian_blur, tv_tensors.Mask, tv_tensors.BoundingBoxes)


def _erase_image(img, i, j, h, w, v, inplace=False):
    check_image(img)
    out = img if inplace else img.clone()
    if not is_batched_param(i, j, h, w):
        out[..., int(i):int(i) + int(h), int(j):int(j) + int(w)] = v
        return out
    n, hh, ww = img.shape[0], img.shape[-2], img.shape[-1]
    dev = img.device
    col = lambda t: torch.as_tensor(t, device=dev).reshape(-1, 1).expand(n, 1)
    rows = torch.arange(hh, device=dev).view(1, -1)
    cols = torch.arange(ww, device=dev).view(1, -1)
    in_r = (rows >= col(i)) & (rows < col(i) + col(h))
    in_c = (cols >= col(j)) & (cols < col(j) + col(w))
    mask = (in_r[:, :, None] & in_c[:, None, :]).view((n,) + (1,) * (img.ndim - 3) + (hh, ww))
    vt = torch.as_tensor(v, dtype=img.dtype, device=dev)
    return out.copy_(torch.where(mask, vt, out)) if inplace else torch.where(mask, vt, out)


@dispatcher
def erase(inpt, i, j, h, w, v, inplace=False):
    """Set the window (i, j, h, w) to ``v``; per-sample windows as [N] tensors."""


register_image(erase, _erase_image)
register_passthrough(erase, tv_tensors.Mask, tv_tensors.BoundingBoxes)


def convert_image_dtype(image, dtype=torch.float32):
    """Deprecated in torchvision: ``to_dtype(image, dtype, scale=True)``."""
    return to_dtype(image, dtype, scale=True)
