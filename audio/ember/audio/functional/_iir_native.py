"""CPU kernel for lfilter in float64: the direct-form difference equation, one per-sample
loop per row, rows spread over ``ember.core.parallel``'s threads. filtering's torch-op path
(FIR by conv1d, blocked recursion) serves autograd, tracing, other devices and machines
without a compiler."""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import Tensor

from ember.core.logs import get_logger

_log = get_logger("audio")

__all__ = ["lfilter_rows", "usable"]

_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {"ember_lfilter_rows": [_P, _P, _I, _P, _P, _I, _I, _I, _I]}
_ROWS_PER_UNIT = 4


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    from ember.core.compiler.runtime import build

    return build.load_kernels(__package__, "_iir_native.cpp", _SIGNATURES,
                              "native lfilter kernel", _log)


def usable(*tensors: Tensor) -> bool:
    """True for plain CPU tensors outside autograd and tracing, when the kernel builds."""
    if torch.compiler.is_compiling() or any(type(t) is not torch.Tensor for t in tensors):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return all(t.device.type == "cpu" for t in tensors) and _library() is not None


def lfilter_rows(x: Tensor, b: Tensor, a: Tensor) -> Tensor:
    """``x`` (B, C, T) filtered by normalised ``b``, ``a`` (C, N+1), N >= 1; float64."""
    from ember.core.parallel import run

    lib = _library()
    x, b, a = (t.to(torch.float64).contiguous() for t in (x, b, a))
    y = torch.empty_like(x)
    rows, time = x.shape[0] * x.shape[1], x.shape[2]
    units = -(-rows // _ROWS_PER_UNIT)
    status = [0] * units

    def unit(i: int) -> None:
        r0 = i * _ROWS_PER_UNIT
        status[i] = lib.ember_lfilter_rows(x.data_ptr(), y.data_ptr(), time, b.data_ptr(),
                                           a.data_ptr(), a.shape[0], a.shape[1] - 1, r0,
                                           min(rows, r0 + _ROWS_PER_UNIT))

    run(unit, units)
    if any(status):
        raise RuntimeError(f"native lfilter kernel failed (status {max(status)})")
    return y
