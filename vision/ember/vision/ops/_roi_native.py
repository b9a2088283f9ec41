"""ctypes bindings of ``_roi_native.cpp``: the CPU kernels of the RoI ops (float32/float64).

Built once through the compiler's build cache (``build.load_source``). Where no C++ compiler
is present, or in a forked child process, :func:`library` is None and the ops use their
torch-op kernels.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from ember.core import parallel
from ember.core.logs import get_logger

_log = get_logger("vision")

__all__ = ["call", "library"]

_P, _I, _D, _C = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_int
_SIGNATURES = {
    "roi_align_fwd": [_P, _P, _P] + [_I] * 7 + [_D, _I, _C, _C, _C],
    "roi_align_nhwc_fwd": [_P, _P, _P] + [_I] * 7 + [_D, _I, _C, _C],
    "roi_align_bwd": [_P, _P, _P] + [_I] * 7 + [_D, _I, _C, _C, _C],
    "roi_pool_fwd": [_P, _P, _P, _P] + [_I] * 7 + [_D, _C],
    "roi_pool_bwd": [_P, _P, _P, _P] + [_I] * 7 + [_C],
    "ps_roi_pool_fwd": [_P, _P, _P] + [_I] * 7 + [_D, _C],
    "ps_roi_pool_bwd": [_P, _P, _P] + [_I] * 7 + [_D, _C],
}


@functools.lru_cache(maxsize=1)
def _load() -> ctypes.CDLL | None:
    from ember.core.compiler.runtime import build

    return build.load_kernels(__package__, "_roi_native.cpp", {
        f"ember_{name}_{suffix}": args for name, args in _SIGNATURES.items()
        for suffix in ("f32", "f64")}, "native RoI kernels", _log)


def library() -> ctypes.CDLL | None:
    """The built library, or None where it cannot serve (no compiler, forked child)."""
    return None if parallel.forked() else _load()


def call(name: str, dtype: torch.dtype, *args) -> None:
    """Run ``ember_<name>_<f32|f64>``; tensors are passed by data pointer. A box whose batch
    index is not an image of the input raises ``ValueError``."""
    fn = getattr(library(), f"ember_{name}_{'f64' if dtype == torch.float64 else 'f32'}")
    values = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
    threads = torch.get_num_threads()
    if fn(*values, threads) != 0:
        raise ValueError("rois: a batch index (column 0) is not an image of the input")
