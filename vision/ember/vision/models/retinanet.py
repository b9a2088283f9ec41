"""The old import path of RetinaNet: the model lives in
:mod:`ember.vision.models.detection.retinanet` (torchvision's layout); this module re-exports
it and keeps the small anchor and box helpers of the first implementation."""

from __future__ import annotations

import math

import torch

from ember.vision.models.detection.retinanet import RetinaNet, retinanet_resnet50_fpn
from ember.vision.ops import FrozenBatchNorm2d, box_iou


def cell_anchors(sizes, ratios) -> torch.Tensor:
    """Zero-centred XYXY anchors of every (ratio, size) pair, ratio-major."""
    sizes_t = torch.as_tensor(sizes, dtype=torch.float32)
    ratios_t = torch.as_tensor(ratios, dtype=torch.float32)
    h_r = torch.sqrt(ratios_t)
    ws = (1 / h_r[:, None] * sizes_t[None, :]).reshape(-1)
    hs = (h_r[:, None] * sizes_t[None, :]).reshape(-1)
    return (torch.stack([-ws, -hs, ws, hs], 1) / 2).round()


def grid_anchors(base: torch.Tensor, feat_hw, stride_hw, device) -> torch.Tensor:
    """Anchors at every feature-map position (position-major, anchor-minor)."""
    (fh, fw), (sh, sw) = feat_hw, stride_hw
    ys = torch.arange(fh, dtype=torch.float32, device=device) * sh
    xs = torch.arange(fw, dtype=torch.float32, device=device) * sw
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    shifts = torch.stack([xx, yy, xx, yy], -1).reshape(-1, 1, 4)
    return (shifts + base.to(device).view(1, -1, 4)).reshape(-1, 4)


class BoxCoder:
    """Anchor-relative box deltas (dx, dy, log dw, log dh), scaled by ``weights``."""

    def __init__(self, weights=(1.0, 1.0, 1.0, 1.0), clip: float = math.log(1000.0 / 16)):
        self.weights, self.clip = weights, clip

    def encode(self, gt: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        wx, wy, ww, wh = self.weights
        aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
        gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
        gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
        return torch.stack([wx * (gx - ax) / aw, wy * (gy - ay) / ah, ww * torch.log(gw / aw),
                            wh * torch.log(gh / ah)], 1)

    def decode(self, deltas: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        wx, wy, ww, wh = self.weights
        aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
        dx, dy = deltas[:, 0] / wx, deltas[:, 1] / wy
        dw = (deltas[:, 2] / ww).clamp(max=self.clip)
        dh = (deltas[:, 3] / wh).clamp(max=self.clip)
        cx, cy = dx * aw + ax, dy * ah + ay
        w, h = torch.exp(dw) * aw, torch.exp(dh) * ah
        return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], 1)


def match_anchors(gt_boxes: torch.Tensor, anchors: torch.Tensor, fg: float = 0.5,
                  bg: float = 0.4) -> torch.Tensor:
    """Per anchor: index of its ground-truth box, -1 background, -2 ignored; each box also
    keeps the anchors it overlaps best (low-quality matches)."""
    if gt_boxes.numel() == 0:
        return torch.full((anchors.shape[0],), -1, dtype=torch.long, device=anchors.device)
    iou = box_iou(gt_boxes, anchors)
    vals, matches = iou.max(0)
    out = matches.clone()
    out[vals < fg] = -2
    out[vals < bg] = -1
    best = iou.max(1, keepdim=True).values
    _, anchor_idx = torch.nonzero(iou == best, as_tuple=True)
    out[anchor_idx] = matches[anchor_idx]
    return out


__all__ = ["RetinaNet", "retinanet_resnet50_fpn", "BoxCoder", "match_anchors", "cell_anchors",
           "grid_anchors", "FrozenBatchNorm2d"]
