"""FCOS (Tian et al., anchor-free) with torchvision's classes, builder, defaults and
state_dict layout: ResNet-50 FPN with P6/P7, GroupNorm heads, centre-ness branch."""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.vision.models._registry import register_model
from ember.vision.models.detection import _utils as det_utils
from ember.vision.models.detection._one_stage import (
    OneStageDetector,
    coco_entry,
    finish,
    nms_per_image,
    num_classes_or,
    top_candidates,
)
from ember.vision.models.detection._weights import detection_weights
from ember.vision.models.detection.anchor_utils import AnchorGenerator
from ember.vision.models.detection.backbone_utils import (
    _resnet_fpn_extractor,
    _validate_trainable_layers,
)
from ember.vision.models.detection.transform import GeneralizedRCNNTransform
from ember.vision.ops import FrozenBatchNorm2d, generalized_box_iou_loss, sigmoid_focal_loss
from ember.vision.ops.feature_pyramid_network import LastLevelP6P7

__all__ = ["FCOS", "FCOSHead", "FCOSClassificationHead", "FCOSRegressionHead",
           "FCOS_ResNet50_FPN_Weights", "fcos_resnet50_fpn"]


def _tower(in_channels: int, num_convs: int, norm_layer) -> nn.Sequential:
    """``num_convs`` x (3x3 conv, norm, ReLU) as flat indices; conv weights N(0, 0.01)."""
    norm_layer = norm_layer or partial(nn.GroupNorm, 32)
    layers: list[nn.Module] = []
    for _ in range(num_convs):
        conv = nn.Conv2d(in_channels, in_channels, 3, 1, 1)
        nn.init.normal_(conv.weight, std=0.01)
        nn.init.zeros_(conv.bias)
        layers += [conv, norm_layer(in_channels), nn.ReLU()]
    return nn.Sequential(*layers)


def _per_position(x: Tensor, channels: int) -> Tensor:
    n, _, h, w = x.shape
    return x.view(n, -1, channels, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, channels)


class FCOSClassificationHead(nn.Module):
    """Conv tower and per-location class logits (bias at the prior probability)."""

    def __init__(self, in_channels: int, num_anchors: int, num_classes: int,
                 num_convs: int = 4, prior_probability: float = 0.01, norm_layer=None) -> None:
        super().__init__()
        self.num_classes, self.num_anchors = num_classes, num_anchors
        self.conv = _tower(in_channels, num_convs, norm_layer)
        self.cls_logits = nn.Conv2d(in_channels, num_anchors * num_classes, 3, 1, 1)
        nn.init.normal_(self.cls_logits.weight, std=0.01)
        nn.init.constant_(self.cls_logits.bias,
                          -math.log((1 - prior_probability) / prior_probability))

    def forward(self, x: list[Tensor]) -> Tensor:
        return torch.cat([_per_position(self.cls_logits(self.conv(f)), self.num_classes)
                          for f in x], dim=1)


class FCOSRegressionHead(nn.Module):
    """Conv tower, per-location distances to the box sides (ReLU) and a centre-ness logit."""

    def __init__(self, in_channels: int, num_anchors: int, num_convs: int = 4,
                 norm_layer=None) -> None:
        super().__init__()
        self.conv = _tower(in_channels, num_convs, norm_layer)
        self.bbox_reg = nn.Conv2d(in_channels, num_anchors * 4, 3, 1, 1)
        self.bbox_ctrness = nn.Conv2d(in_channels, num_anchors, 3, 1, 1)
        for layer in (self.bbox_reg, self.bbox_ctrness):
            nn.init.normal_(layer.weight, std=0.01)
            nn.init.zeros_(layer.bias)

    def forward(self, x: list[Tensor]) -> tuple[Tensor, Tensor]:
        regs, ctrs = [], []
        for f in x:
            feature = self.conv(f)
            regs.append(_per_position(F.relu(self.bbox_reg(feature)), 4))
            ctrs.append(_per_position(self.bbox_ctrness(feature), 1))
        return torch.cat(regs, dim=1), torch.cat(ctrs, dim=1)


class FCOSHead(nn.Module):
    """Classification and regression heads; the focal, GIoU and centre-ness losses."""

    def __init__(self, in_channels: int, num_anchors: int, num_classes: int,
                 num_convs: int | None = 4) -> None:
        super().__init__()
        self.box_coder = det_utils.BoxLinearCoder(normalize_by_size=True)
        self.classification_head = FCOSClassificationHead(in_channels, num_anchors,
                                                          num_classes, num_convs)
        self.regression_head = FCOSRegressionHead(in_channels, num_anchors, num_convs)

    def compute_loss(self, targets, head_outputs, anchors, matched_idxs) -> dict[str, Tensor]:
        cls_logits = head_outputs["cls_logits"]
        bbox_regression = head_outputs["bbox_regression"]
        bbox_ctrness = head_outputs["bbox_ctrness"]
        gt_classes, gt_boxes = [], []
        for target, matched in zip(targets, matched_idxs):
            if len(target["labels"]) == 0:
                classes = target["labels"].new_zeros((len(matched),))
                boxes = target["boxes"].new_zeros((len(matched), 4))
            else:
                classes = target["labels"][matched.clip(min=0)]
                boxes = target["boxes"][matched.clip(min=0)]
            classes[matched < 0] = -1   # background
            gt_classes.append(classes)
            gt_boxes.append(boxes)
        gt_boxes_t, gt_classes_t = torch.stack(gt_boxes), torch.stack(gt_classes)
        anchors_t = torch.stack(anchors)
        foreground = gt_classes_t >= 0
        num_foreground = foreground.sum().item()
        cls_target = torch.zeros_like(cls_logits)
        cls_target[foreground, gt_classes_t[foreground]] = 1.0
        loss_cls = sigmoid_focal_loss(cls_logits, cls_target, reduction="sum")
        pred_boxes = self.box_coder.decode(bbox_regression, anchors_t)
        loss_reg = generalized_box_iou_loss(pred_boxes[foreground], gt_boxes_t[foreground],
                                            reduction="sum")
        reg_targets = self.box_coder.encode(anchors_t, gt_boxes_t)
        if len(reg_targets) == 0:
            ctr_target = reg_targets.new_zeros(reg_targets.size()[:-1])
        else:
            lr, tb = reg_targets[:, :, [0, 2]], reg_targets[:, :, [1, 3]]
            ctr_target = torch.sqrt((lr.min(dim=-1)[0] / lr.max(dim=-1)[0])
                                    * (tb.min(dim=-1)[0] / tb.max(dim=-1)[0]))
        loss_ctr = F.binary_cross_entropy_with_logits(
            bbox_ctrness.squeeze(dim=2)[foreground], ctr_target[foreground], reduction="sum")
        n = max(1, num_foreground)
        return {"classification": loss_cls / n, "bbox_regression": loss_reg / n,
                "bbox_ctrness": loss_ctr / n}

    def forward(self, x: list[Tensor]) -> dict[str, Tensor]:
        bbox_regression, bbox_ctrness = self.regression_head(x)
        return {"cls_logits": self.classification_head(x), "bbox_regression": bbox_regression,
                "bbox_ctrness": bbox_ctrness}


class FCOS(OneStageDetector):
    """FCOS on any backbone with ``out_channels`` (torchvision's arguments and defaults);
    training returns {"classification", "bbox_regression", "bbox_ctrness"}."""

    def __init__(self, backbone: nn.Module, num_classes: int, min_size: int = 800,
                 max_size: int = 1333, image_mean=None, image_std=None, anchor_generator=None,
                 head=None, center_sampling_radius: float = 1.5, score_thresh: float = 0.2,
                 nms_thresh: float = 0.6, detections_per_img: int = 100,
                 topk_candidates: int = 1000, **kwargs) -> None:
        super().__init__()
        if not hasattr(backbone, "out_channels"):
            raise ValueError("backbone should contain an attribute out_channels specifying "
                             "the number of output channels (the same for all the levels)")
        if not isinstance(anchor_generator, (AnchorGenerator, type(None))):
            raise TypeError("anchor_generator should be of type AnchorGenerator or None, got "
                            f"{type(anchor_generator).__name__}")
        self.backbone = backbone
        if anchor_generator is None:   # one anchor per location, of the level's stride
            sizes = ((8,), (16,), (32,), (64,), (128,))
            anchor_generator = AnchorGenerator(sizes, ((1.0,),) * len(sizes))
        if anchor_generator.num_anchors_per_location()[0] != 1:
            raise ValueError("anchor_generator.num_anchors_per_location()[0] should be 1 "
                             f"instead of {anchor_generator.num_anchors_per_location()[0]}")
        self.anchor_generator = anchor_generator
        if head is None:
            head = FCOSHead(backbone.out_channels, 1, num_classes)
        self.head = head
        self.box_coder = det_utils.BoxLinearCoder(normalize_by_size=True)
        self.transform = GeneralizedRCNNTransform(
            min_size, max_size, image_mean or [0.485, 0.456, 0.406],
            image_std or [0.229, 0.224, 0.225], **kwargs)
        self.center_sampling_radius = center_sampling_radius
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img, self.topk_candidates = detections_per_img, topk_candidates

    def _loss(self, targets, head_outputs, anchors, num_anchors_per_level):
        return self.compute_loss(targets, head_outputs, anchors, num_anchors_per_level)

    def _match(self, anchors: Tensor, gt_boxes: Tensor, num_anchors_per_level) -> Tensor:
        """Per location: the smallest ground-truth box whose centre region (radius x stride)
        and size range (this level's) contain it, else -1."""
        gt_centers = (gt_boxes[:, :2] + gt_boxes[:, 2:]) / 2
        centers = (anchors[:, :2] + anchors[:, 2:]) / 2
        sizes = anchors[:, 2] - anchors[:, 0]
        match = ((centers[:, None, :] - gt_centers[None, :, :]).abs_().max(dim=2).values
                 < self.center_sampling_radius * sizes[:, None])
        x, y = centers.unsqueeze(dim=2).unbind(dim=1)
        x0, y0, x1, y1 = gt_boxes.unsqueeze(dim=0).unbind(dim=2)
        dist = torch.stack([x - x0, y - y0, x1 - x, y1 - y], dim=2)
        match &= dist.min(dim=2).values > 0
        lower, upper = sizes * 4, sizes * 8
        lower[:num_anchors_per_level[0]] = 0
        upper[-num_anchors_per_level[-1]:] = float("inf")
        dist = dist.max(dim=2).values
        match &= (dist > lower[:, None]) & (dist < upper[:, None])
        areas = (gt_boxes[:, 2] - gt_boxes[:, 0]) * (gt_boxes[:, 3] - gt_boxes[:, 1])
        scored = match.to(torch.float32) * (1e8 - areas[None, :])
        best, idx = scored.max(dim=1)
        idx[best < 1e-5] = -1
        return idx

    def compute_loss(self, targets, head_outputs, anchors,
                     num_anchors_per_level) -> dict[str, Tensor]:
        matched_idxs = []
        for anchors_i, target in zip(anchors, targets):
            if target["boxes"].numel() == 0:
                matched_idxs.append(torch.full((anchors_i.size(0),), -1, dtype=torch.int64,
                                               device=anchors_i.device))
            else:
                matched_idxs.append(self._match(anchors_i, target["boxes"],
                                                num_anchors_per_level))
        return self.head.compute_loss(targets, head_outputs, anchors, matched_idxs)

    def postprocess_detections(self, head_outputs, anchors, image_shapes):
        detections = []
        for index, image_shape in enumerate(image_shapes):
            boxes, scores, labels = [], [], []
            for reg, logits, ctr, anchors_l in zip(
                    [r[index] for r in head_outputs["bbox_regression"]],
                    [c[index] for c in head_outputs["cls_logits"]],
                    [c[index] for c in head_outputs["bbox_ctrness"]], anchors[index]):
                flat = torch.sqrt(torch.sigmoid(logits) * torch.sigmoid(ctr)).flatten()
                s, anchor_idx, lab = top_candidates(flat, logits.shape[-1], self.score_thresh,
                                                    self.topk_candidates)
                boxes.append(self.box_coder.decode(reg[anchor_idx], anchors_l[anchor_idx]))
                scores.append(s)
                labels.append(lab)
            detections.append(nms_per_image(boxes, scores, labels, image_shape,
                                            self.nms_thresh, self.detections_per_img))
        return detections


FCOS_ResNet50_FPN_Weights = detection_weights(
    "fcos_resnet50_fpn", "FCOS_ResNet50_FPN_Weights",
    {"COCO_V1": coco_entry("fcos_resnet50_fpn_coco-99b0c9b7.pth", 32269600, box_map=39.2)},
    "COCO_V1")


@register_model()
def fcos_resnet50_fpn(*, weights=None, progress: bool = True, num_classes=None,
                      weights_backbone=None, trainable_backbone_layers=None, **kwargs) -> FCOS:
    """FCOS, ResNet-50 FPN with P6/P7 (32,269,600 parameters at 91 classes);
    ``weights_backbone`` defaults to None here (nothing downloads)."""
    from ember.vision.models.resnet import resnet50
    is_trained = weights is not None or weights_backbone is not None
    layers = _validate_trainable_layers(is_trained, trainable_backbone_layers, 5, 3)
    body = resnet50(weights=None if weights is not None else weights_backbone,
                    norm_layer=FrozenBatchNorm2d if is_trained else nn.BatchNorm2d)
    backbone = _resnet_fpn_extractor(body, layers, returned_layers=[2, 3, 4],
                                     extra_blocks=LastLevelP6P7(256, 256))
    return finish(FCOS(backbone, num_classes_or(num_classes, 91), **kwargs), weights)
