"""Decomposition table: core ATen and composite ops rewritten onto Ember's prim set.

AOTAutograd applies this table while tracing, so the graphs reaching ``lower`` hold prims
(see ``prims.PRIMS``), extern ops (``lowering.externs.EXTERN_OPS``) and, rarely, ops that fall
back to eager. ``log_graph`` reports what a traced graph holds on ``ember.decompose``.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from ember.core.compiler import eager_parity, moments
from ember.core.logs import get_logger

aten = torch.ops.aten
log = get_logger("decompose")

# Composite ops that torch's core-ATen table keeps whole but we want as prims.
_EXTRA = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.native_group_norm,
    aten.native_batch_norm, aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit_no_training,
    aten.gelu, aten.native_dropout, aten.var, aten.var_mean, aten.std, aten.std_mean,
    aten.hardtanh, aten.leaky_relu, aten.hardsigmoid, aten.hardswish, aten.elu,
    aten.softplus, aten.mish, aten.logsumexp,
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
    # eager computes these with one multiply-add rounded once (lowering/ops.py): torch's
    # decompositions round the product and the sum apart, an ulp off in a fifth of elements
    aten.addcmul.default, aten.addcdiv.default, aten.lerp.Scalar, aten.lerp.Tensor,
    # torch's table turns it into aten.index, whose bounds checks its producers (upsampling
    # decompositions, whose indices are clamped by construction) do not need
    aten._unsafe_index.Tensor,
}

# Evenly spaced values stay ATen's (extern): eager's CPU kernels split at ``steps // 2`` and
# count the second half down from the end, each value one fused multiply-add where the kernel
# was built with FMA, and arange's vector path rounds each vector's first value on its own, so
# the last bits depend on the instruction set; torch's decompositions miss them by an ulp or more.
_ATEN_SPACING = {aten.linspace, aten.logspace}


def _dropout(input, p: float, train):
    """Dropout that drops nothing (eval mode, or p = 0) is its input, as eager's kernel returns
    it: torch's decomposition copies it, an op every trace pays for and lowering removes."""
    if train and p != 0:
        return aten.native_dropout(input, p, train)[0]
    return input


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    """The table passed to AOTAutograd (ATen overload -> Python decomposition)."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA))
    table.update(eager_parity.decompositions())  # torch.export honours these (autograd doesn't)
    table.update(moments.decompositions())
    table[aten.dropout.default] = _dropout
    for op in _KEEP:
        table.pop(op, None)
    # torch's SDPA decompositions gave wrong q/k/v gradients for nn.TransformerEncoderLayer
    # trained with mse_loss (torch 2.13); attention stays extern until our pattern rewrite,
    # and so do the evenly spaced values.
    for op in list(table):
        if "scaled_dot_product" in str(op) or getattr(op, "overloadpacket", op) in _ATEN_SPACING:
            table.pop(op)
    log.debug("decomposition table: %d ATen overloads (%d composite ops of ours, %d kept whole)",
              len(table), len(_EXTRA), len(_KEEP))
    return table


def log_graph(kind: str, gm: torch.fx.GraphModule) -> None:
    """INFO: the ops a graph holds after decomposition, most frequent first; DEBUG: its code."""
    if not log.isEnabledFor(logging.INFO):
        return
    ops = Counter(str(getattr(n.target, "_overloadpacket", n.target))
                  for n in gm.graph.nodes if n.op == "call_function")
    log.info("%s graph after decomposition: %d ops: %s", kind, sum(ops.values()),
             ", ".join(f"{name} x{k}" for name, k in ops.most_common()))
    log.debug("%s graph:\n%s", kind, gm.code)
