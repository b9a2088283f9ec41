"""Decomposition table: core ATen and composite ops rewritten onto Ember's prim set.

AOTAutograd applies this table while tracing, so the graphs reaching ``lower`` hold prims
(see ``prims.PRIMS``), extern ops (``EXTERN_OPS``) and, rarely, ops that fall back to eager.
"""

from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

# Composite ops that torch's core-ATen table keeps whole but we want as prims.
_EXTRA = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.native_group_norm,
    aten.native_batch_norm, aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit_no_training,
    aten.gelu, aten.native_dropout, aten.var, aten.var_mean, aten.std, aten.std_mean,
    aten.hardtanh, aten.leaky_relu, aten.hardsigmoid, aten.hardswish, aten.elu,
    aten.softplus, aten.mish, aten.logsumexp, aten.addcmul, aten.addcdiv, aten.lerp,
    aten.nll_loss_forward, aten.nll_loss_backward, aten._softmax_backward_data,
    aten._log_softmax_backward_data, aten.native_layer_norm_backward,
    aten.native_group_norm_backward, aten.native_batch_norm_backward, aten.gelu_backward,
    aten.silu_backward, aten.sigmoid_backward, aten.tanh_backward, aten.threshold_backward,
    aten.hardtanh_backward, aten.leaky_relu_backward, aten.native_dropout_backward,
    aten.binary_cross_entropy, aten.mse_loss, aten.mse_loss_backward, aten.square,
    aten.linalg_vector_norm, aten.rsub, aten.xlogy,
]

# Ops we keep whole: lowered directly (cheaper IR than torch's decomposition) or extern.
_KEEP = {
    aten.mean.dim, aten.mean.default, aten.clamp.default, aten.clamp.Tensor,
    aten.addmm.default, aten.relu.default, aten.sigmoid.default,
}


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    """The table passed to AOTAutograd (ATen overload -> Python decomposition)."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA))
    for op in _KEEP:
        table.pop(op, None)
    # torch's SDPA decompositions gave wrong q/k/v gradients for nn.TransformerEncoderLayer
    # trained with mse_loss (torch 2.13); attention stays extern until our pattern rewrite.
    for op in list(table):
        if "scaled_dot_product" in str(op):
            table.pop(op)
    return table
