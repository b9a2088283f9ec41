"""CPU kernel for lfilter: the direct-form difference equation accumulated in float64 (float32
data is read and written as float32), one per-sample loop per row, rows spread over
``ember.core.parallel``'s threads. filtering's torch-op path (FIR by conv1d, blocked
recursion) serves autograd, tracing, other devices and machines without a compiler."""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import Tensor

from ember.core.logs import get_logger

_log = get_logger("audio")

__all__ = ["lfilter_rows", "usable"]

_P, _I = ctypes.c_void_p, ctypes.c_int64
_ARGS = [_P, _P, _P, _I, _P, _P, _I, _I, _I, _I]
_SIGNATURES = {"ember_lfilter_rows_f32": _ARGS, "ember_lfilter_rows_f64": _ARGS}
_SYMBOL = {torch.float32: "ember_lfilter_rows_f32", torch.float64: "ember_lfilter_rows_f64"}
_FIXED_ORDERS = 8  # above this the kernel needs a float64 scratch row per thread
_ROWS_PER_UNIT = 4


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    from ember.core.compiler.runtime import build

    return build.load_kernels(__package__, "_iir_native.cpp", _SIGNATURES,
                              "native lfilter kernel", _log)


def usable(x: Tensor, *coefficients: Tensor) -> bool:
    """True for plain float32/64 CPU tensors outside autograd and tracing, when it builds."""
    tensors = (x, *coefficients)
    if torch.compiler.is_compiling() or any(type(t) is not torch.Tensor for t in tensors):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return (x.dtype in _SYMBOL and all(t.device.type == "cpu" for t in tensors)
            and _library() is not None)


def lfilter_rows(x: Tensor, b: Tensor, a: Tensor) -> Tensor:
    """``x`` (B, C, T) filtered by normalised ``b``, ``a`` (C, N+1), N >= 1, in x's dtype."""
    from ember.core.parallel import run_slots, scratch

    kernel = getattr(_library(), _SYMBOL[x.dtype])
    x = x.contiguous()
    b, a = (t.to(torch.float64).contiguous() for t in (b, a))
    y = torch.empty_like(x)
    rows, time, order = x.shape[0] * x.shape[1], x.shape[2], a.shape[1] - 1
    units = -(-rows // _ROWS_PER_UNIT)
    status = [0] * units

    def unit(slot: int, i: int) -> None:
        r0 = i * _ROWS_PER_UNIT
        hist = scratch(("lfilter", slot), (time,), torch.float64).data_ptr() if (
            order > _FIXED_ORDERS) else None
        status[i] = kernel(x.data_ptr(), y.data_ptr(), hist, time, b.data_ptr(), a.data_ptr(),
                           a.shape[0], order, r0, min(rows, r0 + _ROWS_PER_UNIT))

    run_slots(unit, units)
    if any(status):
        raise RuntimeError(f"native lfilter kernel failed (status {max(status)})")
    return y
