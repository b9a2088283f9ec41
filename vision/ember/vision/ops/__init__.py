"""Detection ops (torchvision.ops names): box utilities, NMS, focal loss."""

from ember.vision.ops.boxes import (
    batched_nms,
    box_area,
    box_convert,
    box_iou,
    clip_boxes_to_image,
    nms,
    remove_small_boxes,
)
from ember.vision.ops.focal_loss import sigmoid_focal_loss

__all__ = ["nms", "batched_nms", "box_iou", "box_area", "box_convert", "clip_boxes_to_image",
           "remove_small_boxes", "sigmoid_focal_loss"]
