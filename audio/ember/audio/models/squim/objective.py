"""Squim objective: STOI, wide-band PESQ and SI-SDR estimated from the degraded speech alone.

A conv encoder, a dual-path RNN and one transformer + auto-pool head per metric; module names
follow torchaudio.models.SquimObjective so its checkpoints load strictly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["SquimObjective", "squim_objective_base", "squim_objective_model"]


def _wb_pesq_of_mos(x: float) -> float:
    """Maps a raw P.862 score onto the wide-band (P.862.2) MOS-LQO scale."""
    return 0.999 + (4.999 - 0.999) / (1 + math.exp(-1.3669 * x + 3.8224))


PESQ_RANGE = (1.0, _wb_pesq_of_mos(4.5))


class RangeSigmoid(nn.Module):
    """Sigmoid scaled onto ``val_range``."""

    def __init__(self, val_range: tuple[float, float] = (0.0, 1.0)) -> None:
        super().__init__()
        if not (isinstance(val_range, tuple) and len(val_range) == 2):
            raise ValueError(f"val_range must be a (low, high) tuple, got {val_range!r}")
        self.val_range = val_range
        self.sigmoid = nn.Sigmoid()

    def forward(self, x: Tensor) -> Tensor:
        low, high = self.val_range
        return self.sigmoid(x) * (high - low) + low


class Encoder(nn.Module):
    """Waveform ``(B, T)`` -> ReLU of a half-overlapping learned filterbank ``(B, C, frames)``."""

    def __init__(self, feat_dim: int = 512, win_len: int = 32) -> None:
        super().__init__()
        self.conv1d = nn.Conv1d(1, feat_dim, win_len, stride=win_len // 2, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.conv1d(x.unsqueeze(1)))


class SingleRNN(nn.Module):
    """Bidirectional RNN (``rnn_type`` of torch.nn) projected back to its input size."""

    def __init__(self, rnn_type: str, input_size: int, hidden_size: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if rnn_type not in ("RNN", "LSTM", "GRU"):
            raise ValueError(f"rnn_type must be 'RNN', 'LSTM' or 'GRU', got {rnn_type!r}")
        self.rnn_type, self.input_size, self.hidden_size = rnn_type, input_size, hidden_size
        self.rnn = getattr(nn, rnn_type)(input_size, hidden_size, 1, dropout=dropout,
                                         batch_first=True, bidirectional=True)
        self.proj = nn.Linear(hidden_size * 2, input_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.rnn(x)[0])


class DPRNN(nn.Module):
    """Dual-path RNN: RNNs within and across half-overlapping chunks, residual and normed."""

    def __init__(self, feat_dim: int = 64, hidden_dim: int = 128, num_blocks: int = 6,
                 rnn_type: str = "LSTM", d_model: int = 256, chunk_size: int = 100,
                 chunk_stride: int = 50) -> None:
        super().__init__()
        self.num_blocks = num_blocks
        self.row_rnn = nn.ModuleList([SingleRNN(rnn_type, feat_dim, hidden_dim)
                                      for _ in range(num_blocks)])
        self.col_rnn = nn.ModuleList([SingleRNN(rnn_type, feat_dim, hidden_dim)
                                      for _ in range(num_blocks)])
        self.row_norm = nn.ModuleList([nn.GroupNorm(1, feat_dim, eps=1e-8)
                                       for _ in range(num_blocks)])
        self.col_norm = nn.ModuleList([nn.GroupNorm(1, feat_dim, eps=1e-8)
                                       for _ in range(num_blocks)])
        self.conv = nn.Sequential(nn.Conv2d(feat_dim, d_model, 1), nn.PReLU())
        self.chunk_size, self.chunk_stride = chunk_size, chunk_stride

    def chunking(self, x: Tensor) -> tuple[Tensor, int]:
        """``(B, C, T)`` -> chunks ``(B, C, chunk_size, n_chunks)`` and the right padding."""
        size, hop = self.chunk_size, self.chunk_stride
        rest = size - (hop + x.shape[-1] % size) % size
        x = F.pad(x, [hop, rest + hop])
        b, c, _ = x.shape
        first = x[:, :, :-hop].reshape(b, c, -1, size)
        second = x[:, :, hop:].reshape(b, c, -1, size)
        chunks = torch.cat([first, second], dim=3).reshape(b, c, -1, size)
        return chunks.transpose(2, 3).contiguous(), rest

    def merging(self, x: Tensor, rest: int) -> Tensor:
        """Overlap-adds chunks ``(B, C, chunk_size, n_chunks)`` back to ``(B, C, T)``."""
        size, hop = self.chunk_size, self.chunk_stride
        b, c = x.shape[:2]
        x = x.transpose(2, 3).reshape(b, c, -1, 2 * size)
        out = (x[..., :size].reshape(b, c, -1)[:, :, hop:]
               + x[..., size:].reshape(b, c, -1)[:, :, :-hop])
        return (out[:, :, :-rest] if rest > 0 else out).contiguous()

    def forward(self, x: Tensor) -> Tensor:
        out, rest = self.chunking(x)
        b, _, n_in, n_chunks = out.shape
        for row_rnn, row_norm, col_rnn, col_norm in zip(self.row_rnn, self.row_norm,
                                                        self.col_rnn, self.col_norm):
            rows = row_rnn(out.permute(0, 3, 2, 1).reshape(b * n_chunks, n_in, -1))
            out = out + row_norm(rows.view(b, n_chunks, n_in, -1).permute(0, 3, 2, 1))
            cols = col_rnn(out.permute(0, 2, 3, 1).reshape(b * n_in, n_chunks, -1))
            out = out + col_norm(cols.view(b, n_in, n_chunks, -1).permute(0, 3, 1, 2))
        return self.merging(self.conv(out), rest).transpose(1, 2).contiguous()


class AutoPool(nn.Module):
    """Softmax pooling with a learned sharpness ``alpha`` (mean at 0, max as it grows)."""

    def __init__(self, pool_dim: int = 1) -> None:
        super().__init__()
        self.pool_dim = pool_dim
        self.softmax = nn.Softmax(dim=pool_dim)
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x: Tensor) -> Tensor:
        return torch.sum(x * self.softmax(x * self.alpha), dim=self.pool_dim)


class SquimObjective(nn.Module):
    """Waveforms ``(B, T)`` at 16 kHz -> ``[STOI, PESQ, SI-SDR]`` estimates, each ``(B,)``."""

    def __init__(self, encoder: nn.Module, dprnn: nn.Module, branches: nn.ModuleList) -> None:
        super().__init__()
        self.encoder, self.dprnn, self.branches = encoder, dprnn, branches

    def forward(self, x: Tensor) -> list[Tensor]:
        if x.ndim != 2:
            raise ValueError(f"input must be (batch, time), got {tuple(x.shape)}")
        x = x / (torch.mean(x**2, dim=1, keepdim=True) ** 0.5 * 20)
        features = self.dprnn(self.encoder(x))
        return [branch(features).squeeze(dim=1) for branch in self.branches]


def _create_branch(d_model: int, nhead: int, metric: str) -> nn.Module:
    """Transformer layer, auto-pool over time, then an MLP (range-bounded for STOI and PESQ)."""
    head = [nn.Linear(d_model, d_model), nn.PReLU(), nn.Linear(d_model, 1)]
    if metric == "stoi":
        head.append(RangeSigmoid())
    elif metric == "pesq":
        head.append(RangeSigmoid(val_range=PESQ_RANGE))
    return nn.Sequential(
        nn.TransformerEncoderLayer(d_model, nhead, d_model * 4, dropout=0.0, batch_first=True),
        AutoPool(), nn.Sequential(*head))


def squim_objective_model(feat_dim: int, win_len: int, d_model: int, nhead: int,
                          hidden_dim: int, num_blocks: int, rnn_type: str, chunk_size: int,
                          chunk_stride: int | None = None) -> SquimObjective:
    """A SquimObjective of the given sizes; ``chunk_stride`` defaults to half a chunk."""
    if chunk_stride is None:
        chunk_stride = chunk_size // 2
    return SquimObjective(
        Encoder(feat_dim, win_len),
        DPRNN(feat_dim, hidden_dim, num_blocks, rnn_type, d_model, chunk_size, chunk_stride),
        nn.ModuleList([_create_branch(d_model, nhead, m) for m in ("stoi", "pesq", "sisdr")]))


def squim_objective_base() -> SquimObjective:
    """torchaudio's SQUIM_OBJECTIVE configuration (untrained)."""
    return squim_objective_model(feat_dim=256, win_len=64, d_model=256, nhead=4,
                                 hidden_dim=256, num_blocks=2, rnn_type="LSTM", chunk_size=71)
