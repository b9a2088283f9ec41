"""Prepacked convolutions for frozen inference graphs (``freezing.py`` calls ``apply``).

A 2-D float32 convolution with a constant weight and static input sizes becomes oneDNN's
``mkldnn._convolution_pointwise`` on a weight reordered once, at compile time, into oneDNN's
blocked layout for this CPU (in the process only, never on disk); a following ``relu``, or
``add`` of a same-shaped tensor (and a ``relu`` after it), runs inside the call. Its output
is channels-last, so the layout flows on to the next convolution with no reorder per call.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten
_names = itertools.count()


class Fusion(NamedTuple):
    """What a convolution absorbs: the node it replaces, and the post-ops' arguments."""

    nodes: tuple  # the convolution and the ops it absorbs, in order
    other: Node | None  # the tensor added (binary post-op), if any
    unary: str  # "none" or "relu"


def available() -> bool:
    return torch.backends.mkldnn.is_available() and \
        hasattr(torch.ops.mkldnn, "_convolution_pointwise") and \
        hasattr(torch.ops.mkldnn, "_reorder_convolution_weight")


def _static(v) -> bool:
    return isinstance(v, torch.Tensor) and all(isinstance(s, int) for s in v.shape)


def _weight_of(gm: GraphModule, conv: Node):
    """(weight, bias) of a convolution this module packs, else None."""
    if conv.op != "call_function" or conv.target is not aten.convolution.default:
        return None
    x, w, b, _stride, _padding, _dilation, transposed = conv.args[:7]
    xv, out = x.meta.get("val") if isinstance(x, Node) else None, conv.meta.get("val")
    if transposed or not _static(xv) or not _static(out) or xv.dim() != 4 or \
            xv.dtype != torch.float32 or xv.device.type != "cpu":
        return None
    if not (isinstance(w, Node) and w.op == "get_attr") or \
            (b is not None and not (isinstance(b, Node) and b.op == "get_attr")):
        return None
    weight, bias = getattr(gm, w.target), getattr(gm, b.target) if b is not None else None
    if weight.layout != torch.strided or weight.dtype != torch.float32 or weight.dim() != 4:
        return None
    if bias is not None and (bias.layout != torch.strided or bias.dtype != torch.float32):
        return None
    return weight, bias


def _only_user(n: Node, target) -> Node | None:
    if len(n.users) != 1:
        return None
    u = next(iter(n.users))
    return u if u.op == "call_function" and u.target is target else None


def _fusion(conv: Node) -> Fusion:
    """The relu, or add (+ relu), that follows ``conv`` as its only reader."""
    relu = _only_user(conv, aten.relu.default)
    if relu is not None:
        return Fusion((conv, relu), None, "relu")
    add = _only_user(conv, aten.add.Tensor)
    if add is None or add.kwargs or len(add.args) != 2:
        return Fusion((conv,), None, "none")
    other = add.args[1] if add.args[0] is conv else add.args[0]
    ov, cv = (other.meta.get("val") if isinstance(other, Node) else None), conv.meta["val"]
    # an NCHW addend would be copied to channels-last inside the call: the add stays a kernel
    if other is conv or not isinstance(ov, torch.Tensor) or ov.shape != cv.shape or \
            ov.dtype != cv.dtype or ov.device != cv.device or \
            not ov.is_contiguous(memory_format=torch.channels_last):
        return Fusion((conv,), None, "none")
    relu = _only_user(add, aten.relu.default)
    if relu is None:
        return Fusion((conv, add), other, "none")
    return Fusion((conv, add, relu), other, "relu")


def _pack(gm: GraphModule, conv: Node, weight, bias, fake_mode) -> None:
    x, _w, b, stride, padding, dilation, _t, _op, groups = conv.args
    fusion = _fusion(conv)
    last = fusion.nodes[-1]
    packed = torch.ops.mkldnn._reorder_convolution_weight(
        weight, list(padding), list(stride), list(dilation), groups, list(x.meta["val"].shape))
    name = f"_packed{next(_names)}"
    gm.register_buffer(name, packed, persistent=False)
    with gm.graph.inserting_before(last):
        w = gm.graph.get_attr(name)
        if fusion.other is None:
            new = gm.graph.call_function(
                torch.ops.mkldnn._convolution_pointwise.default,
                (x, w, b, list(padding), list(stride), list(dilation), groups, fusion.unary,
                 [], ""))
        else:
            new = gm.graph.call_function(
                torch.ops.mkldnn._convolution_pointwise.binary,
                (x, fusion.other, w, b, list(padding), list(stride), list(dilation), groups,
                 "add", None, None if fusion.unary == "none" else fusion.unary, [], ""))
    w.meta["val"] = None
    shape, dtype = conv.meta["val"].shape, conv.meta["val"].dtype
    with fake_mode:
        new.meta["val"] = torch.empty(shape, dtype=dtype, memory_format=torch.channels_last)
    last.replace_all_uses_with(new)
    for n in reversed(fusion.nodes):
        gm.graph.erase_node(n)


_PACKED = (torch.ops.mkldnn._convolution_pointwise.default,
           torch.ops.mkldnn._convolution_pointwise.binary) if available() else ()


def propagate(gm: GraphModule, fake_mode) -> None:
    """Recompute every value's fake tensor, so strides follow the channels-last outputs of
    the packed calls (whose values were set when they were made)."""
    def val(a):
        return a.meta.get("val") if isinstance(a, Node) else a

    with fake_mode:
        for n in gm.graph.nodes:
            if n.op != "call_function" or n.target in _PACKED:
                continue
            args = torch.fx.node.map_arg(n.args, val)
            kwargs = torch.fx.node.map_arg(n.kwargs, val)
            n.meta["val"] = n.target(*args, **kwargs)


def apply(gm: GraphModule, fake_mode) -> int:
    """Pack every convolution that qualifies; returns how many."""
    if not available() or fake_mode is None:
        return 0
    packed = 0
    for conv in list(gm.graph.nodes):
        operands = _weight_of(gm, conv)
        if operands is not None:
            _pack(gm, conv, *operands, fake_mode)
            packed += 1
    if packed:
        propagate(gm, fake_mode)
    return packed
