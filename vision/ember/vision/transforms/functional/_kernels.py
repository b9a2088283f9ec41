"""torchvision's per-type kernels (``resize_image``, ``resize_mask``, ``resize_bounding_boxes``,
``resize_video``, ...) as thin entries over the functionals' kernel registry.

An image or video kernel takes a plain tensor and runs the functional's plain-tensor kernel;
a mask kernel runs its ``Mask`` kernel; a box kernel takes plain boxes with their ``format``
and ``canvas_size`` and runs its ``BoundingBoxes`` kernel, returning what torchvision's
returns (the boxes, or the boxes and the new canvas size).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from ember.vision import tv_tensors
from ember.vision.transforms.functional import _augment, _channels, _color, _geometry, _misc
from ember.vision.transforms.functional._meta import (
    get_dimensions,
    get_num_channels,
    get_num_frames_video,
)
from ember.vision.transforms.functional._utils import InterpolationMode

BoxFormat = tv_tensors.BoundingBoxFormat


def _plain(out):
    if isinstance(out, tuple):
        return tuple(tv_tensors.unwrap(o) for o in out)
    return tv_tensors.unwrap(out)


def _tensor_kernel(functional: Callable, name: str, first: str, extra=()) -> Callable:
    """``functional`` on a plain tensor, with its signature (first parameter renamed)."""
    sig = inspect.signature(functional)
    params = list(sig.parameters.values())
    params = [params[0].replace(name=first)] + params[1:] + list(extra)
    signature = sig.replace(parameters=params)

    def kernel(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        x, *rest = bound.args
        return _plain(functional(tv_tensors.unwrap(x), *rest, **bound.kwargs))

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__module__ = "ember.vision.transforms.functional"
    kernel.__signature__ = signature
    kernel.__doc__ = f"``{functional.__name__}`` of a plain {first} tensor."
    return kernel


# functional -> the kinds torchvision has a plain-tensor kernel for
_TENSOR_KERNELS: dict[Callable, tuple[str, ...]] = {
    _color.adjust_brightness: ("image", "video"), _color.adjust_contrast: ("image", "video"),
    _color.adjust_gamma: ("image", "video"), _color.adjust_hue: ("image", "video"),
    _color.adjust_saturation: ("image", "video"), _color.adjust_sharpness: ("image", "video"),
    _color.autocontrast: ("image", "video"), _color.equalize: ("image", "video"),
    _color.invert: ("image", "video"), _color.posterize: ("image", "video"),
    _color.solarize: ("image", "video"), _color.rgb_to_grayscale: ("image",),
    _channels.permute_channels: ("image", "video"),
    _geometry.affine: ("image", "video"), _geometry.center_crop: ("image", "video"),
    _geometry.crop: ("image", "video"), _geometry.five_crop: ("image", "video"),
    _geometry.horizontal_flip: ("image", "video"), _geometry.vertical_flip: ("image", "video"),
    _geometry.pad: ("image", "video"), _geometry.perspective: ("image", "video"),
    _geometry.resize: ("image", "video"), _geometry.resized_crop: ("image", "video"),
    _geometry.rotate: ("image", "video"), _geometry.ten_crop: ("image", "video"),
    _augment.elastic: ("video",), _augment.jpeg: ("video",),
    _augment.gaussian_noise: ("video",),
    _misc.erase: ("image", "video"), _misc.gaussian_blur: ("image", "video"),
    _misc.normalize: ("image", "video"), _misc.to_dtype: ("image", "video"),
    _geometry.get_size: ("image", "video", "mask"), get_dimensions: ("image", "video"),
    get_num_channels: ("image", "video"),
}

KERNELS: dict[str, Callable] = {
    f"{f.__name__}_{kind}": _tensor_kernel(f, f"{f.__name__}_{kind}", kind)
    for f, kinds in _TENSOR_KERNELS.items() for kind in kinds
}


# ----------------------------------------------------------------------------- masks

def _on_mask(functional, mask, *args, **kwargs):
    return _plain(functional(tv_tensors.Mask(mask), *args, **kwargs))


def horizontal_flip_mask(mask: torch.Tensor) -> torch.Tensor:
    """``horizontal_flip`` of a plain mask."""
    return _on_mask(_geometry.horizontal_flip, mask)


def vertical_flip_mask(mask: torch.Tensor) -> torch.Tensor:
    """``vertical_flip`` of a plain mask."""
    return _on_mask(_geometry.vertical_flip, mask)


def resize_mask(mask, size, interpolation=InterpolationMode.BILINEAR, max_size=None):
    """``resize`` of a plain mask (always nearest, as torchvision)."""
    return _on_mask(_geometry.resize, mask, size, interpolation, max_size)


def crop_mask(mask, top, left, height, width):
    """``crop`` of a plain mask."""
    return _on_mask(_geometry.crop, mask, top, left, height, width)


def center_crop_mask(mask, output_size):
    """``center_crop`` of a plain mask."""
    return _on_mask(_geometry.center_crop, mask, output_size)


def resized_crop_mask(mask, top, left, height, width, size):
    """``resized_crop`` of a plain mask (nearest)."""
    return _on_mask(_geometry.resized_crop, mask, top, left, height, width, size)


def pad_mask(mask, padding, fill=None, padding_mode="constant"):
    """``pad`` of a plain mask."""
    return _on_mask(_geometry.pad, mask, padding, fill, padding_mode)


def rotate_mask(mask, angle, expand=False, center=None, fill=None):
    """``rotate`` of a plain mask (nearest)."""
    return _on_mask(_geometry.rotate, mask, angle, expand=expand, center=center, fill=fill)


def affine_mask(mask, angle, translate, scale, shear, fill=None, center=None):
    """``affine`` of a plain mask (nearest)."""
    return _on_mask(_geometry.affine, mask, angle, translate, scale, shear, fill=fill,
                    center=center)


def perspective_mask(mask, startpoints, endpoints, fill=None, coefficients=None):
    """``perspective`` of a plain mask (nearest)."""
    return _on_mask(_geometry.perspective, mask, startpoints, endpoints, fill=fill,
                    coefficients=coefficients)


# ----------------------------------------------------------------------------- boxes

def _on_boxes(functional, boxes, format, canvas_size, clamping_mode, *args, **kwargs):
    typed = tv_tensors.BoundingBoxes(boxes, format=format, canvas_size=canvas_size,
                                     clamping_mode=clamping_mode)
    out = functional(typed, *args, **kwargs)
    return tv_tensors.unwrap(out), out.canvas_size


def horizontal_flip_bounding_boxes(bounding_boxes, format, canvas_size):
    """``horizontal_flip`` of plain boxes."""
    return _on_boxes(_geometry.horizontal_flip, bounding_boxes, format, canvas_size, None)[0]


def vertical_flip_bounding_boxes(bounding_boxes, format, canvas_size):
    """``vertical_flip`` of plain boxes."""
    return _on_boxes(_geometry.vertical_flip, bounding_boxes, format, canvas_size, None)[0]


def resize_bounding_boxes(bounding_boxes, canvas_size, size, max_size=None,
                          format=BoxFormat.XYXY, clamping_mode="soft"):
    """``resize`` of plain boxes: (boxes, new canvas size)."""
    return _on_boxes(_geometry.resize, bounding_boxes, format, canvas_size, clamping_mode, size,
                     max_size=max_size)


def crop_bounding_boxes(bounding_boxes, format, top, left, height, width, clamping_mode="soft"):
    """``crop`` of plain boxes: (boxes, (height, width))."""
    return _on_boxes(_geometry.crop, bounding_boxes, format, (height, width), clamping_mode,
                     top, left, height, width)


def center_crop_bounding_boxes(bounding_boxes, format, canvas_size, output_size,
                               clamping_mode="soft"):
    """``center_crop`` of plain boxes: (boxes, new canvas size)."""
    return _on_boxes(_geometry.center_crop, bounding_boxes, format, canvas_size, clamping_mode,
                     output_size)


def resized_crop_bounding_boxes(bounding_boxes, format, top, left, height, width, size,
                                clamping_mode="soft"):
    """``resized_crop`` of plain boxes: (boxes, new canvas size)."""
    return _on_boxes(_geometry.resized_crop, bounding_boxes, format, (height, width),
                     clamping_mode, top, left, height, width, size)


def pad_bounding_boxes(bounding_boxes, format, canvas_size, padding, padding_mode="constant",
                       clamping_mode="soft"):
    """``pad`` of plain boxes: (boxes, new canvas size)."""
    return _on_boxes(_geometry.pad, bounding_boxes, format, canvas_size, clamping_mode, padding,
                     padding_mode=padding_mode)


def rotate_bounding_boxes(bounding_boxes, format, canvas_size, angle, expand=False, center=None,
                          clamping_mode="soft"):
    """``rotate`` of plain boxes: (boxes, new canvas size)."""
    return _on_boxes(_geometry.rotate, bounding_boxes, format, canvas_size, clamping_mode, angle,
                     expand=expand, center=center)


def affine_bounding_boxes(bounding_boxes, format, canvas_size, angle, translate, scale, shear,
                          center=None, clamping_mode="soft"):
    """``affine`` of plain boxes."""
    return _on_boxes(_geometry.affine, bounding_boxes, format, canvas_size, clamping_mode, angle,
                     translate, scale, shear, center=center)[0]


def perspective_bounding_boxes(bounding_boxes, format, canvas_size, startpoints, endpoints,
                               coefficients=None, clamping_mode="soft"):
    """``perspective`` of plain boxes."""
    return _on_boxes(_geometry.perspective, bounding_boxes, format, canvas_size, clamping_mode,
                     startpoints, endpoints, coefficients=coefficients)[0]


# ----------------------------------------------------------------------------- sizes

def get_size_bounding_boxes(bounding_box: tv_tensors.BoundingBoxes) -> list[int]:
    """The boxes' ``canvas_size`` as a list."""
    return list(bounding_box.canvas_size)


KERNELS.update({f.__name__: f for f in (
    horizontal_flip_mask, vertical_flip_mask, resize_mask, crop_mask, center_crop_mask,
    resized_crop_mask, pad_mask, rotate_mask, affine_mask, perspective_mask,
    horizontal_flip_bounding_boxes, vertical_flip_bounding_boxes, resize_bounding_boxes,
    crop_bounding_boxes, center_crop_bounding_boxes, resized_crop_bounding_boxes,
    pad_bounding_boxes, rotate_bounding_boxes, affine_bounding_boxes,
    perspective_bounding_boxes, get_size_bounding_boxes,
    # kernels the functionals' modules define under torchvision's names already
    _augment.elastic_image, _augment.elastic_mask, _augment.elastic_bounding_boxes,
    _augment.jpeg_image, _augment.gaussian_noise_image, _channels.grayscale_to_rgb_image,
    _channels.uniform_temporal_subsample_video, get_num_frames_video,
)})
