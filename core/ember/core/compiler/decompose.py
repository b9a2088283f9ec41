"""Decomposition table: core ATen and composite ops rewritten onto Ember's prim set.

AOTAutograd applies this table while tracing, so the graphs reaching ``lower`` hold prims
(see ``prims.PRIMS``), extern ops (``lowering.externs.EXTERN_OPS``) and, rarely, ops that fall
back to eager. ``log_graph`` reports what a traced graph holds on ``ember.decompose``.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import Counter

import torch
from torch._decomp import core_aten_decompositions, get_decompositions
from torch.utils._python_dispatch import _disable_current_modes

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
    # torch's table turns it into aten.index, whose bounds checks its producers (upsampling
    # decompositions, whose indices are clamped by construction) do not need
    aten._unsafe_index.Tensor,
}


def _linspace(start, end, steps, *, dtype=None, layout=torch.strided, device=None,
              pin_memory=False, requires_grad=False):
    """linspace to an integer dtype on CPU as ATen computes it: both ends truncated first, a
    float64 step, the first half counted up from start and the rest down from end, each value
    one multiply-add, fused or not as eager's kernel is. torch's decomposition keeps the
    fractional ends and steps in float32: off by one here and there."""
    kw = {"layout": layout, "device": device, "pin_memory": pin_memory,
          "requires_grad": requires_grad}
    ends = (start, end)
    if (dtype is None or dtype.is_floating_point or dtype.is_complex or dtype == torch.bool
            or torch.device(device or "cpu").type != "cpu" or steps < 2
            or not all(_real_end(v) for v in ends)):
        return _TORCH_LINSPACE(start, end, steps, dtype=dtype, **kw)
    # eager reads a tensor end as a number (``item``), then converts it to the dtype
    lo, hi = (v.to(torch.float64).trunc() if isinstance(v, torch.Tensor) else math.trunc(v)
              for v in ends)
    step = (hi - lo) / (steps - 1)
    idx = torch.arange(steps, dtype=torch.float64, device=device)
    madd = _fused_madd if _eager_linspace_fuses() else (lambda a, b, c: a * b + c)
    out = torch.where(idx < steps // 2, madd(step, idx, lo), madd(-step, steps - 1 - idx, hi))
    return out.to(dtype)


def _real_end(v) -> bool:
    if isinstance(v, torch.Tensor):
        return v.dim() == 0 and not v.is_complex()
    return isinstance(v, (int, float)) and math.isfinite(v)


def _fused_madd(a, b: torch.Tensor, c) -> torch.Tensor:
    """a * b + c in float64 rounded once, as an FMA instruction gives it: Dekker's exact
    product and Knuth's two-sum (our C++ is built without FP contraction, so these hold)."""
    def split(x):  # x == hi + lo exactly, each with at most 26 significant bits
        big = x * 134217729.0  # 2**27 + 1
        hi_ = big - (big - x)
        return hi_, x - hi_
    ah, al = split(a)
    bh, bl = split(b)
    p = a * b
    err = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    s = p + c
    back = s - p
    return s + (((p - (s - back)) + (c - back)) + err)


@functools.lru_cache(maxsize=1)
def _eager_linspace_fuses() -> bool:
    """Does eager's CPU linspace kernel round ``end - step * k`` once (built with FMA
    contraction, as ATen's AVX2 and AVX-512 kernels are) or twice (its baseline kernel)?
    Asked of eager itself on a case where the two differ."""
    with _disable_current_modes():
        return int(torch.linspace(-82, 32, 29, dtype=torch.int64)[14]) == -24


_TORCH_LINSPACE = core_aten_decompositions()[aten.linspace.default]  # all overloads: one function


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    """The table passed to AOTAutograd (ATen overload -> Python decomposition)."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA))
    for op in _KEEP:
        table.pop(op, None)
    for overload in ("default", "Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"):
        table[getattr(aten.linspace, overload)] = _linspace
    # torch's SDPA decompositions gave wrong q/k/v gradients for nn.TransformerEncoderLayer
    # trained with mse_loss (torch 2.13); attention stays extern until our pattern rewrite.
    for op in list(table):
        if "scaled_dot_product" in str(op):
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
