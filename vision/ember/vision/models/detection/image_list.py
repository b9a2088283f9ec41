"""ImageList: a padded batch of images and each image's size before padding."""

from __future__ import annotations

import torch
from torch import Tensor


class ImageList:
    """``tensors`` [N, C, H, W] (padded) and ``image_sizes``, the (h, w) of each image."""

    def __init__(self, tensors: Tensor, image_sizes: list[tuple[int, int]]) -> None:
        self.tensors = tensors
        self.image_sizes = image_sizes

    def to(self, device: torch.device) -> ImageList:
        return ImageList(self.tensors.to(device), self.image_sizes)
