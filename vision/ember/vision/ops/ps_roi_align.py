"""ps_roi_align and PSRoIAlign (position-sensitive RoIAlign, R-FCN), torchvision's rules:
bin ``(i, j)`` of output channel ``c`` samples input channel ``(c * oh + i) * ow + j``.

Declared as ``ember_vision::ps_roi_align`` (and its backward) through ``ember.core.kernels``
with a native CPU kernel, the torch-op kernel elsewhere, fake kernels and autograd.
"""

from __future__ import annotations

from torch import Tensor, nn

from ember.core import kernels
from ember.vision.ops._align import align_backward, align_forward
from ember.vision.ops._roi_common import as_rois, compute_dtype, pair
from ember.vision.ops.roi_align import native_align

__all__ = ["ps_roi_align", "PSRoIAlign"]

_fwd = kernels.define(
    "ember_vision::ps_roi_align",
    "(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
    "int sampling_ratio) -> Tensor")
_bwd = kernels.define(
    "ember_vision::ps_roi_align_backward",
    "(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
    "int batch_size, int channels, int height, int width, int sampling_ratio) -> Tensor")


@_fwd.register_fake
def _(input, rois, spatial_scale, ph, pw, sampling_ratio):
    return input.new_empty((rois.shape[0], input.shape[1] // (ph * pw), ph, pw))


@_bwd.register_fake
def _(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width, sampling_ratio):
    return grad.new_empty((batch_size, channels, height, width))


@_fwd.register_kernel("cpu")
def _(input, rois, spatial_scale, ph, pw, sampling_ratio):
    n, c, h, w = input.shape
    k = rois.shape[0]
    out = native_align("roi_align_fwd", input, rois, (k, c // (ph * pw), ph, pw), n, c, h, w,
                       k, ph, pw, spatial_scale, sampling_ratio, 0, 1)
    return _portable_fwd(input, rois, spatial_scale, ph, pw, sampling_ratio) if out is None \
        else out


@_fwd.register_kernel("portable")
def _portable_fwd(input, rois, spatial_scale, ph, pw, sampling_ratio):
    dt = compute_dtype(input.dtype)
    return align_forward(input.to(dt), rois.to(dt), spatial_scale, ph, pw, sampling_ratio,
                         False, True).to(input.dtype)


@_bwd.register_kernel("cpu")
def _(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width, sampling_ratio):
    shape = (batch_size, channels, height, width)
    out = native_align("roi_align_bwd", grad, rois, shape, batch_size, channels, height, width,
                       rois.shape[0], ph, pw, spatial_scale, sampling_ratio, 0, 1)
    if out is None:
        return _portable_bwd(grad, rois, spatial_scale, ph, pw, batch_size, channels, height,
                             width, sampling_ratio)
    return out


@_bwd.register_kernel("portable")
def _portable_bwd(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width,
                  sampling_ratio):
    dt = compute_dtype(grad.dtype)
    return align_backward(grad.to(dt), rois.to(dt), spatial_scale, ph, pw,
                          (batch_size, channels, height, width), sampling_ratio, False,
                          True).to(grad.dtype)


def _setup(ctx, inputs, output):
    input, rois, scale, ph, pw, sampling = inputs
    ctx.save_for_backward(rois)
    ctx.args = (scale, ph, pw, *input.shape, sampling)


def _backward(ctx, grad):
    (rois,) = ctx.saved_tensors
    return (_bwd(grad.contiguous(), rois, *ctx.args),) + (None,) * 5


_fwd.register_autograd(_backward, setup_context=_setup)


def ps_roi_align(input: Tensor, boxes: Tensor | list[Tensor], output_size,
                 spatial_scale: float = 1.0, sampling_ratio: int = -1) -> Tensor:
    """Position-sensitive RoIAlign: ``[K, C / (oh * ow), oh, ow]``; ``C`` must be a multiple
    of ``oh * ow``. ``boxes`` as for :func:`roi_align`."""
    rois = as_rois(input, boxes)
    oh, ow = pair(output_size)
    if input.shape[1] % (oh * ow):
        raise ValueError(f"input channels ({input.shape[1]}) must be a multiple of "
                         f"output_size[0] * output_size[1] ({oh * ow})")
    return _fwd(input, rois, float(spatial_scale), oh, ow, int(sampling_ratio))


class PSRoIAlign(nn.Module):
    """:func:`ps_roi_align` as a module."""

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int) -> None:
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio

    def forward(self, input: Tensor, rois: Tensor | list[Tensor]) -> Tensor:
        return ps_roi_align(input, rois, self.output_size, self.spatial_scale,
                            self.sampling_ratio)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, "
                f"spatial_scale={self.spatial_scale}, sampling_ratio={self.sampling_ratio})")
