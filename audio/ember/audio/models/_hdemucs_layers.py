"""Hybrid Demucs building blocks: encoder / decoder layers and their residual DConv branch.

Names and Sequential positions follow torchaudio.models._hdemucs so checkpoints load strictly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _norm(kind: str, groups: int, channels: int) -> nn.Module:
    return nn.GroupNorm(groups, channels) if kind == "group_norm" else nn.Identity()


class _ScaledEmbedding(nn.Module):
    """Embedding stored divided by ``scale`` and multiplied back on lookup (faster learning)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, scale: float = 10.0,
                 smooth: bool = False) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)
        with torch.no_grad():
            if smooth:   # running means: neighbouring frequencies start out similar
                weight = self.embedding.weight.cumsum(0)
                self.embedding.weight.copy_(
                    weight / torch.arange(1, num_embeddings + 1).sqrt()[:, None])
            self.embedding.weight.div_(scale)
        self.scale = scale

    @property
    def weight(self) -> Tensor:
        return self.embedding.weight * self.scale

    def forward(self, x: Tensor) -> Tensor:
        return self.embedding(x) * self.scale


class _LayerScale(nn.Module):
    """Per-channel learned scale of a residual branch, starting small."""

    def __init__(self, channels: int, init: float = 0) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale[:, None] * x


class _BLSTM(nn.Module):
    """Bidirectional LSTM over ``(B, C, T)``; long inputs run in half-overlapping windows."""

    def __init__(self, dim: int, layers: int = 1, skip: bool = False) -> None:
        super().__init__()
        self.max_steps = 200
        self.lstm = nn.LSTM(bidirectional=True, num_layers=layers, hidden_size=dim,
                            input_size=dim)
        self.linear = nn.Linear(2 * dim, dim)
        self.skip = skip

    def _run(self, x: Tensor) -> Tensor:
        return self.linear(self.lstm(x.permute(2, 0, 1))[0]).permute(1, 2, 0)

    def forward(self, x: Tensor) -> Tensor:
        batch, channels, time = x.shape
        width = self.max_steps
        if time <= width:
            out = self._run(x)
        else:
            stride = width // 2
            n_frames = math.ceil(time / stride)
            padded = F.pad(x, (0, (n_frames - 1) * stride + width - time))
            frames = padded.unfold(-1, width, stride)              # (B, C, n_frames, width)
            y = self._run(frames.permute(0, 2, 1, 3).reshape(-1, channels, width))
            y = y.reshape(batch, n_frames, channels, width)
            cut = stride // 2                                       # keep each window's middle
            parts = [y[:, 0, :, :-cut]] + [y[:, k, :, cut:-cut] for k in range(1, n_frames - 1)]
            out = torch.cat(parts + [y[:, -1, :, cut:]], -1)[..., :time]
        return out + x if self.skip else out


class _LocalState(nn.Module):
    """Self-attention over time with learned per-head decays that favour nearby frames."""

    def __init__(self, channels: int, heads: int = 4, ndecay: int = 4) -> None:
        super().__init__()
        if channels % heads:
            raise ValueError(f"channels ({channels}) must be divisible by heads ({heads})")
        self.heads, self.ndecay = heads, ndecay
        self.content = nn.Conv1d(channels, channels, 1)
        self.query = nn.Conv1d(channels, channels, 1)
        self.key = nn.Conv1d(channels, channels, 1)
        self.query_decay = nn.Conv1d(channels, heads * ndecay, 1)
        if ndecay:
            with torch.no_grad():
                self.query_decay.weight.mul_(0.01)
                self.query_decay.bias.fill_(-2)
        self.proj = nn.Conv1d(channels, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        batch, _, time = x.shape
        idx = torch.arange(time, device=x.device, dtype=x.dtype)
        delta = idx[:, None] - idx[None, :]
        queries = self.query(x).view(batch, self.heads, -1, time)
        keys = self.key(x).view(batch, self.heads, -1, time)
        dots = torch.einsum("bhct,bhcs->bhts", keys, queries) / math.sqrt(keys.shape[2])
        if self.ndecay:
            decays = torch.arange(1, self.ndecay + 1, device=x.device, dtype=x.dtype)
            decay_q = torch.sigmoid(self.query_decay(x).view(batch, self.heads, -1, time)) / 2
            kernel = -decays.view(-1, 1, 1) * delta.abs() / math.sqrt(self.ndecay)
            dots = dots + torch.einsum("fts,bhfs->bhts", kernel, decay_q)
        dots = dots.masked_fill(torch.eye(time, device=x.device, dtype=torch.bool), -100)
        weights = torch.softmax(dots, dim=2)
        content = self.content(x).view(batch, self.heads, -1, time)
        result = torch.einsum("bhts,bhct->bhcs", weights, content).reshape(batch, -1, time)
        return x + self.proj(result)


class _DConv(nn.Module):
    """Residual stack of dilated conv branches (optionally with BLSTM and local attention)."""

    def __init__(self, channels: int, compress: float = 4, depth: int = 2, init: float = 1e-4,
                 norm_type: str = "group_norm", attn: bool = False, heads: int = 4,
                 ndecay: int = 4, lstm: bool = False, kernel_size: int = 3) -> None:
        super().__init__()
        if kernel_size % 2 == 0:
            raise ValueError(f"DConv kernel_size must be odd, got {kernel_size}")
        self.channels, self.compress, self.depth = channels, compress, abs(depth)
        hidden = int(channels / compress)
        self.layers = nn.ModuleList()
        for d in range(self.depth):
            dilation = 2**d if depth > 0 else 1
            extras = ([_BLSTM(hidden, layers=2, skip=True)] if lstm else []) + (
                [_LocalState(hidden, heads=heads, ndecay=ndecay)] if attn else [])
            self.layers.append(nn.Sequential(
                nn.Conv1d(channels, hidden, kernel_size, dilation=dilation,
                          padding=dilation * (kernel_size // 2)),
                _norm(norm_type, 1, hidden), nn.GELU(), *extras,
                nn.Conv1d(hidden, 2 * channels, 1), _norm(norm_type, 1, 2 * channels),
                nn.GLU(1), _LayerScale(channels, init)))

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


class _HEncLayer(nn.Module):
    """Strided conv (2-d over frequency, or 1-d over time), norm, GELU, DConv, 1x1 conv + GLU."""

    def __init__(self, chin: int, chout: int, kernel_size: int = 8, stride: int = 4,
                 norm_groups: int = 4, empty: bool = False, freq: bool = True,
                 norm_type: str = "group_norm", context: int = 0,
                 dconv_kw: dict | None = None, pad: bool = True) -> None:
        super().__init__()
        pad_val = kernel_size // 4 if pad else 0
        self.freq, self.kernel_size, self.stride = freq, kernel_size, stride
        self.empty, self.pad = empty, pad_val
        if freq:
            conv = nn.Conv2d(chin, chout, (kernel_size, 1), (stride, 1), (pad_val, 0))
        else:
            conv = nn.Conv1d(chin, chout, kernel_size, stride, pad_val)
        self.conv = conv
        self.norm1 = _norm(norm_type, norm_groups, chout)
        if empty:
            self.rewrite, self.norm2, self.dconv = nn.Identity(), nn.Identity(), nn.Identity()
        else:
            klass = nn.Conv2d if freq else nn.Conv1d
            self.rewrite = klass(chout, 2 * chout, 1 + 2 * context, 1, context)
            self.norm2 = _norm(norm_type, norm_groups, 2 * chout)
            self.dconv = _DConv(chout, **(dconv_kw or {}))

    def forward(self, x: Tensor, inject: Tensor | None = None) -> Tensor:
        if not self.freq:
            if x.ndim == 4:
                x = x.reshape(x.shape[0], -1, x.shape[-1])
            if x.shape[-1] % self.stride:
                x = F.pad(x, (0, self.stride - x.shape[-1] % self.stride))
        y = self.conv(x)
        if self.empty:
            return y
        if inject is not None:
            if inject.shape[-1] != y.shape[-1]:
                raise ValueError(f"time-branch injection has {inject.shape[-1]} frames, the "
                                 f"frequency branch {y.shape[-1]}")
            y = y + (inject[:, :, None] if inject.ndim == 3 and y.ndim == 4 else inject)
        y = F.gelu(self.norm1(y))
        if self.freq:   # DConv runs over time for every frequency row
            b, c, fr, t = y.shape
            y = self.dconv(y.permute(0, 2, 1, 3).reshape(-1, c, t))
            y = y.view(b, fr, c, t).permute(0, 2, 1, 3)
        else:
            y = self.dconv(y)
        return F.glu(self.norm2(self.rewrite(y)), dim=1)


class _HDecLayer(nn.Module):
    """Skip sum, 1x1 conv + GLU, transposed conv, norm (and GELU but in the last layer)."""

    def __init__(self, chin: int, chout: int, last: bool = False, kernel_size: int = 8,
                 stride: int = 4, norm_groups: int = 1, empty: bool = False, freq: bool = True,
                 norm_type: str = "group_norm", context: int = 1, dconv_kw: dict | None = None,
                 pad: bool = True) -> None:
        super().__init__()
        if pad and (kernel_size - stride) % 2:
            raise ValueError(f"kernel_size - stride must be even, got {kernel_size} and "
                             f"{stride}")
        self.pad = (kernel_size - stride) // 2 if pad else 0
        self.last, self.freq, self.chin, self.empty = last, freq, chin, empty
        self.stride, self.kernel_size = stride, kernel_size
        if freq:
            self.conv_tr = nn.ConvTranspose2d(chin, chout, (kernel_size, 1), (stride, 1))
        else:
            self.conv_tr = nn.ConvTranspose1d(chin, chout, kernel_size, stride)
        self.norm2 = _norm(norm_type, norm_groups, chout)
        if empty:
            self.rewrite, self.norm1 = nn.Identity(), nn.Identity()
        else:
            klass = nn.Conv2d if freq else nn.Conv1d
            self.rewrite = klass(chin, 2 * chin, 1 + 2 * context, 1, context)
            self.norm1 = _norm(norm_type, norm_groups, 2 * chin)

    def forward(self, x: Tensor, skip: Tensor | None, length: int) -> tuple[Tensor, Tensor]:
        if self.freq and x.ndim == 3:
            x = x.view(x.shape[0], self.chin, -1, x.shape[-1])
        if self.empty:
            if skip is not None:
                raise ValueError("an empty decoder layer takes no skip connection")
            y = x
        else:
            y = F.glu(self.norm1(self.rewrite(x + skip)), dim=1)
        z = self.norm2(self.conv_tr(y))
        if self.freq:
            if self.pad:
                z = z[..., self.pad: -self.pad, :]
        else:
            z = z[..., self.pad: self.pad + length]
            if z.shape[-1] != length:
                raise ValueError(f"decoded {z.shape[-1]} frames, expected {length}")
        return (z if self.last else F.gelu(z)), y
