"""`ember bench attention`: Ember's SDPA vs torch's SDPA vs the math path on CPU.

Speed: medians of round-robin timings in one process (ratios are the targets). Peak extra
memory: each candidate runs once in a fresh subprocess (after a tiny warm-up call) and reports
the growth of its peak resident set size (Linux VmHWM, reset just before the call) over the
resident set size before the call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from ember.tools.bench.harness import BenchResult, compare_timings

HEADS = 4
HEAD_DIM = 64
CANDIDATES = ("ember", "torch_sdpa", "math")


def _attention(name: str):
    import torch.nn.functional as F

    from ember.core.nn import scaled_dot_product_attention

    if name == "ember":
        return scaled_dot_product_attention
    if name == "torch_sdpa":
        return F.scaled_dot_product_attention

    def math(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v)

    return math


def _inputs(length: int, heads: int, backward: bool):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, heads, length, HEAD_DIM, generator=g).requires_grad_(backward)
            for _ in range(3)]


def _call(name: str, length: int, heads: int, backward: bool):
    fn = _attention(name)
    q, k, v = _inputs(length, heads, backward)
    grad = torch.ones(1, heads, length, HEAD_DIM) if backward else None

    def run():
        out = fn(q, k, v)
        if backward:
            for t in (q, k, v):
                t.grad = None
            out.backward(grad)
        return out

    return run


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _probe(name: str, length: int, heads: int, backward: bool) -> None:
    """Subprocess entry: print the peak resident-set growth (bytes) of one call.

    Linux: the VmHWM high-water mark is reset (``/proc/self/clear_refs``) after a warm-up, so
    the growth is measured from the level just before the call; ru_maxrss is not usable here
    because a child inherits its parent's peak at fork.
    """
    import resource

    _call(name, 64, heads, backward)()  # one-time costs (imports, worker threads) first
    run = _call(name, length, heads, backward)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status_kib("VmRSS")
    except OSError:
        before = _status_kib("VmHWM")
    if before is None:  # no /proc: the process-wide peak is the best available
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    else:
        run()
        after = _status_kib("VmHWM")
    print(json.dumps({"peak_extra_bytes": max(0, after - before) * 1024}))


def _peak_extra(name: str, length: int, heads: int, backward: bool) -> float | None:
    code = ("from ember.tools.bench.attention import _probe; "
            f"_probe({name!r}, {length}, {heads}, {backward})")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=900, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])["peak_extra_bytes"]
    except (subprocess.SubprocessError, ValueError, IndexError, KeyError):
        return None


def run(quick: bool = False) -> BenchResult:
    """Forward and forward+backward at L = S in {512, 2048, 8192} (quick: tiny sizes)."""
    lengths = (64, 128) if quick else (512, 2048, 8192)
    heads = 2 if quick else HEADS
    result = BenchResult(
        name="attention",
        title=(f"scaled_dot_product_attention on CPU, float32, batch 1, {heads} heads, "
               f"head dim {HEAD_DIM}, L = S"),
        columns=["L=S", "pass", "candidate", "ms", "speed vs torch SDPA",
                 "peak extra MiB", "memory vs math"])
    for length in lengths:
        for backward in (False, True):
            calls = {name: _call(name, length, heads, backward) for name in CANDIDATES}
            big = length >= 8192
            times = compare_timings(calls, rounds=3 if (quick or big) else 5,
                                    min_seconds=0.001 if quick else 0.05)
            del calls
            peaks = {name: None if quick else _peak_extra(name, length, heads, backward)
                     for name in CANDIDATES}
            for name in CANDIDATES:
                peak, math_peak = peaks[name], peaks["math"]
                result.rows.append([
                    length, "fwd+bwd" if backward else "fwd", name, times[name] * 1e3,
                    times["torch_sdpa"] / times[name],
                    "-" if peak is None else peak / 2**20,
                    "-" if peak is None or not math_peak else peak / math_peak])
    result.notes += [
        "ember = ember.core.nn.functional.scaled_dot_product_attention (native CPU kernel: "
        "C++/OpenMP online-softmax tiles, matrix products through torch's BLAS); "
        "torch_sdpa = torch.nn.functional.scaled_dot_product_attention (its CPU "
        "flash kernel); math = torch's SDPBackend.MATH (materialises L x S).",
        "speed vs torch SDPA > 1 means faster than torch; targets at L = 8192: >= 0.8 speed, "
        "<= 0.1 memory vs math.",
        "peak extra memory: growth of the peak resident set size (VmHWM, reset before the "
        "call) during one call, each candidate in a fresh subprocess after a warm-up call"
        + (" (skipped in --quick)" if quick else "") + ".",
        "GPU rows: `ember bench attention-gpu` (Triton FlashAttention-2 vs torch's flash "
        "backend, TFLOP/s).",
    ]
    if hasattr(os, "getloadavg"):
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        result.notes.append(f"load average (1/5/15 min) at the end of the run: {load}.")
    return result
