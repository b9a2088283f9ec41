"""Models (torchvision names and state_dict layouts); weights load from local files only.

``get_model("resnet50", num_classes=10, weights="/path/state_dict.pt")``, ``list_models()``;
torchvision's weights enums: ``resnet50(weights=ResNet50_Weights.DEFAULT)`` loads
``resnet50-11ad3fa6.pth`` from ``weights_dir=`` or ``$EMBER_WEIGHTS_DIR`` (never downloads).
"""

# the modules; alexnet and googlenet name their builders (imported below), as in torchvision
from ember.vision.models import (
    convnext,
    densenet,
    efficientnet,
    inception,
    maxvit,
    mnasnet,
    mobilenetv2,
    mobilenetv3,
    regnet,
    resnet,
    retinanet,
    shufflenetv2,
    squeezenet,
    swin_transformer,
    vgg,
    vision_transformer,
)
from ember.vision.models._registry import get_model, list_models, load_weights, register_model
from ember.vision.models._weights import (
    CLASSIFICATION_WEIGHTS,
    ImageClassification,
    Weights,
    WeightsEnum,
    get_model_weights,
    get_weight,
)
from ember.vision.models.alexnet import AlexNet, alexnet
from ember.vision.models.convnext import (
    ConvNeXt,
    convnext_base,
    convnext_large,
    convnext_small,
    convnext_tiny,
)
from ember.vision.models.densenet import (
    DenseNet,
    densenet121,
    densenet161,
    densenet169,
    densenet201,
)
from ember.vision.models.efficientnet import (
    EfficientNet,
    efficientnet_b0,
    efficientnet_b1,
    efficientnet_b2,
    efficientnet_b3,
    efficientnet_b4,
    efficientnet_b5,
    efficientnet_b6,
    efficientnet_b7,
    efficientnet_v2_l,
    efficientnet_v2_m,
    efficientnet_v2_s,
)
from ember.vision.models.googlenet import GoogLeNet, googlenet
from ember.vision.models.inception import Inception3, inception_v3
from ember.vision.models.maxvit import MaxVit, maxvit_t
from ember.vision.models.mnasnet import MNASNet, mnasnet0_5, mnasnet0_75, mnasnet1_0, mnasnet1_3
from ember.vision.models.mobilenetv2 import MobileNetV2, mobilenet_v2
from ember.vision.models.mobilenetv3 import MobileNetV3, mobilenet_v3_large, mobilenet_v3_small
from ember.vision.models.regnet import (
    RegNet,
    regnet_x_1_6gf,
    regnet_x_3_2gf,
    regnet_x_8gf,
    regnet_x_16gf,
    regnet_x_32gf,
    regnet_x_400mf,
    regnet_x_800mf,
    regnet_y_1_6gf,
    regnet_y_3_2gf,
    regnet_y_8gf,
    regnet_y_16gf,
    regnet_y_32gf,
    regnet_y_128gf,
    regnet_y_400mf,
    regnet_y_800mf,
)
from ember.vision.models.resnet import (
    ResNet,
    resnet18,
    resnet34,
    resnet50,
    resnet101,
    resnet152,
    resnext50_32x4d,
    resnext101_32x8d,
    resnext101_64x4d,
    wide_resnet50_2,
    wide_resnet101_2,
)
from ember.vision.models.retinanet import RetinaNet, retinanet_resnet50_fpn
from ember.vision.models.shufflenetv2 import (
    ShuffleNetV2,
    shufflenet_v2_x0_5,
    shufflenet_v2_x1_0,
    shufflenet_v2_x1_5,
    shufflenet_v2_x2_0,
)
from ember.vision.models.squeezenet import SqueezeNet, squeezenet1_0, squeezenet1_1
from ember.vision.models.swin_transformer import (
    SwinTransformer,
    swin_b,
    swin_s,
    swin_t,
    swin_v2_b,
    swin_v2_s,
    swin_v2_t,
)
from ember.vision.models.vgg import (
    VGG,
    vgg11,
    vgg11_bn,
    vgg13,
    vgg13_bn,
    vgg16,
    vgg16_bn,
    vgg19,
    vgg19_bn,
)
from ember.vision.models.vision_transformer import (
    VisionTransformer,
    vit_b_16,
    vit_b_32,
    vit_h_14,
    vit_l_16,
    vit_l_32,
)

__all__ = [
    "get_model", "list_models", "load_weights", "register_model",
    "AlexNet", "alexnet",
    "ConvNeXt", "convnext_tiny", "convnext_small", "convnext_base", "convnext_large",
    "DenseNet", "densenet121", "densenet161", "densenet169", "densenet201",
    "EfficientNet", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
    "efficientnet_b4", "efficientnet_b5", "efficientnet_b6", "efficientnet_b7",
    "efficientnet_v2_s", "efficientnet_v2_m", "efficientnet_v2_l",
    "GoogLeNet", "googlenet",
    "Inception3", "inception_v3",
    "MaxVit", "maxvit_t",
    "MNASNet", "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3",
    "MobileNetV2", "mobilenet_v2",
    "MobileNetV3", "mobilenet_v3_large", "mobilenet_v3_small",
    "RegNet", "regnet_y_400mf", "regnet_y_800mf", "regnet_y_1_6gf", "regnet_y_3_2gf",
    "regnet_y_8gf", "regnet_y_16gf", "regnet_y_32gf", "regnet_y_128gf", "regnet_x_400mf",
    "regnet_x_800mf", "regnet_x_1_6gf", "regnet_x_3_2gf", "regnet_x_8gf", "regnet_x_16gf",
    "regnet_x_32gf",
    "ResNet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d",
    "resnext101_32x8d", "resnext101_64x4d", "wide_resnet50_2", "wide_resnet101_2",
    "RetinaNet", "retinanet_resnet50_fpn",
    "ShuffleNetV2", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5",
    "shufflenet_v2_x2_0",
    "SqueezeNet", "squeezenet1_0", "squeezenet1_1",
    "SwinTransformer", "swin_t", "swin_s", "swin_b", "swin_v2_t", "swin_v2_s", "swin_v2_b",
    "VGG", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "VisionTransformer", "vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14",
    "convnext", "densenet", "efficientnet", "inception", "maxvit", "mnasnet", "mobilenetv2",
    "mobilenetv3", "regnet", "resnet", "retinanet", "shufflenetv2", "squeezenet",
    "swin_transformer", "vgg", "vision_transformer",
]

# the classification ``*_Weights`` enums, here and in their builders' modules, as in
# torchvision (the task packages below define and export their own)
for _model, _enum in CLASSIFICATION_WEIGHTS.items():
    globals()[_enum.__name__] = _enum
    setattr(__import__(globals()[_model].__module__, fromlist=["_"]), _enum.__name__, _enum)
__all__ += ["Weights", "WeightsEnum", "ImageClassification", "get_weight", "get_model_weights",
            *(e.__name__ for e in CLASSIFICATION_WEIGHTS.values())]
del _model, _enum

# task packages, as torchvision.models.segmentation etc. (their builders register on import)
from ember.vision.models import detection, segmentation, video  # noqa: E402

__all__ += ["detection", "segmentation", "video"]
