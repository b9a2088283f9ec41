"""Tiled online-softmax attention in torch ops: forward and backward, memory linear in length.

Every (query block x key block) tile is computed for all N*H heads at once with batched
matmuls, so the work is a few large GEMMs plus in-place elementwise passes per tile. Only the
output, the per-row log-sum-exp and the gradients are full size; the L x S score matrix is
never formed. Causal tiles entirely above the diagonal are skipped. Dropout masks come from a
counter-based generator (:mod:`attention_dropout`), so the backward replays them. Written for
CPU but device-agnostic: CUDA uses it for float64 and head dims beyond the Triton kernels.
"""

from __future__ import annotations

import torch

from ember.core.nn.attention_dropout import keep_scale
from ember.core.nn.attention_math import repeat_kv

# Tile sizes (rows of queries x columns of keys); the key block shrinks for many heads so a
# score tile stays around TILE_ELEMENTS floats.
BLOCK_Q = 256
BLOCK_K = 1024
TILE_ELEMENTS = 1 << 21

_NEG_INF = float("-inf")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _blocks(heads: int, length_q: int, length_k: int) -> tuple[int, int]:
    block_q = min(BLOCK_Q, max(length_q, 1))
    block_k = max(16, min(BLOCK_K, TILE_ELEMENTS // max(heads * block_q, 1)))
    return block_q, min(block_k, max(length_k, 1))


class _Tiles:
    """Shared layout of forward and backward: flattened heads, scaled q, tile masking."""

    def __init__(self, q, k, v, attn_mask, dropout_p, is_causal, scale, rng):
        n, h, self.length_q, _ = q.shape
        self.length_k = k.shape[2]
        self.shape4 = (n, h)
        self.heads = n * h
        self.dtype = _compute_dtype(q.dtype)
        # scale is folded into q once; k, v are repeated for grouped-query heads.
        self.q = (q.to(self.dtype) * scale).reshape(self.heads, self.length_q, -1)
        self.k = repeat_kv(k.to(self.dtype), h).reshape(self.heads, self.length_k, -1)
        self.v = repeat_kv(v.to(self.dtype), h).reshape(self.heads, self.length_k, -1)
        self.mask = None if attn_mask is None else attn_mask.expand(n, h, self.length_q,
                                                                   self.length_k)
        self.dropout_p, self.is_causal, self.rng = dropout_p, is_causal, rng
        self.block_q, self.block_k = _blocks(self.heads, self.length_q, self.length_k)

    def key_end(self, i1: int) -> int:
        """Keys a query block ending at row ``i1`` can see (causal tiles past it are skipped)."""
        return min(self.length_k, i1) if self.is_causal else self.length_k

    def scores(self, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
        """Scaled, masked ``q k^T`` tile ``[N*H, i1-i0, j1-j0]``."""
        s = torch.bmm(self.q[:, i0:i1], self.k[:, j0:j1].transpose(1, 2))
        if self.is_causal and j1 - 1 > i0:
            rows = torch.arange(i0, i1, device=s.device)[:, None]
            cols = torch.arange(j0, j1, device=s.device)[None, :]
            s.masked_fill_(cols > rows, _NEG_INF)
        if self.mask is not None:
            tile = self.mask[:, :, i0:i1, j0:j1]
            s4 = s.view(*self.shape4, i1 - i0, j1 - j0)
            if tile.dtype == torch.bool:
                s4.masked_fill_(tile.logical_not(), _NEG_INF)
            else:
                s4.add_(tile)
        return s

    def dropout(self, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor | None:
        if self.dropout_p <= 0.0 or self.rng is None:
            return None
        keep = keep_scale(self.rng, self.dropout_p, self.heads, slice(i0, i1), slice(j0, j1),
                          self.length_q, self.length_k, self.dtype)
        return keep.to(self.q.device)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
            dropout_p: float, is_causal: bool, scale: float,
            rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Output ``[N, H, L, Ev]`` in q's dtype and log-sum-exp ``[N, H, L]`` (float32/64)."""
    t = _Tiles(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    n, h = t.shape4
    value_dim = v.shape[-1]
    out = torch.zeros(t.heads, t.length_q, value_dim, dtype=t.dtype, device=q.device)
    lse = torch.full((t.heads, t.length_q), _NEG_INF, dtype=t.dtype, device=q.device)
    for i0 in range(0, t.length_q, t.block_q):
        i1 = min(t.length_q, i0 + t.block_q)
        end = t.key_end(i1)
        row_max = row_sum = acc = None
        for j0 in range(0, end, t.block_k):
            j1 = min(end, j0 + t.block_k)
            s = t.scores(i0, i1, j0, j1)
            tile_max = s.amax(dim=-1, keepdim=True)
            new_max = tile_max if row_max is None else torch.maximum(row_max, tile_max)
            # A row whose keys are all masked so far keeps max -inf; 0 avoids inf - inf.
            safe_max = new_max.masked_fill(new_max == _NEG_INF, 0.0)
            p = s.sub_(safe_max).exp_()
            tile_sum = p.sum(dim=-1, keepdim=True)
            keep = t.dropout(i0, i1, j0, j1)
            if keep is not None:
                p.mul_(keep)
            if acc is None:
                row_sum, acc = tile_sum, torch.bmm(p, t.v[:, j0:j1])
            else:
                alpha = torch.exp(row_max - safe_max)
                row_sum = row_sum.mul_(alpha).add_(tile_sum)
                acc = acc.mul_(alpha).baddbmm_(p, t.v[:, j0:j1])
            row_max = new_max
        if acc is None:
            continue
        out[:, i0:i1] = acc / row_sum.masked_fill(row_sum == 0, 1.0)
        safe_max = row_max.masked_fill(row_max == _NEG_INF, 0.0)
        lse[:, i0:i1] = (safe_max + torch.log(row_sum)).squeeze(-1)
    return (out.view(n, h, t.length_q, value_dim).to(q.dtype),
            lse.view(n, h, t.length_q))


def backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             out: torch.Tensor, lse: torch.Tensor, attn_mask: torch.Tensor | None,
             dropout_p: float, is_causal: bool, scale: float,
             rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients for q, k, v, recomputing each probability tile from the saved log-sum-exp."""
    t = _Tiles(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    n, h = t.shape4
    hkv = k.shape[1]
    go = grad_out.to(t.dtype).reshape(t.heads, t.length_q, -1)
    delta = (go * out.to(t.dtype).reshape_as(go)).sum(-1, keepdim=True)
    lse = lse.to(t.dtype).reshape(t.heads, t.length_q, 1)
    lse = lse.masked_fill(lse == _NEG_INF, float("inf"))  # fully masked rows: p = 0
    dq = torch.zeros_like(t.q)
    dk = torch.zeros_like(t.k)
    dv = torch.zeros_like(t.v)
    for i0 in range(0, t.length_q, t.block_q):
        i1 = min(t.length_q, i0 + t.block_q)
        end = t.key_end(i1)
        go_i, q_i = go[:, i0:i1], t.q[:, i0:i1]
        dq_i = dq[:, i0:i1]
        for j0 in range(0, end, t.block_k):
            j1 = min(end, j0 + t.block_k)
            p = t.scores(i0, i1, j0, j1).sub_(lse[:, i0:i1]).exp_()
            keep = t.dropout(i0, i1, j0, j1)
            p_dropped = p if keep is None else p * keep
            dv[:, j0:j1].baddbmm_(p_dropped.transpose(1, 2), go_i)
            dp = torch.bmm(go_i, t.v[:, j0:j1].transpose(1, 2))
            if keep is not None:
                dp.mul_(keep)
            ds = dp.sub_(delta[:, i0:i1]).mul_(p)
            dq_i.baddbmm_(ds, t.k[:, j0:j1])
            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), q_i)
    dq = dq.mul_(scale).view(n, h, t.length_q, -1)
    dk = dk.view(n, hkv, h // hkv, t.length_k, -1).sum(2)
    dv = dv.view(n, hkv, h // hkv, t.length_k, -1).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
