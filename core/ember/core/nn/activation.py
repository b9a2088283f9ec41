"""``MultiheadAttention`` with torch.nn's constructor, parameters and forward, on Ember's SDPA."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ember.core.nn.functional import scaled_dot_product_attention

__all__ = ["MultiheadAttention"]


def _to_additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """torch.nn's mask convention (bool True = not allowed) -> an additive float mask."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
            mask, float("-inf"))
    return mask.to(dtype)


def _check_mask(name: str, mask: torch.Tensor | None) -> None:
    if mask is not None and mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(f"{name} must be bool or floating point, got {mask.dtype}")


class MultiheadAttention(nn.Module):
    """Drop-in for ``torch.nn.MultiheadAttention`` (same arguments and state_dict keys).

    Self-attention uses one packed QKV projection; with ``need_weights=False`` (the inference
    fast path, as in BetterTransformer) attention weights are never formed and the attention
    runs on :func:`scaled_dot_product_attention` (memory linear in sequence length).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None,
                 dtype=None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive, got {embed_dim} and "
                             f"{num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], got {dropout}")
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim, **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = nn.Parameter(torch.empty(embed_dim, self.kdim, **factory))
            self.v_proj_weight = nn.Parameter(torch.empty(embed_dim, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty(1, 1, embed_dim, **factory))
            self.bias_v = nn.Parameter(torch.empty(1, 1, embed_dim, **factory))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            nn.init.xavier_normal_(self.bias_k)
            nn.init.xavier_normal_(self.bias_v)

    def _project(self, query, key, value):
        e = self.embed_dim
        biases = (None, None, None) if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        if self._qkv_same_embed_dim:
            if query is key and key is value:  # self-attention: one packed projection
                return F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
            w = self.in_proj_weight
            q = F.linear(query, w[:e], biases[0])
            if key is value:
                b = None if self.in_proj_bias is None else self.in_proj_bias[e:]
                return (q, *F.linear(key, w[e:], b).chunk(2, dim=-1))
            return q, F.linear(key, w[e:2 * e], biases[1]), F.linear(value, w[2 * e:], biases[2])
        return (F.linear(query, self.q_proj_weight, biases[0]),
                F.linear(key, self.k_proj_weight, biases[1]),
                F.linear(value, self.v_proj_weight, biases[2]))

    def _masks(self, attn_mask, key_padding_mask, n, length_q, length_k, dtype):
        """One SDPA mask ``[N|1, H|1, L, S]`` (bool = allowed, or additive) from torch.nn's two."""
        _check_mask("attn_mask", attn_mask)
        _check_mask("key_padding_mask", key_padding_mask)
        masks = []
        if attn_mask is not None:
            if attn_mask.dim() == 2 and attn_mask.shape == (length_q, length_k):
                masks.append(attn_mask[None, None])
            elif attn_mask.dim() == 3 and attn_mask.shape == (n * self.num_heads, length_q,
                                                               length_k):
                masks.append(attn_mask.view(n, self.num_heads, length_q, length_k))
            else:
                raise ValueError(f"attn_mask must have shape ({length_q}, {length_k}) or "
                                 f"({n * self.num_heads}, {length_q}, {length_k}), got "
                                 f"{tuple(attn_mask.shape)}")
        if key_padding_mask is not None:
            if key_padding_mask.shape != (n, length_k):
                raise ValueError(f"key_padding_mask must have shape ({n}, {length_k}), got "
                                 f"{tuple(key_padding_mask.shape)}")
            masks.append(key_padding_mask[:, None, None, :])
        if not masks:
            return None
        if all(m.dtype == torch.bool for m in masks):
            allowed = masks[0].logical_not()
            for m in masks[1:]:
                allowed = allowed & m.logical_not()
            return allowed
        total = _to_additive(masks[0], dtype)
        for m in masks[1:]:
            total = total + _to_additive(m, dtype)
        return total

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = True,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention output (and head-averaged weights when ``need_weights``), as torch.nn's."""
        if query.dim() not in (2, 3):
            raise ValueError(f"query must be (L, E) or batched 3-D, got {tuple(query.shape)}")
        if key.dim() != query.dim() or value.dim() != query.dim():
            raise ValueError("query, key and value must all be batched (3-D) or unbatched (2-D)")
        if query.shape[-1] != self.embed_dim:
            raise ValueError(f"query must have embed_dim={self.embed_dim} features, got "
                             f"{query.shape[-1]}")
        if is_causal and attn_mask is None:
            raise ValueError("attn_mask is required with the is_causal hint (pass the causal "
                             "mask, e.g. nn.Transformer.generate_square_subsequent_mask)")
        batched = query.dim() == 3
        same = query is key and key is value
        if not batched:
            query, key, value = query[None], key[None], value[None]
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask[None]
        elif not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if same:
            key = value = query
        n, length_q, _ = query.shape
        q, k, v = self._project(query, key, value)
        if self.bias_k is not None:
            k = torch.cat([k, self.bias_k.expand(n, 1, -1)], dim=1)
            v = torch.cat([v, self.bias_v.expand(n, 1, -1)], dim=1)
            attn_mask, key_padding_mask = (None if m is None else F.pad(m, (0, 1))
                                           for m in (attn_mask, key_padding_mask))
        h, d = self.num_heads, self.head_dim
        q = q.view(n, length_q, h, d).transpose(1, 2)
        k = k.view(n, -1, h, d).transpose(1, 2)
        v = v.view(n, -1, h, d).transpose(1, 2)
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(n, h, 1, d)], dim=2)
            v = torch.cat([v, v.new_zeros(n, h, 1, d)], dim=2)
            attn_mask, key_padding_mask = (None if m is None else F.pad(m, (0, 1))
                                           for m in (attn_mask, key_padding_mask))
        causal = is_causal and key_padding_mask is None and not need_weights
        mask = None if causal else self._masks(attn_mask, key_padding_mask, n, length_q,
                                               k.shape[2], q.dtype)
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = q @ k.transpose(-2, -1) / math.sqrt(d)
            if mask is not None:
                scores = (scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool
                          else scores + mask)
            weights = scores.softmax(dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, p=dropout_p)
            out = weights @ v
            if average_attn_weights:
                weights = weights.mean(dim=1)
            if not batched:
                weights = weights[0]
        else:
            out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                               is_causal=causal)
        out = self.out_proj(out.transpose(1, 2).reshape(n, length_q, self.embed_dim))
        if not batched:
            out = out[0]
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights
