"""Anchor generation: AnchorGenerator (the R-CNN family, RetinaNet, FCOS) and SSD's
DefaultBoxGenerator."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ember.vision.models.detection.image_list import ImageList

__all__ = ["AnchorGenerator", "DefaultBoxGenerator"]


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


class DefaultBoxGenerator(nn.Module):
    """SSD's default boxes: per feature map ``k``, boxes of scale ``s_k``, ``sqrt(s_k s_k+1)``
    and ``s_k`` at each aspect ratio (both orientations), centred on every cell; XYXY pixels."""

    def __init__(self, aspect_ratios: list[list[int]], min_ratio: float = 0.15,
                 max_ratio: float = 0.9, scales: list[float] | None = None,
                 steps: list[int] | None = None, clip: bool = True) -> None:
        super().__init__()
        if steps is not None and len(aspect_ratios) != len(steps):
            raise ValueError("aspect_ratios and steps should have the same length")
        self.aspect_ratios, self.steps, self.clip = aspect_ratios, steps, clip
        n = len(aspect_ratios)
        if scales is None:
            if n > 1:   # evenly spaced between min_ratio and max_ratio, then 1.0
                scales = [min_ratio + (max_ratio - min_ratio) * k / (n - 1.0) for k in range(n)]
                scales.append(1.0)
            else:
                scales = [min_ratio, max_ratio]
        self.scales = scales
        self._wh_pairs = self._generate_wh_pairs(n)

    def _generate_wh_pairs(self, num_outputs: int, dtype: torch.dtype = torch.float32,
                           device: torch.device | str = "cpu") -> list[Tensor]:
        pairs = []
        for k in range(num_outputs):
            s_k = self.scales[k]
            s_prime = math.sqrt(self.scales[k] * self.scales[k + 1])
            wh = [[s_k, s_k], [s_prime, s_prime]]
            for ar in self.aspect_ratios[k]:
                root = math.sqrt(ar)
                wh += [[s_k * root, s_k / root], [s_k / root, s_k * root]]
            pairs.append(torch.as_tensor(wh, dtype=dtype, device=device))
        return pairs

    def num_anchors_per_location(self) -> list[int]:
        return [2 + 2 * len(r) for r in self.aspect_ratios]

    def _grid_default_boxes(self, grid_sizes, image_size,
                            dtype: torch.dtype = torch.float32) -> Tensor:
        """(cx, cy, w, h) boxes relative to the image, cell-major, for every feature map."""
        boxes = []
        for k, (fh, fw) in enumerate(grid_sizes):
            if self.steps is not None:
                x_f, y_f = image_size[1] / self.steps[k], image_size[0] / self.steps[k]
            else:
                y_f, x_f = fh, fw
            xs = ((torch.arange(0, fw) + 0.5) / x_f).to(dtype=dtype)
            ys = ((torch.arange(0, fh) + 0.5) / y_f).to(dtype=dtype)
            yy, xx = torch.meshgrid(ys, xs, indexing="ij")
            centres = torch.stack((xx.reshape(-1), yy.reshape(-1)) * len(self._wh_pairs[k]),
                                  dim=-1).reshape(-1, 2)
            wh = self._wh_pairs[k].clamp(min=0, max=1) if self.clip else self._wh_pairs[k]
            boxes.append(torch.cat((centres, wh.repeat(fh * fw, 1)), dim=1))
        return torch.cat(boxes, dim=0)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(aspect_ratios={self.aspect_ratios}, clip={self.clip}, "
                f"scales={self.scales}, steps={self.steps})")

    def forward(self, image_list: ImageList, feature_maps: list[Tensor]) -> list[Tensor]:
        grid_sizes = [f.shape[-2:] for f in feature_maps]
        image_size = image_list.tensors.shape[-2:]
        dtype, device = feature_maps[0].dtype, feature_maps[0].device
        boxes = self._grid_default_boxes(grid_sizes, image_size, dtype=dtype).to(device)
        scale = torch.tensor([image_size[1], image_size[0]], device=boxes.device)
        xyxy = torch.cat([(boxes[:, :2] - 0.5 * boxes[:, 2:]) * scale,
                          (boxes[:, :2] + 0.5 * boxes[:, 2:]) * scale], -1)
        return [xyxy for _ in image_list.image_sizes]
