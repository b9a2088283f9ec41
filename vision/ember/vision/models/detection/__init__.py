"""Detection models (torchvision.models.detection names, builders and state_dict layouts);
weights load from local files only."""

from ember.vision.models.detection.faster_rcnn import (
    FasterRCNN,
    FasterRCNN_MobileNet_V3_Large_320_FPN_Weights,
    FasterRCNN_MobileNet_V3_Large_FPN_Weights,
    FasterRCNN_ResNet50_FPN_V2_Weights,
    FasterRCNN_ResNet50_FPN_Weights,
    fasterrcnn_mobilenet_v3_large_320_fpn,
    fasterrcnn_mobilenet_v3_large_fpn,
    fasterrcnn_resnet50_fpn,
    fasterrcnn_resnet50_fpn_v2,
)
from ember.vision.models.detection.fcos import FCOS, FCOS_ResNet50_FPN_Weights, fcos_resnet50_fpn
from ember.vision.models.detection.keypoint_rcnn import (
    KeypointRCNN,
    KeypointRCNN_ResNet50_FPN_Weights,
    keypointrcnn_resnet50_fpn,
)
from ember.vision.models.detection.mask_rcnn import (
    MaskRCNN,
    MaskRCNN_ResNet50_FPN_V2_Weights,
    MaskRCNN_ResNet50_FPN_Weights,
    maskrcnn_resnet50_fpn,
    maskrcnn_resnet50_fpn_v2,
)
from ember.vision.models.detection.retinanet import (
    RetinaNet,
    RetinaNet_ResNet50_FPN_V2_Weights,
    RetinaNet_ResNet50_FPN_Weights,
    retinanet_resnet50_fpn,
    retinanet_resnet50_fpn_v2,
)
from ember.vision.models.detection.ssd import SSD, SSD300_VGG16_Weights, ssd300_vgg16
from ember.vision.models.detection.ssdlite import (
    SSDLite320_MobileNet_V3_Large_Weights,
    ssdlite320_mobilenet_v3_large,
)

__all__ = [
    "FasterRCNN", "fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2",
    "fasterrcnn_mobilenet_v3_large_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn",
    "FasterRCNN_ResNet50_FPN_Weights", "FasterRCNN_ResNet50_FPN_V2_Weights",
    "FasterRCNN_MobileNet_V3_Large_FPN_Weights", "FasterRCNN_MobileNet_V3_Large_320_FPN_Weights",
    "MaskRCNN", "maskrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn_v2",
    "MaskRCNN_ResNet50_FPN_Weights", "MaskRCNN_ResNet50_FPN_V2_Weights",
    "KeypointRCNN", "keypointrcnn_resnet50_fpn", "KeypointRCNN_ResNet50_FPN_Weights",
    "FCOS", "fcos_resnet50_fpn", "FCOS_ResNet50_FPN_Weights",
    "RetinaNet", "retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2",
    "RetinaNet_ResNet50_FPN_Weights", "RetinaNet_ResNet50_FPN_V2_Weights",
    "SSD", "ssd300_vgg16", "SSD300_VGG16_Weights",
    "ssdlite320_mobilenet_v3_large", "SSDLite320_MobileNet_V3_Large_Weights",
]
