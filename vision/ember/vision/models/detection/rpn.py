"""Region proposal network (Ren et al.): RPNHead and RegionProposalNetwork."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.vision.models.detection import _utils as det_utils
from ember.vision.models.detection.anchor_utils import AnchorGenerator
from ember.vision.models.detection.image_list import ImageList
from ember.vision.ops import (
    Conv2dNormActivation,
    batched_nms,
    box_iou,
    clip_boxes_to_image,
    remove_small_boxes,
)

__all__ = ["RPNHead", "RegionProposalNetwork", "AnchorGenerator",
           "concat_box_prediction_layers", "permute_and_flatten"]


class RPNHead(nn.Module):
    """``conv_depth`` 3x3 conv + ReLU layers, then per-anchor objectness logits and box
    deltas (1x1 convs), shared by all feature levels."""

    _version = 2

    def __init__(self, in_channels: int, num_anchors: int, conv_depth: int = 1) -> None:
        super().__init__()
        self.conv = nn.Sequential(*[Conv2dNormActivation(in_channels, in_channels,
                                                         kernel_size=3, norm_layer=None)
                                    for _ in range(conv_depth)])
        self.cls_logits = nn.Conv2d(in_channels, num_anchors, kernel_size=1, stride=1)
        self.bbox_pred = nn.Conv2d(in_channels, num_anchors * 4, kernel_size=1, stride=1)
        for layer in self.modules():
            if isinstance(layer, nn.Conv2d):
                nn.init.normal_(layer.weight, std=0.01)
                if layer.bias is not None:
                    nn.init.constant_(layer.bias, 0)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        if (local_metadata.get("version") or 0) < 2:   # the conv was bare, not Sequential
            for kind in ("weight", "bias"):
                old = f"{prefix}conv.{kind}"
                if old in state_dict:
                    state_dict[f"{prefix}conv.0.0.{kind}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def forward(self, x: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        logits, bbox_reg = [], []
        for feature in x:
            t = self.conv(feature)
            logits.append(self.cls_logits(t))
            bbox_reg.append(self.bbox_pred(t))
        return logits, bbox_reg


def permute_and_flatten(layer: Tensor, N: int, A: int, C: int, H: int, W: int) -> Tensor:
    """[N, A * C, H, W] -> [N, H * W * A, C] (position-major, anchor-minor)."""
    return layer.view(N, -1, C, H, W).permute(0, 3, 4, 1, 2).reshape(N, -1, C)


def concat_box_prediction_layers(box_cls: list[Tensor], box_regression: list[Tensor]
                                 ) -> tuple[Tensor, Tensor]:
    """All levels' predictions flattened and joined: [N * sum(HWA), C] and [N * sum(HWA), 4]."""
    cls_flat, reg_flat = [], []
    for cls, reg in zip(box_cls, box_regression):
        n, axc, h, w = cls.shape
        a = reg.shape[1] // 4
        cls_flat.append(permute_and_flatten(cls, n, a, axc // a, h, w))
        reg_flat.append(permute_and_flatten(reg, n, a, 4, h, w))
    return torch.cat(cls_flat, dim=1).flatten(0, -2), torch.cat(reg_flat, dim=1).reshape(-1, 4)


class RegionProposalNetwork(nn.Module):
    """Scores and regresses anchors; keeps per level the ``pre_nms_top_n`` best, clips,
    drops tiny and low-scoring boxes, NMS per level, then the ``post_nms_top_n`` best per
    image. In training also returns the objectness and box losses over sampled anchors."""

    def __init__(self, anchor_generator: AnchorGenerator, head: nn.Module,
                 fg_iou_thresh: float, bg_iou_thresh: float, batch_size_per_image: int,
                 positive_fraction: float, pre_nms_top_n: dict[str, int],
                 post_nms_top_n: dict[str, int], nms_thresh: float,
                 score_thresh: float = 0.0) -> None:
        super().__init__()
        self.anchor_generator = anchor_generator
        self.head = head
        self.box_coder = det_utils.BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))
        self.box_similarity = box_iou
        self.proposal_matcher = det_utils.Matcher(fg_iou_thresh, bg_iou_thresh,
                                                  allow_low_quality_matches=True)
        self.fg_bg_sampler = det_utils.BalancedPositiveNegativeSampler(batch_size_per_image,
                                                                       positive_fraction)
        for what, d in (("pre_nms_top_n", pre_nms_top_n), ("post_nms_top_n", post_nms_top_n)):
            if not isinstance(d, dict) or set(d) != {"training", "testing"}:
                raise ValueError(f"{what} must be a dict with keys 'training' and 'testing', "
                                 f"got {d!r}")
        self._pre_nms_top_n = pre_nms_top_n
        self._post_nms_top_n = post_nms_top_n
        self.nms_thresh = nms_thresh
        self.score_thresh = score_thresh
        self.min_size = 1e-3

    def pre_nms_top_n(self) -> int:
        return self._pre_nms_top_n["training" if self.training else "testing"]

    def post_nms_top_n(self) -> int:
        return self._post_nms_top_n["training" if self.training else "testing"]

    def assign_targets_to_anchors(self, anchors: list[Tensor], targets: list[dict[str, Tensor]]
                                  ) -> tuple[list[Tensor], list[Tensor]]:
        """Per image: anchor labels (1 object, 0 background, -1 ignored) and the matched
        ground-truth box of each anchor."""
        labels, matched_boxes = [], []
        for anchors_i, target in zip(anchors, targets):
            gt = target["boxes"]
            if gt.numel() == 0:
                boxes = torch.zeros(anchors_i.shape, dtype=torch.float32, device=anchors_i.device)
                lab = torch.zeros((anchors_i.shape[0],), dtype=torch.float32,
                                  device=anchors_i.device)
            else:
                matched = self.proposal_matcher(self.box_similarity(gt, anchors_i))
                boxes = gt[matched.clamp(min=0)]
                lab = (matched >= 0).to(dtype=torch.float32)
                lab[matched == self.proposal_matcher.BELOW_LOW_THRESHOLD] = 0.0
                lab[matched == self.proposal_matcher.BETWEEN_THRESHOLDS] = -1.0
            labels.append(lab)
            matched_boxes.append(boxes)
        return labels, matched_boxes

    def _get_top_n_idx(self, objectness: Tensor, num_anchors_per_level: list[int]) -> Tensor:
        out, offset = [], 0
        for ob in objectness.split(num_anchors_per_level, 1):
            k = det_utils._topk_min(ob, self.pre_nms_top_n(), 1)
            out.append(ob.topk(k, dim=1).indices + offset)
            offset += ob.shape[1]
        return torch.cat(out, dim=1)

    def filter_proposals(self, proposals: Tensor, objectness: Tensor,
                         image_shapes: list[tuple[int, int]], num_anchors_per_level: list[int]
                         ) -> tuple[list[Tensor], list[Tensor]]:
        n = proposals.shape[0]
        device = proposals.device
        objectness = objectness.detach().reshape(n, -1)
        levels = torch.cat([torch.full((k,), i, dtype=torch.int64, device=device)
                            for i, k in enumerate(num_anchors_per_level)], 0)
        levels = levels.reshape(1, -1).expand_as(objectness)
        top = self._get_top_n_idx(objectness, num_anchors_per_level)
        rows = torch.arange(n, device=device)[:, None]
        objectness, levels = objectness[rows, top], levels[rows, top]
        proposals = proposals[rows, top]
        probs = torch.sigmoid(objectness)
        final_boxes, final_scores = [], []
        for boxes, scores, lvl, shape in zip(proposals, probs, levels, image_shapes):
            boxes = clip_boxes_to_image(boxes, shape)
            keep = remove_small_boxes(boxes, self.min_size)
            boxes, scores, lvl = boxes[keep], scores[keep], lvl[keep]
            keep = torch.where(scores >= self.score_thresh)[0]
            boxes, scores, lvl = boxes[keep], scores[keep], lvl[keep]
            keep = batched_nms(boxes, scores, lvl, self.nms_thresh)[:self.post_nms_top_n()]
            final_boxes.append(boxes[keep])
            final_scores.append(scores[keep])
        return final_boxes, final_scores

    def compute_loss(self, objectness: Tensor, pred_bbox_deltas: Tensor, labels: list[Tensor],
                     regression_targets: list[Tensor]) -> tuple[Tensor, Tensor]:
        """BCE objectness loss over the sampled anchors; smooth-L1 (beta 1/9) of the sampled
        positives' deltas divided by the number of samples."""
        pos, neg = self.fg_bg_sampler(labels)
        pos = torch.where(torch.cat(pos, dim=0))[0]
        neg = torch.where(torch.cat(neg, dim=0))[0]
        sampled = torch.cat([pos, neg], dim=0)
        objectness = objectness.flatten()
        labels = torch.cat(labels, dim=0)
        regression_targets = torch.cat(regression_targets, dim=0)
        box_loss = F.smooth_l1_loss(pred_bbox_deltas[pos], regression_targets[pos], beta=1 / 9,
                                    reduction="sum") / sampled.numel()
        obj_loss = F.binary_cross_entropy_with_logits(objectness[sampled], labels[sampled])
        return obj_loss, box_loss

    def forward(self, images: ImageList, features: dict[str, Tensor],
                targets: list[dict[str, Tensor]] | None = None
                ) -> tuple[list[Tensor], dict[str, Tensor]]:
        """Proposals per image (XYXY in the resized image) and the losses (training only)."""
        features = list(features.values())
        objectness, deltas = self.head(features)
        anchors = self.anchor_generator(images, features)
        n = len(anchors)
        num_anchors_per_level = [o[0].shape[0] * o[0].shape[1] * o[0].shape[2]
                                 for o in objectness]
        objectness, deltas = concat_box_prediction_layers(objectness, deltas)
        proposals = self.box_coder.decode(deltas.detach(), anchors).view(n, -1, 4)
        boxes, _ = self.filter_proposals(proposals, objectness, images.image_sizes,
                                         num_anchors_per_level)
        losses: dict[str, Tensor] = {}
        if self.training:
            if targets is None:
                raise ValueError("targets are required in training mode")
            labels, matched = self.assign_targets_to_anchors(anchors, targets)
            regression_targets = self.box_coder.encode(matched, anchors)
            obj_loss, box_loss = self.compute_loss(objectness, deltas, labels,
                                                   regression_targets)
            losses = {"loss_objectness": obj_loss, "loss_rpn_box_reg": box_loss}
        return boxes, losses
