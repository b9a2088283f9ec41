"""Keypoint R-CNN: Faster R-CNN plus a keypoint heatmap branch, torchvision's classes,
builder and state_dict layout (ResNet-50 FPN)."""

from __future__ import annotations

import os

import torch.nn.functional as F
from torch import nn

from ember.vision.models._categories import (
    COCO_PERSON_CATEGORIES,
    COCO_PERSON_KEYPOINT_NAMES,
)
from ember.vision.models._registry import register_model
from ember.vision.models.detection._weights import detection_weights
from ember.vision.models.detection.faster_rcnn import (
    FasterRCNN,
    _finish,
    _is_file_of,
    _num_classes,
    _resnet50_fpn_v1,
)
from ember.vision.ops import MultiScaleRoIAlign

__all__ = ["KeypointRCNN", "KeypointRCNNHeads", "KeypointRCNNPredictor",
           "keypointrcnn_resnet50_fpn", "KeypointRCNN_ResNet50_FPN_Weights"]


class KeypointRCNN(FasterRCNN):
    """Faster R-CNN whose RoI heads also predict ``num_keypoints`` keypoints per detection;
    targets add ``keypoints`` (float [N, K, 3]: x, y, visibility); detections add
    ``keypoints`` and ``keypoints_scores``. Training picks ``min_size`` from 640..800."""

    def __init__(self, backbone, num_classes=None, min_size=None, *args,
                 keypoint_roi_pool=None, keypoint_head=None, keypoint_predictor=None,
                 num_keypoints=None, **kwargs) -> None:
        if not isinstance(keypoint_roi_pool, (MultiScaleRoIAlign, type(None))):
            raise TypeError(f"keypoint_roi_pool must be a MultiScaleRoIAlign or None, got "
                            f"{type(keypoint_roi_pool).__name__}")
        if min_size is None:
            min_size = (640, 672, 704, 736, 768, 800)
        if num_keypoints is not None and keypoint_predictor is not None:
            raise ValueError("num_keypoints must be None when keypoint_predictor is given")
        num_keypoints = 17 if num_keypoints is None else num_keypoints
        out_channels = backbone.out_channels
        if keypoint_roi_pool is None:
            keypoint_roi_pool = MultiScaleRoIAlign(featmap_names=["0", "1", "2", "3"],
                                                   output_size=14, sampling_ratio=2)
        if keypoint_head is None:
            keypoint_head = KeypointRCNNHeads(out_channels, tuple(512 for _ in range(8)))
        if keypoint_predictor is None:
            keypoint_predictor = KeypointRCNNPredictor(512, num_keypoints)
        super().__init__(backbone, num_classes, min_size, *args, **kwargs)
        self.roi_heads.keypoint_roi_pool = keypoint_roi_pool
        self.roi_heads.keypoint_head = keypoint_head
        self.roi_heads.keypoint_predictor = keypoint_predictor


class KeypointRCNNHeads(nn.Sequential):
    """Plain 3x3 conv + ReLU pairs of widths ``layers``."""

    def __init__(self, in_channels: int, layers) -> None:
        blocks: list[nn.Module] = []
        for width in layers:
            blocks += [nn.Conv2d(in_channels, width, 3, stride=1, padding=1),
                       nn.ReLU(inplace=True)]
            in_channels = width
        super().__init__(*blocks)
        for m in self.children():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(m.bias, 0)


class KeypointRCNNPredictor(nn.Module):
    """4x4 stride-2 transposed conv to one heatmap per keypoint, then 2x bilinear upsampling."""

    def __init__(self, in_channels: int, num_keypoints: int) -> None:
        super().__init__()
        self.kps_score_lowres = nn.ConvTranspose2d(in_channels, num_keypoints, 4, stride=2,
                                                   padding=1)
        nn.init.kaiming_normal_(self.kps_score_lowres.weight, mode="fan_out",
                                nonlinearity="relu")
        nn.init.constant_(self.kps_score_lowres.bias, 0)
        self.up_scale = 2
        self.out_channels = num_keypoints

    def forward(self, x):
        return F.interpolate(self.kps_score_lowres(x), scale_factor=float(self.up_scale),
                             mode="bilinear", align_corners=False,
                             recompute_scale_factor=False)


def _entry(file: str, **metrics) -> tuple[str, dict]:
    return file, {"categories": list(COCO_PERSON_CATEGORIES),
                  "keypoint_names": list(COCO_PERSON_KEYPOINT_NAMES), "num_params": 59137258,
                  "_metrics": {"COCO-val2017": metrics}}


KeypointRCNN_ResNet50_FPN_Weights = detection_weights(
    "keypointrcnn_resnet50_fpn", "KeypointRCNN_ResNet50_FPN_Weights",
    {"COCO_LEGACY": _entry("keypointrcnn_resnet50_fpn_coco-9f466800.pth", box_map=50.6,
                           kp_map=61.1),
     "COCO_V1": _entry("keypointrcnn_resnet50_fpn_coco-fc266e95.pth", box_map=54.6,
                       kp_map=65.0)}, "COCO_V1")


@register_model(backbone="resnet50")
def keypointrcnn_resnet50_fpn(*, weights=None, progress: bool = True, num_classes=None,
                              num_keypoints=None, weights_backbone=None,
                              trainable_backbone_layers=None, **kwargs) -> KeypointRCNN:
    """Keypoint R-CNN, ResNet-50 FPN (59,137,258 parameters at 2 classes, 17 keypoints).
    Unlike torchvision, ``weights_backbone`` defaults to None (nothing downloads)."""
    entries = (KeypointRCNN_ResNet50_FPN_Weights.COCO_V1,
               KeypointRCNN_ResNet50_FPN_Weights.COCO_LEGACY)
    if isinstance(weights, (str, os.PathLike)) and any(_is_file_of(weights, e) for e in entries):
        if num_keypoints not in (None, 17):
            raise ValueError(f"The parameter 'num_keypoints' expected value 17 but got "
                             f"{num_keypoints} instead.")
        num_keypoints = 17
    backbone = _resnet50_fpn_v1(weights, weights_backbone, trainable_backbone_layers)
    model = KeypointRCNN(backbone, _num_classes(num_classes, 2),
                         num_keypoints=17 if num_keypoints is None else num_keypoints, **kwargs)
    return _finish(model, weights, KeypointRCNN_ResNet50_FPN_Weights.COCO_V1)
