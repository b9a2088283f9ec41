"""SSD (Liu et al.) with torchvision's classes, builder, defaults and state_dict layout: a
VGG-16 feature extractor (conv4_3 rescaled, atrous FC6/FC7, extra layers) at 300x300."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.vision.models._registry import register_model
from ember.vision.models.detection import _utils as det_utils
from ember.vision.models.detection._one_stage import (
    OneStageDetector,
    coco_entry,
    finish,
    num_classes_or,
)
from ember.vision.models.detection._weights import detection_weights
from ember.vision.models.detection.anchor_utils import DefaultBoxGenerator
from ember.vision.models.detection.backbone_utils import _validate_trainable_layers
from ember.vision.models.detection.transform import GeneralizedRCNNTransform
from ember.vision.ops import batched_nms, box_iou, clip_boxes_to_image

__all__ = ["SSD", "SSDHead", "SSDScoringHead", "SSDClassificationHead", "SSDRegressionHead",
           "SSDFeatureExtractorVGG", "SSD300_VGG16_Weights", "ssd300_vgg16"]


def _xavier_init(module: nn.Module) -> None:
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


class SSDScoringHead(nn.Module):
    """One predictor per feature map; outputs concatenated as [N, sum(H W A), num_columns]."""

    def __init__(self, module_list: nn.ModuleList, num_columns: int) -> None:
        super().__init__()
        self.module_list = module_list
        self.num_columns = num_columns

    def forward(self, x: list[Tensor]) -> Tensor:
        if len(x) != len(self.module_list):
            raise ValueError(f"{type(self).__name__} has {len(self.module_list)} predictors "
                             f"but got {len(x)} feature maps")
        outs = []
        for features, module in zip(x, self.module_list):
            y = module(features)
            n, _, h, w = y.shape
            outs.append(y.view(n, -1, self.num_columns, h, w).permute(0, 3, 4, 1, 2)
                        .reshape(n, -1, self.num_columns))
        return torch.cat(outs, dim=1)


class SSDClassificationHead(SSDScoringHead):
    """A 3x3 conv per feature map to class logits per default box."""

    def __init__(self, in_channels: list[int], num_anchors: list[int], num_classes: int):
        convs = nn.ModuleList(nn.Conv2d(c, num_classes * a, 3, padding=1)
                              for c, a in zip(in_channels, num_anchors))
        _xavier_init(convs)
        super().__init__(convs, num_classes)


class SSDRegressionHead(SSDScoringHead):
    """A 3x3 conv per feature map to box deltas per default box."""

    def __init__(self, in_channels: list[int], num_anchors: list[int]):
        convs = nn.ModuleList(nn.Conv2d(c, 4 * a, 3, padding=1)
                              for c, a in zip(in_channels, num_anchors))
        _xavier_init(convs)
        super().__init__(convs, 4)


class SSDHead(nn.Module):
    def __init__(self, in_channels: list[int], num_anchors: list[int], num_classes: int):
        super().__init__()
        self.classification_head = SSDClassificationHead(in_channels, num_anchors, num_classes)
        self.regression_head = SSDRegressionHead(in_channels, num_anchors)

    def forward(self, x: list[Tensor]) -> dict[str, Tensor]:
        return {"bbox_regression": self.regression_head(x),
                "cls_logits": self.classification_head(x)}


class SSD(OneStageDetector):
    """SSD on a multi-output backbone at a fixed ``size`` (torchvision's arguments and
    defaults); training returns {"bbox_regression", "classification"} with 3:1 hard negative
    mining, evaluation per-image detections."""

    def __init__(self, backbone: nn.Module, anchor_generator: DefaultBoxGenerator,
                 size: tuple[int, int], num_classes: int, image_mean=None, image_std=None,
                 head: nn.Module | None = None, score_thresh: float = 0.01,
                 nms_thresh: float = 0.45, detections_per_img: int = 200,
                 iou_thresh: float = 0.5, topk_candidates: int = 400,
                 positive_fraction: float = 0.25, **kwargs) -> None:
        super().__init__()
        self.backbone = backbone
        self.anchor_generator = anchor_generator
        self.box_coder = det_utils.BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
        if head is None:
            out_channels = getattr(backbone, "out_channels", None) or \
                det_utils.retrieve_out_channels(backbone, size)
            if len(out_channels) != len(anchor_generator.aspect_ratios):
                raise ValueError(f"The backbone has {len(out_channels)} outputs but the anchor "
                                 f"generator {len(anchor_generator.aspect_ratios)} aspect "
                                 "ratio lists")
            head = SSDHead(out_channels, anchor_generator.num_anchors_per_location(),
                           num_classes)
        self.head = head
        self.proposal_matcher = det_utils.SSDMatcher(iou_thresh)
        self.transform = GeneralizedRCNNTransform(
            min(size), max(size), image_mean or [0.485, 0.456, 0.406],
            image_std or [0.229, 0.224, 0.225], size_divisible=1, fixed_size=size, **kwargs)
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img, self.topk_candidates = detections_per_img, topk_candidates
        self.neg_to_pos_ratio = (1.0 - positive_fraction) / positive_fraction

    def _loss(self, targets, head_outputs, anchors, num_anchors_per_level):
        matched_idxs = []
        for anchors_i, target in zip(anchors, targets):
            if target["boxes"].numel() == 0:
                matched_idxs.append(torch.full((anchors_i.size(0),), -1, dtype=torch.int64,
                                               device=anchors_i.device))
            else:
                matched_idxs.append(self.proposal_matcher(box_iou(target["boxes"], anchors_i)))
        return self.compute_loss(targets, head_outputs, anchors, matched_idxs)

    def compute_loss(self, targets, head_outputs, anchors, matched_idxs) -> dict[str, Tensor]:
        cls_logits = head_outputs["cls_logits"]
        num_foreground = 0
        box_losses, cls_targets = [], []
        for target, reg, logits, anchors_i, matched in zip(
                targets, head_outputs["bbox_regression"], cls_logits, anchors, matched_idxs):
            fg = torch.where(matched >= 0)[0]
            fg_matched = matched[fg]
            num_foreground += fg_matched.numel()
            goal = self.box_coder.encode_single(target["boxes"][fg_matched], anchors_i[fg, :])
            box_losses.append(F.smooth_l1_loss(reg[fg, :], goal, reduction="sum"))
            classes = torch.zeros((logits.size(0),), dtype=target["labels"].dtype,
                                  device=target["labels"].device)
            classes[fg] = target["labels"][fg_matched]
            cls_targets.append(classes)
        box_loss, cls_target = torch.stack(box_losses), torch.stack(cls_targets)
        num_classes = cls_logits.size(-1)
        cls_loss = F.cross_entropy(cls_logits.view(-1, num_classes), cls_target.view(-1),
                                   reduction="none").view(cls_target.size())
        # hard negatives: the highest-loss background boxes, neg_to_pos_ratio per positive
        foreground = cls_target > 0
        num_negative = self.neg_to_pos_ratio * foreground.sum(1, keepdim=True)
        negative_loss = cls_loss.clone()
        negative_loss[foreground] = -float("inf")
        _, order = negative_loss.sort(1, descending=True)
        background = order.sort(1)[1] < num_negative
        n = max(1, num_foreground)
        return {"bbox_regression": box_loss.sum() / n,
                "classification": (cls_loss[foreground].sum() + cls_loss[background].sum()) / n}

    def _detect(self, head_outputs, anchors, image_sizes, positions):
        return self.postprocess_detections(head_outputs, anchors, image_sizes)

    def postprocess_detections(self, head_outputs, image_anchors, image_shapes):
        """Per image and class (background excluded): softmax scores above the threshold, the
        best ``topk_candidates``, then class-wise NMS."""
        scores_all = F.softmax(head_outputs["cls_logits"], dim=-1)
        num_classes = scores_all.size(-1)
        detections = []
        for reg, scores, anchors, image_shape in zip(head_outputs["bbox_regression"],
                                                     scores_all, image_anchors, image_shapes):
            boxes = clip_boxes_to_image(self.box_coder.decode_single(reg, anchors), image_shape)
            out_boxes, out_scores, out_labels = [], [], []
            for label in range(1, num_classes):
                score = scores[:, label]
                keep = score > self.score_thresh
                score, box = score[keep], boxes[keep]
                score, idxs = score.topk(min(self.topk_candidates, score.size(0)))
                out_boxes.append(box[idxs])
                out_scores.append(score)
                out_labels.append(torch.full_like(score, fill_value=label, dtype=torch.int64))
            b, s, lab = torch.cat(out_boxes), torch.cat(out_scores), torch.cat(out_labels)
            keep = batched_nms(b, s, lab, self.nms_thresh)[:self.detections_per_img]
            detections.append({"boxes": b[keep], "scores": s[keep], "labels": lab[keep]})
        return detections


def _extra(cin: int, mid: int, cout: int, k: int = 3, stride: int = 1,
           padding: int = 0) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, mid, 1), nn.ReLU(inplace=True),
                         nn.Conv2d(mid, cout, k, padding=padding, stride=stride),
                         nn.ReLU(inplace=True))


class SSDFeatureExtractorVGG(nn.Module):
    """VGG ``features``: conv4_3 (L2-normalised, learnt scale 20), then conv5 with an atrous
    FC6 and FC7, then conv8_2..conv11_2 (conv12_2 too when ``highres``)."""

    def __init__(self, backbone: nn.Sequential, highres: bool) -> None:
        super().__init__()
        pools = [i for i, layer in enumerate(backbone) if isinstance(layer, nn.MaxPool2d)]
        if len(pools) != 5:
            raise ValueError(f"expected VGG features with 5 max-pools, got {len(pools)}")
        backbone[pools[2]].ceil_mode = True
        self.scale_weight = nn.Parameter(torch.ones(512) * 20)
        self.features = nn.Sequential(*backbone[:pools[3]])   # until conv4_3
        extra = nn.ModuleList([_extra(1024, 256, 512, stride=2, padding=1),    # conv8_2
                               _extra(512, 128, 256, stride=2, padding=1),     # conv9_2
                               _extra(256, 128, 256),                          # conv10_2
                               _extra(256, 128, 256)])                         # conv11_2
        if highres:
            extra.append(_extra(256, 128, 256, k=4))                           # conv12_2
        _xavier_init(extra)
        fc = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=False),             # pool5
                           nn.Conv2d(512, 1024, 3, padding=6, dilation=6),     # FC6, atrous
                           nn.ReLU(inplace=True), nn.Conv2d(1024, 1024, 1),    # FC7
                           nn.ReLU(inplace=True))
        _xavier_init(fc)
        extra.insert(0, nn.Sequential(*backbone[pools[3]:-1], fc))   # conv5_3, no pool5
        self.extra = extra
        self.out_channels = [512, 1024, 512, 256, 256, 256] + ([256] if highres else [])

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        x = self.features(x)
        out = [self.scale_weight.view(1, -1, 1, 1) * F.normalize(x)]
        for block in self.extra:
            x = block(x)
            out.append(x)
        return {str(i): v for i, v in enumerate(out)}


def _vgg_extractor(backbone, highres: bool, trainable_layers: int) -> SSDFeatureExtractorVGG:
    features = backbone.features
    stages = [0] + [i for i, b in enumerate(features) if isinstance(b, nn.MaxPool2d)][:-1]
    if not 0 <= trainable_layers <= len(stages):
        raise ValueError(f"trainable_layers should be in the range [0, {len(stages)}], got "
                         f"{trainable_layers}")
    freeze_before = (len(features) if trainable_layers == 0
                     else stages[len(stages) - trainable_layers])
    for block in features[:freeze_before]:
        for p in block.parameters():
            p.requires_grad_(False)
    return SSDFeatureExtractorVGG(features, highres)


SSD300_VGG16_Weights = detection_weights(
    "ssd300_vgg16", "SSD300_VGG16_Weights",
    {"COCO_V1": coco_entry("ssd300_vgg16_coco-b556d3b4.pth", 35641826, box_map=25.1)},
    "COCO_V1")


@register_model()
def ssd300_vgg16(*, weights=None, progress: bool = True, num_classes=None,
                 weights_backbone=None, trainable_backbone_layers=None, **kwargs) -> SSD:
    """SSD300 on VGG-16 (35,641,826 parameters at 91 classes); inputs are resized to
    300x300; ``weights_backbone`` (VGG16_Weights, e.g. IMAGENET1K_FEATURES) defaults to None
    here (nothing downloads)."""
    from ember.vision.models.vgg import vgg16
    if "size" in kwargs:
        warnings.warn("The size of the model is already fixed; ignoring the parameter.",
                      stacklevel=2)
        kwargs.pop("size")
    is_trained = weights is not None or weights_backbone is not None
    layers = _validate_trainable_layers(is_trained, trainable_backbone_layers, 5, 4)
    body = vgg16(weights=None if weights is not None else weights_backbone)
    anchors = DefaultBoxGenerator([[2], [2, 3], [2, 3], [2, 3], [2], [2]],
                                  scales=[0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05],
                                  steps=[8, 16, 32, 64, 100, 300])
    # the VGG features checkpoint takes 0..255 inputs: undo ToTensor's scaling
    kwargs = {"image_mean": [0.48235, 0.45882, 0.40784],
              "image_std": [1.0 / 255.0, 1.0 / 255.0, 1.0 / 255.0], **kwargs}
    model = SSD(_vgg_extractor(body, False, layers), anchors, (300, 300),
                num_classes_or(num_classes, 91), **kwargs)
    return finish(model, weights)
