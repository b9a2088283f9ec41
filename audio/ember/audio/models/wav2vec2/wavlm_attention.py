"""WavLM self-attention: a bucketed relative position bias, gated per query (Chen et al., 2022).

Parameters follow torchaudio's layout (``attention.in_proj_weight``, ``attention.out_proj``,
``rel_attn_embed``, ``gru_rel_pos_linear``, ``gru_rel_pos_const``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.audio.models.wav2vec2.components import _sdpa

__all__ = ["WavLMSelfAttention"]


class _Projections(nn.Module):
    """The packed q/k/v and output projections, laid out as nn.MultiheadAttention's."""

    def __init__(self, embed_dim: int, bias: bool) -> None:
        super().__init__()
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        nn.init.xavier_uniform_(self.in_proj_weight)
        if bias:
            nn.init.zeros_(self.out_proj.bias)


class WavLMSelfAttention(nn.Module):
    """Self-attention plus a relative position bias computed by the first layer and shared."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 has_relative_attention_bias: bool = False, num_buckets: int = 32,
                 max_distance: int = 128, gru_rel_pos: bool = True) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if num_buckets < 4 or max_distance <= num_buckets // 4:
            raise ValueError(f"need num_buckets >= 4 and max_distance > num_buckets // 4, got "
                             f"{num_buckets} and {max_distance}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.has_relative_attention_bias = has_relative_attention_bias
        self.rel_attn_embed = (nn.Embedding(num_buckets, num_heads)
                               if has_relative_attention_bias else None)
        self.attention = _Projections(embed_dim, bias)
        self.gru_rel_pos = gru_rel_pos
        if gru_rel_pos:
            self.gru_rel_pos_linear = nn.Linear(self.head_dim, 8)
            self.gru_rel_pos_const = nn.Parameter(torch.ones(1, num_heads, 1, 1))

    def _buckets(self, relative: Tensor) -> Tensor:
        """Bidirectional buckets: exact for small distances, logarithmic up to max_distance."""
        half = self.num_buckets // 2
        exact = half // 2
        buckets = (relative > 0).long() * half
        distance = relative.abs()
        # clamp keeps log() finite where the exact branch is taken anyway
        far = exact + (torch.log(distance.clamp(min=1).float() / exact)
                       / math.log(self.max_distance / exact) * (half - exact)).long()
        far = far.clamp(max=half - 1)
        return buckets + torch.where(distance < exact, distance, far)

    def compute_bias(self, query_length: int, key_length: int) -> Tensor:
        """Relative position bias ``(num_heads, query_length, key_length)``."""
        if self.rel_attn_embed is None:
            raise RuntimeError("this layer has no relative attention bias of its own")
        device = self.rel_attn_embed.weight.device
        relative = (torch.arange(key_length, device=device)[None, :]
                    - torch.arange(query_length, device=device)[:, None])
        return self.rel_attn_embed(self._buckets(relative)).permute(2, 0, 1)

    def forward(self, query: Tensor, key_padding_mask: Tensor | None = None,
                position_bias: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``query`` ``(B, T, D)``; returns the output and the (ungated) position bias."""
        if query.ndim != 3 or query.shape[2] != self.embed_dim:
            raise ValueError(f"expected (batch, time, {self.embed_dim}), got "
                             f"{tuple(query.shape)}")
        batch, length, _ = query.shape
        if self.rel_attn_embed is not None and position_bias is None:
            position_bias = self.compute_bias(length, length)[None].repeat(batch, 1, 1, 1)
        bias = None
        if position_bias is not None:
            bias = position_bias
            if self.gru_rel_pos:
                heads = query.view(batch, length, self.num_heads, -1).permute(0, 2, 1, 3)
                gates = self.gru_rel_pos_linear(heads).view(batch, self.num_heads, length, 2, 4)
                gate_a, gate_b = torch.sigmoid(gates.sum(-1)).chunk(2, dim=-1)
                gate = gate_a * (gate_b * self.gru_rel_pos_const - 1.0) + 2.0
                bias = gate.view(batch, self.num_heads, -1, 1) * position_bias
            bias = bias.view(batch, self.num_heads, length, length)
            if key_padding_mask is not None:
                bias = bias.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        elif key_padding_mask is not None:
            bias = key_padding_mask[:, None, None, :].logical_not()
        qkv = F.linear(query, self.attention.in_proj_weight, self.attention.in_proj_bias)
        shape = (batch, length, self.num_heads, self.head_dim)
        q, k, v = (t.view(shape).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        out = _sdpa(q, k, v, attn_mask=bias, dropout_p=self.dropout if self.training else 0.0)
        out = out.transpose(1, 2).reshape(batch, length, self.embed_dim)
        return self.attention.out_proj(out), position_bias
