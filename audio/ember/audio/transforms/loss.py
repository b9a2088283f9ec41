"""Loss modules with torchaudio.transforms' names: the RNN Transducer loss."""

from __future__ import annotations

from torch import Tensor, nn

from ember.audio.functional.rnnt import rnnt_loss

__all__ = ["RNNTLoss"]


class RNNTLoss(nn.Module):
    """:func:`ember.audio.functional.rnnt_loss` with its options fixed at construction."""

    def __init__(self, blank: int = -1, clamp: float = -1.0, reduction: str = "mean",
                 fused_log_softmax: bool = True):
        super().__init__()
        self.blank, self.clamp = blank, clamp
        self.reduction, self.fused_log_softmax = reduction, fused_log_softmax

    def forward(self, logits: Tensor, targets: Tensor, logit_lengths: Tensor,
                target_lengths: Tensor):
        return rnnt_loss(logits, targets, logit_lengths, target_lengths, self.blank, self.clamp,
                         self.reduction, self.fused_log_softmax)
