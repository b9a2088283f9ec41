"""ps_roi_pool and PSRoIPool (position-sensitive average pooling, R-FCN), torchvision's
rules: bin ``(i, j)`` of output channel ``c`` averages input channel ``(c * oh + i) * ow + j``.

Declared as ``ember_vision::ps_roi_pool`` and its backward through ``ember.core.kernels``
with a native CPU kernel, the torch-op kernel elsewhere, fake kernels and autograd.
"""

from __future__ import annotations

from torch import Tensor, nn

from ember.core import kernels
from ember.vision.ops import _roi_native
from ember.vision.ops._pool import ps_pool_backward, ps_pool_forward
from ember.vision.ops._roi_common import as_rois, compute_dtype, pair

__all__ = ["ps_roi_pool", "PSRoIPool"]

_fwd = kernels.define(
    "ember_vision::ps_roi_pool",
    "(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width)"
    " -> Tensor")
_bwd = kernels.define(
    "ember_vision::ps_roi_pool_backward",
    "(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
    "int batch_size, int channels, int height, int width) -> Tensor")


@_fwd.register_fake
def _(input, rois, spatial_scale, ph, pw):
    return input.new_empty((rois.shape[0], input.shape[1] // (ph * pw), ph, pw))


@_bwd.register_fake
def _(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width):
    return grad.new_empty((batch_size, channels, height, width))


def _native(name, x, rois, out_shape, *args):
    dt = compute_dtype(x.dtype)
    xs, r = x.to(dt).contiguous(), rois.to(dt).contiguous()
    out = xs.new_zeros(out_shape)
    if out.numel() and xs.numel() and r.shape[0]:
        _roi_native.call(name, dt, xs, r, out, *args)
    return out.to(x.dtype)


@_fwd.register_kernel("cpu")
def _(input, rois, spatial_scale, ph, pw):
    if _roi_native.library() is None:
        return _portable_fwd(input, rois, spatial_scale, ph, pw)
    n, c, h, w = input.shape
    k = rois.shape[0]
    return _native("ps_roi_pool_fwd", input, rois, (k, c // (ph * pw), ph, pw), n, c, h, w,
                   k, ph, pw, spatial_scale)


@_fwd.register_kernel("portable")
def _portable_fwd(input, rois, spatial_scale, ph, pw):
    dt = compute_dtype(input.dtype)
    return ps_pool_forward(input.to(dt), rois.to(dt), spatial_scale, ph, pw).to(input.dtype)


@_bwd.register_kernel("cpu")
def _(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width):
    shape = (batch_size, channels, height, width)
    if _roi_native.library() is None:
        return _portable_bwd(grad, rois, spatial_scale, ph, pw, *shape)
    return _native("ps_roi_pool_bwd", grad, rois, shape, *shape, rois.shape[0], ph, pw,
                   spatial_scale)


@_bwd.register_kernel("portable")
def _portable_bwd(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width):
    dt = compute_dtype(grad.dtype)
    return ps_pool_backward(grad.to(dt), rois.to(dt), spatial_scale, ph, pw,
                            (batch_size, channels, height, width)).to(grad.dtype)


def _setup(ctx, inputs, output):
    input, rois, scale, ph, pw = inputs
    ctx.save_for_backward(rois)
    ctx.args = (scale, ph, pw, *input.shape)


def _backward(ctx, grad):
    (rois,) = ctx.saved_tensors
    return (_bwd(grad.contiguous(), rois, *ctx.args),) + (None,) * 4


_fwd.register_autograd(_backward, setup_context=_setup)


def ps_roi_pool(input: Tensor, boxes: Tensor | list[Tensor], output_size,
                spatial_scale: float = 1.0) -> Tensor:
    """Position-sensitive RoI average pooling: ``[K, C / (oh * ow), oh, ow]``; ``C`` must be
    a multiple of ``oh * ow``. ``boxes`` as for ``roi_align``."""
    rois = as_rois(input, boxes)
    oh, ow = pair(output_size)
    if input.shape[1] % (oh * ow):
        raise ValueError(f"input channels ({input.shape[1]}) must be a multiple of "
                         f"output_size[0] * output_size[1] ({oh * ow})")
    return _fwd(input, rois, float(spatial_scale), oh, ow)


class PSRoIPool(nn.Module):
    """:func:`ps_roi_pool` as a module."""

    def __init__(self, output_size, spatial_scale: float) -> None:
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Tensor | list[Tensor]) -> Tensor:
        return ps_roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, "
                f"spatial_scale={self.spatial_scale})")
