"""Models (torchvision names and state_dict layouts); weights load from local files only.

``get_model("resnet50", num_classes=10, weights="/path/state_dict.pt")``, ``list_models()``.
"""

from ember.vision.models import mobilenetv3, resnet, retinanet, vision_transformer
from ember.vision.models._registry import get_model, list_models, load_weights, register_model
from ember.vision.models.mobilenetv3 import MobileNetV3, mobilenet_v3_large, mobilenet_v3_small
from ember.vision.models.resnet import ResNet, resnet18, resnet34, resnet50
from ember.vision.models.retinanet import RetinaNet, retinanet_resnet50_fpn
from ember.vision.models.vision_transformer import VisionTransformer, vit_b_16

__all__ = [
    "get_model", "list_models", "load_weights", "register_model",
    "ResNet", "resnet18", "resnet34", "resnet50",
    "MobileNetV3", "mobilenet_v3_large", "mobilenet_v3_small",
    "VisionTransformer", "vit_b_16", "RetinaNet", "retinanet_resnet50_fpn",
    "mobilenetv3", "resnet", "retinanet", "vision_transformer",
]
