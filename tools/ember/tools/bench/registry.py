"""Benchmark registry: name -> "module:function", imported lazily."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ember.tools.bench.harness import BenchResult

# name -> (target "module:function", one-line description)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "io": ("ember.tools.bench.io:run", "image decode vs Pillow: single, batched, reduced-size"),
    "compile": ("ember.tools.bench.compile:run", "ember.core.compile vs eager and Inductor"),
    "attention": ("ember.tools.bench.attention:run", "scaled_dot_product_attention vs torch"),
    "transforms": ("ember.tools.bench.transforms:run", "batched transforms vs per-sample Pillow"),
    "audio": ("ember.tools.bench.audio:run", "MelSpectrogram, Resample, load vs librosa"),
    "data": ("ember.tools.bench.data:run", "DataLoader2 vs torch DataLoader, torchdata.nodes"),
    "arrow": ("ember.tools.bench.arrow:run", "DataFrame ops vs pandas and polars"),
}


def register(name: str, target: str, description: str) -> None:
    """Add a benchmark; ``target`` is ``"module:function"`` taking ``quick: bool``."""
    if name in BENCHMARKS and BENCHMARKS[name][0] != target:
        raise ValueError(f"benchmark {name!r} is already registered to {BENCHMARKS[name][0]}")
    BENCHMARKS[name] = (target, description)


def _resolve(name: str) -> Callable[..., BenchResult]:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    module, _, func = BENCHMARKS[name][0].partition(":")
    return getattr(importlib.import_module(module), func)


def run(name: str, quick: bool = False, **options) -> BenchResult:
    """Run one registered benchmark and return its result table."""
    return _resolve(name)(quick=quick, **options)
