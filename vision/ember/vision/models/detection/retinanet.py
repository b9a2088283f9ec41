"""RetinaNet (Lin et al., focal loss) with torchvision's classes, builders, defaults and
state_dict layout: ResNet-50 FPN v1 and the v2 recipe (GroupNorm heads, GIoU loss)."""

from __future__ import annotations

import math
from functools import partial

import torch
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
from ember.vision.models.detection._utils import _box_loss
from ember.vision.models.detection._weights import detection_weights
from ember.vision.models.detection.anchor_utils import AnchorGenerator
from ember.vision.models.detection.backbone_utils import (
    _resnet_fpn_extractor,
    _validate_trainable_layers,
)
from ember.vision.models.detection.transform import GeneralizedRCNNTransform
from ember.vision.ops import Conv2dNormActivation, FrozenBatchNorm2d, box_iou, sigmoid_focal_loss
from ember.vision.ops.feature_pyramid_network import LastLevelP6P7

__all__ = ["RetinaNet", "RetinaNetHead", "RetinaNetClassificationHead",
           "RetinaNetRegressionHead", "RetinaNet_ResNet50_FPN_Weights",
           "RetinaNet_ResNet50_FPN_V2_Weights", "retinanet_resnet50_fpn",
           "retinanet_resnet50_fpn_v2"]


def _sum(values: list[Tensor]) -> Tensor:
    out = values[0]
    for v in values[1:]:
        out = out + v
    return out


def _default_anchorgen() -> AnchorGenerator:
    sizes = tuple((s, int(s * 2 ** (1 / 3)), int(s * 2 ** (2 / 3)))
                  for s in (32, 64, 128, 256, 512))
    return AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * len(sizes))


def _tower(in_channels: int, norm_layer) -> nn.Sequential:
    """Four 3x3 Conv2dNormActivation layers, weights N(0, 0.01), biases 0."""
    tower = nn.Sequential(*[Conv2dNormActivation(in_channels, in_channels, norm_layer=norm_layer)
                            for _ in range(4)])
    for m in tower.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.normal_(m.weight, std=0.01)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return tower


def _per_position(x: Tensor, channels: int) -> Tensor:
    """[N, A * C, H, W] -> [N, H * W * A, C] (position-major, anchor-minor)."""
    n, _, h, w = x.shape
    return x.view(n, -1, channels, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, channels)


class _Versioned(nn.Module):
    """Heads whose version-1 checkpoints kept the tower as flat (conv, relu) pairs."""

    _version = 2

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args) -> None:
        if local_metadata.get("version") is None or local_metadata["version"] < 2:
            for i in range(4):
                for kind in ("weight", "bias"):
                    old = f"{prefix}conv.{2 * i}.{kind}"
                    if old in state_dict:
                        state_dict[f"{prefix}conv.{i}.0.{kind}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)


class RetinaNetClassificationHead(_Versioned):
    """Conv tower and per-anchor class logits (bias at the prior probability); focal loss."""

    def __init__(self, in_channels: int, num_anchors: int, num_classes: int,
                 prior_probability: float = 0.01, norm_layer=None) -> None:
        super().__init__()
        self.conv = _tower(in_channels, norm_layer)
        self.cls_logits = nn.Conv2d(in_channels, num_anchors * num_classes, 3, 1, 1)
        nn.init.normal_(self.cls_logits.weight, std=0.01)
        nn.init.constant_(self.cls_logits.bias,
                          -math.log((1 - prior_probability) / prior_probability))
        self.num_classes, self.num_anchors = num_classes, num_anchors
        self.BETWEEN_THRESHOLDS = det_utils.Matcher.BETWEEN_THRESHOLDS

    def compute_loss(self, targets, head_outputs, matched_idxs) -> Tensor:
        losses = []
        for target, logits, matched in zip(targets, head_outputs["cls_logits"], matched_idxs):
            foreground = matched >= 0
            num_foreground = foreground.sum()
            gt = torch.zeros_like(logits)
            gt[foreground, target["labels"][matched[foreground]]] = 1.0
            valid = matched != self.BETWEEN_THRESHOLDS
            losses.append(sigmoid_focal_loss(logits[valid], gt[valid], reduction="sum")
                          / max(1, num_foreground))
        return _sum(losses) / len(targets)

    def forward(self, x: list[Tensor]) -> Tensor:
        return torch.cat([_per_position(self.cls_logits(self.conv(f)), self.num_classes)
                          for f in x], dim=1)


class RetinaNetRegressionHead(_Versioned):
    """Conv tower and per-anchor box deltas; L1 loss (``_loss_type`` "giou" in v2)."""

    def __init__(self, in_channels: int, num_anchors: int, norm_layer=None) -> None:
        super().__init__()
        self.conv = _tower(in_channels, norm_layer)
        self.bbox_reg = nn.Conv2d(in_channels, num_anchors * 4, 3, 1, 1)
        nn.init.normal_(self.bbox_reg.weight, std=0.01)
        nn.init.zeros_(self.bbox_reg.bias)
        self.box_coder = det_utils.BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))
        self._loss_type = "l1"

    def compute_loss(self, targets, head_outputs, anchors, matched_idxs) -> Tensor:
        losses = []
        for target, reg, anchors_i, matched in zip(targets, head_outputs["bbox_regression"],
                                                   anchors, matched_idxs):
            foreground = torch.where(matched >= 0)[0]
            gt_boxes = target["boxes"][matched[foreground]]
            loss = _box_loss(self._loss_type, self.box_coder, anchors_i[foreground, :],
                             gt_boxes, reg[foreground, :])
            losses.append(loss / max(1, foreground.numel()))
        return _sum(losses) / max(1, len(targets))

    def forward(self, x: list[Tensor]) -> Tensor:
        return torch.cat([_per_position(self.bbox_reg(self.conv(f)), 4) for f in x], dim=1)


class RetinaNetHead(nn.Module):
    """The classification and regression heads; ``forward`` returns both outputs."""

    def __init__(self, in_channels: int, num_anchors: int, num_classes: int,
                 norm_layer=None) -> None:
        super().__init__()
        self.classification_head = RetinaNetClassificationHead(in_channels, num_anchors,
                                                               num_classes,
                                                               norm_layer=norm_layer)
        self.regression_head = RetinaNetRegressionHead(in_channels, num_anchors,
                                                       norm_layer=norm_layer)

    def compute_loss(self, targets, head_outputs, anchors, matched_idxs) -> dict[str, Tensor]:
        return {"classification": self.classification_head.compute_loss(
                    targets, head_outputs, matched_idxs),
                "bbox_regression": self.regression_head.compute_loss(
                    targets, head_outputs, anchors, matched_idxs)}

    def forward(self, x: list[Tensor]) -> dict[str, Tensor]:
        return {"cls_logits": self.classification_head(x),
                "bbox_regression": self.regression_head(x)}


class RetinaNet(OneStageDetector):
    """RetinaNet on any backbone with ``out_channels`` (torchvision's arguments and defaults);
    training returns {"classification", "bbox_regression"}, evaluation per-image detections."""

    def __init__(self, backbone: nn.Module, num_classes: int, min_size=800, max_size=1333,
                 image_mean=None, image_std=None, anchor_generator=None, head=None,
                 proposal_matcher=None, score_thresh: float = 0.05, nms_thresh: float = 0.5,
                 detections_per_img: int = 300, fg_iou_thresh: float = 0.5,
                 bg_iou_thresh: float = 0.4, topk_candidates: int = 1000, **kwargs) -> None:
        super().__init__()
        if not hasattr(backbone, "out_channels"):
            raise ValueError("backbone should contain an attribute out_channels specifying "
                             "the number of output channels (the same for all the levels)")
        if not isinstance(anchor_generator, (AnchorGenerator, type(None))):
            raise TypeError("anchor_generator should be of type AnchorGenerator or None, got "
                            f"{type(anchor_generator).__name__}")
        self.backbone = backbone
        self.anchor_generator = anchor_generator or _default_anchorgen()
        if head is None:
            head = RetinaNetHead(backbone.out_channels,
                                 self.anchor_generator.num_anchors_per_location()[0], num_classes)
        self.head = head
        self.proposal_matcher = proposal_matcher or det_utils.Matcher(
            fg_iou_thresh, bg_iou_thresh, allow_low_quality_matches=True)
        self.box_coder = det_utils.BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))
        self.transform = GeneralizedRCNNTransform(
            min_size, max_size, image_mean or [0.485, 0.456, 0.406],
            image_std or [0.229, 0.224, 0.225], **kwargs)
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img, self.topk_candidates = detections_per_img, topk_candidates

    def _loss(self, targets, head_outputs, anchors, num_anchors_per_level):
        return self.compute_loss(targets, head_outputs, anchors)

    def compute_loss(self, targets, head_outputs, anchors) -> dict[str, Tensor]:
        matched_idxs = []
        for anchors_i, target in zip(anchors, targets):
            if target["boxes"].numel() == 0:
                matched_idxs.append(torch.full((anchors_i.size(0),), -1, dtype=torch.int64,
                                               device=anchors_i.device))
                continue
            matched_idxs.append(self.proposal_matcher(box_iou(target["boxes"], anchors_i)))
        return self.head.compute_loss(targets, head_outputs, anchors, matched_idxs)

    def postprocess_detections(self, head_outputs, anchors, image_shapes):
        detections = []
        for index, image_shape in enumerate(image_shapes):
            boxes, scores, labels = [], [], []
            for reg, logits, anchors_l in zip(
                    [r[index] for r in head_outputs["bbox_regression"]],
                    [c[index] for c in head_outputs["cls_logits"]], anchors[index]):
                s, anchor_idx, lab = top_candidates(torch.sigmoid(logits).flatten(),
                                                    logits.shape[-1], self.score_thresh,
                                                    self.topk_candidates)
                boxes.append(self.box_coder.decode_single(reg[anchor_idx], anchors_l[anchor_idx]))
                scores.append(s)
                labels.append(lab)
            detections.append(nms_per_image(boxes, scores, labels, image_shape,
                                            self.nms_thresh, self.detections_per_img))
        return detections


RetinaNet_ResNet50_FPN_Weights = detection_weights(
    "retinanet_resnet50_fpn", "RetinaNet_ResNet50_FPN_Weights",
    {"COCO_V1": coco_entry("retinanet_resnet50_fpn_coco-eeacb38b.pth", 34014999, box_map=36.4)},
    "COCO_V1")
RetinaNet_ResNet50_FPN_V2_Weights = detection_weights(
    "retinanet_resnet50_fpn_v2", "RetinaNet_ResNet50_FPN_V2_Weights",
    {"COCO_V1": coco_entry("retinanet_resnet50_fpn_v2_coco-5905b1c5.pth", 38198935, box_map=41.5)},
    "COCO_V1")


def _resnet50(weights, weights_backbone, norm_layer):
    from ember.vision.models.resnet import resnet50
    return resnet50(weights=None if weights is not None else weights_backbone,
                    norm_layer=norm_layer)


@register_model()
def retinanet_resnet50_fpn(*, weights=None, progress: bool = True, num_classes=None,
                           weights_backbone=None, trainable_backbone_layers=None,
                           **kwargs) -> RetinaNet:
    """RetinaNet, ResNet-50 FPN with P6/P7 from P5 (34,014,999 parameters at 91 classes);
    ``weights_backbone`` defaults to None here (nothing downloads)."""
    is_trained = weights is not None or weights_backbone is not None
    layers = _validate_trainable_layers(is_trained, trainable_backbone_layers, 5, 3)
    norm = FrozenBatchNorm2d if is_trained else nn.BatchNorm2d
    body = _resnet50(weights, weights_backbone, norm)
    backbone = _resnet_fpn_extractor(body, layers, returned_layers=[2, 3, 4],
                                     extra_blocks=LastLevelP6P7(256, 256))
    model = RetinaNet(backbone, num_classes_or(num_classes, 91), **kwargs)
    return finish(model, weights, RetinaNet_ResNet50_FPN_Weights.COCO_V1.file_name)


@register_model()
def retinanet_resnet50_fpn_v2(*, weights=None, progress: bool = True, num_classes=None,
                              weights_backbone=None, trainable_backbone_layers=None,
                              **kwargs) -> RetinaNet:
    """RetinaNet v2 recipe: BatchNorm body, P6/P7 from C5, GroupNorm heads, GIoU box loss
    (38,198,935 parameters at 91 classes)."""
    is_trained = weights is not None or weights_backbone is not None
    layers = _validate_trainable_layers(is_trained, trainable_backbone_layers, 5, 3)
    backbone = _resnet_fpn_extractor(_resnet50(weights, weights_backbone, None), layers,
                                     returned_layers=[2, 3, 4],
                                     extra_blocks=LastLevelP6P7(2048, 256))
    anchors = _default_anchorgen()
    n = num_classes_or(num_classes, 91)
    head = RetinaNetHead(backbone.out_channels, anchors.num_anchors_per_location()[0], n,
                         norm_layer=partial(nn.GroupNorm, 32))
    head.regression_head._loss_type = "giou"
    model = RetinaNet(backbone, n, anchor_generator=anchors, head=head, **kwargs)
    return finish(model, weights)
