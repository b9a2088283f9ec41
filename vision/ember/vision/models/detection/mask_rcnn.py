"""Mask R-CNN (He et al.): Faster R-CNN plus a mask branch, torchvision's classes, builders
and state_dict layout (ResNet-50 FPN v1 and the v2 recipe)."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from ember.vision.models._categories import COCO_CATEGORIES
from ember.vision.models._registry import register_model
from ember.vision.models.detection._weights import detection_weights
from ember.vision.models.detection.faster_rcnn import (
    FasterRCNN,
    FastRCNNConvFCHead,
    _default_anchorgen,
    _finish,
    _num_classes,
    _resnet50_fpn_v1,
    _resnet50_fpn_v2,
)
from ember.vision.models.detection.rpn import RPNHead
from ember.vision.ops import Conv2dNormActivation, MultiScaleRoIAlign

__all__ = ["MaskRCNN", "MaskRCNNHeads", "MaskRCNNPredictor", "maskrcnn_resnet50_fpn",
           "maskrcnn_resnet50_fpn_v2", "MaskRCNN_ResNet50_FPN_Weights",
           "MaskRCNN_ResNet50_FPN_V2_Weights"]


class MaskRCNN(FasterRCNN):
    """Faster R-CNN whose RoI heads also predict a mask per detection; training targets
    add ``masks`` (uint8 [N, H, W]); detections add ``masks`` (probabilities [N, 1, H, W])."""

    def __init__(self, backbone, num_classes=None, *args, mask_roi_pool=None, mask_head=None,
                 mask_predictor=None, **kwargs) -> None:
        if not isinstance(mask_roi_pool, (MultiScaleRoIAlign, type(None))):
            raise TypeError(f"mask_roi_pool must be a MultiScaleRoIAlign or None, got "
                            f"{type(mask_roi_pool).__name__}")
        if num_classes is not None and mask_predictor is not None:
            raise ValueError("num_classes must be None when mask_predictor is given")
        out_channels = backbone.out_channels
        if mask_roi_pool is None:
            mask_roi_pool = MultiScaleRoIAlign(featmap_names=["0", "1", "2", "3"],
                                               output_size=14, sampling_ratio=2)
        if mask_head is None:
            mask_head = MaskRCNNHeads(out_channels, (256, 256, 256, 256), 1)
        if mask_predictor is None:
            mask_predictor = MaskRCNNPredictor(256, 256, num_classes)
        super().__init__(backbone, num_classes, *args, **kwargs)
        self.roi_heads.mask_roi_pool = mask_roi_pool
        self.roi_heads.mask_head = mask_head
        self.roi_heads.mask_predictor = mask_predictor


class MaskRCNNHeads(nn.Sequential):
    """3x3 conv (+ norm) + ReLU blocks of widths ``layers`` with ``dilation``."""

    _version = 2

    def __init__(self, in_channels: int, layers, dilation: int, norm_layer=None) -> None:
        blocks = []
        for width in layers:
            blocks.append(Conv2dNormActivation(in_channels, width, kernel_size=3, stride=1,
                                               padding=dilation, dilation=dilation,
                                               norm_layer=norm_layer))
            in_channels = width
        super().__init__(*blocks)
        for layer in self.modules():
            if isinstance(layer, nn.Conv2d):
                nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        if (local_metadata.get("version") or 0) < 2:   # old names: mask_fcn{i}.weight
            for i in range(len(self)):
                for kind in ("weight", "bias"):
                    old = f"{prefix}mask_fcn{i + 1}.{kind}"
                    if old in state_dict:
                        state_dict[f"{prefix}{i}.0.{kind}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)


class MaskRCNNPredictor(nn.Sequential):
    """2x2 stride-2 transposed conv + ReLU, then 1x1 conv to one mask logit map per class."""

    def __init__(self, in_channels: int, dim_reduced: int, num_classes: int) -> None:
        super().__init__(OrderedDict([
            ("conv5_mask", nn.ConvTranspose2d(in_channels, dim_reduced, 2, 2, 0)),
            ("relu", nn.ReLU(inplace=True)),
            ("mask_fcn_logits", nn.Conv2d(dim_reduced, num_classes, 1, 1, 0)),
        ]))
        for name, param in self.named_parameters():
            if "weight" in name:
                nn.init.kaiming_normal_(param, mode="fan_out", nonlinearity="relu")


def _coco(file: str, num_params: int, **metrics) -> tuple[str, dict]:
    return file, {"categories": list(COCO_CATEGORIES), "num_params": num_params,
                  "_metrics": {"COCO-val2017": metrics}}


MaskRCNN_ResNet50_FPN_Weights = detection_weights(
    "maskrcnn_resnet50_fpn", "MaskRCNN_ResNet50_FPN_Weights",
    {"COCO_V1": _coco("maskrcnn_resnet50_fpn_coco-bf2d0c1e.pth", 44401393, box_map=37.9,
                      mask_map=34.6)}, "COCO_V1")
MaskRCNN_ResNet50_FPN_V2_Weights = detection_weights(
    "maskrcnn_resnet50_fpn_v2", "MaskRCNN_ResNet50_FPN_V2_Weights",
    {"COCO_V1": _coco("maskrcnn_resnet50_fpn_v2_coco-73cbd019.pth", 46359409, box_map=47.4,
                      mask_map=41.8)}, "COCO_V1")


@register_model(backbone="resnet50")
def maskrcnn_resnet50_fpn(*, weights=None, progress: bool = True, num_classes=None,
                          weights_backbone=None, trainable_backbone_layers=None,
                          **kwargs) -> MaskRCNN:
    """Mask R-CNN, ResNet-50 FPN (44,401,393 parameters at 91 classes). Unlike torchvision,
    ``weights_backbone`` defaults to None (nothing downloads)."""
    backbone = _resnet50_fpn_v1(weights, weights_backbone, trainable_backbone_layers)
    model = MaskRCNN(backbone, num_classes=_num_classes(num_classes, 91), **kwargs)
    return _finish(model, weights, MaskRCNN_ResNet50_FPN_Weights.COCO_V1)


@register_model(backbone="resnet50")
def maskrcnn_resnet50_fpn_v2(*, weights=None, progress: bool = True, num_classes=None,
                             weights_backbone=None, trainable_backbone_layers=None,
                             **kwargs) -> MaskRCNN:
    """Mask R-CNN v2 recipe: two-conv RPN head, conv box head and BatchNorm mask head
    (46,359,409 parameters at 91 classes)."""
    backbone = _resnet50_fpn_v2(weights, weights_backbone, trainable_backbone_layers)
    anchors = _default_anchorgen()
    rpn_head = RPNHead(backbone.out_channels, anchors.num_anchors_per_location()[0],
                       conv_depth=2)
    box_head = FastRCNNConvFCHead((backbone.out_channels, 7, 7), [256, 256, 256, 256], [1024],
                                  norm_layer=nn.BatchNorm2d)
    mask_head = MaskRCNNHeads(backbone.out_channels, [256, 256, 256, 256], 1,
                              norm_layer=nn.BatchNorm2d)
    model = MaskRCNN(backbone, num_classes=_num_classes(num_classes, 91),
                     rpn_anchor_generator=anchors, rpn_head=rpn_head, box_head=box_head,
                     mask_head=mask_head, **kwargs)
    return _finish(model, weights)
