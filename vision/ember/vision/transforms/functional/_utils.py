"""Shared helpers of the functional kernels: shapes, dtypes, per-sample parameters."""

from __future__ import annotations

import enum
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch


class InterpolationMode(enum.Enum):
    """Resampling filters (torchvision names). NEAREST is torch's floor rule, not Pillow's."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


def as_interpolation(mode: InterpolationMode | str | int) -> InterpolationMode:
    if isinstance(mode, InterpolationMode):
        return mode
    pil_codes = {0: InterpolationMode.NEAREST, 2: InterpolationMode.BILINEAR,
                 3: InterpolationMode.BICUBIC}
    if isinstance(mode, int) and mode in pil_codes:
        return pil_codes[mode]
    if isinstance(mode, str):
        for m in InterpolationMode:
            if mode.lower() in (m.value, m.name.lower()):
                return m
    raise ValueError(f"interpolation must be one of {[m.name for m in InterpolationMode]}, "
                     f"got {mode!r}")


def max_value(dtype: torch.dtype) -> float:
    """The value of full intensity: 1.0 for floats, the integer maximum otherwise."""
    if dtype.is_floating_point:
        return 1.0
    if dtype == torch.bool:
        return 1
    return torch.iinfo(dtype).max


def check_image(img: torch.Tensor, name: str = "image", channels: Sequence[int] | None = None):
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(img).__name__}")
    if img.ndim < 3:
        raise ValueError(f"{name} must have shape [..., C, H, W], got {tuple(img.shape)}")
    if channels is not None and img.shape[-3] not in channels:
        raise ValueError(f"{name} must have {' or '.join(map(str, channels))} channels, "
                         f"got {img.shape[-3]}")


def flatten_batch(x: torch.Tensor, keep: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """View ``x`` as ``[N, *last keep dims]``; return it with the leading shape."""
    lead = tuple(x.shape[:-keep])
    return x.reshape((-1,) + tuple(x.shape[-keep:])), lead


def per_sample(value, like: torch.Tensor) -> torch.Tensor | float:
    """A scalar stays a float; a 1-d tensor of length N broadcasts over dim 0 of ``like``."""
    if isinstance(value, torch.Tensor):
        if value.ndim == 0:
            return value.to(like.device, torch.float32)
        if value.ndim != 1 or value.shape[0] != like.shape[0]:
            raise ValueError(f"a per-sample parameter must have shape [{like.shape[0]}] "
                             f"(the batch size), got {tuple(value.shape)}")
        return value.to(like.device, torch.float32).view((-1,) + (1,) * (like.ndim - 1))
    return float(value)


def is_batched_param(*values) -> bool:
    return any(isinstance(v, torch.Tensor) and v.ndim > 0 for v in values)


def to_float(img: torch.Tensor) -> torch.Tensor:
    return img if img.is_floating_point() else img.to(torch.float32)


def from_float(out: torch.Tensor, dtype: torch.dtype, *, round_: bool = True) -> torch.Tensor:
    """Back to ``dtype``: integer outputs are rounded (or truncated) and clamped to range."""
    if dtype.is_floating_point:
        return out.to(dtype)
    if round_:
        out = out.round()
    return out.clamp_(0, max_value(dtype)).to(dtype)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


_state = threading.local()


def _forget_pool() -> None:
    """A forked child (a DataLoader worker) inherits the pool but not its threads."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _single_thread_run(fn: Callable[[int], None], indices) -> None:
    torch.set_num_threads(1)
    _state.busy = True
    try:
        for i in indices:
            fn(i)
    finally:
        _state.busy = False


class _Counter:
    """A shared work queue of 0..n-1: threads take the next index (dynamic scheduling keeps
    every thread busy when the machine is shared)."""

    def __init__(self, n: int) -> None:
        self.n, self.next, self.lock = n, 0, threading.Lock()

    def __iter__(self):
        while True:
            with self.lock:
                i = self.next
                self.next += 1
            if i >= self.n:
                return
            yield i


def per_image_parallel(fn: Callable[[int], None], n: int) -> None:
    """Run ``fn(i)`` for i < n on torch's thread count of threads (the caller's included),
    one intra-op thread each: small per-image kernels lose badly to OpenMP spin-waits and
    team wake-ups otherwise. The caller's thread setting is restored."""
    global _pool
    if n <= 0:
        return
    prev = torch.get_num_threads()
    if torch.compiler.is_compiling() or getattr(_state, "busy", False):
        for i in range(n):  # traced, or nested inside a parallel run: stay on this thread
            fn(i)
        return
    workers = max(1, min(prev, n))
    work = _Counter(n)
    try:
        if workers == 1:  # no hand-off to a pool thread
            _single_thread_run(fn, work)
            return
        with _pool_lock:
            if _pool is None or _pool._max_workers < workers - 1:
                _pool = ThreadPoolExecutor(max(workers - 1, prev - 1),
                                           thread_name_prefix="ember-vision")
        futures = [_pool.submit(_single_thread_run, fn, work) for _ in range(workers - 1)]
        try:
            _single_thread_run(fn, work)
        finally:
            for f in futures:
                f.result()
    finally:
        torch.set_num_threads(prev)  # also the default for threads started later
