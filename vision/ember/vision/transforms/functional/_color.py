"""Color functionals with torchvision's formulas; factors may be per-sample [N] tensors.

Integer images are computed in float32 and converted back by truncation, as torchvision does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as tF

from ember.core import parallel
from ember.vision import tv_tensors
from ember.vision.transforms.functional._registry import (
    dispatcher,
    register_image,
    register_passthrough,
)
from ember.vision.transforms.functional._utils import (
    ValueTypeError,
    check_image,
    max_value,
    per_sample,
)

_NON_IMAGE = (tv_tensors.Mask, tv_tensors.BoundingBoxes)


def _check_factor(value, name, lo=0.0, hi=None):
    if isinstance(value, torch.Tensor):
        if torch.compiler.is_compiling():
            return  # a data-dependent check would break the graph
        vals = value.flatten().tolist()
    else:
        vals = [value]
    for v in vals:
        if not isinstance(v, (int, float)) or v < lo or (hi is not None and v > hi):
            rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
            raise ValueError(f"{name} must be a number in {rng}, got {value!r}")


def _back(out: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    out = out.clamp_(0, max_value(dtype))
    return out if dtype.is_floating_point else out.to(dtype)


def _blend(img1: torch.Tensor, img2, ratio) -> torch.Tensor:
    """``ratio * img1 + (1 - ratio) * img2``, clamped, with torchvision's float operations
    (``img1 * r`` then a fused multiply-add of ``img2``), so integer results truncate the same
    values; per-sample ratios give what one call per sample gives."""
    if isinstance(ratio, torch.Tensor) and ratio.ndim == 0 and not torch.compiler.is_compiling():
        ratio = float(ratio)
    r = per_sample(ratio, img1)
    a = img1 if img1.is_floating_point() else img1.to(torch.float32)
    b = img2 if isinstance(img2, torch.Tensor) else torch.tensor(img2, dtype=a.dtype)
    if isinstance(r, float):
        return _back(img1.mul(r).add_(b, alpha=1.0 - r), img1.dtype)
    # per-sample: the same two roundings (add with alpha is a fused multiply-add)
    r = r.to(a.dtype)
    return _back(torch.addcmul(a.mul(r), b.to(a.dtype), 1 - r), img1.dtype)


_LUMA = (0.2989, 0.587, 0.114)


def _gray(img: torch.Tensor) -> torch.Tensor:
    """Luma [..., 1, H, W] in the input dtype (truncated for integers)."""
    if img.dtype == torch.float32 and img.numel() > 0 and not torch.compiler.is_compiling():
        # a [3] x [3, H*W] matmul per image reads the three planes once
        x = img.reshape((-1, 3, img.shape[-2] * img.shape[-1]))
        w = torch.tensor(_LUMA, dtype=img.dtype, device=img.device)
        return torch.matmul(w, x).reshape(img.shape[:-3] + (1,) + tuple(img.shape[-2:]))
    r, g, b = img.unbind(-3)
    luma = (r.to(torch.float32) * _LUMA[0] + g * _LUMA[1] + b * _LUMA[2]).unsqueeze(-3)
    return luma.to(img.dtype)


def _rgb_to_grayscale_image(img, num_output_channels=1):
    check_image(img, channels=(1, 3))
    if num_output_channels not in (1, 3):
        raise ValueError(f"num_output_channels must be 1 or 3, got {num_output_channels!r}")
    gray = img.clone() if img.shape[-3] == 1 else _gray(img)
    if num_output_channels == 3:
        gray = gray.expand(img.shape[:-3] + (3,) + img.shape[-2:]).clone()
    return gray


@dispatcher
def rgb_to_grayscale(inpt, num_output_channels=1):
    """Luma 0.2989 R + 0.587 G + 0.114 B, with 1 or 3 output channels."""


def _brightness(img, brightness_factor):
    check_image(img)
    _check_factor(brightness_factor, "brightness_factor")
    a = img if img.is_floating_point() else img.to(torch.float32)
    return _back(a * per_sample(brightness_factor, img), img.dtype)


@dispatcher
def adjust_brightness(inpt, brightness_factor):
    """Multiply intensities by ``brightness_factor``."""


def _contrast(img, contrast_factor):
    check_image(img, channels=(1, 3))
    _check_factor(contrast_factor, "contrast_factor")
    if img.shape[-3] == 3 and img.is_floating_point():
        # luma is linear for float images: weight the channel means, no grey plane needed
        luma = torch.tensor(_LUMA, dtype=img.dtype, device=img.device).view(3, 1, 1)
        mean = (img.mean(dim=(-2, -1), keepdim=True) * luma).sum(-3, keepdim=True)
    else:
        gray = _gray(img) if img.shape[-3] == 3 else img
        mean = gray.to(torch.float32).mean(dim=(-3, -2, -1), keepdim=True)
    return _blend(img, mean, contrast_factor)


@dispatcher
def adjust_contrast(inpt, contrast_factor):
    """Blend with the mean grey level of each image."""


def _saturation(img, saturation_factor):
    check_image(img, channels=(1, 3))
    _check_factor(saturation_factor, "saturation_factor")
    if img.shape[-3] == 1:
        return img.clone()
    return _blend(img, _gray(img), saturation_factor)


@dispatcher
def adjust_saturation(inpt, saturation_factor):
    """Blend with the grayscale image."""


def _to_unit_float(img):
    return img if img.is_floating_point() else img.to(torch.float32) / max_value(img.dtype)


def _from_unit_float(out, dtype):
    if dtype.is_floating_point:
        return out.to(dtype)
    return out.mul(max_value(dtype) + 1.0 - 1e-3).to(dtype)


_SCRATCH_LIMIT = 1 << 21  # elements per buffer; larger calls allocate fresh


def _workspace(count: int, shape, dtype, device) -> list[torch.Tensor]:
    """``count`` scratch buffers of ``shape``, reused per thread: fresh large CPU buffers
    pay a page fault per 4 KiB, which costs more than the arithmetic here."""
    numel = 1
    for d in shape:
        numel *= int(d)
    if torch.compiler.is_compiling() or device.type != "cpu" or numel > _SCRATCH_LIMIT:
        return [torch.empty(shape, dtype=dtype, device=device) for _ in range(count)]
    return [parallel.scratch(("color", i), tuple(shape), dtype) for i in range(count)]


def _shift_hue(img: torch.Tensor, factor, out: torch.Tensor | None = None) -> torch.Tensor:
    """RGB in [0, 1] -> hue rotated by ``factor`` turns; torchvision's HSV round trip, fused:
    with v = max and v*s = max - min = d, channel n is min + d * clamp(|k - 2| - 1, 0, 1),
    k = (n + 6h) mod 6 (n = 5, 3, 1 for r, g, b).

    Written as branch-free in-place arithmetic on a few buffers: on CPU ``torch.where``
    costs ~50x a float op and every fresh large buffer pays its page faults. ``out`` may
    be ``img`` itself (the input is fully read before the first write).
    """
    if torch.compiler.is_compiling():
        return _shift_hue_traced(img, factor)
    r, g, b = img.unbind(-3)
    maxc, minc, delta, is_r, is_g, num, tmp = _workspace(7, r.shape, img.dtype, img.device)
    torch.maximum(torch.maximum(r, g, out=maxc), b, out=maxc)
    torch.minimum(torch.minimum(r, g, out=minc), b, out=minc)
    torch.sub(maxc, minc, out=delta)
    # 1 where red holds the maximum; 1 where green does and red does not (torchvision's ties)
    torch.eq(maxc, r, out=is_r)
    torch.eq(maxc, g, out=is_g).addcmul_(is_g, is_r, value=-1.0)
    # 6h * delta = C + is_r (A - C) + is_g (B - C) with the sector numerators
    # A = g - b (red max), B = b - r + 2d (green max), C = r - g + 4d (blue max)
    torch.sub(r, g, out=num).add_(delta, alpha=4.0)
    torch.mul(g, 2.0, out=tmp).sub_(b).sub_(r).sub_(delta, alpha=4.0)
    num.addcmul_(is_r, tmp)
    torch.add(b, g, out=tmp).sub_(r, alpha=2.0).sub_(delta, alpha=2.0)
    num.addcmul_(is_g, tmp)
    inv = torch.clamp(delta, min=1e-12, out=is_r).reciprocal_()  # delta = 0 -> num = 0
    h6 = num.mul_(inv)
    if isinstance(factor, torch.Tensor):
        h6.add_(6.0 * factor.view(factor.shape[:1] + (1,) * (h6.ndim - 1)))
    else:
        h6.add_(6.0 * factor)
    out = torch.empty_like(img) if out is None else out
    w = is_g
    for i, n in enumerate((5.0, 3.0, 1.0)):
        torch.add(h6, n, out=w)
        w.sub_(torch.mul(w, 1.0 / 6.0, out=tmp).floor_(), alpha=6.0)  # mod 6 (remainder_ is slow)
        w.sub_(2.0).abs_().sub_(1.0).clamp_(0.0, 1.0)
        if torch.compiler.is_compiling():  # Dynamo takes no strided out= views
            out.select(-3, i).copy_(minc).addcmul_(delta, w)
        else:
            torch.addcmul(minc, delta, w, out=out.select(-3, i))
    return out


def _shift_hue_traced(img: torch.Tensor, factor) -> torch.Tensor:
    """``_shift_hue``'s arithmetic as pure tensor expressions, which a compiler fuses into
    one pass (the eager version's buffers and in-place ops would only stand in its way)."""
    r, g, b = img.unbind(-3)
    maxc = torch.maximum(torch.maximum(r, g), b)
    minc = torch.minimum(torch.minimum(r, g), b)
    delta = maxc - minc
    is_r = maxc == r
    is_g = (maxc == g) & ~is_r
    num = torch.where(is_r, g - b, torch.where(is_g, b - r + 2.0 * delta, r - g + 4.0 * delta))
    h6 = num / delta.clamp(min=1e-12)
    if isinstance(factor, torch.Tensor):
        h6 = h6 + 6.0 * factor.view(factor.shape[:1] + (1,) * (h6.ndim - 1))
    else:
        h6 = h6 + 6.0 * factor
    # all three channels as one broadcast expression (no stack, so later ops fuse with it)
    n = torch.tensor([5.0, 3.0, 1.0], dtype=img.dtype, device=img.device).view(3, 1, 1)
    k = h6.unsqueeze(-3) + n
    k = k - 6.0 * torch.floor(k * (1.0 / 6.0))
    return minc.unsqueeze(-3) + delta.unsqueeze(-3) * ((k - 2.0).abs() - 1.0).clamp(0.0, 1.0)


def jitter_(img: torch.Tensor, order, factors) -> torch.Tensor:
    """Brightness, contrast, saturation and hue (``factors``, None to skip) in ``order``,
    in place on a float RGB batch the caller owns: one buffer instead of one per op."""
    fns = (_brightness_, _contrast_, _saturation_, _shift_hue_)
    for k in order:
        if factors[k] is not None:
            fns[k](img, per_sample(factors[k], img))
    return img


def _brightness_(x, f):
    x.mul_(f).clamp_(0.0, 1.0)


def _contrast_(x, f):
    luma = torch.tensor(_LUMA, dtype=x.dtype, device=x.device).view(3, 1, 1)
    mean = (x.mean(dim=(-2, -1), keepdim=True) * luma).sum(-3, keepdim=True)
    x.mul_(f).add_(mean * (1.0 - f)).clamp_(0.0, 1.0)


def _saturation_(x, f):
    gray = _gray(x).mul_(1.0 - f)
    x.mul_(f).add_(gray).clamp_(0.0, 1.0)


def _shift_hue_(x, f):
    _shift_hue(x, f.flatten() if isinstance(f, torch.Tensor) else f, out=x)


def _hue(img, hue_factor):
    check_image(img, channels=(1, 3))
    _check_factor(hue_factor, "hue_factor", -0.5, 0.5)
    if img.shape[-3] == 1 or img.numel() == 0:
        return img.clone()
    if isinstance(hue_factor, torch.Tensor) and hue_factor.ndim == 1 \
            and hue_factor.shape[0] != img.shape[0]:
        raise ValueError(f"a per-sample parameter must have shape [{img.shape[0]}] (the batch "
                         f"size), got {tuple(hue_factor.shape)}")
    x = _to_unit_float(img)
    x = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
    if isinstance(hue_factor, torch.Tensor):
        hue_factor = hue_factor.to(x.device, x.dtype)
    return _from_unit_float(_shift_hue(x, hue_factor), img.dtype)


@dispatcher
def adjust_hue(inpt, hue_factor):
    """Rotate the hue by ``hue_factor`` turns, in [-0.5, 0.5], through HSV."""


def _gray_u8(x: torch.Tensor) -> torch.Tensor:
    """``_gray`` of a uint8 image held in float32: the same sums, truncated (floored: they
    are >= 0) in place."""
    r, g, b = x.unbind(-3)
    return (r * _LUMA[0] + g * _LUMA[1] + b * _LUMA[2]).unsqueeze(-3).floor_()


def _lerp_u8(toward: torch.Tensor, x: torch.Tensor, f: float) -> torch.Tensor:
    """``_blend`` of uint8 values held in float32 (one ratio)."""
    return x.mul(f).add_(toward, alpha=1.0 - f).clamp_(0, 255).floor_()


def _contrast_u8(x, f):
    gray = _gray_u8(x) if x.shape[-3] == 3 else x
    return _lerp_u8(gray.mean(dim=(-3, -2, -1), keepdim=True), x, f)


# uint8 colour steps on float32 storage: each mirrors its uint8 kernel's float arithmetic and
# ends clamped and truncated, which is what that kernel's cast back to uint8 does (on values
# >= 0 truncation is floor_, which torch vectorises; trunc_ is 25x slower on CPU)
_UINT8_STEPS = {
    "brightness": lambda x, f: x.mul_(f).clamp_(0, 255).floor_(),
    "contrast": _contrast_u8,
    "saturation": lambda x, f: x if x.shape[-3] == 1 else _lerp_u8(_gray_u8(x), x, f),
    "hue": lambda x, f: x if x.shape[-3] == 1 else
    _shift_hue(x / 255.0, f).mul_(256.0 - 1e-3).clamp_(min=0).floor_(),
}


def photometric_uint8(img: torch.Tensor, steps) -> torch.Tensor:
    """``steps`` [(name, factor)] of brightness / contrast / saturation / hue on a 1- or
    3-channel uint8 image with one conversion each way: the pixels of the separate calls."""
    x = img.to(torch.float32)
    for name, factor in steps:
        x = _UINT8_STEPS[name](x, float(factor))
    return x.to(torch.uint8)


def _sharpness(img, sharpness_factor):
    check_image(img, channels=(1, 3))
    _check_factor(sharpness_factor, "sharpness_factor")
    if img.shape[-1] <= 2 or img.shape[-2] <= 2 or img.numel() == 0:
        return img.clone()
    c = img.shape[-3]
    x = img.reshape((-1,) + tuple(img.shape[-3:]))
    xf = x.to(torch.float32)
    k = torch.ones(3, 3, dtype=torch.float32, device=img.device)
    k[1, 1] = 5.0
    k = (k / k.sum()).expand(c, 1, 3, 3)
    blurred = tF.conv2d(xf, k, groups=c)
    if not img.dtype.is_floating_point:
        blurred = blurred.round()
    degenerate = xf.clone()
    degenerate[..., 1:-1, 1:-1] = blurred
    if isinstance(sharpness_factor, torch.Tensor):
        return _blend(img, degenerate.reshape(img.shape), sharpness_factor)
    # torchvision's arithmetic: x + (1 - f) * (blurred - x), then clamped and truncated
    out = xf.add(degenerate.sub_(xf), alpha=1.0 - float(sharpness_factor))
    return _back(out.reshape(img.shape), img.dtype)


@dispatcher
def adjust_sharpness(inpt, sharpness_factor):
    """Blend with a 3x3-smoothed image (borders kept); factor > 1 sharpens."""


def _gamma(img, gamma, gain=1.0):
    check_image(img)
    _check_factor(gamma, "gamma")
    out = _to_unit_float(img).pow(per_sample(gamma, img)) * gain
    return _from_unit_float(out.clamp(0, 1), img.dtype)


@dispatcher
def adjust_gamma(inpt, gamma, gain=1.0):
    """``gain * img ** gamma`` on intensities in [0, 1]."""


def _posterize(img, bits):
    check_image(img)
    if not isinstance(bits, int) or not 0 <= bits <= 8:
        raise ValueTypeError(f"bits must be an int in [0, 8], got {bits!r}")
    if img.dtype == torch.uint8:
        return img & (((1 << bits) - 1) << (8 - bits))
    if img.dtype.is_floating_point:
        levels = 1 << bits
        return img.mul(levels).floor_().clamp_(0, levels - 1).mul_(1.0 / levels)
    raise TypeError(f"posterize supports uint8 and float images, got {img.dtype}")


@dispatcher
def posterize(inpt, bits):
    """Keep the ``bits`` most significant bits of each channel."""


def _invert(img):
    check_image(img)
    if img.dtype == torch.uint8:
        return img.bitwise_not()
    return max_value(img.dtype) - img


@dispatcher
def invert(inpt):
    """``max - value`` per channel."""


def _solarize(img, threshold):
    check_image(img)
    if threshold > max_value(img.dtype):
        raise ValueTypeError(f"threshold must not exceed {max_value(img.dtype)}, "
                             f"got {threshold!r}")
    return torch.where(img >= threshold, _invert(img), img)


@dispatcher
def solarize(inpt, threshold):
    """Invert the values at or above ``threshold``."""


def _autocontrast(img):
    check_image(img)
    bound = max_value(img.dtype)
    xf = img.to(torch.float32)
    lo = xf.amin(dim=(-2, -1), keepdim=True)
    hi = xf.amax(dim=(-2, -1), keepdim=True)
    flat = hi == lo
    # torchvision's float operations: divide by (hi - lo) * (1 / bound), so that the
    # truncation to integers sees the same values
    inv_scale = torch.where(flat, torch.ones_like(hi), (hi - lo) * (1.0 / bound))
    lo = torch.where(flat, torch.zeros_like(lo), lo)
    return _back((xf - lo) / inv_scale, img.dtype)


@dispatcher
def autocontrast(inpt):
    """Stretch each channel to the full range."""


def _equalize(img):
    check_image(img)
    if img.numel() == 0:
        return img.clone()
    if img.dtype.is_floating_point:
        u8 = _from_unit_float(img.clamp(0, 1), torch.uint8)
    elif img.dtype == torch.uint8:
        u8 = img
    else:  # other integer images through uint8 and back, as torchvision's
        from ember.vision.transforms.functional._misc import to_dtype

        return to_dtype(_equalize(to_dtype(img, torch.uint8, scale=True)), img.dtype,
                        scale=True)
    flat = u8.reshape(-1, u8.shape[-2] * u8.shape[-1]).long()
    hist = torch.zeros(flat.shape[0], 256, dtype=torch.long, device=img.device)
    hist.scatter_add_(1, flat, torch.ones_like(flat))
    # Pillow's rule: step from all pixels but those of the last occupied bin
    last = 255 - hist.flip(1).ne(0).long().argmax(1)
    last_count = hist.gather(1, last[:, None]).squeeze(1)
    step = (flat.shape[1] - last_count) // 255
    cum = hist.cumsum(1) - hist
    safe = step.clamp(min=1)[:, None]
    lut = ((cum + safe // 2) // safe).clamp(max=255)
    lut = torch.where(step[:, None] == 0, torch.arange(256, device=img.device).expand_as(lut), lut)
    out = lut.gather(1, flat).to(torch.uint8).reshape(u8.shape)
    if img.dtype.is_floating_point:  # torchvision's to_dtype(scale=True): * (1 / 255)
        return out.to(img.dtype).mul_(1.0 / 255)
    return out


@dispatcher
def equalize(inpt):
    """Histogram equalisation per channel (Pillow's ImageOps.equalize rule)."""


for _f, _k in [(rgb_to_grayscale, _rgb_to_grayscale_image), (adjust_brightness, _brightness),
               (adjust_contrast, _contrast), (adjust_saturation, _saturation), (adjust_hue, _hue),
               (adjust_sharpness, _sharpness), (adjust_gamma, _gamma), (posterize, _posterize),
               (invert, _invert), (solarize, _solarize), (autocontrast, _autocontrast),
               (equalize, _equalize)]:
    register_image(_f, _k)
    register_passthrough(_f, *_NON_IMAGE)
