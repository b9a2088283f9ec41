"""SSDLite (Sandler et al., MobileNetV2 paper) with torchvision's classes, builder, defaults
and state_dict layout: MobileNetV3-Large features, depthwise-separable heads, 320x320."""

from __future__ import annotations

import warnings
from functools import partial

from torch import Tensor, nn

from ember.vision.models._registry import register_model
from ember.vision.models.detection._one_stage import coco_entry, finish, num_classes_or
from ember.vision.models.detection._weights import detection_weights
from ember.vision.models.detection.anchor_utils import DefaultBoxGenerator
from ember.vision.models.detection.backbone_utils import _validate_trainable_layers
from ember.vision.models.detection.ssd import SSD, SSDScoringHead
from ember.vision.ops import Conv2dNormActivation

__all__ = ["SSDLiteHead", "SSDLiteClassificationHead", "SSDLiteRegressionHead",
           "SSDLiteFeatureExtractorMobileNet", "SSDLite320_MobileNet_V3_Large_Weights",
           "ssdlite320_mobilenet_v3_large"]


def _normal_init(module: nn.Module) -> None:
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.normal_(layer.weight, mean=0.0, std=0.03)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


def _prediction_block(cin: int, cout: int, kernel_size: int, norm_layer) -> nn.Sequential:
    """Depthwise kxk conv-norm-ReLU6, then a 1x1 conv to the predictions."""
    return nn.Sequential(Conv2dNormActivation(cin, cin, kernel_size=kernel_size, groups=cin,
                                              norm_layer=norm_layer, activation_layer=nn.ReLU6),
                         nn.Conv2d(cin, cout, 1))


def _extra_block(cin: int, cout: int, norm_layer) -> nn.Sequential:
    """1x1 to half width, depthwise 3x3 stride 2, 1x1 to ``cout`` (each norm + ReLU6)."""
    mid = cout // 2
    unit = partial(Conv2dNormActivation, norm_layer=norm_layer, activation_layer=nn.ReLU6)
    return nn.Sequential(unit(cin, mid, kernel_size=1),
                         unit(mid, mid, kernel_size=3, stride=2, groups=mid),
                         unit(mid, cout, kernel_size=1))


class SSDLiteClassificationHead(SSDScoringHead):
    def __init__(self, in_channels: list[int], num_anchors: list[int], num_classes: int,
                 norm_layer) -> None:
        blocks = nn.ModuleList(_prediction_block(c, num_classes * a, 3, norm_layer)
                               for c, a in zip(in_channels, num_anchors))
        _normal_init(blocks)
        super().__init__(blocks, num_classes)


class SSDLiteRegressionHead(SSDScoringHead):
    def __init__(self, in_channels: list[int], num_anchors: list[int], norm_layer) -> None:
        blocks = nn.ModuleList(_prediction_block(c, 4 * a, 3, norm_layer)
                               for c, a in zip(in_channels, num_anchors))
        _normal_init(blocks)
        super().__init__(blocks, 4)


class SSDLiteHead(nn.Module):
    def __init__(self, in_channels: list[int], num_anchors: list[int], num_classes: int,
                 norm_layer) -> None:
        super().__init__()
        self.classification_head = SSDLiteClassificationHead(in_channels, num_anchors,
                                                             num_classes, norm_layer)
        self.regression_head = SSDLiteRegressionHead(in_channels, num_anchors, norm_layer)

    def forward(self, x: list[Tensor]) -> dict[str, Tensor]:
        return {"bbox_regression": self.regression_head(x),
                "cls_logits": self.classification_head(x)}


class SSDLiteFeatureExtractorMobileNet(nn.Module):
    """MobileNet features split at C4's expansion (stride 16, then stride 32 outputs), then
    four extra blocks halving the resolution."""

    def __init__(self, backbone: nn.Sequential, c4_pos: int, norm_layer,
                 width_mult: float = 1.0, min_depth: int = 16) -> None:
        super().__init__()
        if getattr(backbone[c4_pos], "use_res", False):
            raise ValueError("backbone[c4_pos] must not have a residual connection")
        self.features = nn.Sequential(
            nn.Sequential(*backbone[:c4_pos], backbone[c4_pos].block[0]),
            nn.Sequential(backbone[c4_pos].block[1:], *backbone[c4_pos + 1:]))

        def depth(d: int) -> int:
            return max(min_depth, int(d * width_mult))
        self.extra = nn.ModuleList([
            _extra_block(backbone[-1].out_channels, depth(512), norm_layer),
            _extra_block(depth(512), depth(256), norm_layer),
            _extra_block(depth(256), depth(256), norm_layer),
            _extra_block(depth(256), depth(128), norm_layer)])
        _normal_init(self.extra)
        self.out_channels = [backbone[c4_pos].block[0].out_channels, backbone[-1].out_channels,
                             depth(512), depth(256), depth(256), depth(128)]

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        out = []
        for block in (*self.features, *self.extra):
            x = block(x)
            out.append(x)
        return {str(i): v for i, v in enumerate(out)}


def _mobilenet_extractor(backbone, trainable_layers: int,
                         norm_layer) -> SSDLiteFeatureExtractorMobileNet:
    features = backbone.features
    stages = ([0] + [i for i, b in enumerate(features) if getattr(b, "_is_cn", False)]
              + [len(features) - 1])
    if not 0 <= trainable_layers <= len(stages):
        raise ValueError(f"trainable_layers should be in the range [0, {len(stages)}], got "
                         f"{trainable_layers}")
    freeze_before = (len(features) if trainable_layers == 0
                     else stages[len(stages) - trainable_layers])
    for block in features[:freeze_before]:
        for p in block.parameters():
            p.requires_grad_(False)
    return SSDLiteFeatureExtractorMobileNet(features, stages[-2], norm_layer)


SSDLite320_MobileNet_V3_Large_Weights = detection_weights(
    "ssdlite320_mobilenet_v3_large", "SSDLite320_MobileNet_V3_Large_Weights",
    {"COCO_V1": coco_entry("ssdlite320_mobilenet_v3_large_coco-a79551df.pth", 3440060,
                           box_map=21.3)}, "COCO_V1")


@register_model()
def ssdlite320_mobilenet_v3_large(*, weights=None, progress: bool = True, num_classes=None,
                                  weights_backbone=None, trainable_backbone_layers=None,
                                  norm_layer=None, **kwargs) -> SSD:
    """SSDLite320 on MobileNetV3-Large (3,440,060 parameters at 91 classes); without
    ``weights_backbone`` (None by default here: nothing downloads) the backbone's last stage
    is halved (``reduced_tail``), as torchvision does and its COCO weights expect."""
    from ember.vision.models.mobilenetv3 import mobilenet_v3_large
    if "size" in kwargs:
        warnings.warn("The size of the model is already fixed; ignoring the parameter.",
                      stacklevel=2)
        kwargs.pop("size")
    backbone_weights = None if weights is not None else weights_backbone
    layers = _validate_trainable_layers(weights is not None or backbone_weights is not None,
                                        trainable_backbone_layers, 6, 6)
    norm_layer = norm_layer or partial(nn.BatchNorm2d, eps=0.001, momentum=0.03)
    body = mobilenet_v3_large(weights=backbone_weights, norm_layer=norm_layer,
                              reduced_tail=backbone_weights is None)
    if backbone_weights is None:
        _normal_init(body)
    backbone = _mobilenet_extractor(body, layers, norm_layer)
    anchors = DefaultBoxGenerator([[2, 3] for _ in range(6)], min_ratio=0.2, max_ratio=0.95)
    kwargs = {"score_thresh": 0.001, "nms_thresh": 0.55, "detections_per_img": 300,
              "topk_candidates": 300, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
              **kwargs}   # mean / std map [0, 1] to [-1, 1]
    n = num_classes_or(num_classes, 91)
    head = SSDLiteHead(backbone.out_channels, anchors.num_anchors_per_location(), n, norm_layer)
    model = SSD(backbone, anchors, (320, 320), n, head=head, **kwargs)
    return finish(model, weights)

