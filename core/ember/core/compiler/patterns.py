"""Pattern rewrites on TorchDynamo's torch-level FX graph, before AOTAutograd.

One pattern today: unfused attention,
``matmul(q, k^T) [* s | / s]... [+ mask | .masked_fill(~keep, -inf)] -> softmax(-1) [-> dropout]
-> matmul(., v)``, becomes one fused attention call: torch's ``scaled_dot_product_attention``
(ATen's C++ flash kernel) on CPU without dropout, else Ember's (the ``ember::sdpa`` op:
FlashAttention-2 on CUDA, and attention dropout). It fires only when every intermediate
(scores, probabilities) has no other user and the shapes and dtypes are the ones the fused op
computes identically (one difference: a row whose every key is masked may give 0 where eager
softmax gives NaN); anything else is left alone.
Disabled with ``compile(..., options={"patterns": False})``.
"""

from __future__ import annotations

import math
import operator
from collections import Counter

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ember.core.logs import get_logger

log = get_logger("perf_hints")

# Process-wide count of rewrites (tests and ``explain``-style tools read it).
stats: Counter = Counter()

_MATMUL_FUNCTIONS = {operator.matmul, torch.matmul, torch.bmm}
_MATMUL_METHODS = {"matmul", "bmm", "__matmul__"}
_SOFTMAX_FUNCTIONS = {torch.softmax, F.softmax}
_DROPOUT_FUNCTIONS = {F.dropout, torch.dropout}
_MUL = ({operator.mul, torch.mul}, {"mul", "__mul__", "__rmul__"})
_DIV = ({operator.truediv, torch.div}, {"div", "__truediv__"})
_ADD = ({operator.add, torch.add}, {"add", "__add__", "__radd__"})
_NOT = ({operator.invert, torch.logical_not, torch.bitwise_not},
        {"logical_not", "bitwise_not", "__invert__"})


def _is(node: Node, kind: tuple[set, set]) -> bool:
    functions, methods = kind
    return ((node.op == "call_function" and node.target in functions)
            or (node.op == "call_method" and node.target in methods))


def _is_matmul(node: Node) -> bool:
    return _is(node, (_MATMUL_FUNCTIONS, _MATMUL_METHODS))


def _val(node) -> torch.Tensor | None:
    if not isinstance(node, Node):
        return None
    value = node.meta.get("example_value", node.meta.get("val"))
    return value if isinstance(value, torch.Tensor) else None


def _only_user(node: Node) -> Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _arg(node: Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _same(a, b) -> bool:
    return statically_known_true(a == b)


def _untransposed(node) -> Node | None:
    """``k`` when ``node`` is ``k`` with its last two dimensions swapped, else None."""
    if not isinstance(node, Node):
        return None
    value = _val(node)
    if value is None:
        return None
    ndim = value.dim()
    if node.op == "call_function" and node.target is getattr and (
            node.args[1] == "mT" or (node.args[1] == "T" and ndim == 2)):
        return node.args[0]
    if node.op == "call_method" and node.target == "transpose" or (
            node.op == "call_function" and node.target is torch.transpose):
        dims = node.args[1:3] if len(node.args) >= 3 else None
        if dims is None or not all(isinstance(d, int) for d in dims):
            return None
        if sorted(d % ndim for d in dims) == [ndim - 2, ndim - 1]:
            return node.args[0]
        return None
    if node.op == "call_method" and node.target == "permute":
        order = node.args[1:] if len(node.args) > 2 else node.args[1]
        expected = list(range(ndim - 2)) + [ndim - 1, ndim - 2]
        if isinstance(order, (list, tuple)) and [d % ndim for d in order] == expected:
            return node.args[0]
    return None


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _scale_step(node: Node, current: Node) -> float | None:
    """The factor ``node`` multiplies ``current`` by (``* c``, ``c *``, ``/ c``), else None."""
    if _is(node, _MUL) and len(node.args) == 2 and not node.kwargs:
        other = node.args[1] if node.args[0] is current else node.args[0]
        return _number(other)
    if _is(node, _DIV) and len(node.args) == 2 and not node.kwargs and node.args[0] is current:
        c = _number(node.args[1])
        return None if not c else 1.0 / c
    return None


def _softmax_last_dim(node) -> bool:
    if not isinstance(node, Node):
        return False
    if node.op == "call_function" and node.target in _SOFTMAX_FUNCTIONS:
        dtype_index = 3 if node.target is F.softmax else 2
    elif node.op == "call_method" and node.target == "softmax":
        dtype_index = 2
    else:
        return False
    if _arg(node, dtype_index, "dtype") is not None:
        return False
    dim, scores = _arg(node, 1, "dim"), _val(node.args[0])
    return scores is not None and isinstance(dim, int) and dim % scores.dim() == scores.dim() - 1


def _scores(node, scale: float, mask, inverted: bool, chain: list):
    """Walk from the softmax input back to ``matmul(q, k^T)`` through scale and mask steps.

    Returns (matmul node, scale, mask, inverted, chain) or None. An additive mask followed by
    a scale factor (walking back: found after one) would be scaled too, so it is refused.
    """
    if not isinstance(node, Node):
        return None
    if _is_matmul(node):
        if len(node.args) != 2 or node.kwargs:
            return None
        return node, scale, mask, inverted, [*chain, node]
    chain = [*chain, node]
    if _is(node, _MUL) or _is(node, _DIV):
        current = next((a for a in node.args if isinstance(a, Node)), None)
        factor = None if current is None else _scale_step(node, current)
        if factor is None or factor <= 0:
            return None
        return _scores(current, scale * factor, mask, inverted, chain)
    scaled_after = any(_is(n, _MUL) or _is(n, _DIV) for n in chain)
    if _is(node, _ADD) and len(node.args) == 2 and not node.kwargs and mask is None and \
            not scaled_after:
        a, b = node.args
        for scores, added in ((a, b), (b, a)):
            if _val(added) is not None:
                found = _scores(scores, scale, added, False, chain)
                if found is not None:
                    return found
        return None
    if (node.op == "call_method" and node.target == "masked_fill" and mask is None
            and len(node.args) == 3 and not node.kwargs and _number(node.args[2]) == -math.inf):
        return _scores(node.args[0], scale, node.args[1], True, chain)
    return None


def _match(final: Node):
    """The attention chain ending at matmul ``final``, or None. Returns the replacement's
    pieces: (q, k, v, mask, mask_is_inverted_bool, dropout, scale, chain)."""
    if not _is_matmul(final) or len(final.args) != 2 or final.kwargs:
        return None
    node, v = final.args
    if not isinstance(node, Node) or not isinstance(v, Node):
        return None
    chain, dropout = [], 0.0
    if node.op == "call_function" and node.target in _DROPOUT_FUNCTIONS:
        p = _number(_arg(node, 1, "p", 0.5))
        training = _arg(node, 2, "training" if node.target is F.dropout else "train", True)
        if p is None or not 0.0 <= p < 1.0 or not isinstance(training, bool):
            return None
        dropout = p if training else 0.0
        chain.append(node)
        node = node.args[0]
    if not _softmax_last_dim(node):
        return None
    found = _scores(node.args[0], 1.0, None, False, [*chain, node])
    if found is None:
        return None
    scores, scale, mask, inverted, chain = found
    q, k = scores.args[0], _untransposed(scores.args[1])
    if k is None or any(_only_user(n) is None for n in chain):
        return None
    if not _shapes_ok(q, k, v, mask, inverted, _val(scores)):
        return None
    return q, k, v, mask, inverted, dropout, scale, chain


def _shapes_ok(q, k, v, mask, inverted, scores) -> bool:
    """The fused op computes exactly this: same dtypes, same batch dims, mask fits the scores."""
    qv, kv, vv = _val(q), _val(k), _val(v)
    if qv is None or kv is None or vv is None or scores is None:
        return False
    if not (qv.dtype == kv.dtype == vv.dtype and qv.dtype.is_floating_point):
        return False
    if not (qv.dim() == kv.dim() == vv.dim() >= 2) or qv.device != kv.device:
        return False
    if not all(_same(a, b) for a, b in zip(qv.shape[:-2], kv.shape[:-2])):
        return False
    if not all(_same(a, b) for a, b in zip(kv.shape[:-1], vv.shape[:-1])):
        return False
    if mask is not None:
        mv = _val(mask)
        if mv is None or mv.dim() > scores.dim():
            return False
        if inverted and mv.dtype != torch.bool:
            return False
        if not inverted and mv.dtype != qv.dtype:
            return False  # eager would promote the scores' dtype
        for m, s in zip(reversed(mv.shape), reversed(scores.shape)):
            if not (_same(m, 1) or _same(m, s)):
                return False
    return True


def rewrite_attention(gm: GraphModule) -> int:
    """Replace every unfused attention chain in ``gm`` by the fused op; returns how many."""
    from ember.core.nn.functional import scaled_dot_product_attention

    graph, count = gm.graph, 0
    for final in list(graph.nodes):
        found = _match(final) if final.op in ("call_function", "call_method") else None
        if found is None:
            continue
        q, k, v, mask, inverted, dropout, scale, chain = found
        transposed = chain[-1].args[1]
        negated = None
        if inverted and _is(mask, _NOT) and len(mask.users) == 1 and \
                getattr(_val(mask.args[0]), "dtype", None) == torch.bool:
            negated, mask = mask, mask.args[0]  # masked_fill(~keep, -inf): keep is the mask
        elif inverted:
            with graph.inserting_before(final):
                mask = graph.call_function(torch.logical_not, (mask,))
        target = _attention_for(_val(q), dropout)
        with graph.inserting_before(final):
            fused = graph.call_function(
                target, (q, k, v), {"attn_mask": mask, "dropout_p": dropout, "scale": scale})
        fused.meta = dict(final.meta)
        final.replace_all_uses_with(fused)
        for node in [final, *chain, negated, transposed]:
            if node is not None and not node.users:
                graph.erase_node(node)
        count += 1
        log.info("attention pattern -> %s: softmax(%s @ %s^T * %.4g%s)%s @ %s",
                 "ember sdpa" if target is scaled_dot_product_attention else "ATen's CPU sdpa",
                 q.name, k.name, scale, "" if mask is None else f" + mask {mask.name}",
                 f" -> dropout({dropout})" if dropout else "", v.name)
    if count:
        graph.lint()
        gm.recompile()
        stats["attention"] += count
    return count


def _attention_for(q: torch.Tensor | None, dropout: float):
    """The fused op a matched chain becomes: on CPU without dropout, torch's
    ``scaled_dot_product_attention`` (ATen's C++ flash kernel, forward and backward; Ember's
    CPU kernel tiles in Python, slow for many small heads); otherwise Ember's (Triton
    FlashAttention-2 on CUDA, and its dropout)."""
    from ember.core.nn.functional import scaled_dot_product_attention

    if q is not None and q.device.type == "cpu" and not dropout:
        return F.scaled_dot_product_attention
    return scaled_dot_product_attention


def apply(gm: GraphModule, options: dict | None = None) -> GraphModule:
    """Run the enabled rewrites on a Dynamo graph (``options["patterns"]`` False: none)."""
    if (options or {}).get("patterns", True) is False:
        return gm
    rewrite_attention(gm)
    return gm
