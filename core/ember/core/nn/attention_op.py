"""``ember::sdpa`` and its backward, declared through :mod:`ember.core.kernels`.

One op with a fake implementation and autograd, so TorchDynamo and AOTAutograd see a single
extern instead of breaking the graph. Kernels: ``cpu`` -> the tiled kernel, ``cuda`` -> the
Triton FlashAttention-2 kernels, ``portable`` (MPS and the rest) -> the math path.
Inputs use the normalised 4-D layout; :mod:`ember.core.nn.functional` does the validation.
"""

from __future__ import annotations

import torch

from ember.core import kernels
from ember.core.extras import needs_extra
from ember.core.nn import attention_cpu, attention_math

sdpa = kernels.define(
    "ember::sdpa",
    "(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, float dropout_p, "
    "bool is_causal, float scale, Tensor? rng) -> (Tensor, Tensor)")

sdpa_backward = kernels.define(
    "ember::sdpa_backward",
    "(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor lse, "
    "Tensor? attn_mask, float dropout_p, bool is_causal, float scale, Tensor? rng) "
    "-> (Tensor, Tensor, Tensor)")


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """Log-sum-exp is kept in float32 (float64 for float64 inputs)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@sdpa.register_fake
def _(query, key, value, attn_mask, dropout_p, is_causal, scale, rng):
    n, h, length_q, _ = query.shape
    out = query.new_empty(n, h, length_q, value.shape[-1])
    return out, query.new_empty(n, h, length_q, dtype=lse_dtype(query.dtype))


@sdpa_backward.register_fake
def _(grad_out, query, key, value, out, lse, attn_mask, dropout_p, is_causal, scale, rng):
    # Gradients are always contiguous, whatever the inputs' strides (every kernel promises it).
    return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape)


sdpa.register_kernel("cpu")(attention_cpu.forward)


@sdpa_backward.register_kernel("cpu")
def _(*args):
    return tuple(g.contiguous() for g in attention_cpu.backward(*args))


@sdpa.register_kernel("cuda")
def _(query, key, value, attn_mask, dropout_p, is_causal, scale, rng):
    with needs_extra("ember-core[cuda]", ["triton"], "CUDA scaled_dot_product_attention"):
        from ember.core.nn import flash_attention_triton

    return flash_attention_triton.forward(query, key, value, attn_mask, dropout_p, is_causal,
                                          scale, rng)


@sdpa_backward.register_kernel("cuda")
def _(grad_out, query, key, value, out, lse, attn_mask, dropout_p, is_causal, scale, rng):
    with needs_extra("ember-core[cuda]", ["triton"], "CUDA scaled_dot_product_attention"):
        from ember.core.nn import flash_attention_triton

    grads = flash_attention_triton.backward(grad_out, query, key, value, out, lse, attn_mask,
                                            dropout_p, is_causal, scale, rng)
    return tuple(g.contiguous() for g in grads)


@sdpa.register_kernel("portable")
def _(query, key, value, attn_mask, dropout_p, is_causal, scale, rng):
    out, lse = attention_math.attention(query, key, value, attn_mask, dropout_p, is_causal,
                                        scale, rng)
    return out.contiguous(), lse.to(lse_dtype(query.dtype)).contiguous()


@sdpa_backward.register_kernel("portable")
def _(grad_out, query, key, value, out, lse, attn_mask, dropout_p, is_causal, scale, rng):
    grads = attention_math.attention_backward(grad_out, query, key, value, attn_mask, dropout_p,
                                              is_causal, scale, rng)
    return tuple(g.contiguous() for g in grads)


def _setup_context(ctx, inputs, output):
    query, key, value, attn_mask, dropout_p, is_causal, scale, rng = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse, attn_mask, rng)
    ctx.dropout_p, ctx.is_causal, ctx.scale = dropout_p, is_causal, scale
    ctx.set_materialize_grads(True)


def _backward(ctx, grad_out, grad_lse):
    query, key, value, out, lse, attn_mask, rng = ctx.saved_tensors
    dq, dk, dv = sdpa_backward(grad_out.contiguous(), query, key, value, out, lse, attn_mask,
                               ctx.dropout_p, ctx.is_causal, ctx.scale, rng)
    return dq, dk, dv, None, None, None, None, None


sdpa.register_autograd(_backward, setup_context=_setup_context)
