"""roi_align and RoIAlign (Mask R-CNN's RoIAlign), torchvision's signature and sampling.

Declared as ``ember_vision::roi_align`` (and its backward) through ``ember.core.kernels``:
a native CPU kernel, Triton kernels for float32 on CUDA (where triton is installed), the
torch-op kernel for everything else, fake kernels for compilation, and autograd with
respect to the input.
"""

from __future__ import annotations

import functools
import importlib.util

import torch
from torch import Tensor, nn

from ember.core import kernels
from ember.vision.ops import _roi_native
from ember.vision.ops._align import separable_backward, separable_forward
from ember.vision.ops._roi_common import as_rois, batch_index, compute_dtype, pair

__all__ = ["roi_align", "RoIAlign"]

_fwd = kernels.define(
    "ember_vision::roi_align",
    "(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor")
_bwd = kernels.define(
    "ember_vision::roi_align_backward",
    "(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
    "int batch_size, int channels, int height, int width, int sampling_ratio, bool aligned)"
    " -> Tensor")


@_fwd.register_fake
def _(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    return input.new_empty((rois.shape[0], input.shape[1], pooled_height, pooled_width))


@_bwd.register_fake
def _(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width, sampling_ratio,
      aligned):
    return grad.new_empty((batch_size, channels, height, width))


def native_align(name, input, rois, out_shape, *args, memory_format=torch.contiguous_format):
    """Run the native ``name`` kernel (``roi_align_fwd``/``_bwd``/``_nhwc_fwd``) into zeros
    of ``out_shape``; None when the library is missing (the caller uses torch ops)."""
    if _roi_native.library() is None:
        return None
    dt = compute_dtype(input.dtype)
    x, r = input.to(dt).contiguous(memory_format=memory_format), rois.to(dt).contiguous()
    out = x.new_zeros(out_shape)
    if out.numel() and x.numel() and r.shape[0]:
        _roi_native.call(name, dt, x, r, out, *args)
    return out.to(input.dtype)


def _nhwc_pays(x: torch.Tensor, k: int, bins: int, sampling: int) -> bool:
    """Whether copying an NCHW input to NHWC pays for itself: the NHWC kernel sums channel
    vectors, about 3x faster per sample than the NCHW kernel's per-plane gathers, so it pays
    once the boxes take more samples than about half the input's pixels."""
    n, _, h, w = x.shape
    cells = sampling * sampling if sampling > 0 else 1
    return x.shape[1] >= 8 and 2 * k * bins * cells >= n * h * w


def channels_last(x: torch.Tensor) -> bool:
    """A 4-D tensor laid out NHWC (and not also NCHW-contiguous, as 1-channel ones are)."""
    return x.dim() == 4 and not x.is_contiguous() and \
        x.is_contiguous(memory_format=torch.channels_last)


@_fwd.register_kernel("cpu")
def _(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    n, c, h, w = input.shape
    k = rois.shape[0]
    shape = (k, c, pooled_height, pooled_width)
    if channels_last(input) or _nhwc_pays(input, k, pooled_height * pooled_width,
                                           sampling_ratio):
        out = native_align("roi_align_nhwc_fwd", input, rois, shape, n, c, h, w, k,
                           pooled_height, pooled_width, spatial_scale, sampling_ratio,
                           int(aligned), memory_format=torch.channels_last)
    else:
        out = native_align("roi_align_fwd", input, rois, shape, n, c, h, w, k,
                           pooled_height, pooled_width, spatial_scale, sampling_ratio,
                           int(aligned), 0)
    if out is None:
        return _portable_fwd(input, rois, spatial_scale, pooled_height, pooled_width,
                             sampling_ratio, aligned)
    return out


@_fwd.register_kernel("portable")
def _portable_fwd(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                  aligned):
    dt = compute_dtype(input.dtype)
    return separable_forward(input.to(dt), rois.to(dt), spatial_scale, pooled_height,
                             pooled_width, sampling_ratio, aligned).to(input.dtype)


@_bwd.register_kernel("cpu")
def _(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width, sampling_ratio,
      aligned):
    k = rois.shape[0]
    shape = (batch_size, channels, height, width)
    out = native_align("roi_align_bwd", grad, rois, shape, batch_size, channels, height,
                       width, k, ph, pw, spatial_scale, sampling_ratio, int(aligned), 0)
    if out is None:
        return _portable_bwd(grad, rois, spatial_scale, ph, pw, batch_size, channels, height,
                             width, sampling_ratio, aligned)
    return out


@_bwd.register_kernel("portable")
def _portable_bwd(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width,
                  sampling_ratio, aligned):
    dt = compute_dtype(grad.dtype)
    return separable_backward(grad.to(dt), rois.to(dt), spatial_scale, ph, pw,
                              (batch_size, channels, height, width), sampling_ratio,
                              aligned).to(grad.dtype)


@functools.lru_cache(maxsize=1)
def triton_kernels():
    """The Triton kernels module, or None when triton is not installed."""
    if importlib.util.find_spec("triton") is None:
        return None
    from ember.vision.ops import _roi_align_triton
    return _roi_align_triton


@_fwd.register_kernel("cuda")
def _(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    tri = triton_kernels()
    if tri is None or input.dtype != torch.float32:
        return _portable_fwd(input, rois, spatial_scale, pooled_height, pooled_width,
                             sampling_ratio, aligned)
    batch_index(rois, input.shape[0])  # a bad index must not read outside the input
    return tri.forward(input.contiguous(), rois.contiguous(), spatial_scale, pooled_height,
                       pooled_width, sampling_ratio, aligned)


@_bwd.register_kernel("cuda")
def _(grad, rois, spatial_scale, ph, pw, batch_size, channels, height, width, sampling_ratio,
      aligned):
    tri = triton_kernels()
    if tri is None or grad.dtype != torch.float32:
        return _portable_bwd(grad, rois, spatial_scale, ph, pw, batch_size, channels, height,
                             width, sampling_ratio, aligned)
    batch_index(rois, batch_size)
    return tri.backward(grad.contiguous(), rois.contiguous(), spatial_scale, ph, pw,
                        (batch_size, channels, height, width), sampling_ratio, aligned)


def _setup(ctx, inputs, output):
    input, rois, scale, ph, pw, sampling, aligned = inputs
    ctx.save_for_backward(rois)
    ctx.args = (scale, ph, pw, *input.shape, sampling, aligned)


def _backward(ctx, grad):
    (rois,) = ctx.saved_tensors
    return (_bwd(grad.contiguous(), rois, *ctx.args),) + (None,) * 6


_fwd.register_autograd(_backward, setup_context=_setup)


def roi_align(input: Tensor, boxes: Tensor | list[Tensor], output_size,
              spatial_scale: float = 1.0, sampling_ratio: int = -1,
              aligned: bool = False) -> Tensor:
    """Average of bilinear samples over each of ``output_size`` bins of every box:
    ``[K, C, oh, ow]``. ``boxes``: ``[K, 5]`` (image index, x1, y1, x2, y2) or a list of
    per-image ``[L, 4]``; ``sampling_ratio <= 0`` picks ``ceil(bin size)`` samples per box."""
    rois = as_rois(input, boxes)
    oh, ow = pair(output_size)
    return _fwd(input, rois, float(spatial_scale), oh, ow, int(sampling_ratio), bool(aligned))


class RoIAlign(nn.Module):
    """:func:`roi_align` as a module."""

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int,
                 aligned: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input: Tensor, rois: Tensor | list[Tensor]) -> Tensor:
        return roi_align(input, rois, self.output_size, self.spatial_scale,
                         self.sampling_ratio, self.aligned)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, "
                f"spatial_scale={self.spatial_scale}, sampling_ratio={self.sampling_ratio}, "
                f"aligned={self.aligned})")
