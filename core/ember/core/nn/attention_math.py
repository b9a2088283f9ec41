"""The math path: attention as plain torch ops over the full L x S score matrix.

Serves devices without a dedicated kernel (MPS, ...), attention masks that need gradients,
and is the readable statement of what the tiled kernels compute. Inputs are the normalised
4-D layout ``q [N, H, L, E]``, ``k [N, Hkv, S, E]``, ``v [N, Hkv, S, Ev]``.
"""

from __future__ import annotations

import torch

from ember.core.nn.attention_dropout import keep_scale


def repeat_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[N, Hkv, S, D]`` -> ``[N, heads, S, D]``, each kv head serving ``heads // Hkv`` queries."""
    n, hkv, s, d = x.shape
    if hkv == heads:
        return x
    return x[:, :, None].expand(n, hkv, heads // hkv, s, d).reshape(n, heads, s, d)


def masked_scores(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None,
                  is_causal: bool, scale: float) -> torch.Tensor:
    """``q @ k^T * scale`` with the boolean/additive mask and the top-left causal triangle."""
    scores = torch.matmul(q, repeat_kv(k, q.shape[1]).transpose(-2, -1)) * scale
    length_q, length_k = scores.shape[-2:]
    if is_causal:
        keep = torch.ones(length_q, length_k, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return scores


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
              dropout_p: float, is_causal: bool, scale: float,
              rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Output ``[N, H, L, Ev]`` and log-sum-exp ``[N, H, L]``; differentiable by autograd."""
    scores = masked_scores(q, k, attn_mask, is_causal, scale)
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()
    lse = torch.logsumexp(scores, dim=-1)
    # Rows with every key masked give zeros, as torch's math path does.
    safe_lse = lse.masked_fill(lse == float("-inf"), float("inf"))
    probs = torch.exp(scores - safe_lse[..., None])
    if dropout_p > 0.0 and rng is not None:
        n, h, length_q, length_k = probs.shape
        keep = keep_scale(rng, dropout_p, slice(0, n * h), slice(0, length_q),
                          slice(0, length_k), length_q, length_k, probs.dtype)
        probs = probs * keep.view_as(probs).to(probs.device)
    out = torch.matmul(probs.to(v.dtype), repeat_kv(v, q.shape[1]))
    return out, lse


def attention_backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       attn_mask: torch.Tensor | None, dropout_p: float, is_causal: bool,
                       scale: float, rng: torch.Tensor | None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of :func:`attention`'s output for q, k, v (autograd through the math path)."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out, _ = attention(*leaves, attn_mask, dropout_p, is_causal, scale, rng)
        grads = torch.autograd.grad(out, leaves, grad_out)
    return grads[0], grads[1], grads[2]
