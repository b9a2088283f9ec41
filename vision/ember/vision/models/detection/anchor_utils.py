"""Anchor generation for the R-CNN family and RetinaNet (torchvision's AnchorGenerator)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ember.vision.models.detection.image_list import ImageList

__all__ = ["AnchorGenerator"]


class AnchorGenerator(nn.Module):
    """Anchors of every (aspect ratio, size) pair at every position of each feature map;
    ``sizes[i]`` and ``aspect_ratios[i]`` (height / width) belong to feature map ``i``."""

    def __init__(self, sizes=((128, 256, 512),), aspect_ratios=((0.5, 1.0, 2.0),)) -> None:
        super().__init__()
        if not isinstance(sizes[0], (list, tuple)):
            sizes = tuple((s,) for s in sizes)
        if not isinstance(aspect_ratios[0], (list, tuple)):
            aspect_ratios = (aspect_ratios,) * len(sizes)
        if len(sizes) != len(aspect_ratios):
            raise ValueError(f"sizes and aspect_ratios need one entry per feature map, got "
                             f"{len(sizes)} and {len(aspect_ratios)}")
        self.sizes = sizes
        self.aspect_ratios = aspect_ratios
        self.cell_anchors = [self.generate_anchors(s, a) for s, a in zip(sizes, aspect_ratios)]

    def generate_anchors(self, scales, aspect_ratios, dtype: torch.dtype = torch.float32,
                         device: torch.device | str = "cpu") -> Tensor:
        """Zero-centred XYXY anchors [len(ratios) * len(scales), 4], ratio-major, rounded."""
        scales = torch.as_tensor(scales, dtype=dtype, device=device)
        ratios = torch.as_tensor(aspect_ratios, dtype=dtype, device=device)
        h_ratios = torch.sqrt(ratios)
        ws = (1 / h_ratios[:, None] * scales[None, :]).view(-1)
        hs = (h_ratios[:, None] * scales[None, :]).view(-1)
        return (torch.stack([-ws, -hs, ws, hs], dim=1) / 2).round()

    def set_cell_anchors(self, dtype: torch.dtype, device: torch.device) -> None:
        self.cell_anchors = [a.to(dtype=dtype, device=device) for a in self.cell_anchors]

    def num_anchors_per_location(self) -> list[int]:
        return [len(s) * len(a) for s, a in zip(self.sizes, self.aspect_ratios)]

    def grid_anchors(self, grid_sizes: list[list[int]],
                     strides: list[list[Tensor]]) -> list[Tensor]:
        """Per feature map: the cell anchors shifted to every grid position [H * W * A, 4]
        (position-major)."""
        if not len(grid_sizes) == len(strides) == len(self.cell_anchors):
            raise ValueError(f"AnchorGenerator has sizes for {len(self.cell_anchors)} feature "
                             f"maps but got {len(grid_sizes)}; give one sizes / aspect_ratios "
                             "entry per feature map")
        out = []
        for (gh, gw), (sh, sw), base in zip(grid_sizes, strides, self.cell_anchors):
            device = base.device
            xs = torch.arange(0, gw, dtype=torch.int32, device=device) * sw
            ys = torch.arange(0, gh, dtype=torch.int32, device=device) * sh
            yy, xx = torch.meshgrid(ys, xs, indexing="ij")
            xx, yy = xx.reshape(-1), yy.reshape(-1)
            shifts = torch.stack([xx, yy, xx, yy], dim=1)
            out.append((shifts.view(-1, 1, 4) + base.view(1, -1, 4)).reshape(-1, 4))
        return out

    def forward(self, image_list: ImageList, feature_maps: list[Tensor]) -> list[Tensor]:
        grid_sizes = [f.shape[-2:] for f in feature_maps]
        h, w = image_list.tensors.shape[-2:]
        dtype, device = feature_maps[0].dtype, feature_maps[0].device
        strides = [[torch.empty((), dtype=torch.int64, device=device).fill_(h // g[0]),
                    torch.empty((), dtype=torch.int64, device=device).fill_(w // g[1])]
                   for g in grid_sizes]
        self.set_cell_anchors(dtype, device)
        per_level = self.grid_anchors(grid_sizes, strides)
        anchors = torch.cat(per_level)
        return [anchors for _ in image_list.image_sizes]
