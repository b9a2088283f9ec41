"""Detection helpers shared by the detectors (torchvision.models.detection._utils names):
box coders, the IoU matcher, the positive/negative sampler, and small utilities."""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.vision.ops import (
    FrozenBatchNorm2d,
    complete_box_iou_loss,
    distance_box_iou_loss,
    generalized_box_iou_loss,
)

__all__ = ["BalancedPositiveNegativeSampler", "BoxCoder", "BoxLinearCoder", "Matcher",
           "SSDMatcher", "encode_boxes", "overwrite_eps", "retrieve_out_channels"]


class BalancedPositiveNegativeSampler:
    """Per image, a random subset of ``batch_size_per_image`` elements with at most
    ``positive_fraction`` positives (label >= 1); negatives are label 0, -1 is ignored."""

    def __init__(self, batch_size_per_image: int, positive_fraction: float) -> None:
        self.batch_size_per_image = batch_size_per_image
        self.positive_fraction = positive_fraction

    def __call__(self, matched_idxs: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """Two lists of uint8 masks (sampled positives, sampled negatives), one per image."""
        pos_masks, neg_masks = [], []
        for labels in matched_idxs:
            positive = torch.where(labels >= 1)[0]
            negative = torch.where(labels == 0)[0]
            n_pos = min(positive.numel(), int(self.batch_size_per_image * self.positive_fraction))
            n_neg = min(negative.numel(), self.batch_size_per_image - n_pos)
            # two permutations drawn in this order (torch RNG), as torchvision does
            pick_pos = positive[torch.randperm(positive.numel(), device=positive.device)[:n_pos]]
            pick_neg = negative[torch.randperm(negative.numel(), device=negative.device)[:n_neg]]
            pos_mask = torch.zeros_like(labels, dtype=torch.uint8)
            neg_mask = torch.zeros_like(labels, dtype=torch.uint8)
            pos_mask[pick_pos] = 1
            neg_mask[pick_neg] = 1
            pos_masks.append(pos_mask)
            neg_masks.append(neg_mask)
        return pos_masks, neg_masks


def _centre_size(boxes: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    w = boxes[:, 2] - boxes[:, 0]
    h = boxes[:, 3] - boxes[:, 1]
    return boxes[:, 0] + 0.5 * w, boxes[:, 1] + 0.5 * h, w, h


def encode_boxes(reference_boxes: Tensor, proposals: Tensor, weights: Tensor) -> Tensor:
    """Deltas ``(dx, dy, dw, dh)`` [N, 4] that move ``proposals`` onto ``reference_boxes``,
    each scaled by its entry of ``weights``."""
    px, py, pw, ph = _centre_size(proposals)
    gx, gy, gw, gh = _centre_size(reference_boxes)
    return torch.stack([weights[0] * (gx - px) / pw, weights[1] * (gy - py) / ph,
                        weights[2] * torch.log(gw / pw), weights[3] * torch.log(gh / ph)], 1)


class BoxCoder:
    """The R-CNN box parametrisation: centre offsets relative to the reference size and log
    size ratios, scaled by ``weights``; decoded log sizes are clamped at ``bbox_xform_clip``."""

    def __init__(self, weights: tuple[float, float, float, float],
                 bbox_xform_clip: float = math.log(1000.0 / 16)) -> None:
        self.weights = weights
        self.bbox_xform_clip = bbox_xform_clip

    def encode(self, reference_boxes: list[Tensor], proposals: list[Tensor]) -> tuple[Tensor, ...]:
        """:meth:`encode_single` over per-image lists; one tensor per image."""
        counts = [len(b) for b in reference_boxes]
        deltas = self.encode_single(torch.cat(reference_boxes, 0), torch.cat(proposals, 0))
        return deltas.split(counts, 0)

    def encode_single(self, reference_boxes: Tensor, proposals: Tensor) -> Tensor:
        weights = torch.as_tensor(self.weights, dtype=reference_boxes.dtype,
                                  device=reference_boxes.device)
        return encode_boxes(reference_boxes, proposals, weights)

    def decode(self, rel_codes: Tensor, boxes: list[Tensor]) -> Tensor:
        """Decode ``rel_codes`` [sum N_i, 4 * K] against per-image ``boxes``: [sum N_i, K, 4]."""
        if not isinstance(boxes, (list, tuple)):
            raise TypeError(f"boxes must be a list or tuple of tensors, got "
                            f"{type(boxes).__name__}")
        if not isinstance(rel_codes, Tensor):
            raise TypeError(f"rel_codes must be a Tensor, got {type(rel_codes).__name__}")
        total = sum(int(b.shape[0]) for b in boxes)
        if total > 0:
            rel_codes = rel_codes.reshape(total, -1)
        out = self.decode_single(rel_codes, torch.cat(list(boxes), 0))
        return out.reshape(total, -1, 4) if total > 0 else out

    def decode_single(self, rel_codes: Tensor, boxes: Tensor) -> Tensor:
        """Boxes [N, 4 * K] from deltas [N, 4 * K] relative to reference ``boxes`` [N, 4]."""
        cx, cy, w, h = _centre_size(boxes.to(rel_codes.dtype))
        wx, wy, ww, wh = self.weights
        dx, dy = rel_codes[:, 0::4] / wx, rel_codes[:, 1::4] / wy
        dw = torch.clamp(rel_codes[:, 2::4] / ww, max=self.bbox_xform_clip)
        dh = torch.clamp(rel_codes[:, 3::4] / wh, max=self.bbox_xform_clip)
        pcx, pcy = dx * w[:, None] + cx[:, None], dy * h[:, None] + cy[:, None]
        half_w, half_h = 0.5 * (torch.exp(dw) * w[:, None]), 0.5 * (torch.exp(dh) * h[:, None])
        return torch.stack([pcx - half_w, pcy - half_h, pcx + half_w, pcy + half_h],
                           dim=2).flatten(1)


class BoxLinearCoder:
    """FCOS's parametrisation: distances from the reference box centre to the four edges,
    divided by the reference size when ``normalize_by_size``."""

    def __init__(self, normalize_by_size: bool = True) -> None:
        self.normalize_by_size = normalize_by_size

    def _size(self, boxes: Tensor) -> Tensor:
        w = boxes[..., 2] - boxes[..., 0]
        h = boxes[..., 3] - boxes[..., 1]
        return torch.stack([w, h, w, h], -1)

    def encode(self, reference_boxes: Tensor, proposals: Tensor) -> Tensor:
        cx = 0.5 * (reference_boxes[..., 0] + reference_boxes[..., 2])
        cy = 0.5 * (reference_boxes[..., 1] + reference_boxes[..., 3])
        out = torch.stack([cx - proposals[..., 0], cy - proposals[..., 1],
                           proposals[..., 2] - cx, proposals[..., 3] - cy], -1)
        return out / self._size(reference_boxes) if self.normalize_by_size else out

    def decode(self, rel_codes: Tensor, boxes: Tensor) -> Tensor:
        boxes = boxes.to(dtype=rel_codes.dtype)
        cx = 0.5 * (boxes[..., 0] + boxes[..., 2])
        cy = 0.5 * (boxes[..., 1] + boxes[..., 3])
        if self.normalize_by_size:
            rel_codes = rel_codes * self._size(boxes)
        return torch.stack([cx - rel_codes[..., 0], cy - rel_codes[..., 1],
                            cx + rel_codes[..., 2], cy + rel_codes[..., 3]], -1)


class Matcher:
    """Assign each prediction (column of an [M gt, N pred] quality matrix) the index of its
    best ground truth when >= ``high_threshold``; -1 below ``low_threshold``, -2 between.
    ``allow_low_quality_matches`` keeps, per ground truth, its best predictions (ties too)."""

    BELOW_LOW_THRESHOLD = -1
    BETWEEN_THRESHOLDS = -2

    def __init__(self, high_threshold: float, low_threshold: float,
                 allow_low_quality_matches: bool = False) -> None:
        if low_threshold > high_threshold:
            raise ValueError(f"low_threshold ({low_threshold}) must be <= high_threshold "
                             f"({high_threshold})")
        self.high_threshold = high_threshold
        self.low_threshold = low_threshold
        self.allow_low_quality_matches = allow_low_quality_matches

    def __call__(self, match_quality_matrix: Tensor) -> Tensor:
        if match_quality_matrix.numel() == 0:
            what = "ground-truth boxes" if match_quality_matrix.shape[0] == 0 else "proposals"
            raise ValueError(f"Matcher: an image has no {what} to match during training")
        vals, matches = match_quality_matrix.max(dim=0)
        best = matches.clone() if self.allow_low_quality_matches else None
        below = vals < self.low_threshold
        between = (vals >= self.low_threshold) & (vals < self.high_threshold)
        matches[below] = self.BELOW_LOW_THRESHOLD
        matches[between] = self.BETWEEN_THRESHOLDS
        if best is not None:
            self.set_low_quality_matches_(matches, best, match_quality_matrix)
        return matches

    def set_low_quality_matches_(self, matches: Tensor, all_matches: Tensor,
                                 match_quality_matrix: Tensor) -> None:
        """Restore the match of every prediction that is some ground truth's best (ties
        included), even when its quality is below the thresholds."""
        per_gt_best = match_quality_matrix.max(dim=1).values
        preds = torch.where(match_quality_matrix == per_gt_best[:, None])[1]
        matches[preds] = all_matches[preds]


class SSDMatcher(Matcher):
    """One threshold; additionally each ground truth claims its single best prediction."""

    def __init__(self, threshold: float) -> None:
        super().__init__(threshold, threshold, allow_low_quality_matches=False)

    def __call__(self, match_quality_matrix: Tensor) -> Tensor:
        matches = super().__call__(match_quality_matrix)
        best_pred = match_quality_matrix.max(dim=1).indices
        matches[best_pred] = torch.arange(best_pred.shape[0], dtype=torch.int64,
                                          device=best_pred.device)
        return matches


def overwrite_eps(model: nn.Module, eps: float) -> None:
    """Set ``eps`` of every FrozenBatchNorm2d in ``model`` (the old COCO checkpoints were
    trained with eps 0)."""
    for module in model.modules():
        if isinstance(module, FrozenBatchNorm2d):
            module.eps = eps


def retrieve_out_channels(model: nn.Module, size: tuple[int, int]) -> list[int]:
    """Channels of each output of ``model`` on a zero image of ``size`` (width, height)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        device = next(model.parameters()).device
        out = model(torch.zeros((1, 3, size[1], size[0]), device=device))
        if isinstance(out, Tensor):
            out = OrderedDict([("0", out)])
        channels = [v.shape[1] for v in out.values()]
    model.train(was_training)
    return channels


def _topk_min(input: Tensor, orig_kval: int, axis: int) -> int:
    """``min(k, size along axis)``: a top-k that never asks for more than there is."""
    return min(orig_kval, input.size(axis))


def _box_loss(type: str, box_coder: BoxCoder, anchors_per_image: Tensor,
              matched_gt_boxes_per_image: Tensor, bbox_regression_per_image: Tensor,
              cnf: dict[str, float] | None = None) -> Tensor:
    """Summed regression loss of one image: ``l1`` / ``smooth_l1`` on encoded deltas, or an
    IoU-family loss (``giou``, ``diou``, ``ciou``) on decoded boxes."""
    cnf = cnf or {}
    if type in ("l1", "smooth_l1"):
        target = box_coder.encode_single(matched_gt_boxes_per_image, anchors_per_image)
        if type == "l1":
            return F.l1_loss(bbox_regression_per_image, target, reduction="sum")
        return F.smooth_l1_loss(bbox_regression_per_image, target, reduction="sum",
                                beta=cnf.get("beta", 1.0))
    losses = {"giou": generalized_box_iou_loss, "diou": distance_box_iou_loss,
              "ciou": complete_box_iou_loss}
    if type not in losses:
        raise ValueError(f"unsupported box loss {type!r}; expected one of l1, smooth_l1, "
                         "ciou, diou, giou")
    boxes = box_coder.decode_single(bbox_regression_per_image, anchors_per_image)
    return losses[type](boxes, matched_gt_boxes_per_image, reduction="sum",
                        eps=cnf.get("eps", 1e-7))
