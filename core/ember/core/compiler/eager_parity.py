"""Arguments under which torch's decompositions compute what eager's kernels compute, where the
two index differently. Applied to TorchDynamo's graph before AOTAutograd (``apply``) and, for
``torch.export`` graphs, as decompositions (``decompositions``).

Nearest upsampling given a scale: eager's 2-D CPU kernels (forward and backward) read output
index ``i`` of a dimension whose output has the input's size at ``i``, and of one twice the
input's size at ``i >> 1``, whatever the scale. torch's decomposition computes
``floor(i / scale)`` and runs at the autograd key, before any decomposition table is consulted:
``scale_factor=2.3`` on 3 rows (6 out) reads rows 0,0,0,1,1,2 where eager reads 0,0,1,1,2,2.
Given a scale of exactly 1 or 2 for those dimensions, both compute eager's indices, and the
output size stays what it was. Eager's 1-D and 3-D CPU forwards use the scale (as the
decomposition does; their backwards take the shortcut, so they are not the gradient of their
forward there); other devices are left alone.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import Counter

import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table as _torch_decompositions
from torch.fx import GraphModule
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ember.core.logs import get_logger

log = get_logger("decompose")
aten = torch.ops.aten

# Process-wide count of rewritten calls (tests read it).
stats: Counter = Counter()

# (device type, spatial dimensions) -> output/input size ratios its nearest kernel indexes
# without the scale (measured on CPU; CUDA's kernels are not known to the same precision)
_NEAREST_SHORTCUTS = {("cpu", 2): (1, 2)}


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


def eager_nearest_scales(input: torch.Tensor, output_size, scales) -> list:
    """``scales`` (one per spatial dimension, None where none was given) with exactly 1.0 or 2.0
    where the output size makes eager's kernel for ``input`` ignore the scale. With symbolic
    sizes the test guards on its outcome (``without_guards``: raises)."""
    spatial = input.shape[2:]
    shortcuts = _NEAREST_SHORTCUTS.get((input.device.type, len(spatial)), ())
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
            if _equal(out, ratio * n, f"whether nearest upsampling's spatial dimension {d} "
                      f"(size {n}, scale {s}) gives exactly {ratio}x the input, where eager's "
                      f"kernel ignores the scale"):
                s = float(ratio)
                stats["nearest_scale"] += 1
                break
        fixed.append(s)
    return fixed


def _scale_list(scale_factor, ndim: int) -> list | None:
    if isinstance(scale_factor, (list, tuple)):
        return list(scale_factor) if len(scale_factor) == ndim else None
    return [scale_factor] * ndim


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """``F.interpolate`` with the scales of ``eager_nearest_scales`` for mode "nearest"."""
    if (mode == "nearest" and size is None and scale_factor is not None
            and not recompute_scale_factor and isinstance(input, torch.Tensor)
            and input.dim() >= 3):
        scales = _scale_list(scale_factor, input.dim() - 2)
        if scales is not None:  # else F.interpolate raises its own error
            scale_factor = tuple(eager_nearest_scales(input, None, scales))
    return F.interpolate(input, size, scale_factor, mode, align_corners,
                         recompute_scale_factor, antialias)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """``F.upsample`` (deprecated alias of ``F.interpolate``)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """``F.upsample_nearest`` (deprecated alias of nearest ``F.interpolate``)."""
    return interpolate(input, size, scale_factor, "nearest")


def _is_vec_call(args) -> bool:
    """``upsample_nearestNd(input, output_size, scale_factors)`` (the ``.vec`` overload) rather
    than ``(input, output_size, *scales)``."""
    return len(args) == 3 and isinstance(args[2], (list, tuple))


def _aten_call(args):
    """The arguments of a nearest upsampling ATen call, with eager's scales."""
    input, output_size = args[0], args[1]
    if _is_vec_call(args):
        return (input, output_size, eager_nearest_scales(input, output_size, list(args[2])))
    ndim = input.dim() - 2
    scales = list(args[2:]) + [None] * (ndim - len(args[2:]))
    return (input, output_size, *eager_nearest_scales(input, output_size, scales))


def _with_eager_scales(fn, name: str):
    """``fn`` (an ATen nearest upsampling op, or torch's decomposition of one) called with
    eager's scales."""
    def call(*args, **kwargs):
        if kwargs or not args or not isinstance(args[0], torch.Tensor):
            return fn(*args, **kwargs)
        return fn(*_aten_call(args))

    call.__name__ = call.__qualname__ = f"{name}_with_eager_scales"
    return call


_NEAREST_ATEN = [getattr(aten, f"upsample_nearest{n}d") for n in (1, 2, 3)]


def _torch_level_rewrites() -> dict:
    table = {F.interpolate: interpolate, F.upsample: upsample,
             F.upsample_nearest: upsample_nearest}
    for packet in _NEAREST_ATEN:
        name = packet._qualified_op_name.split("::")[-1]
        for target in (packet, packet.vec, packet.default, getattr(torch._C._nn, name, None)):
            if target is not None:
                table[target] = _with_eager_scales(target, name)
    return table


_REWRITES = _torch_level_rewrites()


def apply(gm: GraphModule) -> GraphModule:
    """Point the graph's nearest-upsampling calls at their eager-scale versions (the choice is
    made when AOTAutograd traces them, from the real sizes and device)."""
    rewritten = 0
    for node in gm.graph.nodes:
        if node.op == "call_function":
            replacement = _REWRITES.get(node.target)
            if replacement is not None:
                node.target = replacement
                rewritten += 1
    if rewritten:
        gm.recompile()
        log.debug("eager parity: %d nearest-upsampling calls take eager's scales", rewritten)
    return gm


def decompositions() -> dict:
    """ATen overload -> decomposition with eager's scales (``torch.export``'s
    ``run_decompositions`` consults its table before these ops' own composite kernels)."""
    ops = [op for packet in _NEAREST_ATEN for op in (packet.vec, packet.default)]
    return {op: _with_eager_scales(_torch_decompositions[op], str(op).replace(".", "_"))
            for op in ops}
