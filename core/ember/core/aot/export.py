"""A module (or an ExportedProgram) -> the decomposed ATen graph an AOT package compiles.

``torch.export.export`` captures the module with its dynamic dimensions; our decomposition
table then brings the graph to the ops our lowering takes, and ops registered from Python
(which a package running without Python could not call) are rewritten onto ATen.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import sympy
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils._sympy.numbers import int_oo

from ember.core.aot.views import drop_contiguous_clones, split_heads_as_views
from ember.core.compiler import eager_parity
from ember.core.compiler.decompose import decomposition_table


class AOTExportError(ValueError):
    """The model could not be exported (torch.export's reason follows)."""


@dataclass(frozen=True)
class Placeholder:
    """One graph input: a weight (a state_dict entry), a constant, or the caller's input."""

    name: str  # the placeholder's name in the graph
    kind: str  # "weight" | "constant" | "input"
    target: str  # the state_dict key / constant name / user argument name


@dataclass
class ExportedGraph:
    gm: torch.fx.GraphModule
    placeholders: list[Placeholder]
    tensors: dict  # placeholder name -> tensor, for weights and constants
    ranges: dict  # size symbol name -> (lo, hi)
    in_spec: object
    out_spec: object
    # graph output position -> the placeholder it is written back into (a buffer the model
    # updates in place, or an input it mutates); the model's own outputs are the others
    write_back: dict


def _additive_mask(graph: torch.fx.Graph, mask: torch.fx.Node, dtype) -> torch.fx.Node:
    """A bool attention mask (True: attend) -> 0 where True, -inf where False, in ``dtype``."""
    aten = torch.ops.aten

    def call(op, *args, **kwargs):
        node = graph.call_function(op, args, kwargs)
        node.meta["val"] = op(*(a.meta["val"] if isinstance(a, torch.fx.Node) else a
                                for a in args), **kwargs)
        return node

    zeros = call(aten.zeros_like.default, mask, dtype=dtype)
    minus_inf = call(aten.full_like.default, mask, float("-inf"), dtype=dtype)
    return call(aten.where.self, mask, zeros, minus_inf)


def sdpa_onto_aten(gm: torch.fx.GraphModule) -> None:
    """``ember::sdpa`` (registered from Python) -> ATen's CPU attention, same arguments."""
    ember_ns = getattr(torch.ops, "ember", None)
    sdpa = getattr(ember_ns, "sdpa", None) if ember_ns is not None else None
    if sdpa is None:
        return
    target = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is sdpa.default:
            q, k, v, mask, dropout_p, is_causal, scale, rng = node.args
            if dropout_p or rng is not None:
                raise AOTExportError("attention dropout in an exported graph: export the "
                                     "model in eval mode")
            if isinstance(mask, torch.fx.Node) and mask.meta["val"].dtype == torch.bool:
                # ATen's CPU flash attention takes an additive mask of the query's dtype
                with gm.graph.inserting_before(node):
                    mask = _additive_mask(gm.graph, mask, q.meta["val"].dtype)
            node.target = target
            node.args = (q, k, v, 0.0, is_causal)
            node.kwargs = {"attn_mask": mask, "scale": scale}
            # ATen's outputs keep their own layout (the output (B, L, H, D) in memory): the
            # graph's buffers declare it, or each call would copy it into ember::sdpa's
            node.meta["val"] = target(
                *(a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args),
                attn_mask=None if mask is None else mask.meta["val"], scale=scale)
            for user in node.users:
                if user.target is operator.getitem:
                    user.meta["val"] = node.meta["val"][user.args[1]]
    gm.recompile()


def scalars_onto_scalar_overloads(gm: torch.fx.GraphModule) -> None:
    """An ATen call given a Python number where its schema takes a Tensor (``add.Tensor(x,
    1e-8)``, which eager wraps into a tensor) -> the overload that takes a Scalar there
    (``add.Scalar``), when the packet has one with the same arguments otherwise: a package
    calls ATen boxed, where a Tensor argument has to be a tensor. Such calls reach a package
    as externs (complex tensors, say); other calls are lowered alike under either overload."""
    def number(v):
        return isinstance(v, (bool, int, float)) and not isinstance(v, torch.fx.Node)

    for node in gm.graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
            continue
        params = op._schema.arguments
        given = dict(zip((a.name for a in params), node.args)) | dict(node.kwargs)
        wrapped = {a.name for a in params if a.type.kind() == "TensorType"
                   and number(given.get(a.name))}
        if not wrapped:
            continue
        for name in op._overloadpacket.overloads():
            other = getattr(op._overloadpacket, name)
            cand = other._schema.arguments
            if len(cand) == len(params) and all(
                    c.name == a.name and (c.type.kind() == "NumberType" if a.name in wrapped
                                          else str(c.type) == str(a.type))
                    for c, a in zip(cand, params)):
                node.target = other
                break
    gm.recompile()


def export(model, example_args: tuple, dynamic_shapes=None) -> ExportedGraph:
    """Export ``model`` (an nn.Module or an ExportedProgram) and decompose it for lowering."""
    if isinstance(model, ExportedProgram):
        ep = model
    elif isinstance(model, torch.nn.Module):
        try:
            ep = torch.export.export(model, tuple(example_args), dynamic_shapes=dynamic_shapes)
        except Exception as e:
            raise AOTExportError(f"torch.export could not capture the model: "
                                 f"{type(e).__name__}: {e}") from e
    else:
        raise TypeError(f"aot_compile takes an nn.Module or an ExportedProgram, got "
                        f"{type(model).__name__}")
    try:
        with eager_parity.without_guards():  # a package keeps no guards
            ep = ep.run_decompositions(decomposition_table())
    except eager_parity.UndecidableSizeError as e:
        raise AOTExportError(f"a package cannot compute what eager does: eager decides "
                             f"{e.what} at run time; make that dimension static or pass an "
                             f"output size") from e
    if ep.graph_signature.input_tokens:
        # with_effects(token, op, *args) -> op(*args), token inputs and outputs dropped (a
        # package runs its steps in graph order, the order the tokens stand for)
        from torch.export._remove_effect_tokens_pass import _remove_effect_tokens

        ep = _remove_effect_tokens(ep)
    gm = ep.graph_module
    sdpa_onto_aten(gm)
    scalars_onto_scalar_overloads(gm)
    split_heads_as_views(gm)
    drop_contiguous_clones(gm)
    sig = ep.graph_signature
    placeholders, tensors = [], {}
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and spec.target in ep.state_dict:
            placeholders.append(Placeholder(name, "weight", spec.target))
            tensors[name] = ep.state_dict[spec.target]
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            placeholders.append(Placeholder(name, "constant", spec.target))
            tensors[name] = ep.constants[spec.target]
        elif spec.kind == InputKind.USER_INPUT:
            placeholders.append(Placeholder(name, "input", name))
        else:
            raise AOTExportError(f"graph input {name!r} of kind {spec.kind.name} is not "
                                 f"supported in ahead-of-time packages")
    write_back = {}
    buffer_inputs = {target: name for name, target in sig.inputs_to_buffers.items()}
    for pos, spec in enumerate(sig.output_specs):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            write_back[pos] = buffer_inputs[spec.target]
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            write_back[pos] = spec.target
        elif spec.kind != OutputKind.USER_OUTPUT:
            raise AOTExportError(f"graph output {spec.arg.name!r} of kind {spec.kind.name} is "
                                 f"not supported in ahead-of-time packages")
    ranges = {}
    for sym, vr in ep.range_constraints.items():
        # torch's int_oo says is_finite; unbounded is either infinity
        lo = 0 if vr.lower in (-int_oo, -sympy.oo) or not vr.lower.is_finite else int(vr.lower)
        hi = 2**62 if vr.upper in (int_oo, sympy.oo) or not vr.upper.is_finite \
            else int(vr.upper)
        ranges[str(sym)] = (lo, hi)
    return ExportedGraph(gm, placeholders, tensors, ranges, ep.call_spec.in_spec,
                         ep.call_spec.out_spec, write_back)
