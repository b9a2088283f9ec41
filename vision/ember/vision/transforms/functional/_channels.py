"""Channel and frame selection: grayscale_to_rgb, permute_channels, uniform_temporal_subsample."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ember.vision import tv_tensors
from ember.vision.transforms.functional._registry import (
    dispatcher,
    register_image,
    register_passthrough,
)
from ember.vision.transforms.functional._utils import check_image


def grayscale_to_rgb_image(image: torch.Tensor) -> torch.Tensor:
    """A 1-channel image repeated to 3 channels; 3 or more channels come back as they are."""
    check_image(image)
    c = image.shape[-3]
    if c >= 3:
        return image
    if c != 1:
        raise ValueError(f"grayscale_to_rgb needs 1 channel (or 3 or more, kept as they are), "
                         f"got {c}")
    return image.expand(image.shape[:-3] + (3,) + image.shape[-2:]).clone()


@dispatcher
def grayscale_to_rgb(inpt):
    """Grayscale images to RGB (channel repeated); RGB images unchanged."""


def permute_channels_image(image: torch.Tensor, permutation: Sequence[int]) -> torch.Tensor:
    """Channel ``i`` of the output is channel ``permutation[i]`` of the input."""
    check_image(image)
    perm = [int(p) for p in permutation]
    c = image.shape[-3]
    if len(perm) != c:
        raise ValueError(f"permutation must have one entry per channel ({c}), got {perm}")
    if sorted(p % c if -c <= p < c else p for p in perm) != list(range(c)):
        raise ValueError(f"permutation must be a permutation of range({c}), got {perm}")
    return image[..., perm, :, :]


@dispatcher
def permute_channels(inpt, permutation):
    """Reorder the channels of an image or video."""


def uniform_temporal_subsample_video(video: torch.Tensor, num_samples: int) -> torch.Tensor:
    """``num_samples`` frames (dim -4) at evenly spaced indices from the first to the last,
    the indices truncated (``linspace(0, T - 1, num_samples).long()``)."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    if video.ndim < 4:
        raise ValueError(f"a video must have shape [..., T, C, H, W], got {tuple(video.shape)}")
    t = video.shape[-4]
    # float32 as torchvision computes them (the truncation is its rounding rule)
    idx = torch.linspace(0, t - 1, num_samples, device=video.device).long()
    return video.index_select(-4, idx)


@dispatcher
def uniform_temporal_subsample(inpt, num_samples):
    """Evenly spaced frames of a video."""


register_image(grayscale_to_rgb, grayscale_to_rgb_image, video=False)
register_passthrough(grayscale_to_rgb, tv_tensors.Mask, tv_tensors.BoundingBoxes)
register_image(permute_channels, permute_channels_image)
register_passthrough(permute_channels, tv_tensors.Mask, tv_tensors.BoundingBoxes)
register_image(uniform_temporal_subsample, uniform_temporal_subsample_video)
