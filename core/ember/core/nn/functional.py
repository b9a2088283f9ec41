"""``scaled_dot_product_attention`` with torch's signature, dispatched to Ember's kernels."""

from __future__ import annotations

import math

import torch

from ember.core.logs import get_logger
from ember.core.nn import attention_math
from ember.core.nn.attention_op import sdpa

__all__ = ["scaled_dot_product_attention"]

_log = get_logger("attention")
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{name} must be float16, bfloat16, float32 or float64, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"{name} must have at least 2 dimensions (..., length, features), "
                         f"got shape {tuple(x.shape)}")


def _broadcast(*shapes) -> tuple[int, ...] | None:
    """The broadcast of ``shapes``, or None where they do not broadcast (plain Python: the
    per-call cost matters for small attention calls, and torch.broadcast_shapes is ~10 us)."""
    out = [1] * max(len(s) for s in shapes)
    for shape in shapes:
        for i, d in enumerate(shape, len(out) - len(shape)):
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    return None
                out[i] = d
    return tuple(out)


def _batch_shape(query, key, value) -> tuple[int, ...]:
    shapes = [tuple(t.shape[:-3]) for t in (query, key, value)]
    batch = shapes[0] if shapes[0] == shapes[1] == shapes[2] else _broadcast(*shapes)
    if batch is None:
        raise ValueError(f"query, key and value batch dimensions must broadcast, got {shapes}")
    return batch


def _validate(query, key, value, attn_mask, dropout_p, is_causal, scale) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_tensor(name, t)
    if not (query.dtype == key.dtype == value.dtype):
        raise ValueError("query, key and value must share a dtype, got "
                         f"{query.dtype}, {key.dtype}, {value.dtype}")
    if not (query.device == key.device == value.device):
        raise ValueError("query, key and value must be on one device, got "
                         f"{query.device}, {key.device}, {value.device}")
    if key.shape[-1] != query.shape[-1]:
        raise ValueError(f"key must have query's feature size {query.shape[-1]} in its last "
                         f"dimension, got shape {tuple(key.shape)}")
    if value.shape[-2] != key.shape[-2]:
        raise ValueError(f"value must have key's length {key.shape[-2]}, got shape "
                         f"{tuple(value.shape)}")
    if not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p must be a number in [0, 1], got {dropout_p!r}")
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool)):
        raise ValueError(f"scale must be a number or None, got {scale!r}")
    if is_causal and attn_mask is not None:
        raise ValueError("attn_mask must be None when is_causal=True (the causal mask is implied)")
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(f"attn_mask must be a torch.Tensor, got {type(attn_mask).__name__}")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise ValueError(f"attn_mask must be bool or floating point, got {attn_mask.dtype}")
        if attn_mask.device != query.device:
            raise ValueError(f"attn_mask must be on query's device {query.device}, got "
                             f"{attn_mask.device}")


def _heads(x: torch.Tensor) -> int:
    return x.shape[-3] if x.dim() >= 3 else 1


def _to4d(x: torch.Tensor, batch: tuple[int, ...]) -> torch.Tensor:
    """``[*b, H, T, D]`` (or ``[T, D]``) -> ``[N, H, T, D]``, broadcasting the batch dims."""
    if x.dim() == 2:
        x = x.unsqueeze(0)
    if len(batch) == 1 and x.dim() == 4 and x.shape[0] == batch[0]:
        return x
    x = x.expand(*batch, *x.shape[-3:])
    return x.reshape(-1, *x.shape[-3:]) if len(batch) != 1 else x


def _mask4d(mask: torch.Tensor, batch: tuple[int, ...], heads: int, length_q: int,
            length_k: int) -> torch.Tensor:
    target = (*batch, heads, length_q, length_k)
    if mask.dim() > len(target) or _broadcast(tuple(mask.shape), target) != target:
        raise ValueError(f"attn_mask of shape {tuple(mask.shape)} does not broadcast to the "
                         f"attention shape {target}")
    mask = mask.reshape((1,) * (len(target) - mask.dim()) + tuple(mask.shape))
    lead = mask.shape[:len(batch)]
    if all(d == 1 for d in lead):
        return mask.reshape(1, *mask.shape[len(batch):])
    if len(batch) == 1:
        return mask
    return mask.expand(*batch, *mask.shape[len(batch):]).reshape(-1, *mask.shape[len(batch):])


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v with torch's semantics; memory linear in length on CPU/CUDA.

    Shapes: query ``[..., H, L, E]``, key ``[..., Hkv, S, E]``, value ``[..., Hkv, S, Ev]``
    -> ``[..., H, L, Ev]``; ``Hkv`` may divide ``H`` when ``enable_gqa=True``.
    """
    _validate(query, key, value, attn_mask, dropout_p, is_causal, scale)
    heads, kv_heads = _heads(query), _heads(key)
    if _heads(value) != kv_heads:
        raise ValueError(f"value must have key's {kv_heads} heads, got shape {tuple(value.shape)}")
    if heads != kv_heads and not (enable_gqa and heads % kv_heads == 0):
        raise ValueError(f"key has {kv_heads} heads but query has {heads}; grouped-query "
                         "attention needs enable_gqa=True and query heads a multiple of key heads")
    batch = _batch_shape(query, key, value)
    length_q, length_k = query.shape[-2], key.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    q4, k4, v4 = (_to4d(t, batch) for t in (query, key, value))
    mask4 = None
    if attn_mask is not None:
        mask4 = _mask4d(attn_mask, batch, heads, length_q, length_k)
    rng = None
    if dropout_p > 0.0:
        # (seed, offset) drawn from torch's default generator: torch.manual_seed replays it.
        rng = torch.randint(0, 2**62, (2,), dtype=torch.int64)
    if mask4 is not None and mask4.requires_grad and torch.is_grad_enabled():
        _log.debug("attn_mask requires grad: using the math path")
        out, _ = attention_math.attention(q4, k4, v4, mask4, float(dropout_p), is_causal,
                                          float(scale), rng)
    else:
        out, _ = sdpa(q4, k4, v4, mask4, float(dropout_p), bool(is_causal), float(scale), rng)
    out_shape = (*batch, heads, length_q, value.shape[-1])
    if max(query.dim(), key.dim(), value.dim()) == 2:
        out_shape = out_shape[-2:]
    return out.reshape(out_shape)
