"""What each ``compile(mode=...)`` means for the C++ (CPU) path.

- ``default`` and ``reduce-overhead``: each run of two or more consecutive kernels becomes one
  native entry (one ctypes call per run; externs split the graph into runs), so per-call
  Python work is minimal. (On CUDA, ``reduce-overhead`` also replays CUDA graphs.)
- ``max-autotune`` / ``max-autotune-no-cudagraphs``: each kernel's OpenMP thread count and
  outer-loop chunking are timed on the real inputs at the first call; the winner is cached
  on disk (``ember.core.compiler.autotune``).
"""

from __future__ import annotations

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def mode_of(options: dict | None) -> str:
    mode = (options or {}).get("mode") or "default"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    return mode


def tunes_kernels(options: dict | None) -> bool:
    """max-autotune: search thread count and chunking per kernel."""
    return mode_of(options).startswith("max-autotune")


def native_entry(options: dict | None) -> bool:
    """One native call per run of kernels instead of one per kernel: every mode but
    max-autotune, whose kernels are timed and called one by one with their tuning arguments."""
    return not tunes_kernels(options)
