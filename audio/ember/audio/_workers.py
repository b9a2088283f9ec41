"""Run independent units of CPU work on worker threads with one intra-op thread each.

Many mid-sized torch ops in one OpenMP team pay a barrier per op; on a small machine shared
with other processes a descheduled team member stalls every barrier (2 threads ran the mel
spectrogram 5x slower than 1). Threads that each run whole units single-threaded and pull
the next unit from a shared counter meet only once, at the end, and a busy core just takes
fewer units. Only as many workers take part as there are cores that other runnable threads
leave free: on an oversubscribed machine more would just queue for the same cores.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["run_units", "scratch", "spare_cores"]

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_local = threading.local()


def _init_worker() -> None:
    _local.worker = True
    torch.get_num_threads()  # this thread's lazy thread-count init, before overriding it
    torch.set_num_threads(1)


def _workers(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    threads = torch.get_num_threads()
    with _lock:
        if _pool is None or _pool_size != size:
            if _pool is not None:
                _pool.shutdown(wait=True)
            _pool = ThreadPoolExecutor(size, thread_name_prefix="ember-audio",
                                       initializer=_init_worker)
            barrier = threading.Barrier(size)  # start every worker now, each runs its init
            for f in [_pool.submit(barrier.wait) for _ in range(size)]:
                f.result()
            # set_num_threads also sets the default for threads started later: put it back
            torch.set_num_threads(threads)
            _pool_size = size
    return _pool


def _forget_pool() -> None:
    """A forked child has no worker threads: it starts a new pool on demand."""
    global _pool, _pool_size, _lock
    _pool, _pool_size, _lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
_SPARE_TTL = 0.01  # seconds a reading of the run queue is reused
_spare = (-1.0, 1)  # (time read, spare cores)


def _runnable_here() -> int:
    """This process's threads in state R: the caller, and OpenMP/BLAS workers still spinning
    after their last parallel region (they go to sleep on their own within milliseconds)."""
    n = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                    n += f.read().rsplit(b")", 1)[1].split()[0] == b"R"
            except (OSError, IndexError):
                pass
    except OSError:
        return 1
    return max(1, n)


def _busy_elsewhere() -> int:
    """Runnable threads of other processes right now (0 where Linux's counts are missing)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            runnable = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, runnable - _runnable_here())


def spare_cores() -> int:
    """Cores not taken by other processes' runnable threads, at least 1 (read at most every
    10 ms). Our own spinning OpenMP/BLAS threads do not count: they yield soon."""
    global _spare
    now = time.monotonic()
    if now - _spare[0] >= _SPARE_TTL:
        _spare = (now, max(1, (_CORES or 1) - _busy_elsewhere()))
    return _spare[1]


class _Job:
    """Units 0..n-1 handed out in order; ``pending`` counts those not finished yet."""

    def __init__(self, fn: Callable[[int], None], n: int) -> None:
        self.fn, self.n, self.next, self.pending = fn, n, 0, n
        self.error: BaseException | None = None
        self.cond = threading.Condition()

    def work(self) -> None:
        while True:
            with self.cond:
                i = self.next
                if i >= self.n:
                    return
                self.next += 1
            try:
                if self.error is None:  # after a failure the rest are only counted off
                    self.fn(i)
            except BaseException as exc:  # re-raised in the caller
                self.error = self.error or exc
            finally:
                with self.cond:
                    self.pending -= 1
                    if not self.pending:
                        self.cond.notify_all()

    def wait(self) -> None:
        with self.cond:
            while self.pending:
                self.cond.wait()
        if self.error is not None:
            raise self.error


def run_units(fn: Callable[[int], None], n: int) -> None:
    """Call ``fn(i)`` for every ``i < n`` on up to ``torch.get_num_threads()`` worker threads
    (no more than :func:`spare_cores`) with one intra-op thread each; on the caller when
    that setting is 1 or when nested.

    The caller only waits: switching its own thread count would rebuild torch's thread
    pools on every call (``torch.set_num_threads`` joins their threads, milliseconds on a
    busy machine).
    """
    threads = torch.get_num_threads()
    if threads <= 1 or getattr(_local, "worker", False):
        for i in range(n):
            fn(i)
        return
    job = _Job(fn, n)
    pool = _workers(threads)
    for _ in range(max(1, min(threads, n, spare_cores()))):
        pool.submit(job.work)
    job.wait()


def scratch(slot: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A reusable per-thread buffer: fresh megabyte-sized tensors page-fault on every use."""
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    numel = 1
    for d in shape:
        numel *= d
    buf = buffers.get((slot, dtype))
    if buf is None or buf.numel() < numel:
        buf = buffers[(slot, dtype)] = torch.empty(numel, dtype=dtype)
    return buf[:numel].view(shape)
