"""The second stage of the R-CNN family: RoIHeads (box classification and regression, plus
optional mask and keypoint branches), their losses and their post-processing."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.vision.models.detection import _utils as det_utils
from ember.vision.ops import (
    batched_nms,
    box_iou,
    clip_boxes_to_image,
    remove_small_boxes,
    roi_align,
)

__all__ = ["RoIHeads", "fastrcnn_loss", "maskrcnn_loss", "maskrcnn_inference",
           "keypointrcnn_loss", "keypointrcnn_inference", "paste_masks_in_image",
           "heatmaps_to_keypoints", "keypoints_to_heatmap", "project_masks_on_boxes"]


def fastrcnn_loss(class_logits: Tensor, box_regression: Tensor, labels: list[Tensor],
                  regression_targets: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Cross-entropy over the sampled proposals, and smooth-L1 (beta 1/9) of the positives'
    deltas for their labelled class, summed and divided by the number of samples."""
    labels = torch.cat(labels, 0)
    regression_targets = torch.cat(regression_targets, 0)
    cls_loss = F.cross_entropy(class_logits, labels)
    pos = torch.where(labels > 0)[0]
    n = class_logits.shape[0]
    box_regression = box_regression.reshape(n, box_regression.size(-1) // 4, 4)
    box_loss = F.smooth_l1_loss(box_regression[pos, labels[pos]], regression_targets[pos],
                                beta=1 / 9, reduction="sum")
    return cls_loss, box_loss / labels.numel()


def maskrcnn_inference(x: Tensor, labels: list[Tensor]) -> tuple[Tensor, ...]:
    """Per image: the sigmoid mask of each detection's own class, [N_i, 1, M, M]."""
    probs = x.sigmoid()
    counts = [len(lab) for lab in labels]
    labels = torch.cat(labels)
    probs = probs[torch.arange(x.shape[0], device=labels.device), labels][:, None]
    return probs.split(counts, dim=0)


def project_masks_on_boxes(gt_masks: Tensor, boxes: Tensor, matched_idxs: Tensor,
                           M: int) -> Tensor:
    """The ground-truth mask of each proposal cropped to it and resampled to M x M."""
    rois = torch.cat([matched_idxs.to(boxes)[:, None], boxes], dim=1)
    return roi_align(gt_masks[:, None].to(rois), rois, (M, M), 1.0)[:, 0]


def maskrcnn_loss(mask_logits: Tensor, proposals: list[Tensor], gt_masks: list[Tensor],
                  gt_labels: list[Tensor], mask_matched_idxs: list[Tensor]) -> Tensor:
    """Binary cross-entropy of each positive proposal's mask logits (its class) against its
    ground-truth mask projected on the proposal."""
    size = mask_logits.shape[-1]
    labels = torch.cat([lab[idx] for lab, idx in zip(gt_labels, mask_matched_idxs)], 0)
    targets = torch.cat([project_masks_on_boxes(m, p, i, size)
                         for m, p, i in zip(gt_masks, proposals, mask_matched_idxs)], 0)
    if targets.numel() == 0:
        return mask_logits.sum() * 0
    picked = mask_logits[torch.arange(labels.shape[0], device=labels.device), labels]
    return F.binary_cross_entropy_with_logits(picked, targets)


def keypoints_to_heatmap(keypoints: Tensor, rois: Tensor, heatmap_size: int
                         ) -> tuple[Tensor, Tensor]:
    """Each keypoint's flat index in a heatmap_size^2 grid over its RoI, and whether it is
    visible and inside the RoI."""
    x0, y0 = rois[:, 0][:, None], rois[:, 1][:, None]
    sx = (heatmap_size / (rois[:, 2] - rois[:, 0]))[:, None]
    sy = (heatmap_size / (rois[:, 3] - rois[:, 1]))[:, None]
    x, y = keypoints[..., 0], keypoints[..., 1]
    on_right = x == rois[:, 2][:, None]
    on_bottom = y == rois[:, 3][:, None]
    x = ((x - x0) * sx).floor().long()
    y = ((y - y0) * sy).floor().long()
    x[on_right] = heatmap_size - 1
    y[on_bottom] = heatmap_size - 1
    inside = (x >= 0) & (y >= 0) & (x < heatmap_size) & (y < heatmap_size)
    valid = (inside & (keypoints[..., 2] > 0)).long()
    return (y * heatmap_size + x) * valid, valid


def heatmaps_to_keypoints(maps: Tensor, rois: Tensor) -> tuple[Tensor, Tensor]:
    """Keypoints [K, N, 3] (x, y, 1) at each heatmap's argmax after a bicubic resize to its
    RoI's size, and the heatmap values there [K, N]."""
    x0, y0 = rois[:, 0], rois[:, 1]
    widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
    heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
    widths_ceil, heights_ceil = widths.ceil(), heights.ceil()
    k = maps.shape[1]
    xy = torch.zeros((len(rois), 3, k), dtype=torch.float32, device=maps.device)
    scores = torch.zeros((len(rois), k), dtype=torch.float32, device=maps.device)
    for i in range(len(rois)):
        rw, rh = int(widths_ceil[i].item()), int(heights_ceil[i].item())
        roi_map = F.interpolate(maps[i][:, None], size=(rh, rw), mode="bicubic",
                                align_corners=False)[:, 0]
        w = roi_map.shape[2]
        pos = roi_map.reshape(k, -1).argmax(dim=1)
        x_int = pos % w
        y_int = torch.div(pos - x_int, w, rounding_mode="floor")
        xy[i, 0, :] = (x_int.float() + 0.5) * (widths[i] / rw) + x0[i]
        xy[i, 1, :] = (y_int.float() + 0.5) * (heights[i] / rh) + y0[i]
        xy[i, 2, :] = 1
        scores[i, :] = roi_map[torch.arange(k, device=roi_map.device), y_int, x_int]
    return xy.permute(0, 2, 1), scores


def keypointrcnn_loss(keypoint_logits: Tensor, proposals: list[Tensor],
                      gt_keypoints: list[Tensor], keypoint_matched_idxs: list[Tensor]) -> Tensor:
    """Cross-entropy over each visible keypoint's heatmap (a softmax over H * W positions)."""
    n, k, h, w = keypoint_logits.shape
    if h != w:
        raise ValueError(f"keypoint_logits must be square heatmaps, got height {h} and "
                         f"width {w}")
    heatmaps, valid = [], []
    for props, kps, idx in zip(proposals, gt_keypoints, keypoint_matched_idxs):
        hm, v = keypoints_to_heatmap(kps[idx], props, h)
        heatmaps.append(hm.view(-1))
        valid.append(v.view(-1))
    targets = torch.cat(heatmaps, 0)
    valid = torch.where(torch.cat(valid, 0).to(torch.uint8))[0]
    if targets.numel() == 0 or len(valid) == 0:
        return keypoint_logits.sum() * 0
    return F.cross_entropy(keypoint_logits.view(n * k, h * w)[valid], targets[valid])


def keypointrcnn_inference(x: Tensor, boxes: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """:func:`heatmaps_to_keypoints` per image."""
    probs, scores = [], []
    for maps, b in zip(x.split([len(b) for b in boxes], dim=0), boxes):
        p, s = heatmaps_to_keypoints(maps, b)
        probs.append(p)
        scores.append(s)
    return probs, scores


def expand_boxes(boxes: Tensor, scale: float) -> Tensor:
    """Boxes grown by ``scale`` about their centres."""
    half_w = (boxes[:, 2] - boxes[:, 0]) * 0.5 * scale
    half_h = (boxes[:, 3] - boxes[:, 1]) * 0.5 * scale
    cx = (boxes[:, 2] + boxes[:, 0]) * 0.5
    cy = (boxes[:, 3] + boxes[:, 1]) * 0.5
    return torch.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], dim=1)


def expand_masks(mask: Tensor, padding: int) -> tuple[Tensor, float]:
    """Masks zero-padded by ``padding`` on each side, and the scale that padding implies."""
    m = mask.shape[-1]
    return F.pad(mask, (padding,) * 4), float(m + 2 * padding) / m


def paste_mask_in_image(mask: Tensor, box: Tensor, im_h: int, im_w: int) -> Tensor:
    """One M x M mask resized (bilinear) to its integer box and placed in an im_h x im_w
    image of zeros."""
    bx0, by0, bx1, by1 = (int(v) for v in box.tolist())
    w, h = max(bx1 - bx0 + 1, 1), max(by1 - by0 + 1, 1)
    mask = F.interpolate(mask.expand((1, 1, -1, -1)), size=(h, w), mode="bilinear",
                         align_corners=False)[0][0]
    out = torch.zeros((im_h, im_w), dtype=mask.dtype, device=mask.device)
    x0, x1 = max(bx0, 0), min(bx1 + 1, im_w)
    y0, y1 = max(by0, 0), min(by1 + 1, im_h)
    out[y0:y1, x0:x1] = mask[(y0 - by0):(y1 - by0), (x0 - bx0):(x1 - bx0)]
    return out


def paste_masks_in_image(masks: Tensor, boxes: Tensor, img_shape, padding: int = 1) -> Tensor:
    """Mask probabilities [N, 1, M, M] pasted into full images [N, 1, H, W] (masks padded
    by ``padding`` and boxes grown to match, then boxes truncated to integers)."""
    masks, scale = expand_masks(masks, padding=padding)
    boxes = expand_boxes(boxes, scale).to(dtype=torch.int64)
    im_h, im_w = int(img_shape[0]), int(img_shape[1])
    pasted = [paste_mask_in_image(m[0], b, im_h, im_w) for m, b in zip(masks, boxes)]
    if not pasted:
        return masks.new_empty((0, 1, im_h, im_w))
    return torch.stack(pasted, dim=0)[:, None]


class RoIHeads(nn.Module):
    """Pools each proposal's features, classifies and refines it; in training samples and
    matches proposals to targets and returns losses, in evaluation returns detections. The
    mask and keypoint branches run when all three of their modules are given."""

    def __init__(self, box_roi_pool, box_head, box_predictor, fg_iou_thresh, bg_iou_thresh,
                 batch_size_per_image, positive_fraction, bbox_reg_weights, score_thresh,
                 nms_thresh, detections_per_img, mask_roi_pool=None, mask_head=None,
                 mask_predictor=None, keypoint_roi_pool=None, keypoint_head=None,
                 keypoint_predictor=None) -> None:
        super().__init__()
        self.box_similarity = box_iou
        self.proposal_matcher = det_utils.Matcher(fg_iou_thresh, bg_iou_thresh,
                                                  allow_low_quality_matches=False)
        self.fg_bg_sampler = det_utils.BalancedPositiveNegativeSampler(batch_size_per_image,
                                                                       positive_fraction)
        if bbox_reg_weights is None:
            bbox_reg_weights = (10.0, 10.0, 5.0, 5.0)
        self.box_coder = det_utils.BoxCoder(bbox_reg_weights)
        self.box_roi_pool = box_roi_pool
        self.box_head = box_head
        self.box_predictor = box_predictor
        self.score_thresh = score_thresh
        self.nms_thresh = nms_thresh
        self.detections_per_img = detections_per_img
        self.mask_roi_pool = mask_roi_pool
        self.mask_head = mask_head
        self.mask_predictor = mask_predictor
        self.keypoint_roi_pool = keypoint_roi_pool
        self.keypoint_head = keypoint_head
        self.keypoint_predictor = keypoint_predictor

    def has_mask(self) -> bool:
        return (self.mask_roi_pool is not None and self.mask_head is not None
                and self.mask_predictor is not None)

    def has_keypoint(self) -> bool:
        return (self.keypoint_roi_pool is not None and self.keypoint_head is not None
                and self.keypoint_predictor is not None)

    def assign_targets_to_proposals(self, proposals, gt_boxes, gt_labels):
        """Per image: the matched ground-truth index of each proposal (clamped to >= 0) and
        its label (0 background, -1 ignored)."""
        matched_idxs, labels = [], []
        for props, boxes, gt_lab in zip(proposals, gt_boxes, gt_labels):
            if boxes.numel() == 0:
                idx = torch.zeros((props.shape[0],), dtype=torch.int64, device=props.device)
                lab = torch.zeros((props.shape[0],), dtype=torch.int64, device=props.device)
            else:
                matched = self.proposal_matcher(box_iou(boxes, props))
                idx = matched.clamp(min=0)
                lab = gt_lab[idx].to(dtype=torch.int64)
                lab[matched == self.proposal_matcher.BELOW_LOW_THRESHOLD] = 0
                lab[matched == self.proposal_matcher.BETWEEN_THRESHOLDS] = -1
            matched_idxs.append(idx)
            labels.append(lab)
        return matched_idxs, labels

    def subsample(self, labels: list[Tensor]) -> list[Tensor]:
        pos, neg = self.fg_bg_sampler(labels)
        return [torch.where(p | n)[0] for p, n in zip(pos, neg)]

    def add_gt_proposals(self, proposals: list[Tensor], gt_boxes: list[Tensor]) -> list[Tensor]:
        return [torch.cat((p, g)) for p, g in zip(proposals, gt_boxes)]

    def check_targets(self, targets) -> None:
        if targets is None:
            raise ValueError("targets are required in training mode")
        for key in ("boxes", "labels") + (("masks",) if self.has_mask() else ()):
            if not all(key in t for t in targets):
                raise ValueError(f"every target needs a {key!r} entry")

    def select_training_samples(self, proposals: list[Tensor], targets):
        """Ground truths joined to the proposals, matched, sampled; returns the sampled
        proposals, their matched indices, labels and regression targets."""
        self.check_targets(targets)
        dtype, device = proposals[0].dtype, proposals[0].device
        gt_boxes = [t["boxes"].to(dtype) for t in targets]
        gt_labels = [t["labels"] for t in targets]
        proposals = self.add_gt_proposals(proposals, gt_boxes)
        matched_idxs, labels = self.assign_targets_to_proposals(proposals, gt_boxes, gt_labels)
        sampled = self.subsample(labels)
        matched_gt_boxes = []
        for i, keep in enumerate(sampled):
            proposals[i] = proposals[i][keep]
            labels[i] = labels[i][keep]
            matched_idxs[i] = matched_idxs[i][keep]
            boxes = gt_boxes[i]
            if boxes.numel() == 0:
                boxes = torch.zeros((1, 4), dtype=dtype, device=device)
            matched_gt_boxes.append(boxes[matched_idxs[i]])
        regression_targets = self.box_coder.encode(matched_gt_boxes, proposals)
        return proposals, matched_idxs, labels, regression_targets

    def postprocess_detections(self, class_logits: Tensor, box_regression: Tensor,
                               proposals: list[Tensor], image_shapes: list[tuple[int, int]]):
        """Per image and foreground class: decoded, clipped boxes scoring above
        ``score_thresh``, small ones removed, class-wise NMS, the best ``detections_per_img``."""
        num_classes = class_logits.shape[-1]
        counts = [p.shape[0] for p in proposals]
        pred_boxes = self.box_coder.decode(box_regression, proposals).split(counts, 0)
        pred_scores = F.softmax(class_logits, -1).split(counts, 0)
        all_boxes, all_scores, all_labels = [], [], []
        for boxes, scores, shape in zip(pred_boxes, pred_scores, image_shapes):
            boxes = clip_boxes_to_image(boxes, shape)
            labels = torch.arange(num_classes, device=class_logits.device)
            labels = labels.view(1, -1).expand_as(scores)
            # drop the background column, then one candidate per (proposal, class)
            boxes = boxes[:, 1:].reshape(-1, 4)
            scores = scores[:, 1:].reshape(-1)
            labels = labels[:, 1:].reshape(-1)
            keep = torch.where(scores > self.score_thresh)[0]
            boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
            keep = remove_small_boxes(boxes, min_size=1e-2)
            boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
            keep = batched_nms(boxes, scores, labels, self.nms_thresh)[:self.detections_per_img]
            all_boxes.append(boxes[keep])
            all_scores.append(scores[keep])
            all_labels.append(labels[keep])
        return all_boxes, all_scores, all_labels

    def _check_target_types(self, targets) -> None:
        for t in targets:
            if t["boxes"].dtype not in (torch.float, torch.double, torch.half):
                raise TypeError(f"target boxes must be floating point, got {t['boxes'].dtype}")
            if t["labels"].dtype != torch.int64:
                raise TypeError(f"target labels must be int64, got {t['labels'].dtype}")
            if self.has_keypoint() and t["keypoints"].dtype != torch.float32:
                raise TypeError(f"target keypoints must be float32, got "
                                f"{t['keypoints'].dtype}")

    def _positives(self, proposals, labels, matched_idxs):
        boxes, idxs = [], []
        for props, lab, idx in zip(proposals, labels, matched_idxs):
            pos = torch.where(lab > 0)[0]
            boxes.append(props[pos])
            idxs.append(idx[pos])
        return boxes, idxs

    def forward(self, features: dict[str, Tensor], proposals: list[Tensor],
                image_shapes: list[tuple[int, int]], targets=None):
        """Returns ``(detections, losses)``: detections (evaluation) as a list of dicts with
        boxes, labels, scores (and masks / keypoints), losses (training) as a dict."""
        if targets is not None:
            self._check_target_types(targets)
        if self.training:
            proposals, matched_idxs, labels, regression_targets = \
                self.select_training_samples(proposals, targets)
        box_features = self.box_head(self.box_roi_pool(features, proposals, image_shapes))
        class_logits, box_regression = self.box_predictor(box_features)

        result: list[dict[str, Tensor]] = []
        losses: dict[str, Tensor] = {}
        if self.training:
            loss_cls, loss_box = fastrcnn_loss(class_logits, box_regression, labels,
                                               regression_targets)
            losses = {"loss_classifier": loss_cls, "loss_box_reg": loss_box}
        else:
            boxes, scores, labels = self.postprocess_detections(class_logits, box_regression,
                                                                proposals, image_shapes)
            result = [{"boxes": b, "labels": lab, "scores": s}
                      for b, s, lab in zip(boxes, scores, labels)]

        if self.has_mask():
            if self.training:
                mask_proposals, pos_idxs = self._positives(proposals, labels, matched_idxs)
            else:
                mask_proposals = [r["boxes"] for r in result]
            mask_logits = self.mask_predictor(
                self.mask_head(self.mask_roi_pool(features, mask_proposals, image_shapes)))
            if self.training:
                losses["loss_mask"] = maskrcnn_loss(
                    mask_logits, mask_proposals, [t["masks"] for t in targets],
                    [t["labels"] for t in targets], pos_idxs)
            else:
                probs = maskrcnn_inference(mask_logits, [r["labels"] for r in result])
                for p, r in zip(probs, result):
                    r["masks"] = p

        if self.has_keypoint():
            if self.training:
                kp_proposals, pos_idxs = self._positives(proposals, labels, matched_idxs)
            else:
                kp_proposals = [r["boxes"] for r in result]
            kp_logits = self.keypoint_predictor(
                self.keypoint_head(self.keypoint_roi_pool(features, kp_proposals, image_shapes)))
            if self.training:
                losses["loss_keypoint"] = keypointrcnn_loss(
                    kp_logits, kp_proposals, [t["keypoints"] for t in targets], pos_idxs)
            else:
                kps, kp_scores = keypointrcnn_inference(kp_logits, kp_proposals)
                for kp, s, r in zip(kps, kp_scores, result):
                    r["keypoints"] = kp
                    r["keypoints_scores"] = s
        return result, losses
