"""Conformer encoder (Gulati et al., 2020): FFN / self-attention / convolution / FFN blocks.

Self-attention keeps ``nn.MultiheadAttention``'s parameter layout (``in_proj_weight``,
``out_proj``) so torchaudio checkpoints load, and runs on Ember's
``scaled_dot_product_attention``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:
    from ember.core.nn.functional import scaled_dot_product_attention as _sdpa
except ImportError:  # ember-core built without the attention module
    from torch.nn.functional import scaled_dot_product_attention as _sdpa

__all__ = ["Conformer", "ConformerLayer"]


def _lengths_to_padding_mask(lengths: Tensor, max_length: int) -> Tensor:
    """True where a frame is padding: ``(batch, max_length)``."""
    return torch.arange(max_length, device=lengths.device)[None] >= lengths[:, None]


class _SelfAttention(nn.Module):
    """Multi-head self-attention with nn.MultiheadAttention's parameters, over SDPA."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"input_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        """``x`` is ``(T, B, D)``; ``key_padding_mask`` ``(B, T)`` is True at padding."""
        length, batch, _ = x.shape
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        heads = [t.reshape(length, batch, self.num_heads, -1).permute(1, 2, 0, 3)
                 for t in (q, k, v)]
        mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
        out = _sdpa(*heads, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        out = out.permute(2, 0, 1, 3).reshape(length, batch, self.embed_dim)
        return self.out_proj(out)


class _FeedForward(nn.Module):
    def __init__(self, input_dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.sequential = nn.Sequential(
            nn.LayerNorm(input_dim), nn.Linear(input_dim, hidden_dim), nn.SiLU(),
            nn.Dropout(dropout), nn.Linear(hidden_dim, input_dim), nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:
        return self.sequential(x)


class _Convolution(nn.Module):
    """LayerNorm -> pointwise conv + GLU -> depthwise conv -> norm -> SiLU -> pointwise conv."""

    def __init__(self, input_dim: int, num_channels: int, depthwise_kernel_size: int,
                 dropout: float = 0.0, bias: bool = False, use_group_norm: bool = False) -> None:
        super().__init__()
        if depthwise_kernel_size % 2 == 0:
            raise ValueError(f"depthwise_conv_kernel_size must be odd for 'same' padding, "
                             f"got {depthwise_kernel_size}")
        self.layer_norm = nn.LayerNorm(input_dim)
        norm = (nn.GroupNorm(1, num_channels) if use_group_norm
                else nn.BatchNorm1d(num_channels))
        self.sequential = nn.Sequential(
            nn.Conv1d(input_dim, 2 * num_channels, 1, bias=bias), nn.GLU(dim=1),
            nn.Conv1d(num_channels, num_channels, depthwise_kernel_size,
                      padding=(depthwise_kernel_size - 1) // 2, groups=num_channels, bias=bias),
            norm, nn.SiLU(), nn.Conv1d(num_channels, input_dim, 1, bias=bias),
            nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:  # (B, T, D)
        return self.sequential(self.layer_norm(x).transpose(1, 2)).transpose(1, 2)


class ConformerLayer(nn.Module):
    """Half-step FFN, self-attention, convolution, half-step FFN, final LayerNorm; ``(T, B, D)``."""

    def __init__(self, input_dim: int, ffn_dim: int, num_attention_heads: int,
                 depthwise_conv_kernel_size: int, dropout: float = 0.0,
                 use_group_norm: bool = False, convolution_first: bool = False) -> None:
        super().__init__()
        self.ffn1 = _FeedForward(input_dim, ffn_dim, dropout)
        self.self_attn_layer_norm = nn.LayerNorm(input_dim)
        self.self_attn = _SelfAttention(input_dim, num_attention_heads, dropout)
        self.self_attn_dropout = nn.Dropout(dropout)
        self.conv_module = _Convolution(input_dim, input_dim, depthwise_conv_kernel_size,
                                        dropout, bias=True, use_group_norm=use_group_norm)
        self.ffn2 = _FeedForward(input_dim, ffn_dim, dropout)
        self.final_layer_norm = nn.LayerNorm(input_dim)
        self.convolution_first = convolution_first

    def _conv(self, x: Tensor) -> Tensor:
        return x + self.conv_module(x.transpose(0, 1)).transpose(0, 1)

    def forward(self, input: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        x = 0.5 * self.ffn1(input) + input
        if self.convolution_first:
            x = self._conv(x)
        attn = self.self_attn(self.self_attn_layer_norm(x), key_padding_mask)
        x = self.self_attn_dropout(attn) + x
        if not self.convolution_first:
            x = self._conv(x)
        x = 0.5 * self.ffn2(x) + x
        return self.final_layer_norm(x)


class Conformer(nn.Module):
    """Frames ``(B, T, input_dim)`` with valid ``lengths`` ``(B,)`` -> (frames, lengths)."""

    def __init__(self, input_dim: int, num_heads: int, ffn_dim: int, num_layers: int,
                 depthwise_conv_kernel_size: int, dropout: float = 0.0,
                 use_group_norm: bool = False, convolution_first: bool = False) -> None:
        super().__init__()
        self.conformer_layers = nn.ModuleList([
            ConformerLayer(input_dim, ffn_dim, num_heads, depthwise_conv_kernel_size,
                           dropout=dropout, use_group_norm=use_group_norm,
                           convolution_first=convolution_first)
            for _ in range(num_layers)])

    def forward(self, input: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        if input.ndim != 3 or lengths.shape != input.shape[:1]:
            raise ValueError(f"input must be (B, T, D) and lengths (B,), got "
                             f"{tuple(input.shape)} and {tuple(lengths.shape)}")
        mask = _lengths_to_padding_mask(lengths, input.shape[1])
        x = input.transpose(0, 1)
        for layer in self.conformer_layers:
            x = layer(x, mask)
        return x.transpose(0, 1), lengths
