"""roi_pool and RoIPool (Fast R-CNN's max pooling over integer bins), torchvision's rules.

Declared as ``ember_vision::roi_pool`` (output and argmax) and its backward through
``ember.core.kernels``: a native CPU kernel, the torch-op kernel elsewhere, fake kernels
and autograd with respect to the input.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ember.core import kernels
from ember.vision.ops import _roi_native
from ember.vision.ops._pool import pool_backward, pool_forward
from ember.vision.ops._roi_common import as_rois, compute_dtype, pair

__all__ = ["roi_pool", "RoIPool"]

_fwd = kernels.define(
    "ember_vision::roi_pool",
    "(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width)"
    " -> (Tensor, Tensor)")
_bwd = kernels.define(
    "ember_vision::roi_pool_backward",
    "(Tensor grad, Tensor rois, Tensor argmax, int batch_size, int channels, int height, "
    "int width) -> Tensor")


@_fwd.register_fake
def _(input, rois, spatial_scale, ph, pw):
    shape = (rois.shape[0], input.shape[1], ph, pw)
    return input.new_empty(shape), input.new_empty(shape, dtype=torch.int32)


@_bwd.register_fake
def _(grad, rois, argmax, batch_size, channels, height, width):
    return grad.new_empty((batch_size, channels, height, width))


@_fwd.register_kernel("cpu")
def _(input, rois, spatial_scale, ph, pw):
    if _roi_native.library() is None:
        return _portable_fwd(input, rois, spatial_scale, ph, pw)
    dt = compute_dtype(input.dtype)
    x, r = input.to(dt).contiguous(), rois.to(dt).contiguous()
    n, c, h, w = x.shape
    k = r.shape[0]
    out = x.new_zeros((k, c, ph, pw))
    arg = torch.full((k, c, ph, pw), -1, dtype=torch.int32)
    if out.numel() and x.numel():
        _roi_native.call("roi_pool_fwd", dt, x, r, out, arg, n, c, h, w, k, ph, pw,
                         spatial_scale)
    return out.to(input.dtype), arg


@_fwd.register_kernel("portable")
def _portable_fwd(input, rois, spatial_scale, ph, pw):
    dt = compute_dtype(input.dtype)
    out, arg = pool_forward(input.to(dt), rois.to(dt), spatial_scale, ph, pw)
    return out.to(input.dtype), arg


@_bwd.register_kernel("cpu")
def _(grad, rois, argmax, batch_size, channels, height, width):
    shape = (batch_size, channels, height, width)
    if _roi_native.library() is None:
        return _portable_bwd(grad, rois, argmax, *shape)
    dt = compute_dtype(grad.dtype)
    g, r = grad.to(dt).contiguous(), rois.to(dt).contiguous()
    gin = g.new_zeros(shape)
    k, ph, pw = g.shape[0], g.shape[2], g.shape[3]
    if g.numel() and gin.numel():
        _roi_native.call("roi_pool_bwd", dt, g, r, argmax.to(torch.int32).contiguous(), gin,
                         *shape, k, ph, pw)
    return gin.to(grad.dtype)


@_bwd.register_kernel("portable")
def _portable_bwd(grad, rois, argmax, batch_size, channels, height, width):
    return pool_backward(grad, rois, argmax, (batch_size, channels, height, width))


def _setup(ctx, inputs, output):
    input, rois = inputs[0], inputs[1]
    ctx.save_for_backward(rois, output[1])
    ctx.shape = tuple(input.shape)


def _backward(ctx, grad, _grad_argmax):
    rois, argmax = ctx.saved_tensors
    return (_bwd(grad.contiguous(), rois, argmax, *ctx.shape),) + (None,) * 4


_fwd.register_autograd(_backward, setup_context=_setup)


def roi_pool(input: Tensor, boxes: Tensor | list[Tensor], output_size,
             spatial_scale: float = 1.0) -> Tensor:
    """Maximum over each of ``output_size`` integer bins of every box: ``[K, C, oh, ow]``
    (0 for a bin outside the input). ``boxes`` as for ``roi_align``."""
    rois = as_rois(input, boxes)
    oh, ow = pair(output_size)
    return _fwd(input, rois, float(spatial_scale), oh, ow)[0]


class RoIPool(nn.Module):
    """:func:`roi_pool` as a module."""

    def __init__(self, output_size, spatial_scale: float) -> None:
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Tensor | list[Tensor]) -> Tensor:
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, "
                f"spatial_scale={self.spatial_scale})")
