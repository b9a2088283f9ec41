"""PIL images and numpy arrays <-> tensors (torchvision's to_image, pil_to_tensor,
to_pil_image), and the PIL support of the functionals and transforms.

A PIL image given to a functional or a transform goes through the tensor kernel and comes
back as a PIL image: pixel values are those of the tensor path (torchvision's PIL path
calls Pillow's own filters instead; see docs/vision.md).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import PIL.Image
import torch

from ember.vision import tv_tensors

# Pillow modes a transform can take through the tensor kernels and give back unchanged in
# kind: (channels, tensor dtype). Others ("P", "1", "CMYK", ...) need an explicit convert.
_ROUND_TRIP = {
    "L": (1, torch.uint8), "LA": (2, torch.uint8), "RGB": (3, torch.uint8),
    "RGBA": (4, torch.uint8), "I;16": (1, torch.uint16), "I": (1, torch.int32),
    "F": (1, torch.float32),
}


def _is_pil(x: Any) -> bool:
    return isinstance(x, PIL.Image.Image)


def pil_to_tensor(pic: Any) -> torch.Tensor:
    """A PIL image as a [C, H, W] tensor of its own dtype (a copy; no scaling)."""
    if not _is_pil(pic):
        raise TypeError(f"pic must be a PIL image, got {type(pic).__name__}")
    arr = np.array(pic, copy=True)
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    w, h = pic.size
    arr = arr.reshape(h, w, -1)
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def to_image(inpt: Any) -> tv_tensors.Image:
    """A plain tensor, numpy array (HWC or HW) or PIL image as a ``tv_tensors.Image``."""
    if isinstance(inpt, np.ndarray):
        out = torch.from_numpy(np.atleast_3d(inpt)).permute(2, 0, 1).contiguous()
    elif _is_pil(inpt):
        out = pil_to_tensor(inpt)
    elif isinstance(inpt, torch.Tensor):
        out = inpt
    else:
        raise TypeError(f"to_image takes a tensor, a numpy array or a PIL image, "
                        f"got {type(inpt).__name__}")
    return tv_tensors.Image(out)


_MODES_BY_CHANNELS = {2: ("LA",), 3: ("RGB", "YCbCr", "HSV"), 4: ("RGBA", "CMYK", "RGBX")}
_DEFAULT_MODE = {2: "LA", 3: "RGB", 4: "RGBA"}


def to_pil_image(pic: Any, mode: str | None = None) -> PIL.Image.Image:
    """A [C, H, W] (or [H, W]) tensor or an HWC (or HW) numpy array as a PIL image.

    Float data other than mode "F" is taken as [0, 1] and scaled to uint8 (x * 255,
    truncated), as torchvision does; the mode follows the dtype and channel count."""
    if isinstance(pic, torch.Tensor):
        if pic.ndim == 3:
            pic = pic.permute(1, 2, 0)
        arr = pic.detach().cpu().numpy()
    elif isinstance(pic, np.ndarray):
        arr = pic
    else:
        raise TypeError(f"pic must be a tensor or a numpy array, got {type(pic).__name__}")
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3:
        raise ValueError(f"pic must have 2 or 3 dimensions, got {arr.ndim}")
    c = arr.shape[-1]
    if c > 4 or c == 0:
        raise ValueError(f"pic must have 1 to 4 channels, got {c}")
    if np.issubdtype(arr.dtype, np.floating) and mode != "F":
        arr = (arr * 255).astype(np.uint8)
    if c == 1:
        arr = arr[:, :, 0]
        expected = {np.dtype(np.uint8): "L", np.dtype(np.int16): "I;16",
                    np.dtype(np.uint16): "I;16", np.dtype(np.int32): "I",
                    np.dtype(np.float32): "F"}.get(arr.dtype)
        if expected is None:
            raise TypeError(f"to_pil_image: a 1-channel image of dtype {arr.dtype} has no "
                            f"PIL mode (uint8, uint16, int16, int32 or float32 do)")
        if mode is not None and mode != expected:
            raise ValueError(f"to_pil_image: mode {mode!r} does not fit a 1-channel "
                             f"{arr.dtype} image; it is {expected!r}")
        if expected == "I;16":
            arr = arr.astype("<u2")
        return PIL.Image.fromarray(np.ascontiguousarray(arr), mode=expected)
    if mode is not None and mode not in _MODES_BY_CHANNELS[c]:
        raise ValueError(f"to_pil_image: a {c}-channel image takes mode "
                         f"{' or '.join(_MODES_BY_CHANNELS[c])}, got {mode!r}")
    if arr.dtype != np.uint8:
        raise TypeError(f"to_pil_image: a {c}-channel image must be uint8 (or float in "
                        f"[0, 1]), got {arr.dtype}")
    return PIL.Image.frombytes(mode or _DEFAULT_MODE[c], (arr.shape[1], arr.shape[0]),
                               np.ascontiguousarray(arr).tobytes())


class PILImage(tv_tensors.Image):
    """An image that came from a PIL image and goes back to one after the transform: its
    ``pil_mode`` survives ``tv_tensors.wrap`` (it is metadata)."""

    pil_mode: str

    def _meta(self) -> dict[str, Any]:
        return {"pil_mode": self.pil_mode}


def check_pil_mode(pic: PIL.Image.Image, op: str) -> None:
    """ValueError for PIL modes the transforms do not take (those outside ``_ROUND_TRIP``)."""
    if pic.mode not in _ROUND_TRIP:
        raise ValueError(f"{op}: PIL images of mode {pic.mode!r} are not supported; convert "
                         f"first (image.convert('RGB') or 'L'), or wrap the index map of a "
                         f"palette image as tv_tensors.Mask(pil_to_tensor(image))")


def pil_as_image(pic: PIL.Image.Image, op: str) -> PILImage:
    """``pic`` as a tensor image for the tensor kernels (modes of ``_ROUND_TRIP`` only)."""
    check_pil_mode(pic, op)
    out = pil_to_tensor(pic).as_subclass(PILImage)
    out.pil_mode = pic.mode
    return out


def image_as_pil(img: torch.Tensor) -> PIL.Image.Image:
    """A transformed ``PILImage`` back as a PIL image: its original mode when the channel
    count and dtype still fit it (e.g. Grayscale(3) makes an "L" image "RGB")."""
    raw = tv_tensors.unwrap(img)
    if raw.ndim != 3:
        raise ValueError(f"a PIL image became a tensor of shape {tuple(raw.shape)}; it cannot "
                         f"be turned back into a PIL image")
    mode = getattr(img, "pil_mode", None)
    fit = _ROUND_TRIP.get(mode)
    if fit is None or fit != (raw.shape[0], raw.dtype):
        mode = None
        for m, (c, dt) in _ROUND_TRIP.items():
            if c == raw.shape[0] and dt == raw.dtype:
                mode = m
                break
        if mode is None:
            raise ValueError(f"a PIL image became a {raw.shape[0]}-channel {raw.dtype} tensor, "
                             f"which has no PIL mode")
    if mode == "I;16":  # from bytes: fromarray(mode="I;16") fails under Pillow 13
        h, w = raw.shape[-2:]
        data = np.ascontiguousarray(raw[0].cpu().numpy().astype("<u2")).tobytes()
        return PIL.Image.frombytes("I;16", (w, h), data)
    return to_pil_image(raw, mode=None if mode in ("L", "I") else mode)


def pil_kernel(kernel):
    """A PIL kernel from a tensor kernel: tensor in, the same kernel, PIL out (tuples of
    images, as five_crop returns, map element-wise)."""
    def run(pic, *args, **kwargs):
        out = kernel(pil_as_image(pic, kernel.__name__), *args, **kwargs)
        if isinstance(out, (tuple, list)):
            return type(out)(image_as_pil(o) for o in out)
        return image_as_pil(out)

    return run


def to_tensor(inpt: Any) -> torch.Tensor:
    """Deprecated in torchvision (use ``to_image`` then ``to_dtype(float32, scale=True)``):
    a PIL image or an HWC/HW numpy array as a [C, H, W] tensor; uint8 (and 1-bit) values
    are scaled to float32 in [0, 1], other dtypes are kept as they are."""
    pic = inpt
    if isinstance(pic, np.ndarray):
        if pic.ndim not in (2, 3):
            raise ValueError(f"pic must be a 2 or 3 dimensional array, got {pic.ndim} dimensions")
        out = torch.from_numpy(np.ascontiguousarray(np.atleast_3d(pic).transpose(2, 0, 1)))
    elif _is_pil(pic):
        out = pil_to_tensor(pic)
    else:
        raise TypeError(f"pic must be a PIL image or a numpy array, got {type(pic).__name__}")
    if out.dtype == torch.bool:
        return out.to(torch.float32)
    if out.dtype == torch.uint8:
        return out.to(torch.float32).div_(255)
    return out
