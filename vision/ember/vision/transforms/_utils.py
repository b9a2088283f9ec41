"""torchvision.transforms.v2's sample helpers: type checks and size queries over leaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import PIL.Image

from ember.vision import tv_tensors
from ember.vision.transforms.functional._geometry import get_size
from ember.vision.transforms.functional._meta import get_dimensions, is_pure_tensor

TypeOrCheck = type | Callable[[Any], bool]


def check_type(obj: Any, types_or_checks: tuple[TypeOrCheck, ...]) -> bool:
    """Whether ``obj`` is an instance of one of the types or passes one of the checks."""
    return any(isinstance(obj, t) if isinstance(t, type) else t(obj) for t in types_or_checks)


def has_any(flat_inputs: list[Any], *types_or_checks: TypeOrCheck) -> bool:
    """Whether some leaf matches some of ``types_or_checks``."""
    return any(check_type(x, types_or_checks) for x in flat_inputs)


def has_all(flat_inputs: list[Any], *types_or_checks: TypeOrCheck) -> bool:
    """Whether every one of ``types_or_checks`` matches some leaf."""
    return all(any(check_type(x, (t,)) for x in flat_inputs) for t in types_or_checks)


def get_bounding_boxes(flat_inputs: list[Any]) -> tv_tensors.BoundingBoxes:
    """The first ``BoundingBoxes`` leaf (ValueError when there is none)."""
    for x in flat_inputs:
        if isinstance(x, tv_tensors.BoundingBoxes):
            return x
    raise ValueError("No bounding boxes were found in the sample")


def get_keypoints(flat_inputs: list[Any]) -> tv_tensors.KeyPoints:
    """The first ``KeyPoints`` leaf (ValueError when there is none)."""
    for x in flat_inputs:
        if isinstance(x, tv_tensors.KeyPoints):
            return x
    raise ValueError("No keypoints were found in the sample")


_IMAGES = (is_pure_tensor, tv_tensors.Image, PIL.Image.Image, tv_tensors.Video)


def _one(found: set, what: str, names: str) -> tuple:
    if not found:
        raise TypeError(f"No {names} was found in the sample")
    if len(found) > 1:
        raise ValueError(f"Found multiple {what} dimensions in the sample: "
                         f"{', '.join(str(s) for s in sorted(found))}")
    return found.pop()


def query_chw(flat_inputs: list[Any]) -> tuple[int, int, int]:
    """(channels, height, width) shared by the sample's images and videos."""
    found = {tuple(get_dimensions(x)) for x in flat_inputs if check_type(x, _IMAGES)}
    return _one(found, "CxHxW", "image or video")


def query_size(flat_inputs: list[Any]) -> tuple[int, int]:
    """(height, width) shared by the sample's images, videos, masks, boxes and keypoints."""
    kinds = _IMAGES + (tv_tensors.Mask, tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)
    found = {tuple(get_size(x)) for x in flat_inputs if check_type(x, kinds)}
    return _one(found, "HxW", "image, video, mask, bounding box or keypoint")
