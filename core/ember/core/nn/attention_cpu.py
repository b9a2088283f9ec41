"""Tiled online-softmax attention in torch ops: forward and backward, memory linear in length.

Work is cut into units of (heads, query block); each unit walks its key blocks, computing the
score tile with one batched matmul, a fused ``softmax`` per tile and the tile's log-sum-exp,
and merges tiles online (rescaling by ``exp(lse_tile - lse)``). Only the output, the per-row
log-sum-exp and the gradients are full size; the L x S score matrix is never formed. Causal
tiles entirely above the diagonal are skipped. Dropout masks come from a counter-based
generator (:mod:`attention_dropout`), so the backward replays them.

On CPU the units run on worker threads with one intra-op thread each (large problems spread
over all of them): many mid-sized ops in one OpenMP team pay a barrier per op, which dominates
on small, busy machines.
Written for CPU but device-agnostic: CUDA uses it for float64 and head dims the Triton kernels
do not cover (on CUDA, units always run inline). On CPU, :mod:`attention_native` runs the same
algorithm in one native call whenever it is available; these tiles are its fallback.
"""

from __future__ import annotations

import torch

from ember.core import parallel
from ember.core.nn import attention_native
from ember.core.nn.attention_dropout import keep_scale
from ember.core.nn.attention_math import repeat_kv

# Tile sizes: rows of queries x columns of keys per unit.
BLOCK_Q = 128
BLOCK_K = 2048
# Problems with at least this many score elements (heads * L * S) spread over all workers.
THREADED_MIN_ELEMENTS = 1 << 18

_NEG_INF = float("-inf")


def _tile_buffer(slot: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """A per-thread reusable tile (fresh tiles of ~1 MB each cost page faults every time)."""
    return parallel.scratch(("attention", slot), shape, like.dtype, like.device)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _run(units: list, fn, device: torch.device, spread: bool) -> None:
    """Call ``fn(worker, unit)`` for every unit on the CPU workers (inline elsewhere).

    ``spread``: the workers pull units from a shared counter (dynamic scheduling copes with
    cores that other processes are using); otherwise one worker runs them all, which keeps
    small ops single-threaded.
    """
    if device.type != "cpu":
        for unit in units:
            fn(0, unit)
        return
    with torch.no_grad():  # kernels never record autograd (workers take the caller's mode)
        parallel.run_slots(lambda w, i: fn(w, units[i]), len(units),
                           workers=spread_workers(device, spread))


def spread_workers(device: torch.device, spread: bool) -> int:
    """How many workers :func:`_run` will use."""
    if device.type != "cpu" or not spread:
        return 1
    return max(1, torch.get_num_threads())


class _Tiles:
    """Shared layout of forward and backward: flattened heads, scaled q, tile masking."""

    def __init__(self, q, k, v, attn_mask, dropout_p, is_causal, scale, rng):
        q, k, v = q.detach(), k.detach(), v.detach()
        n, h, self.length_q, _ = q.shape
        self.length_k = k.shape[2]
        self.shape4 = (n, h)
        self.heads = n * h
        self.dtype = _compute_dtype(q.dtype)
        # scale is folded into q once; k, v are repeated for grouped-query heads.
        self.q = (q.to(self.dtype) * scale).reshape(self.heads, self.length_q, q.shape[-1])
        self.k = repeat_kv(k.to(self.dtype), h).reshape(self.heads, self.length_k, k.shape[-1])
        self.v = repeat_kv(v.to(self.dtype), h).reshape(self.heads, self.length_k, v.shape[-1])
        self.mask = None if attn_mask is None else attn_mask.expand(n, h, self.length_q,
                                                                   self.length_k)
        self.dropout_p, self.is_causal, self.rng = dropout_p, is_causal, rng
        self.device = q.device
        self.spread = self.heads * self.length_q * self.length_k >= THREADED_MIN_ELEMENTS
        self.block_q = max(1, min(BLOCK_Q, self.length_q))
        self.block_k = max(1, min(BLOCK_K, self.length_k))

    def units(self) -> list[tuple[int, int, int, int]]:
        """(first head, last head + 1, first row, last row + 1) of every unit of work."""
        rows = [(i0, min(self.length_q, i0 + self.block_q))
                for i0 in range(0, self.length_q, self.block_q)]
        if not self.spread:
            return [(0, self.heads, i0, i1) for i0, i1 in rows]
        return [(f, f + 1, i0, i1) for f in range(self.heads) for i0, i1 in rows]

    def key_blocks(self, i1: int) -> list[tuple[int, int]]:
        """Key blocks a query block ending at row ``i1`` sees (causal: none past the diagonal)."""
        end = min(self.length_k, i1) if self.is_causal else self.length_k
        return [(j0, min(end, j0 + self.block_k)) for j0 in range(0, end, self.block_k)]

    def scores(self, h0: int, h1: int, i0: int, i1: int, j0: int, j1: int,
               slot: str = "scores") -> torch.Tensor:
        """Scaled, masked ``q k^T`` tile ``[h1-h0, i1-i0, j1-j0]`` in this thread's buffer."""
        s = _tile_buffer(slot, (h1 - h0, i1 - i0, j1 - j0), self.q)
        torch.bmm(self.q[h0:h1, i0:i1], self.k[h0:h1, j0:j1].transpose(1, 2), out=s)
        if self.is_causal and j1 - 1 > i0:
            rows = torch.arange(i0, i1, device=s.device)[:, None]
            cols = torch.arange(j0, j1, device=s.device)[None, :]
            s.masked_fill_(cols > rows, _NEG_INF)
        if self.mask is not None:
            if h1 - h0 == self.heads:
                tile = self.mask[:, :, i0:i1, j0:j1]
                target = s.view(*self.shape4, i1 - i0, j1 - j0)
            else:  # one flattened head
                b, h = divmod(h0, self.shape4[1])
                tile, target = self.mask[b, h, i0:i1, j0:j1], s
            if tile.dtype == torch.bool:
                target.masked_fill_(tile.logical_not(), _NEG_INF)
            else:
                target.add_(tile)
        return s

    def dropout(self, h0: int, h1: int, i0: int, i1: int, j0: int,
                j1: int) -> torch.Tensor | None:
        if self.dropout_p <= 0.0 or self.rng is None:
            return None
        keep = keep_scale(self.rng, self.dropout_p, slice(h0, h1), slice(i0, i1), slice(j0, j1),
                          self.length_q, self.length_k, self.dtype)
        return keep.to(self.q.device)


def _finite_or(x: torch.Tensor, value: float) -> torch.Tensor:
    return x.masked_fill(~torch.isfinite(x), value)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
            dropout_p: float, is_causal: bool, scale: float,
            rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Output ``[N, H, L, Ev]`` in q's dtype and log-sum-exp ``[N, H, L]`` (float32/64)."""
    if attention_native.available(q, k, v):
        return attention_native.forward(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    t = _Tiles(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    n, h = t.shape4
    value_dim = v.shape[-1]
    out = torch.zeros(t.heads, t.length_q, value_dim, dtype=t.dtype, device=q.device)
    lse = torch.full((t.heads, t.length_q, 1), _NEG_INF, dtype=t.dtype, device=q.device)

    def unit(_worker, u):
        h0, h1, i0, i1 = u
        parts, lses = [], []
        for j0, j1 in t.key_blocks(i1):
            p = t.scores(h0, h1, i0, i1, j0, j1)
            tile_max = p.amax(dim=-1, keepdim=True)
            torch.ops.aten._softmax.out(p, -1, False, out=p)  # in place, row by row
            # lse of the tile = max - log(max p); rows with every key masked get -inf and 0.
            tile_lse = tile_max - torch.log(p.amax(dim=-1, keepdim=True))
            keep = t.dropout(h0, h1, i0, i1, j0, j1)
            if keep is not None:
                p.mul_(keep)
            part = torch.bmm(p, t.v[h0:h1, j0:j1])
            if t.mask is not None or t.is_causal:
                dead = tile_max == _NEG_INF
                tile_lse.masked_fill_(dead, _NEG_INF)
                part.masked_fill_(dead, 0.0)
            lses.append(tile_lse)
            parts.append(part)
        if not parts:
            return
        if len(parts) == 1:
            out[h0:h1, i0:i1], lse[h0:h1, i0:i1] = parts[0], lses[0]
            return
        # Online softmax, merged once per unit: weight each tile by exp(lse_tile - lse).
        tile_lse = torch.stack(lses)
        row_lse = torch.logsumexp(tile_lse, dim=0)
        weights = torch.exp(tile_lse - _finite_or(row_lse, 0.0))
        out[h0:h1, i0:i1] = (torch.stack(parts) * weights).sum(0)
        lse[h0:h1, i0:i1] = row_lse

    _run(t.units(), unit, t.device, t.spread)
    return (out.view(n, h, t.length_q, value_dim).to(q.dtype),
            lse.view(n, h, t.length_q))


def backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             out: torch.Tensor, lse: torch.Tensor, attn_mask: torch.Tensor | None,
             dropout_p: float, is_causal: bool, scale: float,
             rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients for q, k, v, recomputing each probability tile from the saved log-sum-exp."""
    if attention_native.available(q, k, v):
        return attention_native.backward(grad_out, q, k, v, out, lse, attn_mask, dropout_p,
                                         is_causal, scale, rng)
    t = _Tiles(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    n, h = t.shape4
    hkv = k.shape[1]
    go = grad_out.to(t.dtype).reshape(t.heads, t.length_q, -1)
    delta = (go * out.to(t.dtype).reshape_as(go)).sum(-1, keepdim=True)
    lse = lse.to(t.dtype).reshape(t.heads, t.length_q, 1)
    lse = lse.masked_fill(lse == _NEG_INF, float("inf"))  # fully masked rows: p = 0
    dq = torch.zeros_like(t.q)
    # Units of one head may run on different workers: each accumulates dK/dV privately.
    workers = spread_workers(t.device, t.spread)
    grads = [(torch.zeros_like(t.k), torch.zeros_like(t.v)) for _ in range(workers)]

    def unit(worker, u):
        h0, h1, i0, i1 = u
        dk, dv = grads[worker]
        go_i, q_i = go[h0:h1, i0:i1], t.q[h0:h1, i0:i1]
        dq_i = dq[h0:h1, i0:i1]
        for j0, j1 in t.key_blocks(i1):
            p = t.scores(h0, h1, i0, i1, j0, j1).sub_(lse[h0:h1, i0:i1]).exp_()
            keep = t.dropout(h0, h1, i0, i1, j0, j1)
            p_dropped = p if keep is None else p * keep
            dv[h0:h1, j0:j1].baddbmm_(p_dropped.transpose(1, 2), go_i)
            dp = _tile_buffer("dp", p.shape, p)
            torch.bmm(go_i, t.v[h0:h1, j0:j1].transpose(1, 2), out=dp)
            if keep is not None:
                dp.mul_(keep)
            ds = dp.sub_(delta[h0:h1, i0:i1]).mul_(p)
            dq_i.baddbmm_(ds, t.k[h0:h1, j0:j1])
            dk[h0:h1, j0:j1].baddbmm_(ds.transpose(1, 2), q_i)

    _run(t.units(), unit, t.device, t.spread)
    dk, dv = grads[0]
    for other_dk, other_dv in grads[1:]:
        dk.add_(other_dk)
        dv.add_(other_dv)
    dq = dq.mul_(scale).view(n, h, t.length_q, -1)
    dk = dk.view(n, hkv, h // hkv, t.length_k, -1).sum(2)
    dv = dv.view(n, hkv, h // hkv, t.length_k, -1).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
