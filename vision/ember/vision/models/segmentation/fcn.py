"""FCN (Long et al.) on dilated ResNet-50/101: torchvision's layout, builders and weights."""

from __future__ import annotations

from torch import nn

from ember.vision.models._registry import register_model
from ember.vision.models._utils import IntermediateLayerGetter
from ember.vision.models._weights import add_weights_enum
from ember.vision.models.resnet import ResNet, resnet50, resnet101
from ember.vision.models.segmentation._utils import (
    _SimpleSegmentationModel,
    checkpoint_and_aux,
    finish,
    voc_weights,
)

__all__ = ["FCN", "FCNHead", "FCN_ResNet50_Weights", "FCN_ResNet101_Weights", "fcn_resnet50",
           "fcn_resnet101"]


class FCN(_SimpleSegmentationModel):
    """Fully convolutional network: ``{"out"}`` (and ``"aux"``) logits at the input size."""


class FCNHead(nn.Sequential):
    """3x3 conv to a quarter of the channels, BN, ReLU, dropout 0.1, 1x1 conv to classes."""

    def __init__(self, in_channels: int, channels: int) -> None:
        inter = in_channels // 4
        super().__init__(nn.Conv2d(in_channels, inter, 3, padding=1, bias=False),
                         nn.BatchNorm2d(inter), nn.ReLU(), nn.Dropout(0.1),
                         nn.Conv2d(inter, channels, 1))


FCN_ResNet50_Weights = add_weights_enum(
    "fcn_resnet50", "FCN_ResNet50_Weights",
    [("COCO_WITH_VOC_LABELS_V1", voc_weights("fcn_resnet50_coco-1167a1af.pth", 35322218))],
    "COCO_WITH_VOC_LABELS_V1")
FCN_ResNet101_Weights = add_weights_enum(
    "fcn_resnet101", "FCN_ResNet101_Weights",
    [("COCO_WITH_VOC_LABELS_V1", voc_weights("fcn_resnet101_coco-7ecb50ca.pth", 54314346))],
    "COCO_WITH_VOC_LABELS_V1")


def dilated_resnet_features(backbone: ResNet, aux: bool) -> IntermediateLayerGetter:
    """layer4 as "out" (and layer3 as "aux") of a ResNet with strides 2 and 4 dilated."""
    layers = {"layer4": "out", **({"layer3": "aux"} if aux else {})}
    return IntermediateLayerGetter(backbone, layers)


def _fcn(make_backbone, weights, num_classes, aux_loss, weights_backbone) -> FCN:
    state, aux = checkpoint_and_aux(weights, aux_loss)
    backbone = make_backbone(weights=weights_backbone,
                             replace_stride_with_dilation=[False, True, True])
    model = FCN(dilated_resnet_features(backbone, aux), FCNHead(2048, num_classes or 21),
                FCNHead(1024, num_classes or 21) if aux else None)
    return finish(model, state)


@register_model(backbone="resnet50")
def fcn_resnet50(*, weights=None, progress: bool = True, num_classes: int | None = None,
                 aux_loss: bool | None = None, weights_backbone=None, **kwargs) -> FCN:
    """FCN, ResNet-50 backbone (35,322,218 parameters with the auxiliary head, 21 classes);
    ``weights_backbone`` defaults to None here (weights are local files only)."""
    return _fcn(resnet50, weights, num_classes, aux_loss, weights_backbone)


@register_model(backbone="resnet101")
def fcn_resnet101(*, weights=None, progress: bool = True, num_classes: int | None = None,
                  aux_loss: bool | None = None, weights_backbone=None, **kwargs) -> FCN:
    """FCN, ResNet-101 backbone (54,314,346 parameters with the auxiliary head, 21 classes)."""
    return _fcn(resnet101, weights, num_classes, aux_loss, weights_backbone)
