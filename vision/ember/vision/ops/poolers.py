"""MultiScaleRoIAlign: RoIAlign over an FPN, each box on the level its size picks (Lin et
al., eq. 1), torchvision's level mapping and scale inference."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ember.vision.ops._roi_common import convert_boxes_to_roi_format
from ember.vision.ops.roi_align import roi_align

__all__ = ["MultiScaleRoIAlign", "LevelMapper"]


class LevelMapper:
    """FPN level of each box: ``floor(canonical_level + log2(sqrt(area) / canonical_scale))``
    clamped to ``[k_min, k_max]``, minus ``k_min``."""

    def __init__(self, k_min: int, k_max: int, canonical_scale: int = 224,
                 canonical_level: int = 4, eps: float = 1e-6) -> None:
        self.k_min, self.k_max = k_min, k_max
        self.s0, self.lvl0, self.eps = canonical_scale, canonical_level, eps

    def __call__(self, boxlists: list[Tensor]) -> Tensor:
        b = torch.cat(boxlists)
        s = torch.sqrt((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))
        lvl = torch.floor(self.lvl0 + torch.log2(s / self.s0)
                          + torch.tensor(self.eps, dtype=s.dtype))
        return lvl.clamp(min=self.k_min, max=self.k_max).to(torch.int64) - self.k_min


def _scale(feature: Tensor, original: tuple[int, int]) -> float:
    """The power of two nearest the feature's height over the image's (log2 rounded, halves
    to even, as torchvision).

    In Python floats, not torchvision's float32 tensor and ``float()`` of it: a compiled
    model's first call then sets the scales up without a graph break per level (Dynamo
    folds the arithmetic on the static sizes). The two agree unless the ratio lies within a
    few float32 ulps of an odd power of sqrt(2), which no ratio of sizes an FPN makes does
    (s1/s2 of integers below 2,000 stays 1e-6 away)."""
    return 2.0 ** round(math.log2(float(feature.shape[-2]) / float(original[0])))


class MultiScaleRoIAlign(nn.Module):
    """RoIAlign on the feature maps named ``featmap_names`` of an FPN dict; scales are
    inferred from the first call's feature and image sizes."""

    def __init__(self, featmap_names: list[str], output_size, sampling_ratio: int, *,
                 canonical_scale: int = 224, canonical_level: int = 4) -> None:
        super().__init__()
        if isinstance(output_size, int):
            output_size = (output_size, output_size)
        self.featmap_names = featmap_names
        self.sampling_ratio = sampling_ratio
        self.output_size = tuple(output_size)
        self.scales: list[float] | None = None
        self.map_levels: LevelMapper | None = None
        self.canonical_scale = canonical_scale
        self.canonical_level = canonical_level

    def _setup(self, features: list[Tensor], image_shapes: list[tuple[int, int]]) -> None:
        if not image_shapes:
            raise ValueError("image_shapes must not be empty")
        original = (max(s[0] for s in image_shapes), max(s[1] for s in image_shapes))
        self.scales = [_scale(f, original) for f in features]
        self.map_levels = LevelMapper(int(-math.log2(self.scales[0])),
                                      int(-math.log2(self.scales[-1])),
                                      self.canonical_scale, self.canonical_level)

    def forward(self, x: dict[str, Tensor], boxes: list[Tensor],
                image_shapes: list[tuple[int, int]]) -> Tensor:
        features = [v for k, v in x.items() if k in self.featmap_names]
        if not features:
            raise ValueError(f"x has none of the feature maps {self.featmap_names}")
        if self.scales is None or self.map_levels is None:
            self._setup(features, image_shapes)
        rois = convert_boxes_to_roi_format(boxes)
        if len(features) == 1:
            return roi_align(features[0], rois, self.output_size, self.scales[0],
                             self.sampling_ratio)
        levels = self.map_levels(boxes)
        first = features[0]
        result = first.new_zeros((rois.shape[0], first.shape[1], *self.output_size))
        for level, (feature, scale) in enumerate(zip(features, self.scales)):
            idx = torch.where(levels == level)[0]
            out = roi_align(feature, rois[idx], self.output_size, scale, self.sampling_ratio)
            # in place, as torchvision: an out-of-place index_put copies the whole result
            # once per level (4 x 17 MB for Faster R-CNN's ~340 boxes)
            result[idx] = out.to(result.dtype)
        return result

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(featmap_names={self.featmap_names}, "
                f"output_size={self.output_size}, sampling_ratio={self.sampling_ratio})")
