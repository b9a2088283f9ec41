"""Functional transforms (torchvision.transforms.v2.functional names).

Each function dispatches on its input's type through a kernel registry: plain tensors and
``Image``/``Video`` use the image kernel, ``Mask`` and ``BoundingBoxes`` their own, and
``register_kernel(functional, MyType)`` adds a kernel for a user type.
"""

from ember.vision.transforms.functional._boxes import (
    clamp_bounding_boxes,
    convert_bounding_box_format,
)
from ember.vision.transforms.functional._color import (
    adjust_brightness,
    adjust_contrast,
    adjust_gamma,
    adjust_hue,
    adjust_saturation,
    adjust_sharpness,
    autocontrast,
    equalize,
    invert,
    posterize,
    rgb_to_grayscale,
    solarize,
)
from ember.vision.transforms.functional._geometry import (
    affine,
    center_crop,
    crop,
    five_crop,
    get_size,
    horizontal_flip,
    pad,
    perspective,
    resize,
    resized_crop,
    rotate,
    vertical_flip,
)
from ember.vision.transforms.functional._misc import (
    erase,
    gaussian_blur,
    normalize,
    to_dtype,
)
from ember.vision.transforms.functional._registry import register_kernel, register_pil
from ember.vision.transforms.functional._type_conversion import (
    pil_to_tensor,
    to_image,
    to_pil_image,
)
from ember.vision.transforms.functional._utils import InterpolationMode

__all__ = [
    "InterpolationMode", "register_kernel", "get_size",
    "horizontal_flip", "vertical_flip", "resize", "crop", "center_crop", "five_crop",
    "resized_crop", "pad", "rotate", "affine", "perspective",
    "rgb_to_grayscale", "adjust_brightness", "adjust_contrast", "adjust_saturation",
    "adjust_hue", "adjust_sharpness", "adjust_gamma", "posterize", "solarize", "invert",
    "autocontrast", "equalize",
    "normalize", "to_dtype", "gaussian_blur", "erase",
    "convert_bounding_box_format", "clamp_bounding_boxes",
    "to_image", "pil_to_tensor", "to_pil_image",
]

# the functionals torchvision gives a PIL kernel: PIL in, PIL out (through the tensor kernel)
for _f in (adjust_brightness, adjust_contrast, adjust_gamma, adjust_hue, adjust_saturation,
           adjust_sharpness, affine, autocontrast, crop, equalize, erase,
           gaussian_blur, horizontal_flip, invert, pad, perspective, posterize, resize,
           resized_crop, rgb_to_grayscale, rotate, solarize, vertical_flip):
    register_pil(_f)
del _f
