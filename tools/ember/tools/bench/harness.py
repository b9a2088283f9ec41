"""Timing and reporting shared by every benchmark.

Candidates are timed round-robin in one process (A B C A B C ...) and summarised by the
median, because this class of machine moves single timings by several x; speed targets
are ratios between candidates of the same run.
"""

from __future__ import annotations

import csv
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ember.core.extras import require

# Columns whose numbers are ratios between candidates (what the chart plots).
_RATIO_COLUMN = re.compile(r"speed|ratio|x faster", re.I)


@dataclass
class BenchResult:
    """One benchmark's table: a title, column names, rows, and free-form notes."""

    name: str
    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        fmt = _fmt
        lines = ["| " + " | ".join(self.columns) + " |",
                 "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in self.rows]
        return "\n".join(lines + [""] + [f"- {n}" for n in self.notes])

    def to_text(self) -> str:
        return f"{self.title}\n{self.to_markdown()}"

    def to_table(self) -> str:
        """The result as an aligned plain-text table, for the terminal."""
        cells = [self.columns] + [[_fmt(v) for v in row] for row in self.rows]
        widths = [max(len(r[i]) for r in cells if i < len(r)) for i in range(len(self.columns))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([self.title, *lines] + [f"  * {n}" for n in self.notes])

    def to_dict(self) -> dict:
        return asdict(self)

    def ratio_columns(self) -> list[str]:
        """Columns holding candidate-vs-candidate ratios: named so, and numeric in every row."""
        out = []
        for i, col in enumerate(self.columns):
            values = [row[i] for row in self.rows if i < len(row) and row[i] is not None]
            if (_RATIO_COLUMN.search(col) and values
                    and all(_is_number(v) for v in values)):
                out.append(col)
        return out

    def case_labels(self) -> list[str]:
        """One label per row: the leading text/integer columns (before the first float)."""
        labels = []
        for row in self.rows:
            parts = []
            for col, v in zip(self.columns, row):
                if isinstance(v, float) or col.endswith(" ok"):
                    break
                parts.append(str(v))
            labels.append(" ".join(parts) or str(row[0]))
        return labels


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def compare_timings(candidates: dict[str, Callable[[], object]], *, rounds: int = 7,
                    min_seconds: float = 0.05, warmup: int = 1,
                    settle: float = 0.0) -> dict[str, float]:
    """Median seconds per call of each candidate, timed round-robin.

    Each round calls every candidate enough times to fill ``min_seconds`` (the count is
    fixed per candidate after warm-up) and records the mean; the median over rounds is
    returned. The order rotates every round, so no candidate always runs right after the same
    peer (a BLAS pool still spinning from the previous call steals a core from the next one).
    ``settle`` seconds of sleep before every timed block let such threads go idle, the same
    for every candidate.
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
    names = list(candidates)
    for r in range(rounds):
        _report(f"round {r + 1}/{rounds}")
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn, n = candidates[name], loops[name]
            if settle:
                time.sleep(settle)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(s) for name, s in samples.items()}


_progress: list[Callable[[str], None]] = []


def _report(status: str) -> None:
    """Tell the active progress display (if any) what the running benchmark is doing."""
    for hook in _progress:
        hook(status)


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


def versions_line() -> str:
    """Versions of the ember distributions and the libraries the benchmarks compare against."""
    names = ["ember-core", "ember-vision", "ember-audio", "ember-data", "ember-arrow",
             "ember-tools", "torch", "numpy"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def update_markdown(path: Path, result: BenchResult, machine: str,
                    versions: str | None = None) -> None:
    """Replace (or append) the ``## <name>`` section of BENCHMARKS.md with this result."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    versions = versions_line() if versions is None else versions
    section = (f"## {result.name}\n\n{result.title}\n\nMachine: {machine}\n\n"
               + (f"Versions: {versions}\n\n" if versions else "")
               + f"{result.to_markdown().rstrip()}\n")
    pattern = re.compile(rf"^## {re.escape(result.name)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section + "\n", text, count=1)
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text.rstrip() + "\n")


def write_json(path: Path, results: Iterable[BenchResult], machine: str) -> None:
    """All results, with the machine line and versions, as one JSON document."""
    doc = {"machine": machine, "versions": versions_line(),
           "results": [r.to_dict() for r in results]}
    Path(path).write_text(json.dumps(doc, indent=2, default=str) + "\n")


def write_csv(path: Path, results: Iterable[BenchResult]) -> None:
    """All rows in one CSV: a ``benchmark`` column, then the union of the results' columns."""
    results = list(results)
    header = ["benchmark"]
    for r in results:
        header += [c for c in r.columns if c not in header]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        for r in results:
            for row in r.rows:
                writer.writerow({"benchmark": r.name, **dict(zip(r.columns, row))})


def write_chart(path: Path, results: Iterable[BenchResult]) -> list[str]:
    """A PNG of every ratio column per case (grouped bars, one panel per benchmark).

    Returns the names of the benchmarks that had something to plot.
    """
    matplotlib = require("matplotlib", "ember-tools[chart]", "--chart")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(r, r.ratio_columns()) for r in results]
    panels = [(r, cols) for r, cols in panels if cols and r.rows]
    if not panels:
        raise ValueError("no result has a numeric speed-up/ratio column to chart")
    heights = [max(2.0, 0.35 * len(r.rows) * max(1, len(cols)) + 1.2) for r, cols in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (r, cols) in zip(axes[:, 0], panels):
        labels = r.case_labels()
        bar = 0.8 / len(cols)
        for j, col in enumerate(cols):
            i = r.columns.index(col)
            values = [row[i] if i < len(row) and _is_number(row[i]) else 0.0 for row in r.rows]
            ys = [k + (j - (len(cols) - 1) / 2) * bar for k in range(len(r.rows))]
            ax.barh(ys, values, height=bar, label=col)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"{r.name}: {r.title}", fontsize=9)
        ax.set_xlabel("ratio (1 = parity)")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [r.name for r, _ in panels]
