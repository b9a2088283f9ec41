"""KeyPoints under the geometric functionals: points ``[..., 2]`` in pixel indices (x, y), as
torchvision moves them (a flip maps x to W - 1 - x); the other functionals pass them through.

The kernels take plain tensors and the canvas size and return what torchvision's return;
rotate's ``expand`` and center_crop past the border follow our image's canvas, as our boxes do.
"""

from __future__ import annotations

import torch

from ember.vision import tv_tensors
from ember.vision.transforms.functional import _augment, _geometry, _misc
from ember.vision.transforms.functional._registry import (
    _KERNELS,
    dispatcher,
    register_raw,
)


def _shifted(keypoints: torch.Tensor, dx, dy) -> torch.Tensor:
    return keypoints - torch.tensor([dx, dy], dtype=keypoints.dtype, device=keypoints.device)


def horizontal_flip_keypoints(keypoints: torch.Tensor, canvas_size) -> torch.Tensor:
    """x -> W - 1 - x."""
    out = keypoints.clone()
    out[..., 0] = (canvas_size[1] - 1) - out[..., 0]
    return out


def vertical_flip_keypoints(keypoints: torch.Tensor, canvas_size) -> torch.Tensor:
    """y -> H - 1 - y."""
    out = keypoints.clone()
    out[..., 1] = (canvas_size[0] - 1) - out[..., 1]
    return out


def crop_keypoints(keypoints, top, left, height, width):
    """Points relative to the window: (points, (height, width))."""
    return _shifted(keypoints, left, top), (height, width)


def center_crop_keypoints(inpt, canvas_size, output_size):
    """Points relative to the central window: (points, output size)."""
    size = _geometry._check_size(output_size, "output_size")
    oh, ow = (size[0], size[0]) if len(size) == 1 else size
    h, w = canvas_size
    return crop_keypoints(inpt, _geometry._center_offset(h, oh), _geometry._center_offset(w, ow),
                          oh, ow)


def pad_keypoints(keypoints, canvas_size, padding, padding_mode="constant"):
    """Points shifted by (left, top): (points, padded canvas)."""
    left, top, right, bottom = _geometry.parse_padding(padding)
    out = _shifted(keypoints, -left, -top)
    return out, (canvas_size[0] + top + bottom, canvas_size[1] + left + right)


def resize_keypoints(keypoints, size, canvas_size, max_size=None):
    """Points scaled by the size ratios: (points, new canvas)."""
    h, w = canvas_size
    oh, ow = _geometry.output_size(h, w, size, max_size)
    if (oh, ow) == (h, w):
        return keypoints, canvas_size
    ratios = torch.tensor([ow / w, oh / h], device=keypoints.device)
    return keypoints.mul(ratios).to(keypoints.dtype), (oh, ow)


def resized_crop_keypoints(keypoints, top, left, height, width, size):
    """``crop_keypoints`` then ``resize_keypoints`` to ``size``."""
    out, canvas = crop_keypoints(keypoints, top, left, height, width)
    return resize_keypoints(out, size, canvas)


def _apply(keypoints: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Points through the [1, 3, 3] homography ``m`` (float64), back in their dtype."""
    if keypoints.numel() == 0:
        return keypoints.clone()
    pts = keypoints.reshape(-1, 2).to(torch.float64)
    pts = torch.cat([pts, torch.ones_like(pts[:, :1])], 1) @ m[0].to(pts.device).T
    return (pts[:, :2] / pts[:, 2:]).to(keypoints.dtype).reshape(keypoints.shape)


def affine_keypoints(keypoints, canvas_size, angle, translate, scale, shear, center=None):
    """Points through the affine map: (points, canvas)."""
    m = _geometry._affine_params(canvas_size, angle, translate, scale, shear, center)
    return _apply(keypoints, m), tuple(canvas_size)


def rotate_keypoints(keypoints, canvas_size, angle, expand=False, center=None):
    """Points rotated with the image: (points, the image's new canvas)."""
    m, canvas = _geometry._rotate_params(canvas_size, angle, expand, center)
    return _apply(keypoints, m), canvas


def perspective_keypoints(keypoints, canvas_size, startpoints, endpoints, coefficients=None):
    """Points through the perspective map."""
    return _apply(keypoints, _geometry._perspective_forward(startpoints, endpoints, coefficients))


def elastic_keypoints(keypoints, canvas_size, displacement):
    """Points moved by the approximate inverse of the displacement at their pixel (identity
    minus displacement, torchvision's approximation)."""
    h, w = canvas_size
    _augment._check_displacement(displacement, h, w)
    if keypoints.numel() == 0:
        return keypoints
    dtype = keypoints.dtype if keypoints.is_floating_point() else torch.float32
    inv = _augment.identity_grid(h, w, dtype, keypoints.device).sub_(
        displacement.to(keypoints.device, dtype))
    idx = keypoints.reshape(-1, 2).long()
    ix, iy = idx[:, 0].clamp(0, w - 1), idx[:, 1].clamp(0, h - 1)
    scale = torch.tensor([w, h], dtype=dtype, device=keypoints.device)
    out = (inv[0, iy, ix, :] + 1) * (0.5 * scale) - 0.5
    return out.to(keypoints.dtype).reshape(keypoints.shape)


def _clamp_plain(inpt, canvas_size):
    out = inpt.clone() if inpt.is_floating_point() else inpt.float()
    out[..., 0].clamp_(0, canvas_size[1] - 1)
    out[..., 1].clamp_(0, canvas_size[0] - 1)
    return out.to(inpt.dtype)


@dispatcher
def clamp_keypoints(inpt, canvas_size=None):
    """Clamp points into the canvas: x to [0, W - 1], y to [0, H - 1]."""


def _clamp_tensor(inpt, canvas_size=None):
    if canvas_size is None:
        raise ValueError("canvas_size is needed for plain tensors")
    return _clamp_plain(inpt, canvas_size)


def _clamp_typed(inpt, canvas_size=None):
    if canvas_size is not None:
        raise ValueError("canvas_size must not be passed with KeyPoints (they carry theirs)")
    return tv_tensors.wrap(_clamp_plain(tv_tensors.unwrap(inpt), inpt.canvas_size), like=inpt)


def get_size_keypoints(keypoints: tv_tensors.KeyPoints) -> list[int]:
    """The points' ``canvas_size`` as a list."""
    return list(keypoints.canvas_size)


register_raw(clamp_keypoints, torch.Tensor, _clamp_tensor)
register_raw(clamp_keypoints, tv_tensors.KeyPoints, _clamp_typed)


# functional -> (its KeyPoints kernel, whether that returns a canvas, the functional's argument
# names after the input, in order); _TAKES: the names a kernel takes where not all of them
_GEOMETRY = {
    _geometry.horizontal_flip: (horizontal_flip_keypoints, False, ()),
    _geometry.vertical_flip: (vertical_flip_keypoints, False, ()),
    _geometry.crop: (crop_keypoints, True, ("top", "left", "height", "width")),
    _geometry.pad: (pad_keypoints, True, ("padding", "fill", "padding_mode")),
    _geometry.resize: (resize_keypoints, True, ("size", "interpolation", "max_size")),
    _geometry.resized_crop: (resized_crop_keypoints, True,
                             ("top", "left", "height", "width", "size")),
    _geometry.affine: (affine_keypoints, True,
                       ("angle", "translate", "scale", "shear", "interpolation", "fill",
                        "center")),
    _geometry.rotate: (rotate_keypoints, True, ("angle", "interpolation", "expand", "center")),
    _geometry.perspective: (perspective_keypoints, False,
                            ("startpoints", "endpoints", "interpolation", "fill",
                             "coefficients")),
    _augment.elastic: (elastic_keypoints, False, ("displacement",)),
}
_TAKES = {pad_keypoints: {"padding", "padding_mode"}, resize_keypoints: {"size", "max_size"},
          affine_keypoints: {"angle", "translate", "scale", "shear", "center"},
          rotate_keypoints: {"angle", "expand", "center"},
          perspective_keypoints: {"startpoints", "endpoints", "coefficients"}}


def _register(functional, kernel, returns_canvas, names):
    takes = _TAKES.get(kernel, set(names))
    needs_canvas = kernel not in (crop_keypoints, resized_crop_keypoints)

    def call(points, canvas, **named):
        named = {k: v for k, v in named.items() if k in takes}
        return kernel(points, canvas_size=canvas, **named) if needs_canvas else \
            kernel(points, **named)

    def run(inpt, *args, **kwargs):
        named = dict(zip(names, args))
        named.update(kwargs)
        out = call(tv_tensors.unwrap(inpt), inpt.canvas_size, **named)
        out, canvas = out if returns_canvas else (out, inpt.canvas_size)
        return tv_tensors.wrap(out, like=inpt, canvas_size=tuple(canvas))

    register_raw(functional, tv_tensors.KeyPoints, run)


for _f, (_k, _c, _names) in _GEOMETRY.items():
    _register(_f, _k, _c, _names)
register_raw(_misc.to_dtype, tv_tensors.KeyPoints,
             _KERNELS[_misc.to_dtype][tv_tensors.BoundingBoxes])

KEYPOINT_KERNELS = {f.__name__: f for f in (
    horizontal_flip_keypoints, vertical_flip_keypoints, crop_keypoints, center_crop_keypoints,
    pad_keypoints, resize_keypoints, resized_crop_keypoints, affine_keypoints,
    rotate_keypoints, perspective_keypoints, elastic_keypoints, get_size_keypoints,
)}


def sanitize_keypoints_mask(keypoints: torch.Tensor, canvas_size) -> torch.Tensor:
    """[N] bool: the points (or groups of points, dims 1.. of ``[N, ..., 2]``) on the canvas."""
    h, w = canvas_size
    x, y = keypoints[..., 0], keypoints[..., 1]
    inside = (x >= 0) & (x < w) & (y >= 0) & (y < h)
    return inside.flatten(1).all(1) if inside.ndim > 1 else inside


def sanitize_keypoints(key_points: torch.Tensor, canvas_size=None):
    """Drop points (or whole groups) off the canvas: (kept points, the [N] bool mask used)."""
    if isinstance(key_points, torch.Tensor) and not isinstance(key_points, tv_tensors.TVTensor):
        if canvas_size is None:
            raise ValueError("sanitize_keypoints: canvas_size is required for a plain tensor "
                             "(or pass a tv_tensors.KeyPoints)")
        valid = sanitize_keypoints_mask(key_points, canvas_size)
        return key_points[valid], valid
    if not isinstance(key_points, tv_tensors.KeyPoints):
        raise ValueError(f"sanitize_keypoints takes a tv_tensors.KeyPoints or a plain tensor, "
                         f"got {type(key_points).__name__}")
    if canvas_size is not None:
        raise ValueError(f"sanitize_keypoints: canvas_size must be None for KeyPoints (they "
                         f"carry theirs), got {canvas_size!r}")
    valid = sanitize_keypoints_mask(tv_tensors.unwrap(key_points), key_points.canvas_size)
    return tv_tensors.wrap(tv_tensors.unwrap(key_points)[valid], like=key_points), valid
