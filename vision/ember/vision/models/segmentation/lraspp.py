"""Lite R-ASPP (Howard et al., MobileNetV3) on a dilated MobileNetV3-Large: torchvision's
layout, builder and weights."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ember.vision.models._registry import register_model
from ember.vision.models._utils import IntermediateLayerGetter
from ember.vision.models._weights import add_weights_enum
from ember.vision.models.mobilenetv3 import mobilenet_v3_large
from ember.vision.models.segmentation._utils import checkpoint_and_aux, finish, voc_weights
from ember.vision.models.segmentation.deeplabv3 import mobilenet_taps

__all__ = ["LRASPP", "LRASPPHead", "LRASPP_MobileNet_V3_Large_Weights",
           "lraspp_mobilenet_v3_large"]


class LRASPPHead(nn.Module):
    """High-level features gated by their pooled sigmoid, upsampled to the low-level ones;
    the two are classified by 1x1 convs and summed."""

    def __init__(self, low_channels: int, high_channels: int, num_classes: int,
                 inter_channels: int) -> None:
        super().__init__()
        self.cbr = nn.Sequential(nn.Conv2d(high_channels, inter_channels, 1, bias=False),
                                 nn.BatchNorm2d(inter_channels), nn.ReLU(inplace=True))
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1),
                                   nn.Conv2d(high_channels, inter_channels, 1, bias=False),
                                   nn.Sigmoid())
        self.low_classifier = nn.Conv2d(low_channels, num_classes, 1)
        self.high_classifier = nn.Conv2d(inter_channels, num_classes, 1)

    def forward(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        low, high = features["low"], features["high"]
        x = self.cbr(high) * self.scale(high)
        x = F.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=False)
        return self.low_classifier(low) + self.high_classifier(x)


class LRASPP(nn.Module):
    """Backbone returning ``{"low", "high"}`` features, the LR-ASPP head, bilinear upsampling
    to the input size; returns ``{"out": ...}``."""

    def __init__(self, backbone: nn.Module, low_channels: int, high_channels: int,
                 num_classes: int, inter_channels: int = 128) -> None:
        super().__init__()
        self.backbone = backbone
        self.classifier = LRASPPHead(low_channels, high_channels, num_classes, inter_channels)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"LRASPP expects images [N, 3, H, W], got {tuple(x.shape)}")
        out = self.classifier(self.backbone(x))
        return {"out": F.interpolate(out, size=x.shape[-2:], mode="bilinear",
                                     align_corners=False)}


LRASPP_MobileNet_V3_Large_Weights = add_weights_enum(
    "lraspp_mobilenet_v3_large", "LRASPP_MobileNet_V3_Large_Weights",
    [("COCO_WITH_VOC_LABELS_V1", voc_weights("lraspp_mobilenet_v3_large-d234d4ea.pth",
                                             3221538))], "COCO_WITH_VOC_LABELS_V1")


@register_model(backbone="mobilenet_v3_large")
def lraspp_mobilenet_v3_large(*, weights=None, progress: bool = True,
                              num_classes: int | None = None, weights_backbone=None,
                              **kwargs) -> LRASPP:
    """LR-ASPP, dilated MobileNetV3-Large backbone (3,221,538 parameters, 21 classes); it
    has no auxiliary head (``aux_loss=True`` raises, as in torchvision)."""
    if kwargs.pop("aux_loss", False):
        raise NotImplementedError("This model does not use auxiliary loss")
    state, _ = checkpoint_and_aux(weights, False)
    features, low, high = mobilenet_taps(
        mobilenet_v3_large(weights=weights_backbone, dilated=True))
    model = LRASPP(IntermediateLayerGetter(features, {str(low): "low", str(high): "high"}),
                   features[low].out_channels, features[high].out_channels, num_classes or 21,
                   **kwargs)
    return finish(model, state)
