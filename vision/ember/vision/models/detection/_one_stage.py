"""The dense one-stage detector flow shared by RetinaNet and FCOS: input checks, transform,
backbone, head and anchors; losses in training, per-level top-k and NMS in evaluation."""

from __future__ import annotations

import os

import torch
from torch import Tensor, nn

from ember.vision.models._categories import COCO_CATEGORIES
from ember.vision.models._registry import load_weights
from ember.vision.models.detection._utils import overwrite_eps
from ember.vision.ops import batched_nms, clip_boxes_to_image


def check_targets(targets) -> None:
    """Training targets: a list of dicts whose ``boxes`` are float tensors [N, 4]."""
    if targets is None:
        raise ValueError("targets should not be none when in training mode")
    for target in targets:
        boxes = target.get("boxes") if isinstance(target, dict) else None
        if not isinstance(boxes, Tensor):
            raise TypeError("Expected target boxes to be of type Tensor.")
        if boxes.ndim != 2 or boxes.shape[-1] != 4:
            raise ValueError(f"Expected target boxes to be a tensor of shape [N, 4], got "
                             f"{tuple(boxes.shape)}.")


def check_degenerate(targets) -> None:
    """Every (resized) target box must have positive width and height."""
    for index, target in enumerate(targets):
        bad = target["boxes"][:, 2:] <= target["boxes"][:, :2]
        if bad.any():
            box = target["boxes"][torch.where(bad.any(dim=1))[0][0]].tolist()
            raise ValueError("All bounding boxes should have positive height and width. "
                             f"Found invalid box {box} for target at index {index}.")


def top_candidates(scores: Tensor, num_classes: int, score_thresh: float,
                   topk: int) -> tuple[Tensor, Tensor, Tensor]:
    """One level's flattened (anchor, class) scores: those above ``score_thresh``, the best
    ``topk`` of them; returns their scores, anchor indices and labels."""
    keep = scores > score_thresh
    scores = scores[keep]
    idxs = torch.where(keep)[0]
    scores, order = scores.topk(min(topk, idxs.size(0)))
    idxs = idxs[order]
    return scores, torch.div(idxs, num_classes, rounding_mode="floor"), idxs % num_classes


def nms_per_image(boxes: list[Tensor], scores: list[Tensor], labels: list[Tensor],
                  image_shape, nms_thresh: float, limit: int) -> dict[str, Tensor]:
    """The levels' boxes (clipped to the image) merged, class-wise NMS, the best ``limit``."""
    boxes_t = torch.cat([clip_boxes_to_image(b, image_shape) for b in boxes], dim=0)
    scores_t, labels_t = torch.cat(scores, dim=0), torch.cat(labels, dim=0)
    keep = batched_nms(boxes_t, scores_t, labels_t, nms_thresh)[:limit]
    return {"boxes": boxes_t[keep], "scores": scores_t[keep], "labels": labels_t[keep]}


class OneStageDetector(nn.Module):
    """``forward(images, targets=None)``: a loss dict in training, per-image detections
    ``{"boxes", "scores", "labels"}`` in evaluation. Subclasses set ``backbone``, ``head``,
    ``anchor_generator`` and ``transform`` and define ``_loss`` and
    ``postprocess_detections`` (per-level inputs unless ``_detect`` is overridden)."""

    def _loss(self, targets, head_outputs, anchors, num_anchors_per_level):
        raise NotImplementedError

    def forward(self, images: list[Tensor], targets: list[dict[str, Tensor]] | None = None):
        if self.training:
            check_targets(targets)
        original_sizes: list[tuple[int, int]] = []
        for img in images:
            if img.ndim != 3:
                raise ValueError("images must be a list of 3-D tensors [C, H, W], got shape "
                                 f"{tuple(img.shape)}")
            original_sizes.append((int(img.shape[-2]), int(img.shape[-1])))
        image_list, targets = self.transform(images, targets)
        if targets is not None:
            check_degenerate(targets)
        features = self.backbone(image_list.tensors)
        if isinstance(features, Tensor):
            features = {"0": features}
        features = list(features.values())
        head_outputs = self.head(features)
        anchors = self.anchor_generator(image_list, features)
        positions = [f.size(2) * f.size(3) for f in features]
        if self.training:
            return self._loss(targets, head_outputs, anchors, positions)
        detections = self._detect(head_outputs, anchors, image_list.image_sizes, positions)
        return self.transform.postprocess(detections, image_list.image_sizes, original_sizes)

    def _detect(self, head_outputs, anchors, image_sizes, positions):
        """Head outputs and anchors split per level, then ``postprocess_detections``."""
        per_anchor = head_outputs["cls_logits"].size(1) // sum(positions)
        sizes = [p * per_anchor for p in positions]
        split_outputs = {k: list(v.split(sizes, dim=1)) for k, v in head_outputs.items()}
        split_anchors = [list(a.split(sizes)) for a in anchors]
        return self.postprocess_detections(split_outputs, split_anchors, image_sizes)


def num_classes_or(num_classes, default: int) -> int:
    """A builder's ``num_classes`` (None: the default), checked."""
    if num_classes is None:
        return default
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
    return num_classes


def coco_entry(file: str, num_params: int, box_map: float) -> tuple[str, dict]:
    """A COCO weights entry for ``detection_weights``: torchvision's file name and meta."""
    return file, {"categories": list(COCO_CATEGORIES), "num_params": num_params,
                  "_metrics": {"COCO-val2017": {"box_map": box_map}}}


def finish(model: nn.Module, weights, eps_zero_file: str | None = None) -> nn.Module:
    """Load ``weights`` (a resolved local file or None); checkpoints named ``eps_zero_file``
    were trained with FrozenBatchNorm eps 0, as torchvision sets after loading."""
    load_weights(model, weights)
    if (eps_zero_file is not None and isinstance(weights, (str, os.PathLike))
            and os.path.basename(os.fspath(weights)) == eps_zero_file):
        overwrite_eps(model, 0.0)
    return model
