"""Run independent units of CPU work on worker threads with one intra-op thread each.

Many mid-sized torch ops in one OpenMP team pay a barrier per op; on a small machine shared
with other processes a descheduled team member stalls every barrier (2 threads ran the mel
spectrogram 5x slower than 1). Threads that each run whole units single-threaded and pull
the next unit from a shared counter meet only once, at the end, and a busy core just takes
fewer units. :func:`spare_cores` says how many cores other processes leave free.

Every package's CPU work-splitting goes through here: one pool of worker threads, one
per-thread scratch cache and the one ``os.register_at_fork`` hook of Ember (other modules
add theirs with :func:`after_fork_in_child`).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Hashable

import torch

__all__ = ["after_fork_in_child", "cores", "default_workers", "forked", "run", "run_slots",
           "scratch", "spare_cores"]

_lock = threading.Lock()
_threads: list[threading.Thread] = []  # the pool's workers; they only ever grow in number
_jobs: queue.SimpleQueue = queue.SimpleQueue()  # one entry per (job, slot) to work on
_local = threading.local()  # .worker on pool threads; .buffers: the thread's scratch
_forked = False
_fork_callbacks: list[Callable[[], None]] = []


def _worker_main(started: threading.Barrier, jobs: queue.SimpleQueue) -> None:
    _local.worker = True
    torch.get_num_threads()  # this thread's lazy thread-count init, before overriding it
    torch.set_num_threads(1)
    started.wait()
    while True:
        job, slot = jobs.get()
        job.work(slot)


def _ensure_workers(size: int) -> None:
    """At least ``size`` pool threads, each already set to one intra-op thread."""
    if len(_threads) >= size:
        return
    with _lock:
        missing = size - len(_threads)
        if missing <= 0:
            return
        threads = torch.get_num_threads()
        started = threading.Barrier(missing + 1)
        for _ in range(missing):
            t = threading.Thread(target=_worker_main, args=(started, _jobs), daemon=True,
                                 name=f"ember-parallel-{len(_threads)}")
            t.start()
            _threads.append(t)
        started.wait()
        # set_num_threads also sets the default for threads started later: put it back
        torch.set_num_threads(threads)


class _Job:
    """Units 0..n-1 handed out in order; ``pending`` counts those not finished yet."""

    def __init__(self, fn: Callable[[int, int], None], n: int, grad: bool) -> None:
        self.fn, self.n, self.grad, self.next, self.pending = fn, n, grad, 0, n
        self.error: BaseException | None = None
        self.cond = threading.Condition()

    def work(self, slot: int) -> None:
        with torch.set_grad_enabled(self.grad):  # grad mode is per thread: the caller's
            while True:
                with self.cond:
                    i = self.next
                    if i >= self.n:
                        return
                    self.next += 1
                try:
                    if self.error is None:  # after a failure the rest are only counted off
                        self.fn(slot, i)
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


def default_workers(n: int) -> int:
    """Workers a run of ``n`` units uses by default: torch's thread count, no more than the
    units and :func:`spare_cores`."""
    threads = torch.get_num_threads()
    if threads <= 1 or n <= 1:
        return 1
    return max(1, min(threads, n, spare_cores()))


def run_slots(fn: Callable[[int, int], None], n: int, *, workers: int | None = None) -> None:
    """Call ``fn(slot, i)`` for every ``i < n`` on ``workers`` pool threads (default
    :func:`default_workers`) with one intra-op thread each; ``slot < workers`` names the
    thread running the unit, so it can accumulate into private state.

    Units run on the caller instead (slot 0) when nested in a unit, while Dynamo traces, or
    when one worker would do and the caller has one intra-op thread anyway. Otherwise the
    caller only waits: switching its own thread count would rebuild torch's thread pools on
    every call (``torch.set_num_threads`` joins their threads, milliseconds on a busy
    machine). Units run under the caller's grad mode; the first exception a unit raises is
    re-raised here once the units already started have finished.
    """
    if n <= 0:
        return
    nested = getattr(_local, "worker", False) or torch.compiler.is_compiling()
    if not nested:
        workers = default_workers(n) if workers is None else max(1, workers)
    if nested or (workers == 1 and torch.get_num_threads() <= 1):
        for i in range(n):
            fn(0, i)
        return
    _ensure_workers(workers)
    job = _Job(fn, n, torch.is_grad_enabled())
    for slot in range(workers):
        _jobs.put((job, slot))
    job.wait()


def run(fn: Callable[[int], None], n: int, *, workers: int | None = None) -> None:
    """Call ``fn(i)`` for every ``i < n`` as :func:`run_slots` does."""
    run_slots(lambda _slot, i: fn(i), n, workers=workers)


def scratch(slot: Hashable, shape: tuple[int, ...], dtype: torch.dtype,
            device: torch.device | str = "cpu") -> torch.Tensor:
    """A reusable per-thread buffer of ``shape``: fresh megabyte-sized tensors page-fault on
    every use. The same ``slot`` on the same thread returns the same memory."""
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    numel = 1
    for d in shape:
        numel *= int(d)
    key = (slot, dtype, torch.device(device))
    buf = buffers.get(key)
    if buf is None or buf.numel() < numel:
        buf = buffers[key] = torch.empty(numel, dtype=dtype, device=device)
    return buf[:numel].view(shape)


def cores() -> int:
    """Cores this process may run on (its CPU affinity)."""
    return _CORES


_CORES = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
          else os.cpu_count()) or 1
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
        _spare = (now, max(1, _CORES - _busy_elsewhere()))
    return _spare[1]


def forked() -> bool:
    """Whether this process was forked from one that had imported this module: the parent's
    threads (ours, libgomp's team) did not come along."""
    return _forked


def after_fork_in_child(fn: Callable[[], None]) -> None:
    """Call ``fn()`` in every child forked from now on, after the pool is reset there."""
    _fork_callbacks.append(fn)


def _after_fork() -> None:
    """A forked child has no worker threads (a new pool starts on demand); a lock held by
    another thread at the fork would never be released there."""
    global _lock, _threads, _jobs, _forked
    _lock, _threads, _jobs, _forked = threading.Lock(), [], queue.SimpleQueue(), True
    for fn in _fork_callbacks:
        fn()


os.register_at_fork(after_in_child=_after_fork)
