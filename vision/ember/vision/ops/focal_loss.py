"""Sigmoid focal loss (Lin et al., RetinaNet)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sigmoid_focal_loss(inputs: torch.Tensor, targets: torch.Tensor, alpha: float = 0.25,
                       gamma: float = 2.0, reduction: str = "none") -> torch.Tensor:
    """``-alpha_t (1 - p_t)^gamma log(p_t)`` on logits; ``reduction`` none / mean / sum."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    p = torch.sigmoid(inputs)
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss
