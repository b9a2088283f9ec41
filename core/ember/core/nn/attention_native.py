"""The CPU attention tiles in one native call: C++ with OpenMP, GEMMs through torch's BLAS.

Same algorithm as :mod:`attention_cpu` (online softmax over key blocks, backward recomputing
each probability tile from the log-sum-exp), but one call per op instead of ~15 torch ops per
tile: no per-tile Python, no GIL hand-offs between workers, exp and row sum in one pass.
The matrix products go through the BLAS that torch itself links (``sgemm_``/``dgemm_``
exported by ``libtorch_cpu``), called single-threaded inside our OpenMP team. Where that
symbol or a C++ compiler is missing, :func:`available` is False and the torch-op tiles run.
Dropout replays the Philox stream of :mod:`attention_dropout` element for element. Forked
children use the torch-op tiles: libgomp's thread pool does not survive fork(), and a parallel
region in the child of a process that already ran one can hang. The C++ is
``attention_native.cpp`` beside this module, built through ``runtime.build.load_source``.
"""

from __future__ import annotations

import ctypes
import functools
import os

import torch

from ember.core import parallel
from ember.core.logs import get_logger

_log = get_logger("attention")

# Tile sizes (queries x keys): a 512 x 256 float32 tile is 512 KiB, so the backward's two
# tiles fit a 1 MiB L2; tall tiles re-read K and V fewer times. Query blocks shrink until
# every thread has several units of work.
BLOCK_Q = 512
BLOCK_K = 256
MIN_UNITS_PER_THREAD = 4
# Smaller problems (heads * L * S score elements) run on one thread: a parallel region's
# barrier costs more than the work when cores are shared.
THREADED_MIN_ELEMENTS = 1 << 18

enabled = True  # tests switch it off to cover the torch-op tiles
def _mkl_local_threads(torch_lib: ctypes.CDLL):
    """MKL's per-thread thread-count setter (Fortran binding: int by reference), if it works.

    Without it, MKL called from our one-thread region starts a team of its own per call.
    """
    try:
        setter, get_max = torch_lib.MKL_SET_NUM_THREADS_LOCAL, torch_lib.mkl_get_max_threads
    except AttributeError:
        return None
    setter.restype = get_max.restype = ctypes.c_int
    previous = setter(ctypes.byref(ctypes.c_int(1)))
    works = get_max() == 1
    setter(ctypes.byref(ctypes.c_int(previous)))
    return setter if works else None


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    """The built kernel with torch's BLAS wired in, or None (logged) when unavailable."""
    try:
        torch_lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib",
                                             "libtorch_cpu.so"))
        sgemm, dgemm = torch_lib.sgemm_, torch_lib.dgemm_
    except (OSError, AttributeError) as e:
        _log.info("native CPU attention off (torch exports no BLAS sgemm_/dgemm_: %s)", e)
        return None
    try:
        from ember.core.compiler.runtime import build

        lib = build.load_source(__package__, "attention_native.cpp")
    except Exception as e:  # no compiler, build failure: the torch-op tiles still work
        _log.warning("native CPU attention off (build failed: %s)", e)
        return None
    local_threads = _mkl_local_threads(torch_lib)
    lib.ember_attn_set_blas(ctypes.cast(sgemm, ctypes.c_void_p),
                            ctypes.cast(dgemm, ctypes.c_void_p),
                            ctypes.cast(local_threads, ctypes.c_void_p) if local_threads else None)
    return lib


def available(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether this problem runs natively: CPU, non-empty, library built, not a forked child."""
    return (enabled and not parallel.forked() and q.device.type == "cpu"
            and min(q.numel(), k.numel(), v.numel()) > 0 and _library() is not None)


def _ptr(t: torch.Tensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(0 if t is None else t.data_ptr())


def _int64s(values) -> ctypes.Array:
    return (ctypes.c_int64 * len(values))(*values)


def _threads(q: torch.Tensor, k: torch.Tensor) -> int:
    n, h, length_q, _ = q.shape
    if n * h * length_q * k.shape[2] < THREADED_MIN_ELEMENTS:
        return 1
    return torch.get_num_threads()


def _prepare(q, k, v, attn_mask, rng, threads):
    """Contiguous compute-dtype q, k, v; mask pointer and strides; sizes and seeds."""
    n, h, length_q, e = q.shape
    hkv, length_k = k.shape[1], k.shape[2]
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    qs = q.detach().to(dtype).contiguous()
    ks = k.detach().to(dtype).contiguous()
    vs = v.detach().to(dtype).contiguous()
    mask, kind, strides = None, 0, (0, 0, 0, 0)
    if attn_mask is not None:
        mask = attn_mask.detach()
        if mask.dtype == torch.bool:
            mask, kind = mask.view(torch.uint8), 1
        else:
            mask, kind = mask.to(dtype), 2
        mask = mask.expand(n, h, length_q, length_k)
        strides = mask.stride()
    block_q = max(1, min(BLOCK_Q, length_q))
    want = MIN_UNITS_PER_THREAD * threads
    while block_q > 32 and n * h * -(-length_q // block_q) < want:
        block_q //= 2
    seed, offset = (0, 0) if rng is None else (int(x) for x in rng.tolist())
    dims = (n * h, h, h // hkv, length_q, length_k, e, v.shape[-1], block_q,
            max(1, min(BLOCK_K, length_k)), seed, offset)
    return qs, ks, vs, mask, kind, strides, dims, dtype


def _dropout(dropout_p: float, rng: torch.Tensor | None) -> ctypes.c_double:
    return ctypes.c_double(dropout_p if dropout_p > 0.0 and rng is not None else 0.0)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
            dropout_p: float, is_causal: bool, scale: float,
            rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Output ``[N, H, L, Ev]`` in q's dtype and log-sum-exp ``[N, H, L]`` (float32/64)."""
    threads = _threads(q, k)
    qs, ks, vs, mask, kind, strides, dims, dtype = _prepare(q, k, v, attn_mask, rng, threads)
    n, h, length_q, _ = q.shape
    out = torch.empty(n, h, length_q, v.shape[-1], dtype=dtype)
    lse = torch.empty(n, h, length_q, dtype=dtype)
    _library().ember_attn_forward(
        dtype == torch.float64, _ptr(qs), _ptr(ks), _ptr(vs), _int64s(dims), _ptr(mask), kind,
        _int64s(strides), int(is_causal), ctypes.c_double(scale), _dropout(dropout_p, rng),
        _ptr(out), _ptr(lse), threads)
    return out.to(q.dtype), lse


def backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             out: torch.Tensor, lse: torch.Tensor, attn_mask: torch.Tensor | None,
             dropout_p: float, is_causal: bool, scale: float,
             rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients for q, k, v (contiguous, in the inputs' dtypes)."""
    threads = _threads(q, k)
    qs, ks, vs, mask, kind, strides, dims, dtype = _prepare(q, k, v, attn_mask, rng, threads)
    go = grad_out.detach().to(dtype).contiguous()
    delta = (go * out.detach().to(dtype)).sum(-1).contiguous()
    lse = lse.detach().to(dtype).contiguous()
    dq = torch.zeros_like(qs)
    dk = torch.zeros((threads, *ks.shape), dtype=dtype)
    dv = torch.zeros((threads, *vs.shape), dtype=dtype)
    _library().ember_attn_backward(
        dtype == torch.float64, _ptr(qs), _ptr(ks), _ptr(vs), _int64s(dims), _ptr(mask), kind,
        _int64s(strides), int(is_causal), ctypes.c_double(scale), _dropout(dropout_p, rng),
        _ptr(go), _ptr(lse), _ptr(delta), _ptr(dq), _ptr(dk), _ptr(dv), threads)
    dk, dv = (dk.sum(0), dv.sum(0)) if threads > 1 else (dk[0], dv[0])
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
