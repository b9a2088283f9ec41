"""RetinaNet with a ResNet-50 FPN backbone (Lin et al.), torchvision's layout and names.

Pieces: a frozen-BN ResNet-50 body, an FPN with P6/P7, anchor generation, classification
and regression heads, the focal loss, a box coder, and NMS post-processing through
``ember.vision.ops.batched_nms``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.models.resnet import Bottleneck, ResNet
from ember.vision.ops import (
    FrozenBatchNorm2d,
    batched_nms,
    box_iou,
    clip_boxes_to_image,
    sigmoid_focal_loss,
)


class ResNetBody(nn.Module):
    """ResNet-50 without pooling and classifier, returning C3, C4, C5."""

    def __init__(self, trainable_layers: int = 3) -> None:
        super().__init__()
        if not 0 <= trainable_layers <= 5:
            raise ValueError(f"trainable_backbone_layers must be in [0, 5], got {trainable_layers}")
        net = ResNet(Bottleneck, [3, 4, 6, 3], norm_layer=FrozenBatchNorm2d)
        for name in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4"):
            setattr(self, name, getattr(net, name))
        trainable = ["layer4", "layer3", "layer2", "layer1", "conv1"][:trainable_layers]
        for name, p in self.named_parameters():
            p.requires_grad_(any(name.startswith(t) for t in trainable))

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        c2 = self.layer1(x)
        c3 = self.layer2(c2)
        c4 = self.layer3(c3)
        return [c3, c4, self.layer4(c4)]


def _conv(cin, cout, k, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2))


class LastLevelP6P7(nn.Module):
    """P6 = conv(P5), P7 = conv(relu(P6))."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.p6 = nn.Conv2d(cin, cout, 3, 2, 1)
        self.p7 = nn.Conv2d(cout, cout, 3, 2, 1)
        for m in (self.p6, self.p7):
            nn.init.kaiming_uniform_(m.weight, a=1)
            nn.init.zeros_(m.bias)

    def forward(self, p5):
        p6 = self.p6(p5)
        return [p6, self.p7(F.relu(p6))]


class FeaturePyramidNetwork(nn.Module):
    """Top-down pathway with lateral 1x1 and output 3x3 convs, plus P6/P7."""

    def __init__(self, in_channels: list[int], out_channels: int) -> None:
        super().__init__()
        self.inner_blocks = nn.ModuleList([_conv(c, out_channels, 1) for c in in_channels])
        self.layer_blocks = nn.ModuleList([_conv(out_channels, out_channels, 3)
                                           for _ in in_channels])
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, a=1)
                nn.init.zeros_(m.bias)
        self.extra_blocks = LastLevelP6P7(out_channels, out_channels)

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        last = self.inner_blocks[-1](feats[-1])
        outs = [self.layer_blocks[-1](last)]
        for i in range(len(feats) - 2, -1, -1):
            lateral = self.inner_blocks[i](feats[i])
            last = lateral + F.interpolate(last, size=lateral.shape[-2:], mode="nearest")
            outs.insert(0, self.layer_blocks[i](last))
        return outs + self.extra_blocks(outs[-1])


class BackboneWithFPN(nn.Module):
    def __init__(self, trainable_layers: int = 3) -> None:
        super().__init__()
        self.body = ResNetBody(trainable_layers)
        self.fpn = FeaturePyramidNetwork([512, 1024, 2048], 256)
        self.out_channels = 256

    def forward(self, x):
        return self.fpn(self.body(x))


def _tower():
    convs = nn.Sequential(*[nn.Sequential(nn.Conv2d(256, 256, 3, 1, 1), nn.ReLU(inplace=True))
                            for _ in range(4)])
    for m in convs.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)
    return convs


class ClassificationHead(nn.Module):
    def __init__(self, anchors: int, num_classes: int, prior: float = 0.01) -> None:
        super().__init__()
        self.conv = _tower()
        self.cls_logits = nn.Conv2d(256, anchors * num_classes, 3, 1, 1)
        nn.init.normal_(self.cls_logits.weight, std=0.01)
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior) / prior))
        self.num_classes = num_classes

    def forward(self, feats):
        outs = []
        for f in feats:
            x = self.cls_logits(self.conv(f))
            n, _, h, w = x.shape
            outs.append(x.view(n, -1, self.num_classes, h, w).permute(0, 3, 4, 1, 2)
                        .reshape(n, -1, self.num_classes))
        return outs


class RegressionHead(nn.Module):
    def __init__(self, anchors: int) -> None:
        super().__init__()
        self.conv = _tower()
        self.bbox_reg = nn.Conv2d(256, anchors * 4, 3, 1, 1)
        nn.init.normal_(self.bbox_reg.weight, std=0.01)
        nn.init.zeros_(self.bbox_reg.bias)

    def forward(self, feats):
        outs = []
        for f in feats:
            x = self.bbox_reg(self.conv(f))
            n, _, h, w = x.shape
            outs.append(x.view(n, -1, 4, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, 4))
        return outs


class RetinaNetHead(nn.Module):
    def __init__(self, anchors: int, num_classes: int) -> None:
        super().__init__()
        self.classification_head = ClassificationHead(anchors, num_classes)
        self.regression_head = RegressionHead(anchors)


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


class RetinaNet(nn.Module):
    """Single-stage detector; ``forward(images, targets=None)`` like torchvision's.

    Training returns {"classification", "bbox_regression"} losses; evaluation returns, per
    image, {"boxes" (XYXY, input pixels), "scores", "labels"}.
    """

    def __init__(self, num_classes: int = 91, min_size: int = 800, max_size: int = 1333,
                 score_thresh: float = 0.05, nms_thresh: float = 0.5,
                 detections_per_img: int = 300, topk_candidates: int = 1000,
                 trainable_backbone_layers: int = 3) -> None:
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        self.backbone = BackboneWithFPN(trainable_backbone_layers)
        sizes = [(s, int(s * 2 ** (1 / 3)), int(s * 2 ** (2 / 3))) for s in (32, 64, 128, 256, 512)]
        self._cell = [cell_anchors(s, (0.5, 1.0, 2.0)) for s in sizes]
        self.head = RetinaNetHead(9, num_classes)
        self.box_coder = BoxCoder()
        self.min_size, self.max_size = min_size, max_size
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img, self.topk_candidates = detections_per_img, topk_candidates
        self.register_buffer("image_mean", torch.tensor([0.485, 0.456, 0.406]), persistent=False)
        self.register_buffer("image_std", torch.tensor([0.229, 0.224, 0.225]), persistent=False)

    def _prepare(self, images: list[torch.Tensor]):
        sizes, resized = [], []
        for img in images:
            if not isinstance(img, torch.Tensor) or img.ndim != 3 or not img.is_floating_point():
                raise ValueError("images must be a list of float tensors [3, H, W] in [0, 1]")
            h, w = img.shape[-2:]
            scale = min(self.min_size / min(h, w), self.max_size / max(h, w))
            x = (img - self.image_mean.view(3, 1, 1)) / self.image_std.view(3, 1, 1)
            x = F.interpolate(x[None], scale_factor=scale, mode="bilinear",
                              recompute_scale_factor=True, align_corners=False)[0]
            sizes.append((h, w))
            resized.append(x)
        mh = int(math.ceil(max(x.shape[-2] for x in resized) / 32) * 32)
        mw = int(math.ceil(max(x.shape[-1] for x in resized) / 32) * 32)
        batch = resized[0].new_zeros((len(resized), 3, mh, mw))
        for i, x in enumerate(resized):
            batch[i, :, :x.shape[-2], :x.shape[-1]] = x
        return batch, sizes, [tuple(x.shape[-2:]) for x in resized]

    def forward(self, images: list[torch.Tensor], targets: list[dict] | None = None):
        if self.training and targets is None:
            raise ValueError("targets are required in training mode")
        batch, orig_sizes, sizes = self._prepare(images)
        feats = self.backbone(batch)
        cls = self.head.classification_head(feats)
        reg = self.head.regression_head(feats)
        per_level = []
        for f, base in zip(feats, self._cell):
            stride = (batch.shape[-2] // f.shape[-2], batch.shape[-1] // f.shape[-1])
            per_level.append(grid_anchors(base, f.shape[-2:], stride, batch.device))
        if self.training:
            scaled = []
            for t, (oh, ow), (h, w) in zip(targets, orig_sizes, sizes):
                b = t["boxes"].to(batch.dtype) * batch.new_tensor([w / ow, h / oh] * 2)
                scaled.append({"boxes": b, "labels": t["labels"]})
            return self.compute_loss(scaled, torch.cat(cls, 1), torch.cat(reg, 1),
                                     torch.cat(per_level))
        return self.postprocess(cls, reg, per_level, sizes, orig_sizes)

    def compute_loss(self, targets, cls, reg, anchors) -> dict[str, torch.Tensor]:
        cls_losses, reg_losses = [], []
        for i, t in enumerate(targets):
            matched = match_anchors(t["boxes"], anchors)
            fg = matched >= 0
            n_fg = max(1, int(fg.sum()))
            gt_cls = torch.zeros_like(cls[i])
            gt_cls[fg, t["labels"][matched[fg]]] = 1.0
            valid = matched != -2
            cls_losses.append(sigmoid_focal_loss(cls[i][valid], gt_cls[valid],
                                                 reduction="sum") / n_fg)
            target_deltas = self.box_coder.encode(t["boxes"][matched[fg]], anchors[fg])
            reg_losses.append(F.l1_loss(reg[i][fg], target_deltas, reduction="sum") / n_fg)
        return {"classification": torch.stack(cls_losses).mean(),
                "bbox_regression": torch.stack(reg_losses).mean()}

    def postprocess(self, cls, reg, anchors, sizes, orig_sizes) -> list[dict[str, torch.Tensor]]:
        out = []
        k = cls[0].shape[-1]
        for i, ((h, w), (oh, ow)) in enumerate(zip(sizes, orig_sizes)):
            boxes_all, scores_all, labels_all = [], [], []
            for c, r, a in zip(cls, reg, anchors):
                scores = torch.sigmoid(c[i]).flatten()
                keep = torch.where(scores > self.score_thresh)[0]
                scores = scores[keep]
                top = scores.topk(min(self.topk_candidates, scores.numel()))
                idx = keep[top.indices]
                anchor_idx, labels = idx // k, idx % k
                boxes = self.box_coder.decode(r[i][anchor_idx], a[anchor_idx])
                boxes_all.append(clip_boxes_to_image(boxes, (h, w)))
                scores_all.append(top.values)
                labels_all.append(labels)
            boxes, scores, labels = (torch.cat(boxes_all), torch.cat(scores_all),
                                     torch.cat(labels_all))
            keep = batched_nms(boxes, scores, labels, self.nms_thresh)[:self.detections_per_img]
            ratio = boxes.new_tensor([ow / w, oh / h] * 2)
            out.append({"boxes": boxes[keep] * ratio, "scores": scores[keep],
                        "labels": labels[keep]})
        return out


@register_model()
def retinanet_resnet50_fpn(*, weights=None, **kw) -> RetinaNet:
    """RetinaNet, ResNet-50 FPN backbone (34,014,999 parameters with 91 classes)."""
    return load_weights(RetinaNet(**kw), weights)


__all__ = ["RetinaNet", "retinanet_resnet50_fpn", "BoxCoder", "match_anchors", "cell_anchors",
           "grid_anchors", "FrozenBatchNorm2d"]
