"""Semantic segmentation models (torchvision.models.segmentation's names, layouts and
weights enums; weights load from local files only)."""

from ember.vision.models.segmentation.deeplabv3 import (
    DeepLabV3,
    DeepLabV3_MobileNet_V3_Large_Weights,
    DeepLabV3_ResNet50_Weights,
    DeepLabV3_ResNet101_Weights,
    deeplabv3_mobilenet_v3_large,
    deeplabv3_resnet50,
    deeplabv3_resnet101,
)
from ember.vision.models.segmentation.fcn import (
    FCN,
    FCN_ResNet50_Weights,
    FCN_ResNet101_Weights,
    fcn_resnet50,
    fcn_resnet101,
)
from ember.vision.models.segmentation.lraspp import (
    LRASPP,
    LRASPP_MobileNet_V3_Large_Weights,
    lraspp_mobilenet_v3_large,
)

__all__ = [
    "DeepLabV3", "DeepLabV3_ResNet50_Weights", "DeepLabV3_ResNet101_Weights",
    "DeepLabV3_MobileNet_V3_Large_Weights", "deeplabv3_mobilenet_v3_large",
    "deeplabv3_resnet50", "deeplabv3_resnet101",
    "FCN", "FCN_ResNet50_Weights", "FCN_ResNet101_Weights", "fcn_resnet50", "fcn_resnet101",
    "LRASPP", "LRASPP_MobileNet_V3_Large_Weights", "lraspp_mobilenet_v3_large",
]
