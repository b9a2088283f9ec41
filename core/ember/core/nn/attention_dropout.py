"""Counter-based dropout for attention: Triton's Philox-4x32-10 written in torch ops.

The keep mask of element ``(bh, i, j)`` is a pure function of ``(seed, offset + (bh*L + i)*S + j)``,
so a backward pass (or another tile order, or the Triton kernel using ``tl.rand``) replays
exactly the forward's mask without storing it.
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57
_UNIFORM_SCALE = 4.6566127342e-10  # tl.rand's int32 -> [0, 1) factor


def philox_uniform(seed: int, offsets: torch.Tensor) -> torch.Tensor:
    """float32 uniforms in [0, 1) equal to ``tl.rand(seed, offsets)`` for int64 ``offsets``."""
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    c0 = offsets & _M32
    c1 = (offsets >> 32) & _M32
    c2 = torch.zeros_like(c0)
    c3 = torch.zeros_like(c0)
    for _ in range(10):
        # 32x32-bit products fit in 64 bits modulo 2**64, which is what int64 wraps to.
        prod_b = c2 * _ROUND_B
        prod_a = c0 * _ROUND_A
        c0 = ((prod_b >> 32) & _M32) ^ c1 ^ k0
        c2 = ((prod_a >> 32) & _M32) ^ c3 ^ k1
        c1 = prod_b & _M32
        c3 = prod_a & _M32
        k0 = (k0 + _KEY_A) & _M32
        k1 = (k1 + _KEY_B) & _M32
    signed = torch.where(c0 >= 2**31, c0 - 2**32, c0)
    signed = torch.where(signed < 0, -signed - 1, signed)
    return signed.to(torch.float32) * _UNIFORM_SCALE


def keep_scale(rng: torch.Tensor, p: float, heads: slice, rows: slice, cols: slice,
               length_q: int, length_k: int, dtype: torch.dtype) -> torch.Tensor:
    """Dropout multiplier (0 or 1/(1-p)) of tile ``[heads, rows, cols]``; rng = (seed, offset).

    ``heads`` indexes the flattened batch x head dimension.
    """
    seed, offset = (int(x) for x in rng.tolist())
    bh = torch.arange(heads.start, heads.stop, dtype=torch.int64)[:, None, None]
    bh = bh * (length_q * length_k)
    i = torch.arange(rows.start, rows.stop, dtype=torch.int64)[None, :, None] * length_k
    j = torch.arange(cols.start, cols.stop, dtype=torch.int64)[None, None, :]
    uniform = philox_uniform(seed, bh + i + j + offset)
    factor = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    return (uniform >= p).to(dtype) * factor
