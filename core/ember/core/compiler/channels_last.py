"""Layout rewrite on an ATen graph: 2-D convolutions take channels-last activations.

oneDNN's CPU convolutions run faster on NHWC data than on NCHW (no reorder of the activation
on every call), and a convolution fed NHWC returns NHWC, so the layout flows on through the
pointwise ops, norms and further convolutions between them. The rewrite puts a layout copy
before each convolution, propagates the fake tensors again (every later node's strides
follow, as eager's would), then drops the copies whose input turned out in that layout
already. Values are unchanged: only memory order moves (the convolution's own summation order
may differ in the last bits, as eager's does between the two layouts); graph outputs keep
eager's layout.

Ahead-of-time packages store their convolution weights NHWC, so every convolution goes NHWC.
In JIT inference graphs the weights are the caller's NCHW parameters, which ATen copies to
NHWC on every call: a convolution goes NHWC only when that copy is small beside its input
(:func:`prefers_nhwc`), else it is fed NCHW. A weight computed in the graph (an AMP cast)
is judged the same way, and when it goes NHWC the kernel that computes it writes it so.
Max pools over NCHW rows narrower than ``POOL_NHWC_BELOW_WIDTH`` get an NHWC copy of their
input too (shared with any convolution that wants the same copy): their loop then runs over
channels with each tap's bounds hoisted, where over a 4-wide row it checked them per element.
A ``view`` the new layout cannot take gets a contiguous copy of its input first (eager's
``reshape`` copies there; the trace kept a view only because the value was contiguous then).
``options={"channels_last": False}`` turns the rewrite off.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from ember.core.logs import get_logger

try:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
except ImportError:  # torch < 2.13 names it hint_int
    from torch.fx.experimental.symbolic_shapes import hint_int as optimization_hint

log = get_logger("perf_hints")

_CONV = torch.ops.aten.convolution.default
_CLONE = torch.ops.aten.clone.default
_VIEW = torch.ops.aten.view.default
_POOL = torch.ops.aten.max_pool2d_with_indices.default
# A max pool over NCHW rows narrower than this runs scalar (each tap's bounds checked per
# element; a 16-bit tap cannot be a vector gather): fed NHWC, its loop runs over channels
# with the bounds hoisted (a 2x256x8x8 bfloat16 3x3 pool: 1071 -> 53 us, 1 thread), for two copies
POOL_NHWC_BELOW_WIDTH = 16
# A JIT convolution goes NHWC when ATen's per-call copy of its weight to NHWC moves at most
# this many elements per element of its input, plus a fixed allowance: NCHW costs oneDNN two
# activation reorders per call, tens of microseconds even on tiny inputs.
WEIGHT_COPY_PER_INPUT = 2
WEIGHT_COPY_ALLOWANCE = 16384
# A weight that is NHWC already (1x1 and depthwise kernels are both layouts at once) is not
# copied, yet oneDNN's NHWC convolution still ran slower than its NCHW one where the weight
# outweighs the input (1x1 at batch 2, float32, NCHW / NHWC: 256->1024 at 4x4 164 / 284 us,
# 2048->512 at 2x2 230 / 1826; but 512->128 at 8x8 186 / 126, 128->512 at 8x8 162 / 130;
# bfloat16 alike): such a convolution goes NHWC when its weight has at most this many
# elements per element of its input, plus the same allowance.
WEIGHT_PER_INPUT_UNCOPIED = 4


def _is_nhwc(v) -> bool:
    return isinstance(v, torch.Tensor) and v.dim() == 4 and \
        v.is_contiguous(memory_format=torch.channels_last)


def _candidates(gm: GraphModule) -> list[Node]:
    out = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not _CONV:
            continue
        x, transposed = n.args[0], n.args[6]
        v = x.meta.get("val") if isinstance(x, Node) else None
        if transposed or not isinstance(v, torch.Tensor) or v.dim() != 4 or \
                v.device.type != "cpu" or not v.dtype.is_floating_point:
            continue
        out.append(n)
    return out


def _narrow_pools(gm: GraphModule) -> list[Node]:
    """Max pools over NCHW rows narrower than ``POOL_NHWC_BELOW_WIDTH``."""
    out = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not _POOL:
            continue
        v = n.args[0].meta.get("val") if isinstance(n.args[0], Node) else None
        if isinstance(v, torch.Tensor) and v.dim() == 4 and v.device.type == "cpu" and \
                v.dtype.is_floating_point and v.is_contiguous() and \
                optimization_hint(v.shape[-1], fallback=POOL_NHWC_BELOW_WIDTH) < \
                POOL_NHWC_BELOW_WIDTH:
            out.append(n)
    return out


def prefers_nhwc(conv: Node) -> bool:
    """JIT rule: whether ``conv`` runs faster fed NHWC, its weight relaid out to NHWC on every
    call (by ATen for a parameter, by its own kernel for a weight computed in the graph)."""
    w, x = conv.args[1].meta["val"], conv.args[0]
    size = optimization_hint(x.meta["val"].numel(), fallback=0)  # no guard on a dynamic size
    weight = optimization_hint(w.numel(), fallback=0)
    # an NHWC weight (1x1, depthwise) is not copied; any other is, every call
    per_input = WEIGHT_PER_INPUT_UNCOPIED if _is_nhwc(w) else WEIGHT_COPY_PER_INPUT
    return weight <= per_input * size + WEIGHT_COPY_ALLOWANCE


class _Propagation(FakeTensorProp):
    """Fake-tensor propagation that gives a ``view`` whose input can no longer be viewed so
    (its producer now NHWC, where the trace saw it contiguous) a contiguous copy of that input
    first: what eager's ``reshape`` would have done, and the trace recorded as a view only
    because the value was contiguous then. The copies made are appended to ``copies``."""

    def __init__(self, gm: GraphModule, mode, copies: list[Node]) -> None:
        super().__init__(gm, mode)
        self.copies = copies

    def run_node(self, n: Node):
        if n.op == "call_function" and n.target is _VIEW and isinstance(n.args[0], Node):
            src, size = self.fetch_args_kwargs_from_env(n)[0][:2]
            try:
                src.view(size)
            except (RuntimeError, ValueError):  # eager's error, and the fake kernel's
                with self.module.graph.inserting_before(n):
                    copy = self.module.graph.call_function(
                        _CLONE, (n.args[0],), {"memory_format": torch.contiguous_format})
                n.replace_input_with(n.args[0], copy)
                self.env[copy] = copy.meta["val"] = src.clone(
                    memory_format=torch.contiguous_format)
                self.copies.append(copy)
        return super().run_node(n)


def _fake_mode(gm: GraphModule):
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and hasattr(v, "fake_mode"):
            return v.fake_mode
    return None


def apply(gm: GraphModule, own_layout: set[str], jit: bool = False) -> list[str]:
    """Rewrite ``gm`` in place. ``own_layout``: the placeholders the caller will hand over in
    whatever layout the rewrite picks (an ahead-of-time package's weights); those that are
    convolution weights become channels-last too, and their names are returned (the caller
    must supply them so). ``jit``: pick each convolution's layout by :func:`prefers_nhwc`
    (else every convolution goes NHWC)."""
    convs = _candidates(gm)
    mode = _fake_mode(gm)
    if not convs or mode is None:
        return []
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    old_vals = {n: n.meta.get("val") for n in inputs}
    # every node's value, to restore as it was: propagating again from the placeholders need
    # not give the same strides (an extern's fake kernel may lay its output out otherwise
    # than the trace recorded: ATen's sdpa, whose contiguous() before a view was dropped)
    traced = {n: n.meta.get("val") for n in gm.graph.nodes}
    nhwc_weights = []
    for conv in convs:
        w = conv.args[1]
        v = old_vals.get(w)
        if w in old_vals and w not in nhwc_weights and w.name in own_layout and \
                isinstance(v, torch.Tensor) and v.dim() == 4 and not _is_nhwc(v):
            with mode:
                w.meta["val"] = v.contiguous(memory_format=torch.channels_last)
            nhwc_weights.append(w)
    placeholders = [n.meta.get("val") for n in inputs]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    before = {id(o): _is_nhwc(o.meta.get("val")) for o in output.all_input_nodes}
    copies = []
    made: dict[tuple, Node] = {}  # (value, layout) -> its copy, shared by its readers here
    pools, conv_set = set(_narrow_pools(gm)), set(convs)
    for node in [n for n in gm.graph.nodes if n in pools or n in conv_set]:
        if node in pools:
            fmt, feeds = torch.channels_last, [node.args[0]]
        else:
            nhwc = not jit or prefers_nhwc(node)
            fmt = torch.channels_last if nhwc else torch.contiguous_format
            feeds = [node.args[0]]
            w = node.args[1]
            if nhwc and isinstance(w, Node) and w.op != "placeholder":
                feeds.append(w)  # a computed weight: its kernel writes it NHWC
        for feed in feeds:
            copy = made.get((feed, fmt))
            if copy is None:  # the first reader in graph order: the copy goes before it
                with gm.graph.inserting_before(node):
                    copy = gm.graph.call_function(_CLONE, (feed,), {"memory_format": fmt})
                made[feed, fmt] = copy
                copies.append(copy)
            node.replace_input_with(feed, copy)
    gm.recompile()
    relaid: list[Node] = []  # contiguous copies before views (``_Propagation``)
    try:
        _Propagation(gm, mode, relaid).propagate_dont_convert_inputs(*placeholders)
    except Exception as e:  # a graph fake tensors cannot re-run: leave it as it was
        for copy in copies + relaid:
            copy.replace_all_uses_with(copy.args[0])
            gm.graph.erase_node(copy)
        for n, v in traced.items():
            n.meta["val"] = v
        gm.recompile()
        log.info("channels-last convolutions: not applied (%s: %s)", type(e).__name__, e)
        return []
    kept = 0
    for copy in copies:
        v = copy.args[0].meta.get("val")
        if v.is_contiguous(memory_format=copy.kwargs["memory_format"]):
            copy.replace_all_uses_with(copy.args[0])
            gm.graph.erase_node(copy)
        else:
            kept += 1
    for o in output.all_input_nodes:  # outputs keep eager's layout
        if _is_nhwc(o.meta.get("val")) and not before[id(o)]:
            with gm.graph.inserting_before(output):
                back = gm.graph.call_function(_CLONE, (o,),
                                              {"memory_format": torch.contiguous_format})
            back.meta["val"] = o.meta["val"].clone(memory_format=torch.contiguous_format)
            output.replace_input_with(o, back)
    gm.recompile()
    log.info("channels-last convolutions: %d of %d convolutions, %d layout copies (%d before "
             "views), %d weights", sum(_is_nhwc(c.args[0].meta.get("val")) for c in convs),
             len(convs), kept + len(relaid), len(relaid), len(nhwc_weights))
    return [w.name for w in nhwc_weights]
