"""Detection ops and layers (torchvision.ops names): box utilities and IoU variants, NMS,
losses, RoI pooling (custom ops with native CPU kernels), FPN, regularisers, model blocks."""

from ember.vision.ops.box_losses import (
    complete_box_iou_loss,
    distance_box_iou_loss,
    generalized_box_iou_loss,
)
from ember.vision.ops.boxes import (
    batched_nms,
    box_area,
    box_convert,
    box_iou,
    clip_boxes_to_image,
    nms,
    remove_small_boxes,
)
from ember.vision.ops.deform_conv import DeformConv2d, deform_conv2d
from ember.vision.ops.feature_pyramid_network import FeaturePyramidNetwork
from ember.vision.ops.focal_loss import sigmoid_focal_loss
from ember.vision.ops.iou import (
    complete_box_iou,
    distance_box_iou,
    generalized_box_iou,
    masks_to_boxes,
)
from ember.vision.ops.layers import (
    MLP,
    Conv2dNormActivation,
    Conv3dNormActivation,
    FrozenBatchNorm2d,
    Permute,
    SqueezeExcitation,
)
from ember.vision.ops.poolers import MultiScaleRoIAlign
from ember.vision.ops.ps_roi_align import PSRoIAlign, ps_roi_align
from ember.vision.ops.ps_roi_pool import PSRoIPool, ps_roi_pool
from ember.vision.ops.regularization import (
    DropBlock2d,
    DropBlock3d,
    StochasticDepth,
    drop_block2d,
    drop_block3d,
    stochastic_depth,
)
from ember.vision.ops.roi_align import RoIAlign, roi_align
from ember.vision.ops.roi_pool import RoIPool, roi_pool

__all__ = ["nms", "batched_nms", "box_iou", "box_area", "box_convert", "clip_boxes_to_image",
           "remove_small_boxes", "sigmoid_focal_loss", "masks_to_boxes",
           "generalized_box_iou", "distance_box_iou", "complete_box_iou",
           "generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss",
           "roi_align", "RoIAlign", "roi_pool", "RoIPool", "ps_roi_align", "PSRoIAlign",
           "ps_roi_pool", "PSRoIPool", "MultiScaleRoIAlign", "FeaturePyramidNetwork",
           "deform_conv2d", "DeformConv2d", "FrozenBatchNorm2d", "Conv2dNormActivation",
           "Conv3dNormActivation", "SqueezeExcitation", "MLP", "Permute",
           "stochastic_depth", "StochasticDepth", "drop_block2d", "DropBlock2d",
           "drop_block3d", "DropBlock3d"]
