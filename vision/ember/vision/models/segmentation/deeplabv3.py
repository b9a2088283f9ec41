"""DeepLabV3 (Chen et al.) on dilated ResNet-50/101 and MobileNetV3-Large: torchvision's
layout, builders and weights."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ember.vision.models._registry import register_model
from ember.vision.models._utils import IntermediateLayerGetter
from ember.vision.models._weights import add_weights_enum
from ember.vision.models.mobilenetv3 import MobileNetV3, mobilenet_v3_large
from ember.vision.models.resnet import resnet50, resnet101
from ember.vision.models.segmentation._utils import (
    _SimpleSegmentationModel,
    checkpoint_and_aux,
    finish,
    voc_weights,
)
from ember.vision.models.segmentation.fcn import FCNHead, dilated_resnet_features

__all__ = ["DeepLabV3", "DeepLabHead", "ASPP", "DeepLabV3_ResNet50_Weights",
           "DeepLabV3_ResNet101_Weights", "DeepLabV3_MobileNet_V3_Large_Weights",
           "deeplabv3_mobilenet_v3_large", "deeplabv3_resnet50", "deeplabv3_resnet101"]


class DeepLabV3(_SimpleSegmentationModel):
    """DeepLabV3: ``{"out"}`` (and ``"aux"``) logits at the input size."""


def _conv_bn_relu(cin: int, cout: int, k: int = 1, dilation: int = 1) -> list[nn.Module]:
    pad = dilation if k == 3 else 0
    return [nn.Conv2d(cin, cout, k, padding=pad, dilation=dilation, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU()]


class ASPPConv(nn.Sequential):
    """3x3 atrous conv, BN, ReLU."""

    def __init__(self, in_channels: int, out_channels: int, dilation: int) -> None:
        super().__init__(*_conv_bn_relu(in_channels, out_channels, 3, dilation))


class ASPPPooling(nn.Sequential):
    """Image-level features: global pool, 1x1 conv, BN, ReLU, upsampled back."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(nn.AdaptiveAvgPool2d(1), *_conv_bn_relu(in_channels, out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        for module in self:
            x = module(x)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: 1x1, one 3x3 per rate and pooling branches,
    concatenated and projected (dropout 0.5)."""

    def __init__(self, in_channels: int, atrous_rates: Sequence[int],
                 out_channels: int = 256) -> None:
        super().__init__()
        branches: list[nn.Module] = [nn.Sequential(*_conv_bn_relu(in_channels, out_channels))]
        branches += [ASPPConv(in_channels, out_channels, r) for r in atrous_rates]
        branches.append(ASPPPooling(in_channels, out_channels))
        self.convs = nn.ModuleList(branches)
        self.project = nn.Sequential(*_conv_bn_relu(len(branches) * out_channels, out_channels),
                                     nn.Dropout(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(torch.cat([branch(x) for branch in self.convs], dim=1))


class DeepLabHead(nn.Sequential):
    """ASPP, 3x3 conv, BN, ReLU, 1x1 conv to classes."""

    def __init__(self, in_channels: int, num_classes: int,
                 atrous_rates: Sequence[int] = (12, 24, 36)) -> None:
        super().__init__(ASPP(in_channels, atrous_rates),
                         nn.Conv2d(256, 256, 3, padding=1, bias=False), nn.BatchNorm2d(256),
                         nn.ReLU(), nn.Conv2d(256, num_classes, 1))


DeepLabV3_ResNet50_Weights = add_weights_enum(
    "deeplabv3_resnet50", "DeepLabV3_ResNet50_Weights",
    [("COCO_WITH_VOC_LABELS_V1", voc_weights("deeplabv3_resnet50_coco-cd0a2569.pth",
                                             42004074))], "COCO_WITH_VOC_LABELS_V1")
DeepLabV3_ResNet101_Weights = add_weights_enum(
    "deeplabv3_resnet101", "DeepLabV3_ResNet101_Weights",
    [("COCO_WITH_VOC_LABELS_V1", voc_weights("deeplabv3_resnet101_coco-586e9e4e.pth",
                                             60996202))], "COCO_WITH_VOC_LABELS_V1")
DeepLabV3_MobileNet_V3_Large_Weights = add_weights_enum(
    "deeplabv3_mobilenet_v3_large", "DeepLabV3_MobileNet_V3_Large_Weights",
    [("COCO_WITH_VOC_LABELS_V1", voc_weights("deeplabv3_mobilenet_v3_large-fc3c493d.pth",
                                             11029328))], "COCO_WITH_VOC_LABELS_V1")


def mobilenet_taps(backbone: MobileNetV3) -> tuple[nn.Sequential, int, int]:
    """``backbone.features`` and the indices of its stride-8 (C2) and last (C5) blocks."""
    features = backbone.features
    stages = [0] + [i for i, b in enumerate(features) if getattr(b, "_is_cn", False)]
    stages.append(len(features) - 1)
    return features, stages[-4], stages[-1]


def _deeplab_resnet(make_backbone, weights, num_classes, aux_loss, weights_backbone):
    state, aux = checkpoint_and_aux(weights, aux_loss)
    backbone = make_backbone(weights=weights_backbone,
                             replace_stride_with_dilation=[False, True, True])
    model = DeepLabV3(dilated_resnet_features(backbone, aux),
                      DeepLabHead(2048, num_classes or 21),
                      FCNHead(1024, num_classes or 21) if aux else None)
    return finish(model, state)


@register_model(backbone="resnet50")
def deeplabv3_resnet50(*, weights=None, progress: bool = True, num_classes: int | None = None,
                       aux_loss: bool | None = None, weights_backbone=None,
                       **kwargs) -> DeepLabV3:
    """DeepLabV3, ResNet-50 backbone (42,004,074 parameters with the auxiliary head);
    ``weights_backbone`` defaults to None here (weights are local files only)."""
    return _deeplab_resnet(resnet50, weights, num_classes, aux_loss, weights_backbone)


@register_model(backbone="resnet101")
def deeplabv3_resnet101(*, weights=None, progress: bool = True, num_classes: int | None = None,
                        aux_loss: bool | None = None, weights_backbone=None,
                        **kwargs) -> DeepLabV3:
    """DeepLabV3, ResNet-101 backbone (60,996,202 parameters with the auxiliary head)."""
    return _deeplab_resnet(resnet101, weights, num_classes, aux_loss, weights_backbone)


@register_model(backbone="mobilenet_v3_large")
def deeplabv3_mobilenet_v3_large(*, weights=None, progress: bool = True,
                                 num_classes: int | None = None, aux_loss: bool | None = None,
                                 weights_backbone=None, **kwargs) -> DeepLabV3:
    """DeepLabV3, dilated MobileNetV3-Large backbone (11,029,328 parameters with the
    auxiliary head)."""
    state, aux = checkpoint_and_aux(weights, aux_loss)
    features, aux_pos, out_pos = mobilenet_taps(
        mobilenet_v3_large(weights=weights_backbone, dilated=True))
    layers = {str(out_pos): "out", **({str(aux_pos): "aux"} if aux else {})}
    n = num_classes or 21
    model = DeepLabV3(IntermediateLayerGetter(features, layers),
                      DeepLabHead(features[out_pos].out_channels, n),
                      FCNHead(features[aux_pos].out_channels, n) if aux else None)
    return finish(model, state)
