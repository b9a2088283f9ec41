"""Prepacked weights for frozen inference graphs (``freezing.py`` calls ``apply``): packed
once, at compile time, for this CPU, in the process only (never in the disk cache).

Convolutions: a 2-D float32 convolution with a constant weight and static input sizes
becomes oneDNN's ``mkldnn._convolution_pointwise`` on a weight reordered into oneDNN's
blocked layout; a following ``relu``, or ``add`` of a same-shaped tensor (and a ``relu``
after it), runs inside the call. Its output is channels-last, so the layout flows on to the
next convolution with no reorder per call. A 3x3, stride-1 one with enough channels and
tiles (``nn.winograd_conv.suits``) runs Winograd's F(2x2, 3x3) instead, with the same
fusions: 1.1-1.7x faster than oneDNN's direct convolution on ResNet-50's, VGG-16's and the
FPN's, with rounding error of the same order (``ember bench conv``).

Linears: ``addmm`` / ``mm`` by a constant transposed weight with static sizes becomes MKL's
``mkl._mkl_linear`` on a weight packed for the batch size (another batch size runs the
unpacked weight). On Faster R-CNN's box head ([337, 12544] @ [12544, 1024], one thread) it
took 110 ms where oneDNN's linear took 121-140 ms and MKL's sgemm 108-138 ms (noisy runs);
on [337, 1024] @ [1024, 1024] 8.9 ms against 10.8 and 10.8.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch
from torch.fx import GraphModule, Node

from ember.core.compiler.lowering.externs import SKINNY_MM

aten = torch.ops.aten
_names = itertools.count()


class Fusion(NamedTuple):
    """What a convolution absorbs: the node it replaces, and the post-ops' arguments."""

    nodes: tuple  # the convolution and the ops it absorbs, in order
    other: Node | None  # the tensor added (binary post-op), if any
    unary: str  # "none" or "relu"


def add_constant(gm: GraphModule, t: torch.Tensor, before: Node, prefix: str, val=None) -> Node:
    """Register ``t`` as a buffer of ``gm`` (not saved: it lives in the process) and read it
    with a get_attr node before ``before``; the one way frozen and packed constants are made."""
    name = f"{prefix}{next(_names)}"
    gm.register_buffer(name, t, persistent=False)
    with gm.graph.inserting_before(before):
        node = gm.graph.get_attr(name)
    node.meta["val"] = val
    return node


def available() -> bool:
    return torch.backends.mkldnn.is_available() and \
        hasattr(torch.ops.mkldnn, "_convolution_pointwise") and \
        hasattr(torch.ops.mkldnn, "_reorder_convolution_weight")


def _mkl_available() -> bool:
    return torch._C.has_mkl and hasattr(torch.ops.mkl, "_mkl_linear")


def _static(v) -> bool:
    return isinstance(v, torch.Tensor) and all(isinstance(s, int) for s in v.shape)


def _is_constant(n) -> bool:
    return isinstance(n, Node) and n.op == "get_attr"


def conv_constants(gm: GraphModule, conv: Node):
    """(weight, bias or None) of a non-transposed convolution whose weight (and bias) are
    constants, the weight strided and floating; else None. Folding and packing both read it."""
    if conv.op != "call_function" or conv.target is not aten.convolution.default or \
            conv.args[6]:
        return None
    w, b = conv.args[1], conv.args[2]
    if not _is_constant(w) or (b is not None and not _is_constant(b)):
        return None
    weight = getattr(gm, w.target)
    if weight.layout != torch.strided or not weight.is_floating_point():
        return None
    return weight, getattr(gm, b.target) if b is not None else None


def _weight_of(gm: GraphModule, conv: Node):
    """(weight, bias) of a convolution this module packs, else None."""
    operands = conv_constants(gm, conv)
    if operands is None:
        return None
    x = conv.args[0]
    xv, out = x.meta.get("val") if isinstance(x, Node) else None, conv.meta.get("val")
    if not _static(xv) or not _static(out) or xv.dim() != 4 or \
            xv.dtype != torch.float32 or xv.device.type != "cpu":
        return None
    weight, bias = operands
    if weight.dtype != torch.float32 or weight.dim() != 4:
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


def _replace(gm: GraphModule, fusion: Fusion, new: Node, fake_mode) -> None:
    """``new`` (a channels-last result) stands for the last node of ``fusion``, which goes."""
    conv, last = fusion.nodes[0], fusion.nodes[-1]
    shape, dtype = conv.meta["val"].shape, conv.meta["val"].dtype
    with fake_mode:
        new.meta["val"] = torch.empty(shape, dtype=dtype, memory_format=torch.channels_last)
    last.replace_all_uses_with(new)
    for n in reversed(fusion.nodes):
        gm.graph.erase_node(n)


def _winograd(gm: GraphModule, conv: Node, weight, fusion: Fusion, fake_mode) -> bool:
    """A 3x3, stride-1 convolution at sizes where Winograd's F(2x2, 3x3) beats oneDNN's
    direct one becomes ``ember::winograd_conv2d`` (see ``ember.core.nn.winograd_conv``)."""
    from ember.core.nn import winograd_conv

    x, w, b, stride, padding, dilation, _t, _op, groups = conv.args
    shape = list(x.meta["val"].shape)
    if not winograd_conv.applies(list(weight.shape), shape, stride, padding, dilation, groups,
                                 packed_once=True):
        return False
    last = fusion.nodes[-1]
    packed = add_constant(gm, winograd_conv.pack(weight, shape, padding), last, "_packed")
    with gm.graph.inserting_before(last):
        new = gm.graph.call_function(winograd_conv.winograd_conv2d.op.default,
                                     (x, w, packed, b, fusion.other, list(padding),
                                      fusion.unary, True))
    _replace(gm, fusion, new, fake_mode)
    return True


def _pack(gm: GraphModule, conv: Node, weight, bias, fake_mode) -> None:
    x, _w, b, stride, padding, dilation, _t, _op, groups = conv.args
    fusion = _fusion(conv)
    if _winograd(gm, conv, weight, fusion, fake_mode):
        return
    last = fusion.nodes[-1]
    packed = torch.ops.mkldnn._reorder_convolution_weight(
        weight, list(padding), list(stride), list(dilation), groups, list(x.meta["val"].shape))
    w = add_constant(gm, packed, last, "_packed")
    with gm.graph.inserting_before(last):
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
    _replace(gm, fusion, new, fake_mode)


_PACKED = ((torch.ops.mkldnn._convolution_pointwise.default,
            torch.ops.mkldnn._convolution_pointwise.binary) if available() else ()) + \
    ((torch.ops.mkl._mkl_linear.default,) if _mkl_available() else ())


def _packed_targets() -> tuple:
    from ember.core.nn import winograd_conv

    return _PACKED + (winograd_conv.winograd_conv2d.op.default,)


# views that need their input's strides to allow them: after a channels-last output reaches
# one (VGG's flatten of its last pooled features), the input is made contiguous first
_VIEWS = (aten.view.default, aten._unsafe_view.default)


def _contiguous_input(gm: GraphModule, n: Node, fake_mode) -> None:
    src = n.args[0]
    with gm.graph.inserting_before(n):
        copy = gm.graph.call_function(aten.clone.default, (src,),
                                      {"memory_format": torch.contiguous_format})
    with fake_mode:
        copy.meta["val"] = src.meta["val"].clone(memory_format=torch.contiguous_format)
    n.replace_input_with(src, copy)


def _refresh(gm: GraphModule, n: Node, fake_mode) -> None:
    """Recompute ``n``'s fake value from its inputs' current ones, so strides follow the
    channels-last outputs of the packed calls before it (a view they no longer allow gets a
    contiguous input first)."""
    def val(a):
        return a.meta.get("val") if isinstance(a, Node) else a

    if n.target in _VIEWS and isinstance(n.args[0], Node):
        v = n.args[0].meta["val"]
        if not v.is_contiguous() and v.is_contiguous(memory_format=torch.channels_last) and \
                not _viewable(v, n.args[1], fake_mode):
            _contiguous_input(gm, n, fake_mode)
    with fake_mode:
        args = torch.fx.node.map_arg(n.args, val)
        kwargs = torch.fx.node.map_arg(n.kwargs, val)
        n.meta["val"] = n.target(*args, **kwargs)


def _viewable(v: torch.Tensor, shape, fake_mode) -> bool:
    with fake_mode:
        try:
            v.view(shape)
        except (RuntimeError, ValueError):
            return False
    return True


def _pack_conv(gm: GraphModule, conv: Node, fake_mode) -> bool:
    operands = _weight_of(gm, conv)
    if operands is None:
        return False
    _pack(gm, conv, *operands, fake_mode)
    return True


def _constant(gm: GraphModule, n, dim: int) -> torch.Tensor | None:
    """The float32 strided ``dim``-D constant ``n`` holds, else None."""
    if not _is_constant(n):
        return None
    t = getattr(gm, n.target)
    ok = t.layout == torch.strided and t.dtype == torch.float32 and t.dim() == dim
    return t if ok else None


def _pack_linear(gm: GraphModule, node: Node, fake_mode) -> bool:
    """``addmm(bias, x, w.t())`` / ``mm(x, w.t())`` with constant ``w`` -> MKL's packed
    linear, for static sizes none of which is skinny (those run as loop reductions)."""
    if node.kwargs or not _mkl_available():
        return False
    bias, x, wt = node.args if node.target is aten.addmm.default else (None, *node.args)
    weight, xv = _constant(gm, wt, 2), x.meta.get("val") if isinstance(x, Node) else None
    if weight is None or not _static(xv) or xv.dim() != 2 or xv.dtype != torch.float32 or \
            xv.device.type != "cpu" or (bias is not None and _constant(gm, bias, 1) is None):
        return False
    (m, k), n = xv.shape, weight.shape[1]
    if min(m, k, n) <= SKINNY_MM:
        return False
    weight = weight.t().contiguous()
    packed = add_constant(gm, torch.ops.mkl._mkl_reorder_linear_weight(weight, m), node, "_packed")
    orig = add_constant(gm, weight, node, "_packed",
                        val=fake_mode.from_tensor(weight, static_shapes=True))
    with gm.graph.inserting_before(node):
        new = gm.graph.call_function(torch.ops.mkl._mkl_linear.default,
                                     (x, packed, orig, bias, m))
    with fake_mode:
        new.meta["val"] = torch.empty((m, n), dtype=torch.float32)
    node.replace_all_uses_with(new)
    gm.graph.erase_node(node)
    return True


PACKERS = {
    aten.convolution.default: _pack_conv,
    aten.addmm.default: _pack_linear,
    aten.mm.default: _pack_linear,
}


def apply(gm: GraphModule, fake_mode) -> int:
    """Pack every convolution and linear that qualifies; returns how many."""
    if not available() or fake_mode is None:
        return 0
    packed, made = 0, _packed_targets()
    # in graph order, so a fusion decision sees the layouts the packed calls before it give
    # (ResNet's identity after a max pool is channels-last by the time its add is fused)
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or getattr(node, "_erased", False) or \
                node.target in made:
            continue
        packer = PACKERS.get(node.target)
        if packer is not None and packer(gm, node, fake_mode):
            packed += 1
        elif packed:
            _refresh(gm, node, fake_mode)
    return packed
