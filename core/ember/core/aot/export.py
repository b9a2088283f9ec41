"""A module (or an ExportedProgram) -> the decomposed ATen graph an AOT package compiles.

``torch.export.export`` captures the module with its dynamic dimensions; our decomposition
table then brings the graph to the ops our lowering takes, and ops registered from Python
(which a package running without Python could not call) are rewritten onto ATen.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

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
            node.target = target
            node.args = (q, k, v, 0.0, is_causal)
            node.kwargs = {"attn_mask": mask, "scale": scale}
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
    ep = ep.run_decompositions(decomposition_table())
    gm = ep.graph_module
    sdpa_onto_aten(gm)
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
    ranges = {}
    for sym, vr in ep.range_constraints.items():
        lo = int(vr.lower) if vr.lower.is_finite else 0
        hi = int(vr.upper) if vr.upper.is_finite else 2**62
        ranges[str(sym)] = (lo, hi)
    return ExportedGraph(gm, placeholders, tensors, ranges, ep.call_spec.in_spec,
                         ep.call_spec.out_spec)
