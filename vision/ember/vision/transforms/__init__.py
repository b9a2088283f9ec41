"""Transforms with torchvision.transforms.v2 names and semantics, on tensors of any batch shape.

A sample is any pytree (dict, list, tuple) of typed tensors (``ember.vision.tv_tensors``) and
other leaves; boxes and masks follow the image. ``per_sample=True`` on random transforms draws
independent parameters for every image of a batch (dim 0), vectorised on the batch's device.
"""

from ember.vision.transforms import functional
from ember.vision.transforms._augment import (
    AugMix,
    AutoAugment,
    AutoAugmentPolicy,
    CutMix,
    MixUp,
    RandAugment,
    TrivialAugmentWide,
)
from ember.vision.transforms._color import (
    JPEG,
    RGB,
    ColorJitter,
    GaussianBlur,
    GaussianNoise,
    Grayscale,
    RandomAdjustSharpness,
    RandomAutocontrast,
    RandomChannelPermutation,
    RandomEqualize,
    RandomGrayscale,
    RandomInvert,
    RandomPhotometricDistort,
    RandomPosterize,
    RandomSolarize,
)
from ember.vision.transforms._container import Compose, RandomApply, RandomChoice, RandomOrder
from ember.vision.transforms._geometry import (
    CenterCrop,
    ElasticTransform,
    FiveCrop,
    Pad,
    RandomAffine,
    RandomCrop,
    RandomHorizontalFlip,
    RandomIoUCrop,
    RandomPerspective,
    RandomResize,
    RandomResizedCrop,
    RandomRotation,
    RandomShortestSize,
    RandomVerticalFlip,
    RandomZoomOut,
    Resize,
    ScaleJitter,
    TenCrop,
)
from ember.vision.transforms._misc import (
    ClampBoundingBoxes,
    ClampKeyPoints,
    ConvertBoundingBoxFormat,
    ConvertImageDtype,
    Identity,
    Lambda,
    LinearTransformation,
    Normalize,
    RandomErasing,
    SanitizeBoundingBoxes,
    SanitizeKeyPoints,
    SetClampingMode,
    ToDtype,
    UniformTemporalSubsample,
)
from ember.vision.transforms._transform import Transform
from ember.vision.transforms._type_conversion import (
    PILToTensor,
    ToImage,
    ToPILImage,
    ToPureTensor,
    ToTensor,
)
from ember.vision.transforms._utils import (
    check_type,
    get_bounding_boxes,
    get_keypoints,
    has_all,
    has_any,
    query_chw,
    query_size,
)
from ember.vision.transforms.functional import InterpolationMode

__all__ = [
    "functional", "Transform", "InterpolationMode",
    "Compose", "RandomApply", "RandomChoice", "RandomOrder",
    "Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop", "FiveCrop", "Pad",
    "RandomHorizontalFlip", "RandomVerticalFlip", "RandomRotation", "RandomAffine",
    "RandomPerspective", "ColorJitter", "Grayscale", "RandomGrayscale", "GaussianBlur",
    "Normalize", "ToDtype", "RandomErasing", "AutoAugment", "AutoAugmentPolicy", "RandAugment",
    "TrivialAugmentWide", "MixUp", "CutMix", "ConvertBoundingBoxFormat", "ClampBoundingBoxes",
    "SetClampingMode", "ClampKeyPoints",
    "SanitizeBoundingBoxes", "ToImage", "PILToTensor", "ToPILImage", "ToPureTensor",
    "TenCrop", "RandomResize", "RandomShortestSize", "ScaleJitter", "RandomZoomOut",
    "RandomIoUCrop", "ElasticTransform", "RandomInvert", "RandomEqualize", "RandomAutocontrast",
    "RandomPosterize", "RandomSolarize", "RandomAdjustSharpness", "RandomChannelPermutation",
    "RandomPhotometricDistort", "GaussianNoise", "JPEG", "RGB", "Identity", "Lambda",
    "LinearTransformation", "UniformTemporalSubsample", "ConvertImageDtype", "ToTensor",
    "AugMix", "SanitizeKeyPoints",
    # torchvision's sample helpers (for writing transforms)
    "check_type", "get_bounding_boxes", "get_keypoints", "has_all", "has_any", "query_chw",
    "query_size",
]
