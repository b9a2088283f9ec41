"""GeneralizedRCNN: transform -> backbone -> RPN -> RoI heads -> postprocess."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import Tensor, nn

__all__ = ["GeneralizedRCNN"]


def _check_targets(targets) -> None:
    if targets is None:
        raise ValueError("targets are required in training mode")
    for t in targets:
        boxes = t["boxes"]
        if not isinstance(boxes, Tensor):
            raise TypeError(f"target boxes must be a Tensor, got {type(boxes).__name__}")
        if boxes.ndim != 2 or boxes.shape[-1] != 4:
            raise ValueError(f"target boxes must have shape [N, 4], got {tuple(boxes.shape)}")


class GeneralizedRCNN(nn.Module):
    """The R-CNN skeleton; ``forward(images, targets=None)`` returns the loss dict in
    training and a list of per-image detection dicts in evaluation."""

    def __init__(self, backbone: nn.Module, rpn: nn.Module, roi_heads: nn.Module,
                 transform: nn.Module) -> None:
        super().__init__()
        self.transform = transform
        self.backbone = backbone
        self.rpn = rpn
        self.roi_heads = roi_heads

    def forward(self, images: list[Tensor], targets: list[dict[str, Tensor]] | None = None):
        if self.training:
            _check_targets(targets)
        original_sizes = []
        for img in images:
            if img.dim() < 2:
                raise ValueError(f"images must end in (H, W), got shape {tuple(img.shape)}")
            original_sizes.append((int(img.shape[-2]), int(img.shape[-1])))
        images, targets = self.transform(images, targets)
        if targets is not None:
            for i, t in enumerate(targets):
                bad = t["boxes"][:, 2:] <= t["boxes"][:, :2]
                if bad.any():
                    first = t["boxes"][torch.where(bad.any(dim=1))[0][0]].tolist()
                    raise ValueError(f"all boxes need positive width and height; target {i} "
                                     f"has box {first}")
        features = self.backbone(images.tensors)
        if isinstance(features, Tensor):
            features = OrderedDict([("0", features)])
        proposals, proposal_losses = self.rpn(images, features, targets)
        detections, detector_losses = self.roi_heads(features, proposals, images.image_sizes,
                                                     targets)
        detections = self.transform.postprocess(detections, images.image_sizes, original_sizes)
        if self.training:
            return {**detector_losses, **proposal_losses}
        return detections
