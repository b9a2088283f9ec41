"""`ember bench arrow`: ember.arrow DataFrame operations against pandas and polars.

One process, one frame per library built from the same Arrow table, candidates timed
round-robin. Cases: filter + arithmetic, groupby-agg, string lower + split, to_tensor, and
a feature-engineering expression over four columns (one with nulls) evaluated three ways:
the default NumPy evaluator, torch op by op, and compiled by ember.core.compile.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import torch

import ember.arrow as ea
from ember.arrow import functional as F
from ember.arrow import lazy
from ember.tools.bench.harness import BenchResult, compare_timings

_WORDS = ["Alpha", "beta", "GAMMA", "Delta", "epsilon", "Zeta", "eta", "Theta", "iota", "KAPPA"]


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    pool = pa.array([f"{_WORDS[i % 10]} {_WORDS[(i * 7) % 10]}_{i}" for i in range(1000)])
    return pa.table({
        "a": rng.random(n),
        "b": rng.normal(size=n),
        "k": rng.integers(0, 1000, n),
        "s": pool.take(pa.array(rng.integers(0, 1000, n))),
    })


def _feature_table(n: int, seed: int = 1) -> pa.Table:
    """Order lines: float32 prices, int32 quantities, a discount that is null on 5% of rows,
    float32 customer ages."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "price": rng.lognormal(3, 1, n).astype(np.float32),
        "qty": rng.integers(1, 20, n, dtype=np.int32),
        "discount": pa.array(rng.uniform(0, 0.5, n).astype(np.float32),
                             mask=rng.random(n) < 0.05),
        "age": rng.uniform(18, 80, n).astype(np.float32),
    })


def _features(price, qty, discount, age, where):
    """A preprocessing feature: log-scaled net revenue, boosted for young big spenders,
    clipped. Written once for ember columns (F.where) and tensors (torch.where)."""
    net = price * qty * (1 - discount)
    scaled = ((net + 1).log() - 3) / 2
    young_spender = (age < 25) & (net > 50)
    return where(young_spender, scaled * 1.5, scaled).clip(-3, 3)


def _one_thread(fn):
    """``fn()`` with torch (and the compiled kernels' OpenMP) on one thread, as NumPy runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn()
    finally:
        torch.set_num_threads(threads)


def _pandas_features(p: pd.DataFrame):
    net = p.price * p.qty * (1 - p.discount)
    scaled = (np.log(net + 1) - 3) / 2
    young_spender = (p.age < 25) & (net > 50)
    return (scaled * 1.5).where(young_spender, scaled).clip(-3, 3)


def _polars_features(p: pl.DataFrame):
    c = pl.col
    net = c("price") * c("qty") * (1 - c("discount"))
    scaled = ((net + 1).log() - 3) / 2
    young_spender = (c("age") < 25) & (net > 50)
    return p.select(pl.when(young_spender).then(scaled * 1.5).otherwise(scaled).clip(-3, 3))


def run(quick: bool = False) -> BenchResult:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    n = 100_000 if quick else 10_000_000
    rounds = 3 if quick else 5
    table = _table(n)
    df = ea.from_arrow(table)
    num = df.select("a", "b", "k")
    pdf = table.to_pandas()
    pnum = pdf[["a", "b", "k"]]
    pldf = pl.from_arrow(table)
    plnum = pldf.select("a", "b", "k")

    result = BenchResult(
        "arrow", f"DataFrame ops on {n:,} rows, ms per call (median of {rounds} round-robin "
        "rounds)",
        ["case", "ember", "pandas", "polars", "pandas/ember (x faster)",
         "ember/polars (time ratio)", "targets"])

    def ember_filter():
        f = num[num.a > 0.5]
        return (f.a * 2 + f.b).to_arrow()

    def pandas_filter():
        f = pnum[pnum.a > 0.5]
        return f.a * 2 + f.b

    def polars_filter():
        return plnum.filter(pl.col("a") > 0.5).select(pl.col("a") * 2 + pl.col("b"))

    def ember_groupby():
        return num.groupby("k", sort=True).agg({"a": "sum", "b": "mean"})

    def pandas_groupby():
        return pnum.groupby("k", sort=True).agg({"a": "sum", "b": "mean"})

    def polars_groupby():
        return plnum.group_by("k").agg(pl.col("a").sum(), pl.col("b").mean()).sort("k")

    def ember_strings():
        return df.s.str.lower().str.split(" ").to_arrow()

    def pandas_strings():
        return pdf.s.str.lower().str.split(" ")

    def polars_strings():
        return pldf.select(pl.col("s").str.to_lowercase().str.split(" "))

    def ember_tensor():
        return num.to_tensor()

    def pandas_tensor():
        with warnings.catch_warnings():  # pandas' copy-on-write arrays are read-only
            warnings.simplefilter("ignore", UserWarning)
            return {c: torch.from_numpy(pnum[c].to_numpy()) for c in pnum.columns}

    def polars_tensor():
        return plnum.to_torch("dict")

    cases = [
        ("filter + arithmetic", ember_filter, pandas_filter, polars_filter, ">= 3x pandas"),
        ("groupby-agg (sum, mean)", ember_groupby, pandas_groupby, polars_groupby,
         "<= 1.5x polars"),
        ("string lower + split", ember_strings, pandas_strings, polars_strings,
         ">= 3x pandas"),
        ("to_tensor (3 numeric columns)", ember_tensor, pandas_tensor, polars_tensor,
         "<= 1.5x polars"),
    ]
    for name, ours, pd_fn, pl_fn, target in cases:
        t = compare_timings({"ember": ours, "pandas": pd_fn, "polars": pl_fn}, rounds=rounds,
                            min_seconds=0.02 if quick else 0.0)
        result.rows.append([name, t["ember"] * 1e3, t["pandas"] * 1e3, t["polars"] * 1e3,
                            t["pandas"] / t["ember"], t["ember"] / t["polars"], target])

    ftable = _feature_table(n)
    fdf, fpd, fpl = ea.from_arrow(ftable), ftable.to_pandas(), pl.from_arrow(ftable)
    fcols = [fdf[c] for c in ftable.column_names]
    ftensors = [lazy.values_tensor(col.to_arrow()) for col in fcols]
    cands = {
        "eager": lambda: _features(*fcols, F.where).to_arrow(),
        "torch": lambda: _features(*ftensors, torch.where),
        "pandas": lambda: _pandas_features(fpd),
        "polars": lambda: _polars_features(fpl),
    }
    if lazy.compiler_available():
        _features(*fcols, F.where).compile().to_arrow()  # compile once, outside the timing
        cands["compiled"] = lambda: _features(*fcols, F.where).compile().to_arrow()
        cands["compiled1"] = lambda: _one_thread(
            lambda: _features(*fcols, F.where).compile().to_arrow())
    t = compare_timings(cands, rounds=rounds, min_seconds=0.02 if quick else 0.0)
    for name, key in [("features, eager (NumPy, reused buffers; the default)", "eager"),
                      ("features, torch op by op (uncompiled)", "torch"),
                      ("features, compiled (ember.core.compile)", "compiled"),
                      ("features, compiled, 1 thread", "compiled1")]:
        if key not in t:
            continue
        target = "-" if key == "eager" or key == "torch" else (
            f">= 2x uncompiled: {t['eager'] / t[key]:.2f}x NumPy eager, "
            f"{t['torch'] / t[key]:.2f}x torch op by op")
        result.rows.append([name, t[key] * 1e3, t["pandas"] * 1e3, t["polars"] * 1e3,
                            t["pandas"] / t[key], t[key] / t["polars"], target])
    if "compiled" not in t:
        result.notes.append("ember.core.compile unavailable: compiled expressions not measured")
    result.notes.append(
        "features: net = price * qty * (1 - discount); scaled = (log(net + 1) - 3) / 2; "
        "where((age < 25) & (net > 50), scaled * 1.5, scaled).clip(-3, 3) - float32 and int32 "
        "columns, discount null on 5% of rows (null in, null out). Compiled: one fused C++ "
        "kernel (net and scaled computed once) over zero-copy views of the Arrow buffers, "
        "run in cache-sized row chunks on torch's threads (or on 1 thread, as NumPy); "
        "eager: one NumPy ufunc per step, single-threaded, reusing temporaries; torch op by "
        "op: the same steps on the value tensors without compiling (no null handling)")
    result.notes.append("groupby: 1,000 keys, sorted output in all three (polars sorts after)")
    result.notes.append(f"1-minute load average when the run started: {load:.1f} on "
                        f"{os.cpu_count()} cores (other jobs share the machine)")
    result.notes.append(f"pandas {pd.__version__} (default string dtype), polars "
                        f"{pl.__version__}, pyarrow {pa.__version__}; torch threads "
                        f"{torch.get_num_threads()}")
    return result
