"""Freezing (``options={"freezing": True}``): in inference graphs, the parameters and buffers
Dynamo lifts as graph inputs become constants baked in at compile time.

``freeze`` turns those inputs into constants, folds what depends only on constants (a
BatchNorm's scale and shift become the preceding convolution's weight and bias), hands the
graph to ``prepack`` (packed convolution and linear weights) and compiles what is left.
The callable it returns checks, per call, that every frozen tensor is the same object with
the same version and storage; on a change it compiles the graph again unfrozen and runs that
from then on, with the reason logged on ``ember.fallback``. Packed weights live in the process only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx import GraphModule, Node

from ember.core.compiler import prepack
from ember.core.logs import get_logger

log = get_logger("aot")
fallback_log = get_logger("fallback")

aten = torch.ops.aten


@dataclass(frozen=True)
class Frozen:
    """One graph input baked in as a constant, with what the per-call check compares."""

    pos: int
    tensor: torch.Tensor
    version: int
    data_ptr: int


def is_parameter(t) -> bool:
    """A parameter or buffer Dynamo lifted as a graph input (it marks them static)."""
    return isinstance(t, torch.nn.Parameter) or (
        isinstance(t, torch.Tensor) and getattr(t, "_dynamo_static_input_type", None) is not None)


def parameter_positions(real_inputs) -> list[int]:
    """Positions of the Dynamo graph's inputs that are parameters or buffers."""
    return [i for i, t in enumerate(real_inputs) if is_parameter(t)]


def changed(args, frozen: list[Frozen]) -> str | None:
    """Why the frozen inputs no longer hold (None while they do)."""
    for f in frozen:
        a = args[f.pos]
        if a is not f.tensor:
            return f"input {f.pos} is another tensor than the one frozen"
        if a._version != f.version or a.data_ptr() != f.data_ptr:
            return f"input {f.pos} was modified in place after compiling"
    return None


# ------------------------------------------------------------------ inputs -> constants

def _written_or_returned(gm: GraphModule) -> set[Node]:
    """Placeholders the graph writes in place, or returns (through views): they stay inputs."""
    keep: set[Node] = set()
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    returned = set(out.all_input_nodes)
    for p in gm.graph.find_nodes(op="placeholder"):
        views, stack = {p}, [p]
        while stack:
            n = stack.pop()
            for u in n.users:
                schema = getattr(u.target, "_schema", None)
                if schema is not None and any(
                        a.alias_info is not None and a.alias_info.is_write and
                        i < len(u.args) and u.args[i] is n
                        for i, a in enumerate(schema.arguments)):
                    keep.add(p)
                if getattr(u.target, "is_view", False) and u not in views:
                    views.add(u)
                    stack.append(u)
        if views & returned:
            keep.add(p)
    return keep


def _constant(gm: GraphModule, t: torch.Tensor, before: Node, like: Node | None = None) -> Node:
    return prepack.add_constant(gm, t, before, "_frozen",
                                val=like.meta.get("val") if like is not None else None)


def bake_inputs(gm: GraphModule, real_inputs, positions: list[int]) -> list[Frozen]:
    """Replace the placeholders at ``positions`` by constants holding the real tensors."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    keep = _written_or_returned(gm)
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    frozen = []
    for pos in positions:
        p, t = placeholders[pos], real_inputs[pos]
        if p in keep:
            continue
        p.replace_all_uses_with(_constant(gm, t, first, like=p))
        gm.graph.erase_node(p)
        frozen.append(Frozen(pos, t, t._version, t.data_ptr()))
    return frozen


# ------------------------------------------------------------------ constant folding

def _value(gm: GraphModule, n) -> object:
    return getattr(gm, n.target) if isinstance(n, Node) else n


def _foldable(n: Node) -> bool:
    if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in n.target.tags or n.target._schema.is_mutable:
        return False
    inputs = n.all_input_nodes
    return bool(inputs) and all(a.op == "get_attr" for a in inputs)


def fold_constants(gm: GraphModule) -> int:
    """Evaluate every op whose tensor inputs are all constants; results no larger than their
    largest input (an ``expand`` stays lazy). Returns how many ops were folded."""
    folded = 0
    for n in list(gm.graph.nodes):
        if not _foldable(n):
            continue
        args = torch.fx.node.map_arg(n.args, lambda a: _value(gm, a))
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: _value(gm, a))
        ins = [_value(gm, a) for a in n.all_input_nodes]
        if any(not isinstance(t, torch.Tensor) or t.layout != torch.strided for t in ins):
            continue
        out = n.target(*args, **kwargs)
        if not isinstance(out, torch.Tensor) or \
                out.numel() > max(t.numel() for t in ins):
            continue
        n.replace_all_uses_with(_constant(gm, out, n, like=n))
        gm.graph.erase_node(n)
        folded += 1
    return folded


# ------------------------------------------------------------------ conv + per-channel op

_FOLD_INTO_CONV = {
    aten.add.Tensor: lambda w, b, c: (w, b + c),
    aten.sub.Tensor: lambda w, b, c: (w, b - c),
    aten.mul.Tensor: lambda w, b, c: (w * c.reshape(-1, *[1] * (w.dim() - 1)), b * c),
    aten.div.Tensor: lambda w, b, c: (w / c.reshape(-1, *[1] * (w.dim() - 1)), b / c),
}


def _per_channel(c, out: torch.Tensor, channels: int) -> torch.Tensor | None:
    """``c`` as a [channels] tensor when broadcasting it against the conv output ``out``
    only scales or shifts each output channel."""
    if isinstance(c, (int, float)) and not isinstance(c, bool):
        return torch.full((channels,), float(c), dtype=out.dtype)
    if not isinstance(c, torch.Tensor) or c.dtype != out.dtype or c.dim() > out.dim():
        return None
    shape = [1] * (out.dim() - c.dim()) + list(c.shape)
    if any(s != 1 for d, s in enumerate(shape) if d != 1) or shape[1] not in (1, channels):
        return None
    return c.reshape(-1).expand(channels).contiguous()


def _conv_operands(gm: GraphModule, conv: Node):
    """(weight, bias) of a non-transposed convolution with constant weight (and bias)."""
    operands = prepack.conv_constants(gm, conv)
    if operands is None:
        return None
    weight, bias = operands
    return weight, bias if bias is not None else torch.zeros(weight.shape[0], dtype=weight.dtype)


def _other_operand(user: Node, conv: Node) -> list:
    """[c] when ``user`` is ``conv op c`` (or ``c op conv`` for add and mul), else []."""
    if user.target not in _FOLD_INTO_CONV or user.kwargs or len(user.args) != 2:
        return []
    a, b = user.args
    if a is conv and b is not conv:
        return [b]
    if b is conv and a is not conv and user.target in (aten.add.Tensor, aten.mul.Tensor):
        return [a]
    return []


def fold_into_convs(gm: GraphModule) -> int:
    """``conv(x) op c`` with ``op`` in add/sub/mul/div and ``c`` a per-channel constant ->
    one conv with the weight and bias rewritten (BatchNorm and FrozenBatchNorm2d in eval)."""
    folded = 0
    for conv in list(gm.graph.nodes):
        while len(conv.users) == 1:
            operands = _conv_operands(gm, conv)
            user = next(iter(conv.users))
            other = _other_operand(user, conv)
            out = conv.meta.get("val")
            if operands is None or not other or not isinstance(out, torch.Tensor):
                break
            c = other[0]
            if isinstance(c, Node):
                if c.op != "get_attr":
                    break
                c = _value(gm, c)
            weight, bias = operands
            c = _per_channel(c, out, weight.shape[0])
            if c is None:
                break
            weight, bias = _FOLD_INTO_CONV[user.target](weight, bias, c)
            w_node = _constant(gm, weight.contiguous(), conv)
            b_node = _constant(gm, bias.contiguous(), conv)
            conv.args = (conv.args[0], w_node, b_node, *conv.args[3:])
            if isinstance(user.meta.get("val"), torch.Tensor):
                conv.meta["val"] = user.meta["val"]
            user.replace_all_uses_with(conv)
            gm.graph.erase_node(user)
            folded += 1
    return folded


# ------------------------------------------------------------------ the entry

def _constant_outputs(gm: GraphModule) -> None:
    """A constant returned as an output is cloned: the caller may write what it gets."""
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    for a in out.all_input_nodes:
        if a.op == "get_attr":
            with gm.graph.inserting_before(out):
                c = gm.graph.call_function(aten.clone.default, (a,))
            c.meta["val"] = a.meta.get("val")
            out.replace_input_with(a, c)


def _fake_constants(gm: GraphModule, fake_mode) -> None:
    for n in gm.graph.find_nodes(op="get_attr"):
        t = getattr(gm, n.target)
        if t.layout == torch.strided and fake_mode is not None:
            n.meta["val"] = fake_mode.from_tensor(t, static_shapes=True)


def _drop_unused(gm: GraphModule) -> None:
    """Free the constants no node reads any more (weights before folding or packing)."""
    used = {n.target for n in gm.graph.find_nodes(op="get_attr")}
    for name in [b for b in gm._buffers if b not in used]:
        del gm._buffers[name]


def _matches(placeholders: list[Node], real_inputs, positions: list[int]) -> bool:
    """Whether the graph's inputs at ``positions`` are shaped as the real tensors."""
    for i in positions:
        v = placeholders[i].meta.get("val")
        if not isinstance(v, torch.Tensor) or tuple(v.shape) != tuple(real_inputs[i].shape):
            return False
    return True


def frozen_graph(gm: GraphModule, example_inputs, real_inputs, positions: list[int]):
    """A copy of ``gm`` with the inputs at ``positions`` (parameters, buffers) baked in and
    rewritten; returns (graph, frozen inputs, the example inputs left)."""
    gm = GraphModule(gm, gm.graph.__deepcopy__())
    frozen = bake_inputs(gm, real_inputs, positions)
    if not frozen:
        return None
    n_const = fold_constants(gm)
    n_conv = fold_into_convs(gm)
    gm.graph.eliminate_dead_code()
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    _fake_constants(gm, fake_mode)
    n_packed = prepack.apply(gm, fake_mode)
    _constant_outputs(gm)
    gm.graph.eliminate_dead_code()
    _drop_unused(gm)
    gm.graph.lint()
    gm.recompile()
    taken = {f.pos for f in frozen}
    rest = [x for i, x in enumerate(example_inputs) if i not in taken]
    log.info("froze %d inputs: %d constant ops folded, %d ops folded into convolutions, "
             "%d prepacked ops", len(frozen), n_const, n_conv, n_packed)
    return gm, frozen, rest


def freeze(gm: GraphModule, example_inputs, real_inputs, compile_fn: Callable, *,
           strict: bool = False):
    """``compile_fn`` over the frozen graph, behind the per-call check of the frozen inputs;
    ``compile_fn(gm, example_inputs)`` of the graph as it is when nothing can be frozen (or
    the rewrites fail, logged; ``strict`` raises)."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    lifted = len(placeholders) - len(real_inputs)
    if lifted > 0:
        # AOTAutograd passes the Dynamo graph's own tensors (its get_attr constants) ahead of
        # the graph's inputs: those stay inputs, the real inputs follow them
        real_inputs = [None] * lifted + list(real_inputs)
    positions = parameter_positions(real_inputs)
    if len(placeholders) != len(real_inputs) or not positions or \
            not _matches(placeholders, real_inputs, positions):
        log.info("nothing frozen: %s", "no parameters among the inputs" if not positions else
                 "the graph's inputs are not Dynamo's")
        return compile_fn(gm, example_inputs)
    try:
        # AOTAutograd compiles under its fake mode; folds are computed on the real tensors
        with unset_fake_temporarily(), torch.no_grad():
            made = frozen_graph(gm, example_inputs, real_inputs, positions)
    except Exception as e:
        if strict:
            raise
        fallback_log.warning("freezing failed, the graph is compiled unfrozen: %s: %s",
                             type(e).__name__, e)
        made = None
    if made is None:
        return compile_fn(gm, example_inputs)
    frozen_gm, frozen, rest = made
    compiled = compile_fn(frozen_gm, rest)
    taken = {f.pos for f in frozen}
    keep = [i for i in range(len(real_inputs)) if i not in taken]
    state: dict = {}

    def run(args):
        if "unfrozen" not in state:
            why = changed(args, frozen)
            if why is None:
                return compiled([args[i] for i in keep])
            fallback_log.warning("frozen parameters changed (%s): this graph runs unfrozen "
                                 "from now on", why)
            state["unfrozen"] = compile_fn(gm, example_inputs)
        return state["unfrozen"](list(args))

    run._boxed_call = True
    return run


