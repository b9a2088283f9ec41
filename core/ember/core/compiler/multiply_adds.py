"""TorchDynamo's multiply-adds, spelled as the ATen ops eager runs.

Dynamo traces an ``add_`` with a tensor ``alpha`` as ``prims.fma(other, alpha, x)``, and, with
a ``value``, ``x.addcmul_(t1, t2, value=v)`` as ``prims.fma(t1 * t2, v, x)`` and
``x.addcdiv_(t1, t2, value=v)`` as ``prims.fma(t1 / t2, v, x)`` (then a copy into ``x``).
Eager's kernels compute ``fma(other, alpha, x)``, ``fma(v * t1, t2, x)`` and
``x + (v * t1) / t2``: the decomposed forms rounded an ulp off in a fifth of the elements, and
optimizer steps drifted. ``addcmul(c, a, b)`` is ``fma(a, b, c)`` rounded once (its
lowering), and only Dynamo writes ``prims.fma`` of a fresh product or quotient with a number,
so matching that shape rewrites nothing a user wrote. Applied to Dynamo's graph before
AOTAutograd.
"""

from __future__ import annotations

import numbers

import torch
from torch.fx import GraphModule, Node

from ember.core.logs import get_logger

log = get_logger("decompose")

_RECOMPOSED = {torch.mul: torch.addcmul, torch.div: torch.addcdiv}


def _is_fma(target) -> bool:
    # prims.fma exists once torch._inductor.inductor_prims is imported (Dynamo does, to use it)
    return isinstance(target, torch._ops.OpOverload) and target.name() == "prims::fma"


def _decomposed(inner, value) -> bool:
    """``inner`` (fma's first operand) is Dynamo's product or quotient of an addcmul_ /
    addcdiv_ whose ``value`` is ``value``."""
    return isinstance(inner, Node) and inner.op == "call_function" and \
        inner.target in _RECOMPOSED and len(inner.args) == 2 and not inner.kwargs and \
        len(inner.users) == 1 and isinstance(value, numbers.Number) and \
        not isinstance(value, bool)


def apply(gm: GraphModule) -> GraphModule:
    """Replace each ``prims.fma`` by ``addcmul`` / ``addcdiv`` as above."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not _is_fma(node.target) or len(node.args) != 3 or \
                node.kwargs:
            continue
        a, b, c = node.args
        decomposed = _decomposed(a, b)
        with gm.graph.inserting_before(node):
            if decomposed:
                new = gm.graph.call_function(_RECOMPOSED[a.target], (c, *a.args), {"value": b})
            else:
                new = gm.graph.call_function(torch.addcmul, (c, a, b))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        if decomposed:
            gm.graph.erase_node(a)
        rewritten += 1
    if rewritten:
        gm.recompile()
        log.debug("multiply-adds: %d of Dynamo's prims.fma as eager's ops", rewritten)
    return gm
