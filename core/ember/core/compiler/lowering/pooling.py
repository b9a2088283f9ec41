"""2-D max pooling as a pointwise value: the window's taps unrolled into one max chain.

ATen's CPU ``max_pool2d_with_indices`` on NCHW data also computes the argmax of every window;
a [2,16,16,16] 3x3/2 pool (a ResNet stem) takes ~70 us on one thread where the loop without
indices is a few microseconds and fuses with the batch norm and ReLU before it. So an
inference graph that never reads the indices gets the pointwise max; one that reads them (a
training forward saving them for the backward) keeps ATen's op.
"""

from __future__ import annotations

import operator

import sympy
import torch

from ember.core.compiler import ir
from ember.core.compiler.ir import Lazy, StridedView, cast, compute_dtype, const, op
from ember.core.compiler.lowering.builders import Ctx, Decline, register, sym
from ember.core.compiler.lowering.ops import _clamp_position

aten = torch.ops.aten

# windows of more taps stay ATen's: each tap is a load and a compare in the unrolled chain
MAX_WINDOW = 49


def _pair(v, default=None) -> tuple[int, int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[0])) if len(v) == 1 else (int(v[0]), int(v[1]))
    return int(v), int(v)


def _indices_read(node) -> bool:
    """Whether anything reads output 1 (the argmax indices) of a multi-output node."""
    return any(u.target is not operator.getitem or u.args[1] != 0 and len(u.users) > 0
               for u in node.users)


def _tap(src: StridedView, lead: list, h, w, padded: bool, cdt: torch.dtype) -> ir.Expr:
    """``src[..., h, w]`` in ``cdt``; when the window may leave the input (``padded``), a
    clamped load that reads as -inf outside, so it never wins the max."""
    if not padded:
        return cast(src.load(lead + [h, w]), cdt)
    height, width = src.size[-2], src.size[-1]
    hv, wv = ir.Index(torch.int64, h), ir.Index(torch.int64, w)
    zero = const(0, torch.int64)

    def inside(v, n):
        return op("logical_and", torch.bool, op("ge", torch.bool, v, zero),
                  op("lt", torch.bool, v, const(int(n), torch.int64)))

    at = lead + [ir.gather_slot(0), ir.gather_slot(1)]
    value = cast(ir.gather(src.dtype, src.buf.name, src.flat_index(at),
                           [_clamp_position(hv, const(int(height) - 1, torch.int64)),
                            _clamp_position(wv, const(int(width) - 1, torch.int64))]), cdt)
    valid = op("logical_and", torch.bool, inside(hv, height), inside(wv, width))
    return op("where", cdt, valid, value, const(float("-inf"), cdt))


@register(aten.max_pool2d_with_indices)
def _max_pool2d(ctx: Ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Values only (see the module docstring); NaN propagates as in ATen (``e_max``)."""
    if _indices_read(ctx.node) or not x.dtype.is_floating_point or len(x.size) not in (3, 4):
        raise Decline
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, kernel_size)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    if kh * kw > MAX_WINDOW:
        raise Decline
    src = x if isinstance(x, StridedView) else ctx.graph.realize(x)
    if not all(sympy.sympify(s).is_Integer for s in src.size[-2:]):
        raise Decline  # the clamp bounds are static sizes
    height, width = (int(s) for s in src.size[-2:])
    out = ctx.val[0]
    oh_n, ow_n = int(out.shape[-2]), int(out.shape[-1])
    # a tap can leave the input when there is padding or ceil_mode's last window runs over
    padded = ph > 0 or pw > 0 or (oh_n - 1) * sh + (kh - 1) * dh >= height or \
        (ow_n - 1) * sw + (kw - 1) * dw >= width
    cdt = compute_dtype(x.dtype)

    def fn(i):
        lead, oh, ow = list(i[:-2]), i[-2], i[-1]
        best = None
        for a in range(kh):
            for b in range(kw):
                v = _tap(src, lead, oh * sh - ph + a * dh, ow * sw - pw + b * dw, padded, cdt)
                best = v if best is None else op("maximum", cdt, v, best)
        return cast(best, x.dtype)

    values = Lazy(x.dtype, [sym(s) for s in out.shape], fn)
    return [values, None]   # output 1 has no reader (checked above)
