"""``TransformerEncoderLayer`` with torch.nn's signature, running on Ember's attention."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ember.core.nn.activation import MultiheadAttention

__all__ = ["TransformerEncoderLayer"]

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu,
                                                                   "gelu": F.gelu}


class TransformerEncoderLayer(nn.Module):
    """Self-attention + feed-forward block, a drop-in for ``torch.nn.TransformerEncoderLayer``.

    Same constructor, forward and state_dict keys; attention never forms its weights.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1,
                 activation: str | Callable[[torch.Tensor], torch.Tensor] = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)} or a "
                                 f"callable, got {activation!r}")
            activation = _ACTIVATIONS[activation]
        elif not callable(activation):
            raise ValueError(f"activation must be a string or a callable, got {activation!r}")
        self.activation = activation

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None = None,
                src_key_padding_mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        """One encoder layer over ``src`` (``(S, N, E)``, ``(N, S, E)`` if batch_first, or 2-D)."""
        x = src
        if self.norm_first:
            x = x + self._attention(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._feed_forward(self.norm2(x))
        else:
            x = self.norm1(x + self._attention(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._feed_forward(x))
        return x

    def _attention(self, x, attn_mask, key_padding_mask, is_causal):
        out = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                             need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(out)

    def _feed_forward(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))
