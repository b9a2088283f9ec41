"""`ember bench opinfo`: PyTorch's OpInfo catalogue through ember and Inductor, vs eager.

Per variant (float32, float32_grad, float32_noncontig, float32_channels_last,
float32_transposed, float32_expanded, bfloat16, int64) and backend: how many ops pass, give
a wrong result, raise, or do not apply (skip), each op's CPU samples compiled together
(``ember.tools.bench.opinfo_runner.check_op``; ember runs in its default, non-strict mode).

Defaults: backends ``ember,inductor``, variant ``float32``, every op of ``op_db``, the first
8 samples of each (Inductor compiles slowly; ``--max-samples 0`` takes them all).
``--quick``: ember only, two ops, two samples (seconds, for CI). ``EMBER_BENCH_OPINFO_LOG=PATH``
appends every op's result as a JSON line while it runs (long runs can be watched).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter

from ember.tools.bench.harness import BenchResult, _report

DEFAULT_MAX_SAMPLES = 8
STATUSES = ("pass", "wrong", "error", "skip")


def _split(v: str | None, default: list[str]) -> list[str]:
    return [s.strip() for s in v.split(",") if s.strip()] if v else default


def run(quick: bool = False, backends: str | None = None, variants: str | None = None,
        ops: str | None = None, max_samples: int | None = None) -> BenchResult:
    from ember.tools.bench import opinfo_runner as opinfo

    backends_ = _split(backends or os.environ.get("EMBER_BENCH_BACKENDS"),
                       ["ember"] if quick else ["ember", "inductor"])
    backends_ = [b for b in backends_ if b != "eager"]  # eager is the reference
    variants_ = _split(variants, ["float32"])
    unknown = sorted(set(variants_) - set(opinfo.VARIANTS))
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; "
                         f"known: {', '.join(opinfo.VARIANTS)}")
    names = _split(ops, ["abs", "add"] if quick else [])
    op_list = opinfo.find_ops(names or None)
    cap = (2 if quick else DEFAULT_MAX_SAMPLES) if max_samples is None else max_samples
    cap = None if cap == 0 else int(cap)

    log = os.environ.get("EMBER_BENCH_OPINFO_LOG")  # one JSON line per op and backend
    counts = {(v, b): Counter() for v in variants_ for b in backends_}
    eager_only = Counter()
    failures: dict[tuple, list[str]] = {k: [] for k in counts}
    seconds = Counter()
    by_op: dict[tuple, str] = {}
    for v in variants_:
        for i, op in enumerate(op_list):
            for b in backends_:
                _report(f"{v} {b} {i + 1}/{len(op_list)} {opinfo.op_name(op)}")
                t0 = time.perf_counter()
                r = opinfo.check_op(op, v, b, max_samples=cap)
                seconds[(v, b)] += time.perf_counter() - t0
                counts[(v, b)][r.status] += 1
                if log:
                    with open(log, "a") as f:
                        f.write(json.dumps({"backend": b, **dataclasses.asdict(r)}) + "\n")
                by_op[(v, b, r.op)] = r.status
                if r.status == "pass" and r.graphs == 0:
                    eager_only[(v, b)] += 1
                if r.status in ("wrong", "error"):
                    failures[(v, b)].append(f"{r.op} ({r.status}: {r.detail[:120]})")
    columns = ["variant", "backend", "ops", *STATUSES, "pass, no graph", "pass ratio",
               "time s"]
    rows = []
    for v in variants_:
        for b in backends_:
            c = counts[(v, b)]
            ran = c["pass"] + c["wrong"] + c["error"]
            rows.append([v, b, len(op_list), *(c[s] for s in STATUSES), eager_only[(v, b)],
                         round(c["pass"] / ran, 4) if ran else float("nan"),
                         round(seconds[(v, b)], 1)])
    notes = [f"{len(op_list)} OpInfos of op_db, CPU samples, at most "
             f"{cap if cap else 'all'} samples per op; ember in its default (non-strict) mode; "
             "'pass, no graph': Dynamo ran the op in eager (graph break), counted as pass; "
             "pass ratio: pass / (pass + wrong + error)"]
    notes.append(f"CPU flags: {_cpu_flags()}")
    for (v, b), fails in failures.items():
        if fails:
            notes.append(f"{b} {v} failures: " + "; ".join(fails))
    if "ember" in backends_:
        for other in (b for b in backends_ if b != "ember"):
            for v in variants_:
                worse = [op for (vv, bb, op), s in by_op.items() if vv == v and bb == "ember"
                         and s in ("wrong", "error") and by_op.get((v, other, op)) == "pass"]
                notes.append(f"{v}: ops {other} passes and ember fails: "
                             + (", ".join(worse) or "none"))
    return BenchResult("opinfo", "OpInfo catalogue: compiled vs eager (pass / wrong / error)",
                       columns, rows, notes)


def _cpu_flags() -> str:
    """The SIMD flags the C++ kernels may use (-march=native) and the selected ISA level."""
    try:
        from ember.core.compiler.runtime import isa

        flags, level = isa.cpu_flags(), isa.selected()
    except Exception:  # an older core without runtime/isa.py
        return "unknown"
    simd = sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "sse4")))
    return f"{' '.join(simd) or 'none'} (ember ISA level: {level})"
