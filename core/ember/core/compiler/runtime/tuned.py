"""max-autotune for one C++ kernel: pick its OpenMP thread count and outer-loop chunking.

Candidates are timed on the real arguments at the first call for each set of size
arguments (kernels only write their outputs, so re-running one is harmless); the winner is
cached on disk by ``runtime.autotune`` so another process does not time again.
"""

from __future__ import annotations

import os
import time

import torch

from ember.core.compiler.runtime import autotune, build, cache

PROBE_SECONDS = 2e-4  # each timing repeats the kernel until it lasts about this long


def candidates(max_threads: int) -> list[dict]:
    """Serial, all threads with 1/4/16 chunks per thread, and half the threads."""
    out = [{"threads": 1, "chunks": 1}]
    teams = sorted({max_threads, max(1, max_threads // 2)} - {1}, reverse=True)
    for t in teams:
        out += [{"threads": t, "chunks": c} for c in ((1, 4, 16) if t == max_threads else (1,))]
    return out


class TunedKernel:
    """Callable like the plain ctypes kernel; appends the tuned (threads, chunks) arguments."""

    def __init__(self, fn, name: str, source: str, n_bufs: int):
        self.fn, self.name, self.n_bufs = fn, name, n_bufs
        self.source_key = cache.key(source)
        self.chosen: dict[tuple, tuple[int, int]] = {}

    def __call__(self, *args) -> None:
        sizes = args[self.n_bufs:]
        cfg = self.chosen.get(sizes)
        if cfg is None:
            cfg = self.chosen[sizes] = self._tune(args, sizes)
        if build.forked_child:  # see build._serial_after_fork
            cfg = (1, cfg[1])
        self.fn(*args, *cfg)

    def _tune(self, args: tuple, sizes: tuple) -> tuple[int, int]:
        max_threads = torch.get_num_threads()
        cands = candidates(max_threads)
        start = time.perf_counter()
        self.fn(*args, max_threads, 1)
        once = max(time.perf_counter() - start, 1e-7)
        reps = max(1, min(1000, int(PROBE_SECONDS / once)))

        def measure(cfg: dict) -> float:
            def run():
                for _ in range(reps):
                    self.fn(*args, cfg["threads"], cfg["chunks"])
            return autotune.timeit(run, warmup=1, reps=5) / reps

        key = [self.source_key, self.name, repr(sizes), f"threads={max_threads}",
               f"cpus={os.cpu_count()}"]
        best = autotune.tune(key, cands, measure, desc=f"autotune {self.name}")
        return best["threads"], best["chunks"]
