"""torchvision's inference presets for segmentation, video and detection weights entries."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

_IMAGENET_MEAN, _IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_KINETICS_MEAN, _KINETICS_STD = (0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989)


def _resize_v1(img, size, interpolation, antialias):
    """torchvision's v1 ``resize`` for presets: uint8 tensors resampled in float32 and rounded."""
    from ember.vision.transforms import functional as F
    if isinstance(img, torch.Tensor) and img.dtype == torch.uint8:
        out = F.resize(img.float(), size, interpolation=interpolation, antialias=antialias)
        return out.round_().clamp_(0, 255).to(torch.uint8)
    return F.resize(img, size, interpolation=interpolation, antialias=antialias)


class SemanticSegmentation(nn.Module):
    """Resize the shorter side to ``resize_size`` (None: keep), scale to float in [0, 1] and
    normalize; takes a tensor image ``[..., C, H, W]`` or a PIL image."""

    def __init__(self, *, resize_size: int | None, mean: Sequence[float] = _IMAGENET_MEAN,
                 std: Sequence[float] = _IMAGENET_STD, interpolation=None,
                 antialias: bool | None = True) -> None:
        super().__init__()
        from ember.vision.transforms.functional import InterpolationMode
        self.resize_size = [resize_size] if resize_size is not None else None
        self.mean, self.std = list(mean), list(std)
        self.interpolation = (InterpolationMode.BILINEAR if interpolation is None
                              else interpolation)
        self.antialias = antialias

    def forward(self, img):
        from ember.vision.transforms import functional as F
        if self.resize_size is not None:
            img = _resize_v1(img, self.resize_size, self.interpolation, self.antialias)
        if not isinstance(img, torch.Tensor):
            img = F.pil_to_tensor(img)
        img = F.convert_image_dtype(img, torch.float)
        return F.normalize(img, mean=self.mean, std=self.std)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(resize_size={self.resize_size}, mean={self.mean}, "
                f"std={self.std}, interpolation={self.interpolation})")

    def describe(self) -> str:
        return (f"Resized to {self.resize_size} with {self.interpolation}, rescaled to "
                f"[0.0, 1.0], normalized with mean={self.mean} and std={self.std}.")


class VideoClassification(nn.Module):
    """Video ``[..., T, C, H, W]`` resized (no antialias), centre-cropped, scaled to [0, 1],
    normalized, and returned as ``[..., C, T, H, W]``."""

    def __init__(self, *, crop_size: Sequence[int], resize_size: Sequence[int],
                 mean: Sequence[float] = _KINETICS_MEAN, std: Sequence[float] = _KINETICS_STD,
                 interpolation=None) -> None:
        super().__init__()
        from ember.vision.transforms.functional import InterpolationMode
        self.crop_size, self.resize_size = list(crop_size), list(resize_size)
        self.mean, self.std = list(mean), list(std)
        self.interpolation = (InterpolationMode.BILINEAR if interpolation is None
                              else interpolation)

    def forward(self, vid: torch.Tensor) -> torch.Tensor:
        from ember.vision.transforms import functional as F
        if not isinstance(vid, torch.Tensor) or vid.ndim not in (4, 5):
            raise ValueError("VideoClassification expects a video tensor [T, C, H, W] or "
                             f"[N, T, C, H, W], got {getattr(vid, 'shape', type(vid))}")
        single = vid.ndim == 4
        if single:
            vid = vid.unsqueeze(0)
        n, t, c = vid.shape[:3]
        vid = _resize_v1(vid.reshape(-1, c, *vid.shape[-2:]), self.resize_size,
                         self.interpolation, False)
        vid = F.center_crop(vid, self.crop_size)
        vid = F.normalize(F.convert_image_dtype(vid, torch.float), mean=self.mean,
                          std=self.std)
        vid = vid.reshape(n, t, c, *self.crop_size).permute(0, 2, 1, 3, 4)
        return vid.squeeze(0) if single else vid

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(crop_size={self.crop_size}, resize_size="
                f"{self.resize_size}, mean={self.mean}, std={self.std}, "
                f"interpolation={self.interpolation})")

    def describe(self) -> str:
        return (f"Frames resized to {self.resize_size} with {self.interpolation}, "
                f"centre-cropped to {self.crop_size}, rescaled to [0.0, 1.0], normalized with "
                f"mean={self.mean} and std={self.std}; output [..., C, T, H, W].")


class ObjectDetection(nn.Module):
    """An image (tensor or PIL) as float in [0, 1]; detectors normalize and resize inside."""

    def forward(self, img):
        from ember.vision.transforms import functional as F
        if not isinstance(img, torch.Tensor):
            img = F.pil_to_tensor(img)
        return F.convert_image_dtype(img, torch.float)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def describe(self) -> str:
        return "Rescaled to [0.0, 1.0] as float; the model normalizes and resizes itself."
