"""CPU kernel for ``projection @ |STFT|^2`` on float32: frames -> real FFT -> power -> banded
projection in one native pass, nothing materialised but the output.

Sixteen consecutive frames are transformed together, one frame per SIMD lane, so every
butterfly is a plain loop over 16 floats that g++ vectorises (a library FFT of a few hundred
points spends most of its time in per-transform overhead). The real FFT of even ``n_fft`` is
a complex Stockham FFT of half the length (radix 4, 2, 3, 5, 7 kernels, any other prime by
its pair-symmetric DFT) plus the usual split step; odd ``n_fft`` transforms the full length
with a zero imaginary part. Each projection row multiplies only the band of bins where it is
non-zero (a mel filter covers a few bins). The C++ is ``_stft_native.cpp`` beside this
module, built once by g++ through the compiler's build cache (``build.load_source``); where
no compiler is present :func:`available` is False and callers keep the torch-op path. No
OpenMP: callers spread frame ranges over ``ember.core.parallel``'s worker threads (ctypes
releases the GIL for the call).
"""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import Tensor

from ember.core.logs import get_logger

_log = get_logger("audio")

__all__ = ["LANES", "available", "frames_power_project"]

LANES = 16  # frames per group: one AVX-512 register of float32, two AVX2 ones
MAX_PRIME = 61  # larger prime factors of the FFT length: the torch-op path is faster


def _largest_prime(n: int) -> int:
    best, p = 1, 2
    while p * p <= n:
        while n % p == 0:
            best, n = p, n // p
        p += 1
    return max(best, n)


_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {"ember_stft_power_project": [_P, _I, _P, _I, _P, _I, _P, _I, _I, _I, _I, _P,
                                             _P, _P, _I, _I, _P, _I]}


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    from ember.core.compiler.runtime import build

    return build.load_kernels(__package__, "_stft_native.cpp", _SIGNATURES,
                              "native STFT kernel", _log)


def available(n_fft: int, dtype: torch.dtype) -> bool:
    """The native kernel serves this transform length and dtype (float32 only)."""
    m = n_fft // 2 if n_fft % 2 == 0 and n_fft > 2 else n_fft
    return dtype == torch.float32 and _largest_prime(m) <= MAX_PRIME and _library() is not None


def bands(projection: Tensor) -> tuple[Tensor, Tensor]:
    """Per projection row, the first and one-past-last column that is non-zero (int32)."""
    nonzero = projection != 0
    cols = projection.shape[1]
    lo = torch.where(nonzero.any(1), nonzero.int().argmax(1), 0)
    hi = torch.where(nonzero.any(1), cols - nonzero.flip(1).int().argmax(1), 0)
    return lo.to(torch.int32).contiguous(), hi.to(torch.int32).contiguous()


def frames_power_project(row: Tensor, left: Tensor, right: Tensor, window: Tensor,
                         n_fft: int, hop: int, f0: int, f1: int, projection: Tensor,
                         lo: Tensor, hi: Tensor, out: Tensor) -> None:
    """Frames ``f0:f1`` of the padded signal ``left ++ row ++ right`` into ``out[:, f0:f1]``
    (``out`` is ``[P, frames]`` with unit stride along frames; every input contiguous
    float32, ``window`` full ``n_fft`` long)."""
    lib = _library()
    rc = lib.ember_stft_power_project(
        row.data_ptr(), row.shape[0], left.data_ptr(), left.shape[0], right.data_ptr(),
        right.shape[0], window.data_ptr(), n_fft, hop, f0, f1, projection.data_ptr(),
        lo.data_ptr(), hi.data_ptr(), projection.shape[0], projection.shape[1],
        out.data_ptr(), out.stride(0))
    if rc != 0:
        raise RuntimeError(f"native STFT kernel rejected n_fft={n_fft}, hop={hop}")
