"""In-place writes over overlapping memory: found on Dynamo's graph, so the graph runs in eager.

Eager raises ``unsupported operation`` when the written tensor and one of the op's inputs lie
in one storage and overlap partly (``x[1:].mul_(x[:-1])``), and when most ops write a tensor
in which several elements share one memory location (an expanded view); ``fill_``, ``zero_``,
``masked_fill_``, ``index_fill_`` and ``index_put_`` write such a tensor. AOTAutograd's
functionalization removes the views: it computed values eager never gives, and for writes
through an expanded view wrong ones (``x[:1].expand(3, 4).fill_(2)`` left 4.0 in ``x``;
Inductor the same). Such a graph runs as eager's graph instead: eager raises its own error or
computes its own value. The rule is ATen's (``get_overlap_status``): partial overlap is decided
only between dense tensors, and a written tensor overlaps itself when it has a stride of 0
along a dimension longer than 1.
Symbolic sizes are decided at the traced example's values, without a guard: a graph found
overlapping there runs in eager at every size (eager's results, slower), one found clear
compiles (the overlap is a matter of how the views are cut, not of the sizes).
"""

from __future__ import annotations

import contextlib
import math
import operator
from dataclasses import dataclass

import torch
from torch._prims_common import _is_non_overlapping_and_dense_or_false as _dense
from torch.fx import GraphModule, Node
from torch.multiprocessing.reductions import StorageWeakRef

_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.iand,
                      operator.ior, operator.ixor, operator.ilshift, operator.irshift}


# In-place methods that change a tensor's metadata, not its elements.
_METADATA_ONLY = {"requires_grad_", "retain_grad", "share_memory_", "detach_", "t_",
                  "transpose_", "unsqueeze_", "squeeze_", "as_strided_", "resize_",
                  "resize_as_", "set_", "swapdims_", "swapaxes_"}


@dataclass(frozen=True)
class _Extent:
    """A tensor's place in its storage, in bytes (concrete sizes only)."""
    storage: StorageWeakRef
    begin: int
    end: int
    strides: tuple[int, ...]
    dense: bool


def _int(v) -> int | None:
    """``v``, or a symbolic size's value in the traced example (None when it has none)."""
    if isinstance(v, torch.SymInt):
        node = v.node
        got = node.maybe_as_int()
        return got if got is not None or not node.has_hint() else int(node.hint)
    return v if isinstance(v, int) else None


def _fake(a) -> torch.Tensor | None:
    v = a.meta.get("example_value") if isinstance(a, Node) else None
    return v if isinstance(v, torch.Tensor) and v.layout == torch.strided else None


def _extent(t: torch.Tensor) -> _Extent | None:
    shape, strides = [_int(v) for v in t.shape], [_int(v) for v in t.stride()]
    offset = _int(t.storage_offset())
    if None in shape or None in strides or offset is None or 0 in shape:
        return None
    size, numel = t.element_size(), math.prod(shape)
    return _Extent(StorageWeakRef(t.untyped_storage()), offset * size,
                   (offset + numel) * size, tuple(strides), _dense(shape, strides))


_COUNTED_OFFSETS = 1 << 20  # a view up to this size that is not dense has its offsets counted


def _self_overlapping(t: torch.Tensor) -> bool:
    """Do two elements of ``t`` share memory? A stride of 0 along a dimension longer than 1
    (an expanded view: ATen's test), or, for a view that is not dense, such as overlapping
    ``unfold`` windows (functionalization refuses those), a repeated offset."""
    shape, strides = [_int(n) for n in t.shape], [_int(s) for s in t.stride()]
    if any(s == 0 and (n or 0) > 1 for n, s in zip(shape, strides)):
        return True
    if None in shape or None in strides or _dense(shape, strides):
        return False
    numel = math.prod(shape)
    if numel > _COUNTED_OFFSETS:
        return False
    offsets = torch.zeros((), dtype=torch.int64)
    for n, s in zip(shape, strides):
        offsets = (offsets.unsqueeze(-1) + torch.arange(n) * s).flatten()
    return offsets.unique().numel() < numel


def _partly_overlapping(a: _Extent, b: _Extent) -> bool:
    if not (a.dense and b.dense) or a.storage != b.storage:
        return False
    if (a.begin, a.end) == (b.begin, b.end):
        return a.strides != b.strides
    return a.begin < b.end and b.begin < a.end


def _written_and_read(node: Node) -> tuple[Node, list] | None:
    """The tensor an in-place node writes and the arguments it reads, or None."""
    if node.op == "call_method" and node.target.endswith("_") and \
            not node.target.startswith("__"):
        if node.target in _METADATA_ONLY:
            return None
        return node.args[0], [*node.args[1:], *node.kwargs.values()]
    if node.op != "call_function":
        return None
    if node.target in _INPLACE_OPERATORS:
        return node.args[0], list(node.args[1:])
    if node.target is operator.setitem:  # eager copies even a number: fill_ is not used
        return node, [node.args[2]]  # the written region is the indexed view (see _region)
    out = node.kwargs.get("out")
    if isinstance(out, Node):
        return out, [*node.args, *(v for k, v in node.kwargs.items() if k != "out")]
    name = getattr(node.target, "__name__", "")
    if name.endswith("_") and not name.startswith("_") and node.args and \
            name not in _METADATA_ONLY:
        return node.args[0], [*node.args[1:], *node.kwargs.values()]
    if node.kwargs.get("inplace") is True and node.args:
        return node.args[0], list(node.args[1:])
    return None


def _region(node: Node, written: Node) -> torch.Tensor | None:
    """The tensor ``node`` writes: for ``x[index] = v`` with basic indexing, ``x[index]``."""
    if written is not node:
        return _fake(written)
    target, index = _fake(node.args[0]), node.args[1]
    indices = index if isinstance(index, tuple) else (index,)
    if target is None or not all(i is None or i is Ellipsis or isinstance(i, (int, slice))
                                 for i in indices):
        return None
    if any(isinstance(i, slice) and not all(isinstance(v, (int, type(None)))
                                            for v in (i.start, i.stop, i.step))
           for i in indices):
        return None
    with getattr(target, "fake_mode", None) or contextlib.nullcontext():
        return target[index]


def _flat_tensors(args) -> list[torch.Tensor]:
    found = []
    for a in args:
        if isinstance(a, (list, tuple)):
            found += _flat_tensors(a)
        elif (t := _fake(a)) is not None:
            found.append(t)
    return found


def find(gm: GraphModule) -> str | None:
    """Why eager would refuse an in-place write of ``gm`` (None: no such write)."""
    for node in gm.graph.nodes:
        got = _written_and_read(node)
        if got is None:
            continue
        written, reads = got
        region = _region(node, written)
        if region is None:
            continue
        op = getattr(node.target, "__name__", str(node.target))
        what = f"the in-place {op}" + ("" if op == node.name else f" ({node.name})")
        if _self_overlapping(region):
            return f"{what} writes a tensor whose elements share memory (an expanded view)"
        mine = _extent(region)
        if mine is None:
            continue
        for t in _flat_tensors(reads):
            other = _extent(t)
            if other is not None and _partly_overlapping(mine, other):
                return f"{what} writes a tensor that partly overlaps one it reads; eager raises"
    return None
