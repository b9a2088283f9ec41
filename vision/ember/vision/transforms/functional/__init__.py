"""Functional transforms (torchvision.transforms.v2.functional names).

Each function dispatches on its input's type through a kernel registry: plain tensors and
``Image``/``Video`` use the image kernel, ``Mask`` and ``BoundingBoxes`` their own, and
``register_kernel(functional, MyType)`` adds a kernel for a user type.
"""

from ember.vision import tv_tensors
from ember.vision.transforms.functional._augment import (
    elastic,
    elastic_transform,
    gaussian_noise,
    jpeg,
)
from ember.vision.transforms.functional._boxes import (
    clamp_bounding_boxes,
    convert_bounding_box_format,
    sanitize_bounding_boxes,
)
from ember.vision.transforms.functional._channels import (
    grayscale_to_rgb,
    permute_channels,
    uniform_temporal_subsample,
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
    ten_crop,
    vertical_flip,
)
from ember.vision.transforms.functional._kernels import KERNELS
from ember.vision.transforms.functional._keypoints import (
    KEYPOINT_KERNELS,
    clamp_keypoints,
    sanitize_keypoints,
)
from ember.vision.transforms.functional._meta import (
    get_dimensions,
    get_image_num_channels,
    get_num_channels,
    get_num_frames,
    is_pure_tensor,
)
from ember.vision.transforms.functional._misc import (
    convert_image_dtype,
    erase,
    gaussian_blur,
    normalize,
    to_dtype,
)
from ember.vision.transforms.functional._registry import (
    passthrough_like,
    register_kernel,
    register_pil,
)
from ember.vision.transforms.functional._type_conversion import (
    pil_to_tensor,
    to_image,
    to_pil_image,
    to_tensor,
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
    "convert_bounding_box_format", "clamp_bounding_boxes", "clamp_keypoints",
    "to_image", "pil_to_tensor", "to_pil_image",
    "hflip", "vflip", "to_grayscale", "get_image_size", "get_dimensions", "get_num_channels",
    "get_image_num_channels", "get_num_frames", "is_pure_tensor", "ten_crop", "elastic",
    "elastic_transform", "jpeg", "gaussian_noise", "grayscale_to_rgb", "permute_channels",
    "uniform_temporal_subsample", "sanitize_bounding_boxes", "convert_image_dtype", "to_tensor",
    "sanitize_keypoints",
]

# torchvision's per-type kernels: resize_image, resize_mask, resize_bounding_boxes, ...
globals().update(KERNELS)
globals().update(KEYPOINT_KERNELS)
__all__ += sorted(KERNELS) + sorted(KEYPOINT_KERNELS)

# torchvision's other names for the same functions
hflip = horizontal_flip
vflip = vertical_flip
to_grayscale = rgb_to_grayscale


def get_image_size(inpt) -> list[int]:
    """Deprecated in torchvision: ``[width, height]`` (note the order; ``get_size`` gives
    ``[height, width]``)."""
    import warnings

    warnings.warn("get_image_size() is deprecated (as in torchvision): use get_size(), which "
                  "returns [height, width] instead of [width, height]", UserWarning, stacklevel=2)
    return get_size(inpt)[::-1]

# the functionals torchvision gives a PIL kernel: PIL in, PIL out (through the tensor kernel)
# (resize, rotate, affine and perspective have Pillow kernels of their own in _geometry)
for _f in (adjust_brightness, adjust_contrast, adjust_gamma, adjust_hue, adjust_saturation,
           adjust_sharpness, autocontrast, crop, equalize, erase,
           gaussian_blur, horizontal_flip, invert, pad, posterize,
           resized_crop, rgb_to_grayscale, solarize, vertical_flip, elastic,
           gaussian_noise, permute_channels):
    register_pil(_f)
del _f

# KeyPoints pass through every functional that leaves boxes alone (colour, blur, ...)
passthrough_like(tv_tensors.KeyPoints, tv_tensors.BoundingBoxes)
