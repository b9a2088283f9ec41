"""`ember bench compile`: ember.core.compile vs eager and Inductor on the same cases.

Per case and backend: accuracy against eager, median time (round-robin), speedup over
eager, cold compile (fresh cache dirs, dynamo reset) and warm compile (disk caches kept).
Backends: ``EMBER_BENCH_BACKENDS`` or ``run(backends=...)``, default ``eager,inductor,ember``.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ember.tools.bench.harness import BenchResult, compare_timings


def _pointwise(n):
    x, y = torch.randn(n, 1024), torch.randn(1024)
    return (lambda x, y: torch.sigmoid(x * 2 + y) * x - 0.5), (x, y)


def _swiglu(n):
    a, b = torch.randn(n, 1024), torch.randn(n, 1024)
    return (lambda a, b: F.silu(a) * b), (a, b)


def _uint8_norm(n):
    img = torch.randint(0, 256, (n, 3, 224, 224), dtype=torch.uint8)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (lambda img, m, s: (img.float() / 255 - m) / s), (img, mean, std)


def _layer_norm(n):
    x, w, b = torch.randn(n, 1024), torch.randn(1024), torch.randn(1024)
    return (lambda x, w, b: F.layer_norm(x, (1024,), w, b)), (x, w, b)


def _layer_norm_gelu(n):
    x, w, b = torch.randn(n, 1024), torch.randn(1024), torch.randn(1024)
    return (lambda x, w, b: F.gelu(F.layer_norm(x, (1024,), w, b))), (x, w, b)


def _softmax(n):
    return (lambda x: torch.softmax(x, -1)), (torch.randn(n, 1024),)


def _rmsnorm(n):
    x, w = torch.randn(n, 1024), torch.randn(1024)
    return (lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w), (x, w)


def _cross_entropy(n):
    return (lambda x, y: F.cross_entropy(x, y)), (torch.randn(n, 1000),
                                                  torch.randint(0, 1000, (n,)))


def _batch_norm(n):
    x = torch.randn(n, 64, 32, 32)
    rm, rv, w, b = torch.randn(64), torch.rand(64) + 0.5, torch.randn(64), torch.randn(64)
    return (lambda x, rm, rv, w, b: F.relu(F.batch_norm(x, rm, rv, w, b, False))), \
        (x, rm, rv, w, b)


def _attention_scores(n):
    q, k, v = (torch.randn(n, 8, 256, 64) for _ in range(3))
    return (lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) * 0.125, -1) @ v), (q, k, v)


def _mlp(n):
    m = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).eval()
    return m, (torch.randn(n, 512),)


def _cnn(n):
    m = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()
    return m, (torch.randn(n, 3, 64, 64),)


class _Block(nn.Module):
    """A pre-LayerNorm transformer block (GPT style) written with plain modules.

    nn.TransformerEncoderLayer is not used: in eval mode eager runs it as one fused native
    kernel (its "fast path") that no graph compiler can see into.
    """

    def __init__(self, d: int = 256, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def _transformer(n):
    return _Block().eval(), (torch.randn(n, 128, 256),)


class _TrainStep:
    """One forward+backward of an MLP with cross-entropy (gradients are the outputs)."""

    def __init__(self, n):
        self.model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.LayerNorm(512),
                                   nn.Linear(512, 10))
        self.x, self.y = torch.randn(n, 256), torch.randint(0, 10, (n,))

    def loss(self, x, y):
        return F.cross_entropy(self.model(x), y)


# name -> (builder(size) -> (fn, args), full size, quick size)
CASES: dict[str, tuple[Callable, int, int]] = {
    "pointwise chain [N,1024]": (_pointwise, 4096, 64),
    "silu(a)*b [N,1024]": (_swiglu, 4096, 64),
    "uint8 normalise [N,3,224,224]": (_uint8_norm, 16, 1),
    "layer_norm [N,1024]": (_layer_norm, 4096, 64),
    "layer_norm+gelu [N,1024]": (_layer_norm_gelu, 4096, 64),
    "softmax [N,1024]": (_softmax, 4096, 64),
    "rmsnorm [N,1024]": (_rmsnorm, 4096, 64),
    "cross_entropy [N,1000]": (_cross_entropy, 4096, 64),
    "batch_norm+relu eval [N,64,32,32]": (_batch_norm, 32, 2),
    "attention scores [N,8,256,64]": (_attention_scores, 4, 1),
    "MLP 512-2048-512 [N]": (_mlp, 256, 8),
    "CNN conv-bn-relu x2 [N,3,64,64]": (_cnn, 8, 1),
    "transformer block [N,128,256]": (_transformer, 8, 1),
    "training step MLP+CE [N]": (None, 512, 16),
}


@contextlib.contextmanager
def _fresh_caches():
    """Empty Ember and Inductor caches, on disk and in memory, and a reset dynamo."""
    from ember.core.compiler.runtime import build

    with tempfile.TemporaryDirectory() as d:
        old = {k: os.environ.get(k) for k in ("EMBER_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}
        os.environ["EMBER_CACHE_DIR"] = os.path.join(d, "ember")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(d, "inductor")
        build._loaded.clear()
        try:
            from torch._inductor.utils import fresh_cache
        except ImportError:  # older torch
            from torch._inductor.utils import fresh_inductor_cache as fresh_cache
        try:
            with fresh_cache(dir=d):
                torch._dynamo.reset()
                yield
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            torch._dynamo.reset()


def _compiled(backend: str, fn):
    if backend == "eager":
        return fn
    if backend == "ember":
        import ember.core

        return ember.core.compile(fn)
    return torch.compile(fn, backend=backend)


def _close(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return all(_close(x, y) for x, y in zip(a, b))
    return torch.allclose(a, b, atol=1e-3, rtol=1e-3, equal_nan=True)


def _case(name: str, size: int, backends: list[str]):
    builder = CASES[name][0]
    if builder is None:
        step = _TrainStep(size)

        def make(backend):
            loss = _compiled(backend, step.loss)

            def run():
                step.model.zero_grad(set_to_none=True)
                out = loss(step.x, step.y)
                out.backward()
                return [out.detach()] + [p.grad for p in step.model.parameters()]
            return run
    else:
        fn, args = builder(size)

        def make(backend):
            compiled = _compiled(backend, fn)
            return lambda: compiled(*args)
    results = {}
    with torch.no_grad() if builder is not None else contextlib.nullcontext():
        ref = make("eager")()
        runners = {}
        for b in backends:
            with _fresh_caches():
                run = make(b)
                t0 = time.perf_counter()
                out = run()
                cold = time.perf_counter() - t0
                torch._dynamo.reset()
                run = make(b)
                t0 = time.perf_counter()
                run()
                warm = time.perf_counter() - t0
            results[b] = {"ok": _close(out, ref), "cold": cold, "warm": warm}
            runners[b] = run
        # 15 rounds: this shared machine moves single rounds by 2x, 7 left the median 10% loose
        times = compare_timings(runners, rounds=3 if size == CASES[name][2] else 15,
                                min_seconds=0.01 if size == CASES[name][2] else 0.05)
    for b in backends:
        results[b]["time"] = times[b]
        # compile time = first call minus one steady-state call
        for key in ("cold", "warm"):
            results[b][key] = 0.0 if b == "eager" else max(0.0, results[b][key] - times[b])
    return results


# per-call overhead: tiny graphs where the time is the call path, not the arithmetic
OVERHEAD_CASES: dict[str, tuple[Callable, tuple]] = {
    "x*2+1 [16] (1 kernel)": (lambda x: x * 2 + 1, (16,)),
    "softmax(x*2+1)+x.sum(0), x.amax(-1) [4,4] (3 kernels)":
        (lambda x: (torch.softmax(x * 2 + 1, -1) + x.sum(0), x.amax(-1)), (4, 4)),
}


def _overhead(backends: list[str], quick: bool) -> list[str]:
    """Microseconds per call of tiny graphs: eager, each backend's default and
    reduce-overhead mode (Inductor on CPU has no CUDA graphs: its mode changes nothing)."""
    import ember.core

    modes = ["default", "reduce-overhead"]
    notes = []
    for name, (fn, shape) in OVERHEAD_CASES.items():
        x = torch.randn(shape)
        runners = {"eager": fn}
        for b in backends:
            for mode in modes:
                if b == "ember":
                    runners[f"{b} {mode}"] = ember.core.compile(fn, mode=mode)
                elif b != "eager":
                    runners[f"{b} {mode}"] = torch.compile(fn, backend=b, mode=mode)
        calls = {}
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the call path, not OpenMP fork/join, is what is measured
        try:
            with torch.no_grad():
                for label, f in runners.items():
                    f(x)
                    calls[label] = (lambda f=f, x=x: f(x))
                times = compare_timings(calls, rounds=5 if quick else 9,
                                        min_seconds=0.005 if quick else 0.05)
        finally:
            torch.set_num_threads(threads)
            torch._dynamo.reset()
        notes.append(f"per-call overhead, {name}: " + ", ".join(
            f"{label} {t * 1e6:.1f} us" for label, t in times.items()))
    return notes


def _graph_count() -> int:
    from ember.core.compiler.pipeline import stats

    return stats["graphs_compiled"] + stats["graphs_fallback"]


def _warm_up_dynamo() -> None:
    """Pay dynamo's and AOTAutograd's one-time process costs before timing any backend."""
    torch._dynamo.reset()
    torch.compile(lambda x: x * 2 + 1, backend="aot_eager")(torch.randn(8))
    torch._dynamo.reset()


def run(quick: bool = False, backends: str | None = None) -> BenchResult:
    default = "eager,ember" if quick else "eager,inductor,ember"  # quick: seconds, for CI
    backends = (backends or os.environ.get("EMBER_BENCH_BACKENDS") or default).split(",")
    if "eager" not in backends:
        backends.insert(0, "eager")
    names = list(CASES)[:2] if quick else list(CASES)
    columns = ["case"] + [f"{b} {what}" for b in backends if b != "eager"
                          for what in ("ok", "speedup", "cold s", "warm s")] + ["eager ms"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows, speedups, colds = [], {b: [] for b in backends}, {b: 0.0 for b in backends}
    graphs = {b: 0 for b in backends}
    _warm_up_dynamo()
    for name in names:
        size = CASES[name][2] if quick else CASES[name][1]
        before = _graph_count()
        res = _case(name, size, backends)
        graphs["ember"] = graphs.get("ember", 0) + (_graph_count() - before) // 2
        row = [name]
        for b in backends:
            if b == "eager":
                continue
            sp = res["eager"]["time"] / res[b]["time"]
            speedups[b].append(sp)
            colds[b] += res[b]["cold"]
            row += ["yes" if res[b]["ok"] else "NO", sp, res[b]["cold"], res[b]["warm"]]
        rows.append(row + [res["eager"]["time"] * 1e3])
    notes = []
    for b in backends:
        if b == "eager":
            continue
        geo = math.exp(statistics.fmean(math.log(s) for s in speedups[b]))
        notes.append(f"{b}: geomean speedup over eager {geo:.2f}x, min {min(speedups[b]):.2f}x, "
                     f"total cold compile {colds[b]:.1f} s")
    if "ember" in backends and graphs["ember"]:
        warm = sum(r[columns.index("ember warm s")] for r in rows)
        per_graph = warm / graphs["ember"]
        notes.append(f"ember: {graphs['ember']} graphs, warm compile {per_graph:.2f} s "
                     f"per graph")
    notes += _overhead(backends, quick)
    notes.append("per-call overhead: one thread, medians of the same round-robin; ember "
                 "reduce-overhead runs each run of kernels through one native entry; "
                 "Inductor's reduce-overhead means CUDA graphs, which it skips for CPU tensors")
    notes.append(f"torch threads: {torch.get_num_threads()}; 1-min load average at start: "
                 f"{load:.1f} (other jobs share this machine: single timings move by several x, "
                 f"ratios of the same round-robin run are what to compare)")
    notes.append("speedup = eager median / backend median, timed round-robin in one process; "
                 "cold = first call with empty caches (dynamo reset, fresh EMBER_CACHE_DIR and "
                 "TORCHINDUCTOR_CACHE_DIR) minus one steady call; warm = the same after a dynamo "
                 "reset with disk caches kept")
    return BenchResult("compile", "ember.core.compile vs eager and Inductor (CPU, float32)",
                       columns, rows, notes)
