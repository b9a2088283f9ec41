"""Faster R-CNN (Ren et al.) with torchvision's classes, builders, defaults and state_dict
layout: ResNet-50 FPN (v1 and the v2 recipe) and MobileNetV3-Large FPN backbones."""

from __future__ import annotations

import os

import torch.nn.functional as F
from torch import nn

from ember.vision.models._categories import COCO_CATEGORIES
from ember.vision.models._registry import load_weights, register_model
from ember.vision.models.detection._utils import overwrite_eps
from ember.vision.models.detection._weights import detection_weights
from ember.vision.models.detection.anchor_utils import AnchorGenerator
from ember.vision.models.detection.backbone_utils import (
    _mobilenet_body,
    _mobilenet_extractor,
    _resnet_fpn_extractor,
    _validate_trainable_layers,
)
from ember.vision.models.detection.generalized_rcnn import GeneralizedRCNN
from ember.vision.models.detection.roi_heads import RoIHeads
from ember.vision.models.detection.rpn import RegionProposalNetwork, RPNHead
from ember.vision.models.detection.transform import GeneralizedRCNNTransform
from ember.vision.ops import Conv2dNormActivation, FrozenBatchNorm2d, MultiScaleRoIAlign

__all__ = ["FasterRCNN", "TwoMLPHead", "FastRCNNConvFCHead", "FastRCNNPredictor",
           "fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2",
           "fasterrcnn_mobilenet_v3_large_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn",
           "FasterRCNN_ResNet50_FPN_Weights", "FasterRCNN_ResNet50_FPN_V2_Weights",
           "FasterRCNN_MobileNet_V3_Large_FPN_Weights",
           "FasterRCNN_MobileNet_V3_Large_320_FPN_Weights"]


def _default_anchorgen() -> AnchorGenerator:
    sizes = ((32,), (64,), (128,), (256,), (512,))
    return AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * len(sizes))


class FasterRCNN(GeneralizedRCNN):
    """Faster R-CNN over ``backbone`` (which has ``out_channels``); each component can be
    passed in, the rest take torchvision's defaults. Images: list of float [3, H, W] in
    [0, 1]; training targets: dicts with ``boxes`` (XYXY) and int64 ``labels``."""

    def __init__(self, backbone, num_classes=None, min_size=800, max_size=1333,
                 image_mean=None, image_std=None, rpn_anchor_generator=None, rpn_head=None,
                 rpn_pre_nms_top_n_train=2000, rpn_pre_nms_top_n_test=1000,
                 rpn_post_nms_top_n_train=2000, rpn_post_nms_top_n_test=1000,
                 rpn_nms_thresh=0.7, rpn_fg_iou_thresh=0.7, rpn_bg_iou_thresh=0.3,
                 rpn_batch_size_per_image=256, rpn_positive_fraction=0.5, rpn_score_thresh=0.0,
                 box_roi_pool=None, box_head=None, box_predictor=None, box_score_thresh=0.05,
                 box_nms_thresh=0.5, box_detections_per_img=100, box_fg_iou_thresh=0.5,
                 box_bg_iou_thresh=0.5, box_batch_size_per_image=512,
                 box_positive_fraction=0.25, bbox_reg_weights=None, **kwargs) -> None:
        if not hasattr(backbone, "out_channels"):
            raise ValueError("backbone needs an out_channels attribute (the channels of "
                             "every feature level)")
        if not isinstance(rpn_anchor_generator, (AnchorGenerator, type(None))):
            raise TypeError(f"rpn_anchor_generator must be an AnchorGenerator or None, got "
                            f"{type(rpn_anchor_generator).__name__}")
        if not isinstance(box_roi_pool, (MultiScaleRoIAlign, type(None))):
            raise TypeError(f"box_roi_pool must be a MultiScaleRoIAlign or None, got "
                            f"{type(box_roi_pool).__name__}")
        if num_classes is not None and box_predictor is not None:
            raise ValueError("num_classes must be None when box_predictor is given")
        if num_classes is None and box_predictor is None:
            raise ValueError("num_classes is required when box_predictor is not given")
        out_channels = backbone.out_channels
        if rpn_anchor_generator is None:
            rpn_anchor_generator = _default_anchorgen()
        if rpn_head is None:
            rpn_head = RPNHead(out_channels, rpn_anchor_generator.num_anchors_per_location()[0])
        rpn = RegionProposalNetwork(
            rpn_anchor_generator, rpn_head, rpn_fg_iou_thresh, rpn_bg_iou_thresh,
            rpn_batch_size_per_image, rpn_positive_fraction,
            {"training": rpn_pre_nms_top_n_train, "testing": rpn_pre_nms_top_n_test},
            {"training": rpn_post_nms_top_n_train, "testing": rpn_post_nms_top_n_test},
            rpn_nms_thresh, score_thresh=rpn_score_thresh)
        if box_roi_pool is None:
            box_roi_pool = MultiScaleRoIAlign(featmap_names=["0", "1", "2", "3"], output_size=7,
                                              sampling_ratio=2)
        if box_head is None:
            resolution = box_roi_pool.output_size[0]
            box_head = TwoMLPHead(out_channels * resolution ** 2, 1024)
        if box_predictor is None:
            box_predictor = FastRCNNPredictor(1024, num_classes)
        roi_heads = RoIHeads(box_roi_pool, box_head, box_predictor, box_fg_iou_thresh,
                             box_bg_iou_thresh, box_batch_size_per_image,
                             box_positive_fraction, bbox_reg_weights, box_score_thresh,
                             box_nms_thresh, box_detections_per_img)
        image_mean = [0.485, 0.456, 0.406] if image_mean is None else image_mean
        image_std = [0.229, 0.224, 0.225] if image_std is None else image_std
        transform = GeneralizedRCNNTransform(min_size, max_size, image_mean, image_std,
                                             **kwargs)
        super().__init__(backbone, rpn, roi_heads, transform)


class TwoMLPHead(nn.Module):
    """Flatten, then two fully connected layers with ReLU (fc6, fc7)."""

    def __init__(self, in_channels: int, representation_size: int) -> None:
        super().__init__()
        self.fc6 = nn.Linear(in_channels, representation_size)
        self.fc7 = nn.Linear(representation_size, representation_size)

    def forward(self, x):
        return F.relu(self.fc7(F.relu(self.fc6(x.flatten(start_dim=1)))))


class FastRCNNConvFCHead(nn.Sequential):
    """3x3 conv-norm-ReLU blocks (``conv_layers`` widths), flatten, then Linear + ReLU
    layers (``fc_layers`` widths): the v2 box head."""

    def __init__(self, input_size: tuple[int, int, int], conv_layers: list[int],
                 fc_layers: list[int], norm_layer=None) -> None:
        channels, height, width = input_size
        blocks: list[nn.Module] = []
        for width_out in conv_layers:
            blocks.append(Conv2dNormActivation(channels, width_out, norm_layer=norm_layer))
            channels = width_out
        blocks.append(nn.Flatten())
        features = channels * height * width
        for width_out in fc_layers:
            blocks += [nn.Linear(features, width_out), nn.ReLU(inplace=True)]
            features = width_out
        super().__init__(*blocks)
        for layer in self.modules():
            if isinstance(layer, nn.Conv2d):
                nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)


class FastRCNNPredictor(nn.Module):
    """Class logits (``cls_score``) and per-class box deltas (``bbox_pred``)."""

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.cls_score = nn.Linear(in_channels, num_classes)
        self.bbox_pred = nn.Linear(in_channels, num_classes * 4)

    def forward(self, x):
        if x.dim() == 4 and list(x.shape[2:]) != [1, 1]:
            raise ValueError(f"FastRCNNPredictor expects [N, C] or [N, C, 1, 1] features, got "
                             f"{tuple(x.shape)}")
        x = x.flatten(start_dim=1)
        return self.cls_score(x), self.bbox_pred(x)


def _coco(file: str, num_params: int, **metrics) -> tuple[str, dict]:
    meta = {"categories": list(COCO_CATEGORIES), "num_params": num_params,
            "_metrics": {"COCO-val2017": metrics}}
    return file, meta


FasterRCNN_ResNet50_FPN_Weights = detection_weights(
    "fasterrcnn_resnet50_fpn", "FasterRCNN_ResNet50_FPN_Weights",
    {"COCO_V1": _coco("fasterrcnn_resnet50_fpn_coco-258fb6c6.pth", 41755286, box_map=37.0)},
    "COCO_V1")
FasterRCNN_ResNet50_FPN_V2_Weights = detection_weights(
    "fasterrcnn_resnet50_fpn_v2", "FasterRCNN_ResNet50_FPN_V2_Weights",
    {"COCO_V1": _coco("fasterrcnn_resnet50_fpn_v2_coco-dd69338a.pth", 43712278, box_map=46.7)},
    "COCO_V1")
FasterRCNN_MobileNet_V3_Large_FPN_Weights = detection_weights(
    "fasterrcnn_mobilenet_v3_large_fpn", "FasterRCNN_MobileNet_V3_Large_FPN_Weights",
    {"COCO_V1": _coco("fasterrcnn_mobilenet_v3_large_fpn-fb6a3cc7.pth", 19386354,
                      box_map=32.8)},
    "COCO_V1")
FasterRCNN_MobileNet_V3_Large_320_FPN_Weights = detection_weights(
    "fasterrcnn_mobilenet_v3_large_320_fpn", "FasterRCNN_MobileNet_V3_Large_320_FPN_Weights",
    {"COCO_V1": _coco("fasterrcnn_mobilenet_v3_large_320_fpn-907ea3f9.pth", 19386354,
                      box_map=22.8)},
    "COCO_V1")


def _num_classes(num_classes, default: int) -> int:
    if num_classes is None:
        return default
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
    return num_classes


def _is_file_of(weights, entry) -> bool:
    """Whether ``weights`` (as the registry resolved it) is the local file of ``entry``."""
    return (isinstance(weights, (str, os.PathLike))
            and os.path.basename(os.fspath(weights)) == entry.file_name)


def _finish(model: nn.Module, weights, legacy_entry=None) -> nn.Module:
    """Load ``weights``; the v1 COCO checkpoints were trained with FrozenBatchNorm eps 0."""
    load_weights(model, weights)
    if legacy_entry is not None and _is_file_of(weights, legacy_entry):
        overwrite_eps(model, 0.0)
    return model


def _resnet50_body(weights, weights_backbone, norm_layer):
    from ember.vision.models.resnet import resnet50
    return resnet50(weights=None if weights is not None else weights_backbone,
                    norm_layer=norm_layer)


def _resnet50_fpn_v1(weights, weights_backbone, trainable_backbone_layers):
    """torchvision's v1 ResNet-50 FPN backbone (FrozenBatchNorm when pretrained)."""
    is_trained = weights is not None or weights_backbone is not None
    layers = _validate_trainable_layers(is_trained, trainable_backbone_layers, 5, 3)
    norm = FrozenBatchNorm2d if is_trained else nn.BatchNorm2d
    return _resnet_fpn_extractor(_resnet50_body(weights, weights_backbone, norm), layers)


def _resnet50_fpn_v2(weights, weights_backbone, trainable_backbone_layers):
    """The v2 backbone: BatchNorm body, BatchNorm in the FPN."""
    is_trained = weights is not None or weights_backbone is not None
    layers = _validate_trainable_layers(is_trained, trainable_backbone_layers, 5, 3)
    body = _resnet50_body(weights, weights_backbone, None)
    return _resnet_fpn_extractor(body, layers, norm_layer=nn.BatchNorm2d)


@register_model(backbone="resnet50")
def fasterrcnn_resnet50_fpn(*, weights=None, progress: bool = True, num_classes=None,
                            weights_backbone=None, trainable_backbone_layers=None,
                            **kwargs) -> FasterRCNN:
    """Faster R-CNN, ResNet-50 FPN (41,755,286 parameters at 91 classes). Unlike
    torchvision, ``weights_backbone`` defaults to None (nothing downloads)."""
    backbone = _resnet50_fpn_v1(weights, weights_backbone, trainable_backbone_layers)
    model = FasterRCNN(backbone, num_classes=_num_classes(num_classes, 91), **kwargs)
    return _finish(model, weights, FasterRCNN_ResNet50_FPN_Weights.COCO_V1)


@register_model(backbone="resnet50")
def fasterrcnn_resnet50_fpn_v2(*, weights=None, progress: bool = True, num_classes=None,
                               weights_backbone=None, trainable_backbone_layers=None,
                               **kwargs) -> FasterRCNN:
    """Faster R-CNN v2 recipe (Li et al., benchmarking ViT detection): two-conv RPN head,
    4-conv + 1-FC box head, BatchNorm (43,712,278 parameters at 91 classes)."""
    backbone = _resnet50_fpn_v2(weights, weights_backbone, trainable_backbone_layers)
    anchors = _default_anchorgen()
    rpn_head = RPNHead(backbone.out_channels, anchors.num_anchors_per_location()[0],
                       conv_depth=2)
    box_head = FastRCNNConvFCHead((backbone.out_channels, 7, 7), [256, 256, 256, 256], [1024],
                                  norm_layer=nn.BatchNorm2d)
    model = FasterRCNN(backbone, num_classes=_num_classes(num_classes, 91),
                       rpn_anchor_generator=anchors, rpn_head=rpn_head, box_head=box_head,
                       **kwargs)
    return _finish(model, weights)


def _fasterrcnn_mobilenet_v3_large_fpn(weights, num_classes, weights_backbone,
                                       trainable_backbone_layers, **kwargs) -> FasterRCNN:
    is_trained = weights is not None or weights_backbone is not None
    layers = _validate_trainable_layers(is_trained, trainable_backbone_layers, 6, 3)
    norm = FrozenBatchNorm2d if is_trained else nn.BatchNorm2d
    body = _mobilenet_body("mobilenet_v3_large",
                           None if weights is not None else weights_backbone, norm)
    backbone = _mobilenet_extractor(body, True, layers)
    sizes = ((32, 64, 128, 256, 512),) * 3
    anchors = AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * len(sizes))
    model = FasterRCNN(backbone, _num_classes(num_classes, 91),
                       rpn_anchor_generator=anchors, **kwargs)
    return _finish(model, weights)


@register_model(backbone="mobilenet_v3_large")
def fasterrcnn_mobilenet_v3_large_fpn(*, weights=None, progress: bool = True,
                                      num_classes=None, weights_backbone=None,
                                      trainable_backbone_layers=None, **kwargs) -> FasterRCNN:
    """Faster R-CNN, MobileNetV3-Large FPN (19,386,354 parameters at 91 classes)."""
    kwargs = {"rpn_score_thresh": 0.05, **kwargs}
    return _fasterrcnn_mobilenet_v3_large_fpn(weights, num_classes, weights_backbone,
                                              trainable_backbone_layers, **kwargs)


@register_model(backbone="mobilenet_v3_large")
def fasterrcnn_mobilenet_v3_large_320_fpn(*, weights=None, progress: bool = True,
                                          num_classes=None, weights_backbone=None,
                                          trainable_backbone_layers=None,
                                          **kwargs) -> FasterRCNN:
    """Faster R-CNN, MobileNetV3-Large FPN for 320-pixel inputs (fewer proposals;
    19,386,354 parameters at 91 classes)."""
    kwargs = {"min_size": 320, "max_size": 640, "rpn_pre_nms_top_n_test": 150,
              "rpn_post_nms_top_n_test": 150, "rpn_score_thresh": 0.05, **kwargs}
    return _fasterrcnn_mobilenet_v3_large_fpn(weights, num_classes, weights_backbone,
                                              trainable_backbone_layers, **kwargs)


