"""Arguments under which torch's decompositions compute what eager's kernels compute, where the
two index differently. Applied to TorchDynamo's graph before AOTAutograd (``apply``) and, for
``torch.export`` graphs, as decompositions (``decompositions``).

Upsampling given a scale: eager's CPU kernels ignore the scale along a dimension whose output
size is a small multiple of the input's, and torch's decompositions (which run at the autograd
key, before any decomposition table is consulted) do not:
- nearest, 2-D: an output of the input's size reads index ``i``, one of twice it ``i >> 1``
  (``scale_factor=2.3`` on 3 rows, 6 out: eager reads rows 0,0,1,1,2,2, the decomposition
  0,0,0,1,1,2). Eager's 1-D and 3-D forwards use the scale (their backwards take the shortcut,
  so they are not their forward's gradient there).
- linear, bilinear, trilinear (``align_corners=False``, no antialias): an output of the input's
  size copies that dimension (``scale_factor=1.1`` on 5 columns interpolates in the
  decomposition).
Given a scale of exactly that ratio for those dimensions, both compute eager's values, and the
output size stays what it was. Other devices are left alone.

``multilabel_margin_loss``: torch's decomposition (also registered at the autograd key) counts
the target slots after a row's first -1 as class 0 where eager stops at the -1
(``[1, -1, 0, 0]`` gave 6.65 where eager gives 1.84); the calls get a composite that stops.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table as _torch_decompositions
from torch.fx import GraphModule
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ember.core.logs import get_logger

log = get_logger("decompose")
aten = torch.ops.aten

# Process-wide count of scales replaced, by kind (tests read it).
stats: Counter = Counter()

# (kind, device type, spatial dimensions) -> the output/input size ratios at which eager's
# kernel ignores the scale (measured on CPU; CUDA's kernels are not known to that precision)
_SHORTCUTS = {("nearest", "cpu", 2): (1, 2), ("linear", "cpu", 1): (1,),
              ("linear", "cpu", 2): (1,), ("linear", "cpu", 3): (1,)}

_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}


class UndecidableSizeError(RuntimeError):
    """Eager's result depends on a symbolic size that a graph without guards cannot test."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what  # torch's tracer appends its context to the message


_GUARDS = contextvars.ContextVar("ember_eager_parity_guards", default=True)


@contextlib.contextmanager
def without_guards():
    """Trace where no guard can be kept (``torch.export``): a choice that depends on a symbolic
    size raises ``UndecidableSizeError`` instead of guarding."""
    token = _GUARDS.set(False)
    try:
        yield
    finally:
        _GUARDS.reset(token)


def _equal(a, b, what: str) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if statically_known_true(a == b):
        return True
    if statically_known_true(a != b):
        return False
    if not _GUARDS.get():
        raise UndecidableSizeError(what)
    return bool(a == b)  # guards on the outcome


def eager_scales(kind: str, input: torch.Tensor, output_size, scales) -> list:
    """``scales`` (one per spatial dimension, None where none was given) with the exact ratio
    where the output size makes eager's ``kind`` ("nearest" or "linear") kernel for ``input``
    ignore the scale. With symbolic sizes the test guards on its outcome (``without_guards``:
    raises)."""
    spatial = input.shape[2:]
    shortcuts = _SHORTCUTS.get((kind, input.device.type, len(spatial)), ())
    if not shortcuts:
        return list(scales)
    if output_size is None:
        output_size = [torch.sym_int(torch.sym_float(n) * s) for n, s in zip(spatial, scales)]
    fixed = []
    for d, (n, out, s) in enumerate(zip(spatial, output_size, scales)):
        for ratio in shortcuts:
            # floor(n * s) == ratio * n needs ratio <= s < ratio + 1 (n >= 1)
            if s is None or s == ratio or not ratio <= s < ratio + 1:
                continue
            if _equal(out, ratio * n, f"whether {kind} upsampling's spatial dimension {d} "
                      f"(size {n}, scale {s}) gives exactly {ratio}x the input, where eager's "
                      f"kernel ignores the scale"):
                s = float(ratio)
                stats[kind] += 1
                break
        fixed.append(s)
    return fixed


def _scale_list(scale_factor, ndim: int) -> list | None:
    if isinstance(scale_factor, (list, tuple)):
        return list(scale_factor) if len(scale_factor) == ndim else None
    return [scale_factor] * ndim


def _interpolate_kind(mode: str, ndim: int, align_corners, antialias) -> str | None:
    if mode == "nearest":
        return "nearest"
    if _LINEAR_MODES.get(mode) == ndim and not align_corners and not antialias:
        return "linear"
    return None


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """``F.interpolate`` with the scales of ``eager_scales``."""
    if (size is None and scale_factor is not None and not recompute_scale_factor
            and isinstance(input, torch.Tensor) and input.dim() >= 3):
        ndim = input.dim() - 2
        kind = _interpolate_kind(mode, ndim, align_corners, antialias)
        scales = _scale_list(scale_factor, ndim)
        if kind is not None and scales is not None:  # else F.interpolate decides or raises
            scale_factor = tuple(eager_scales(kind, input, None, scales))
    return F.interpolate(input, size, scale_factor, mode, align_corners,
                         recompute_scale_factor, antialias)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """``F.upsample`` (deprecated alias of ``F.interpolate``)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """``F.upsample_nearest`` (deprecated alias of nearest ``F.interpolate``)."""
    return interpolate(input, size, scale_factor, "nearest")


@dataclass(frozen=True)
class _AtenUpsample:
    """An ATen upsampling op: ``(input, output_size, [align_corners,] *scales)`` (``.default``)
    or ``(input, output_size, [align_corners,] scale_factors)`` (``.vec``)."""

    kind: str
    first_scale: int  # where the scales start
    aligned_at: int | None = None  # where ``align_corners`` is (set: the scales are unused)

    def call_args(self, args) -> tuple:
        input, scales = args[0], args[self.first_scale:]
        if (self.aligned_at is not None and args[self.aligned_at]) or \
                all(s is None for s in scales):  # no scale to make exact (``.vec``: one None)
            return tuple(args)
        if len(scales) == 1 and isinstance(scales[0], (list, tuple)):  # .vec
            return (*args[:self.first_scale],
                    eager_scales(self.kind, input, args[1], list(scales[0])))
        scales = list(scales) + [None] * (input.dim() - 2 - len(scales))
        return (*args[:self.first_scale], *eager_scales(self.kind, input, args[1], scales))


_ATEN_UPSAMPLES = {**{getattr(aten, f"upsample_nearest{n}d"): _AtenUpsample("nearest", 2)
                      for n in (1, 2, 3)},
                   **{op: _AtenUpsample("linear", 3, aligned_at=2) for op in
                      (aten.upsample_linear1d, aten.upsample_bilinear2d,
                       aten.upsample_trilinear3d)}}


def _with_eager_scales(fn, op: _AtenUpsample, name: str):
    """``fn`` (an ATen upsampling op, or torch's decomposition of one) called with eager's
    scales."""
    def call(*args, **kwargs):
        if kwargs or len(args) < 3 or not isinstance(args[0], torch.Tensor):
            return fn(*args, **kwargs)
        return fn(*op.call_args(args))

    call.__name__ = call.__qualname__ = f"{name}_with_eager_scales"
    return call


def _multilabel_margin(input, target):
    """Eager's per-sample multilabel margin loss and its is-target mask (both over rows of
    ``input`` seen as 2-D): the hinge ``1 - x[t_j] + x[k]`` for each target slot ``j`` before
    the first -1 and each class ``k`` not a target, summed, over the number of classes."""
    x = input.reshape(1, -1) if input.dim() < 2 else input
    t = target.reshape(x.shape)
    classes = x.shape[1]
    idx = torch.arange(classes, device=x.device)
    used = idx < torch.where(t == -1, idx, classes).amin(-1, keepdim=True)
    is_target = (torch.where(used, t, -1).unsqueeze(-1) == idx).any(1)
    margin = 1 - x.gather(1, torch.where(used, t, 0)).unsqueeze(-1) + x.unsqueeze(1)
    keep = used.unsqueeze(-1) & ~is_target.unsqueeze(1) & (margin > 0)
    return torch.where(keep, margin, 0).sum((1, 2)) / classes, is_target


def _reduced(per_sample, input, reduction: int):
    if reduction == 1:
        return per_sample.mean()
    if reduction == 2:
        return per_sample.sum()
    return per_sample.reshape(input.shape[:-1]) if input.dim() == 2 else per_sample.reshape(())


def _multilabel_margin_loss_aten(input, target, reduction: int = 1):
    """``aten.multilabel_margin_loss`` (``reduction``: 0 none, 1 mean, 2 sum), as eager."""
    return _reduced(_multilabel_margin(input, target)[0], input, reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``F.multilabel_margin_loss`` as eager computes it."""
    from torch.nn import _reduction

    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce)
    return _multilabel_margin_loss_aten(input, target, _reduction.get_enum(reduction))


def _multilabel_margin_loss_forward(input, target, reduction: int):
    per_sample, is_target = _multilabel_margin(input, target)
    return (_reduced(per_sample, input, reduction),
            is_target.to(input.dtype).reshape(target.shape))


def _torch_level_rewrites() -> dict:
    table = {F.interpolate: interpolate, F.upsample: upsample,
             F.upsample_nearest: upsample_nearest,
             F.multilabel_margin_loss: multilabel_margin_loss,
             torch._C._nn.multilabel_margin_loss: _multilabel_margin_loss_aten,
             aten.multilabel_margin_loss: _multilabel_margin_loss_aten,
             aten.multilabel_margin_loss.default: _multilabel_margin_loss_aten}
    for packet, op in _ATEN_UPSAMPLES.items():
        name = packet._qualified_op_name.split("::")[-1]
        for target in (packet, packet.vec, packet.default, getattr(torch._C._nn, name, None)):
            if target is not None:
                table[target] = _with_eager_scales(target, op, name)
    return table


_REWRITES = _torch_level_rewrites()


def apply(gm: GraphModule) -> GraphModule:
    """Point the graph's upsampling calls at their eager-scale versions (the choice is
    made when AOTAutograd traces them, from the real sizes and device), and its multilabel
    margin losses at eager's formula."""
    rewritten = 0
    for node in gm.graph.nodes:
        if node.op == "call_function":
            replacement = _REWRITES.get(node.target)
            if replacement is not None:
                node.target = replacement
                rewritten += 1
    if rewritten:
        gm.recompile()
        log.debug("eager parity: %d upsampling or multilabel margin calls rewritten",
                  rewritten)
    return gm


def _torch_decomposition(overload):
    return _torch_decompositions.get(overload) or overload.py_kernels.get(
        torch._C.DispatchKey.CompositeImplicitAutograd)


def decompositions() -> dict:
    """ATen overload -> torch's decomposition given eager's scales, and eager's multilabel
    margin loss (``torch.export``'s ``run_decompositions`` consults its table before these
    ops' own composite kernels)."""
    table = {aten.multilabel_margin_loss_forward.default: _multilabel_margin_loss_forward}
    for packet, op in _ATEN_UPSAMPLES.items():
        for overload in (packet.vec, packet.default):
            decomposition = _torch_decomposition(overload)
            if decomposition is not None:
                table[overload] = _with_eager_scales(decomposition, op,
                                                     str(overload).replace(".", "_"))
    return table
