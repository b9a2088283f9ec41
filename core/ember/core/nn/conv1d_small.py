"""``ember::conv1d_small``: a float32 CPU 1-d convolution whose reduction (input channels x
kernel taps, at most ``MAX_TAPS``) is too short for oneDNN's im2col + GEMM to run well (a
waveform model's first layer: 1 channel, kernel 10, stride 5 ran at ~2 GFLOP/s).

The compiler routes such convolutions here (``lowering.externs``); the C++ is
``conv1d_small.cpp`` beside this module, built through ``runtime.build``. Where it does not
build, or for other dtypes and devices, the op is ATen's ``conv1d``.
"""

from __future__ import annotations

import ctypes
import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from ember.core import kernels
from ember.core.logs import get_logger

__all__ = ["MAX_TAPS", "available", "conv1d_small"]

_log = get_logger("kernels")

MAX_TAPS = 32  # kMaxTaps in the C++

conv1d_small = kernels.define(
    "ember::conv1d_small",
    "(Tensor input, Tensor weight, Tensor? bias, int stride, int padding, int dilation) "
    "-> Tensor")

_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {"ember_conv1d_small_f32": [_P, _P, _P, _P] + [_I] * 9}


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    from ember.core.compiler.runtime import build

    return build.load_kernels(__package__, "conv1d_small.cpp", _SIGNATURES,
                              "native small 1-d convolution", _log)


def available() -> bool:
    """The native kernel builds on this machine."""
    return _library() is not None


def _frames(length: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (length + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


@conv1d_small.register_fake
def _(input, weight, bias, stride, padding, dilation):
    frames = _frames(input.shape[2], weight.shape[2], stride, padding, dilation)
    return input.new_empty((input.shape[0], weight.shape[0], frames))


@conv1d_small.register_kernel("portable")
def _(input, weight, bias, stride, padding, dilation):
    return F.conv1d(input, weight, bias, stride, padding, dilation)


@conv1d_small.register_kernel("cpu")
def _(input: Tensor, weight: Tensor, bias: Tensor | None, stride: int, padding: int,
      dilation: int) -> Tensor:
    batch, cin, length = input.shape
    cout, wcin, kernel = weight.shape
    lib = _library()
    if lib is None or input.dtype != torch.float32 or weight.dtype != torch.float32 or \
            wcin != cin or cin * kernel > MAX_TAPS or (bias is not None and (
                bias.dtype != torch.float32 or bias.shape != (cout,))):
        return F.conv1d(input, weight, bias, stride, padding, dilation)
    frames = _frames(length, kernel, stride, padding, dilation)
    if frames <= 0 or stride < 1 or dilation < 1 or padding < 0:
        return F.conv1d(input, weight, bias, stride, padding, dilation)
    x, w = input.contiguous(), weight.contiguous()
    b = bias.contiguous() if bias is not None else None
    out = torch.empty((batch, cout, frames), dtype=torch.float32)
    status = lib.ember_conv1d_small_f32(x.data_ptr(), w.data_ptr(),
                                        b.data_ptr() if b is not None else None,
                                        out.data_ptr(), batch, cin, length, cout, kernel,
                                        stride, padding, dilation, frames)
    if status:
        raise RuntimeError(f"native small 1-d convolution failed (status {status})")
    return out
