"""Timing and reporting shared by every benchmark.

Candidates are timed round-robin in one process (A B C A B C ...) and summarised by the
median, because this class of machine moves single timings by several x; speed targets
are ratios between candidates of the same run.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BenchResult:
    """One benchmark's table: a title, column names, rows, and free-form notes."""

    name: str
    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        def fmt(v) -> str:
            if isinstance(v, float):
                return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"
            return str(v)

        lines = ["| " + " | ".join(self.columns) + " |",
                 "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in self.rows]
        return "\n".join(lines + [""] + [f"- {n}" for n in self.notes])

    def to_text(self) -> str:
        return f"{self.title}\n{self.to_markdown()}"


def compare_timings(candidates: dict[str, Callable[[], object]], *, rounds: int = 7,
                    min_seconds: float = 0.05, warmup: int = 1) -> dict[str, float]:
    """Median seconds per call of each candidate, timed round-robin.

    Each round calls every candidate enough times to fill ``min_seconds`` (the count is
    fixed per candidate after warm-up) and records the mean; the median over rounds is
    returned.
    """
    loops: dict[str, int] = {}
    for name, fn in candidates.items():
        for _ in range(warmup):
            fn()
        t0 = time.perf_counter()
        fn()
        once = max(time.perf_counter() - t0, 1e-7)
        loops[name] = max(1, int(min_seconds / once))
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            n = loops[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(s) for name, s in samples.items()}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """Machine, date and versions, as BENCHMARKS.md records them."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{_cpu_model()}, {cores} cores, {gpu}; Python {platform.python_version()}, "
            f"torch {torch.__version__}; {_dt.date.today().isoformat()}")


def update_markdown(path: Path, result: BenchResult, machine: str) -> None:
    """Replace (or append) the ``## <name>`` section of BENCHMARKS.md with this result."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    section = (f"## {result.name}\n\n{result.title}\n\nMachine: {machine}\n\n"
               f"{result.to_markdown().rstrip()}\n")
    pattern = re.compile(rf"^## {re.escape(result.name)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section + "\n", text, count=1)
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text.rstrip() + "\n")


def speedup_rows(times: dict[str, float], reference: str,
                 order: Sequence[str] | None = None) -> list[list]:
    """Rows of (candidate, ms, speedup over ``reference``)."""
    ref = times[reference]
    return [[name, times[name] * 1e3, ref / times[name]] for name in (order or times)]
