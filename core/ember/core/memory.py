"""Large fresh CPU tensors backed by transparent huge pages.

glibc hands out allocations above 32 MiB as fresh ``mmap`` pages, so a graph's big
intermediate is page-faulted in 4 KiB at a time on every call: 131 MB cost ~100 ms of faults
on one core. Advising the range ``MADV_HUGEPAGE`` before its first touch lets the kernel
fault it in 2 MiB pages (~5x cheaper). Linux only; elsewhere, or where the advice is
refused, the tensor is a plain ``torch.empty_strided``.
"""

from __future__ import annotations

import ctypes
import functools
import sys

import torch

__all__ = ["HUGE_MIN_BYTES", "empty_huge"]

HUGE_MIN_BYTES = 8 << 20  # smaller buffers: glibc reuses its heap, few faults to save
_HUGE = 1 << 21
_MADV_HUGEPAGE = 14


@functools.lru_cache(maxsize=1)
def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return fn


def empty_huge(size, stride, dtype: torch.dtype) -> torch.Tensor:
    """``torch.empty_strided(size, stride, dtype=dtype)`` on the CPU, its whole 2 MiB pages
    advised huge when it spans at least ``HUGE_MIN_BYTES``."""
    t = torch.empty_strided(size, stride, dtype=dtype)
    nbytes = t.untyped_storage().nbytes()
    advise = _madvise()
    if advise is not None and nbytes >= HUGE_MIN_BYTES:
        start = (t.data_ptr() + _HUGE - 1) & ~(_HUGE - 1)
        end = (t.data_ptr() + nbytes) & ~(_HUGE - 1)
        if end > start:
            advise(start, end - start, _MADV_HUGEPAGE)
    return t
