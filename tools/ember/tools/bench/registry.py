"""Benchmark registry: name -> "module:function", imported lazily."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator

from ember.core.extras import needs_extra
from ember.tools.bench import harness
from ember.tools.bench.harness import BenchResult

# name -> (target "module:function", one-line description)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "io": ("ember.tools.bench.io:run", "image decode vs Pillow: single, batched, reduced-size"),
    "compile": ("ember.tools.bench.compile:run", "ember.core.compile vs eager and Inductor"),
    "attention": ("ember.tools.bench.attention:run", "scaled_dot_product_attention vs torch"),
    "attention-gpu": ("ember.tools.bench.attention_gpu:run",
                      "Triton FlashAttention-2 vs torch's flash backend on CUDA (TFLOP/s)"),
    "transforms": ("ember.tools.bench.transforms:run", "batched transforms vs per-sample Pillow"),
    "audio": ("ember.tools.bench.audio:run", "MelSpectrogram, Resample, load vs librosa; "
              "lfilter, fbank vs scipy/torchaudio; Wav2Vec2 under compilers"),
    "data": ("ember.tools.bench.data:run", "DataLoader2 vs torch DataLoader, torchdata.nodes"),
    "arrow": ("ember.tools.bench.arrow:run", "DataFrame ops vs pandas and polars"),
    "zoo": ("ember.tools.bench.zoo:run",
            "model zoo under eager, inductor and ember, float32 and AMP, inference and training"),
    "opinfo": ("ember.tools.bench.opinfo:run",
               "PyTorch's OpInfo catalogue through ember and Inductor: pass / wrong / error"),
    "optim": ("ember.tools.bench.optim:run",
              "compiled AdamW step vs eager foreach, fused and Inductor"),
    "aot": ("ember.tools.bench.aot:run",
            "ahead-of-time packages vs torch's AOTInductor and eager on CPU"),
    "conv": ("ember.tools.bench.convolution:run",
             "3x3 convolutions: ATen and oneDNN's direct vs Ember's Winograd F(2x2, 3x3)"),
    "detection": ("ember.tools.bench.detection:run",
                  "Faster R-CNN inference end to end: eager vs Inductor vs ember, graph breaks"),
}

# The libraries benchmarks compare against: the extra ember-tools[bench] installs them.
BENCH_PEERS = ("librosa", "pandas", "polars", "torchdata", "transformers")


def register(name: str, target: str, description: str) -> None:
    """Add a benchmark; ``target`` is ``"module:function"`` taking ``quick: bool``."""
    if name in BENCHMARKS and BENCHMARKS[name][0] != target:
        raise ValueError(f"benchmark {name!r} is already registered to {BENCHMARKS[name][0]}")
    BENCHMARKS[name] = (target, description)


def _resolve(name: str) -> Callable[..., BenchResult]:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    module, _, func = BENCHMARKS[name][0].partition(":")
    with needs_extra("ember-tools[bench]", BENCH_PEERS, f"ember bench {name}"):
        return getattr(importlib.import_module(module), func)


def options_of(name: str) -> set[str]:
    """The keyword options (besides ``quick``) that benchmark ``name`` accepts."""
    params = inspect.signature(_resolve(name)).parameters
    return {p for p in params if p != "quick"}


def run(name: str, quick: bool = False, **options) -> BenchResult:
    """Run one registered benchmark and return its result table."""
    unknown = sorted(set(options) - options_of(name))
    if unknown:
        raise ValueError(f"benchmark {name!r} takes no option {', '.join(unknown)}")
    bench = _resolve(name)
    with needs_extra("ember-tools[bench]", BENCH_PEERS, f"ember bench {name}"):
        return bench(quick=quick, **options)


def run_many(names: list[str], quick: bool = False, progress: bool = True,
             **options) -> Iterator[tuple[str, BenchResult | BaseException]]:
    """Run benchmarks in order under one progress bar; yields (name, result or the error).

    A failing benchmark does not stop the others; its exception is yielded in its place.
    """
    bar = _progress_bar(len(names), enabled=progress)
    with bar, _hook(lambda status: bar.set_postfix_str(status, refresh=True)):
        for name in names:
            bar.set_description(name)
            try:  # with several benchmarks, each gets the options it understands
                own = options if len(names) == 1 else {
                    k: v for k, v in options.items() if k in options_of(name)}
                outcome: BenchResult | BaseException = run(name, quick=quick, **own)
            except Exception as exc:  # reported by the caller, the other benchmarks still run
                outcome = exc
            bar.update(1)
            yield name, outcome


@contextlib.contextmanager
def _hook(fn: Callable[[str], None]):
    harness._progress.append(fn)
    try:
        yield
    finally:
        harness._progress.remove(fn)


def _progress_bar(total: int, enabled: bool):
    from tqdm import tqdm

    # disable=None: tqdm draws only on a terminal, so CI logs get no carriage-return noise
    return tqdm(total=total, unit="bench", file=sys.stderr, disable=None if enabled else True,
                dynamic_ncols=True, leave=False)
