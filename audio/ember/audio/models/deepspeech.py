"""DeepSpeech: clipped-ReLU MLP + bidirectional RNN acoustic model (Hannun et al., 2014)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DeepSpeech"]


class FullyConnected(nn.Module):
    """Linear -> ReLU clipped at ``relu_max_clip`` -> dropout."""

    def __init__(self, n_feature: int, n_hidden: int, dropout: float,
                 relu_max_clip: int = 20) -> None:
        super().__init__()
        self.fc = nn.Linear(n_feature, n_hidden, bias=True)
        self.relu_max_clip, self.dropout = relu_max_clip, dropout

    def forward(self, x: Tensor) -> Tensor:
        x = torch.clamp(self.fc(x), 0, self.relu_max_clip)
        return F.dropout(x, self.dropout, self.training) if self.dropout else x


class DeepSpeech(nn.Module):
    """Features ``(batch, channel=1, time, n_feature)`` -> log-probs ``(batch, time, n_class)``."""

    def __init__(self, n_feature: int, n_hidden: int = 2048, n_class: int = 40,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.n_hidden = n_hidden
        self.fc1 = FullyConnected(n_feature, n_hidden, dropout)
        self.fc2 = FullyConnected(n_hidden, n_hidden, dropout)
        self.fc3 = FullyConnected(n_hidden, n_hidden, dropout)
        self.bi_rnn = nn.RNN(n_hidden, n_hidden, num_layers=1, nonlinearity="relu",
                             bidirectional=True)
        self.fc4 = FullyConnected(n_hidden, n_hidden, dropout)
        self.out = nn.Linear(n_hidden, n_class)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4 or x.shape[1] != 1:
            raise ValueError(f"x must be (batch, 1, time, n_feature), got {tuple(x.shape)}")
        x = self.fc3(self.fc2(self.fc1(x))).squeeze(1).transpose(0, 1)  # (T, N, H)
        x, _ = self.bi_rnn(x)
        x = x[..., : self.n_hidden] + x[..., self.n_hidden:]  # sum the two directions
        x = self.out(self.fc4(x)).permute(1, 0, 2)
        return F.log_softmax(x, dim=2)
