"""max-autotune's search: time candidate configurations on the real inputs, keep the fastest.

The winner is written to ``$EMBER_CACHE_DIR/autotune/<key>.json``, so a second process (or a
recompile) reuses it without timing anything. Code generators (C++ and Triton) describe their
knobs as plain dicts and call ``tune``; this module knows nothing about either.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence

from ember.core.compiler.runtime import cache
from ember.core.logs import get_logger

log = get_logger("autotune")

# Process-wide counters (tests read them): searches run, cache hits, candidates timed.
stats: Counter = Counter()


def _path(key: str):
    d = cache.cache_dir() / "autotune"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{key}.json"


def _load(key: str, candidates: Sequence[dict]) -> dict | None:
    try:
        with open(_path(key)) as f:
            winner = json.load(f)["winner"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or corrupt entry: tune again
    return winner if winner in candidates else None


def _store(key: str, winner: dict, timings: list) -> None:
    path = _path(key)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump({"winner": winner, "timings": timings}, f, indent=1)
    os.replace(tmp, path)


def timeit(fn: Callable[[], object], *, warmup: int = 1, reps: int = 5,
           sync: Callable[[], None] | None = None) -> float:
    """Median seconds of ``fn()`` over ``reps`` runs, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency of ember-core; keep working without it anyway
        return None
    # disable=None: a bar on terminals only, so CI logs get no carriage-return noise
    return tqdm(total=total, desc=desc, unit="config", disable=None, leave=False)


def tune(key_parts: Sequence[str], candidates: Sequence[dict],
         measure: Callable[[dict], float], *, desc: str = "autotune") -> dict:
    """The fastest of ``candidates`` by ``measure(config) -> seconds``, cached on disk.

    ``key_parts`` must identify the kernel and the input shapes/dtypes/device (a kernel's source
    text and its size arguments do). A candidate whose ``measure`` raises is skipped; if all
    fail the first candidate is returned and nothing is cached.
    """
    if not candidates:
        raise ValueError("tune() needs at least one candidate configuration")
    candidates = [dict(c) for c in candidates]
    key = cache.key("autotune", *key_parts, json.dumps(candidates, sort_keys=True))
    hit = _load(key, candidates)
    if hit is not None:
        stats["cache_hits"] += 1
        log.debug("%s: cached winner %s", desc, hit)
        return hit
    stats["searches"] += 1
    bar = _progress(len(candidates), desc)
    timings = []
    for cfg in candidates:
        try:
            t = float(measure(cfg))
        except Exception as e:  # a config that does not build or run is not a winner
            log.debug("%s: %s failed: %s: %s", desc, cfg, type(e).__name__, e)
            t = math.inf
        stats["timed"] += 1
        timings.append([cfg, t])
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    best_cfg, best_t = min(timings, key=lambda ct: ct[1])
    if math.isinf(best_t):
        log.warning("%s: every candidate failed; using %s", desc, candidates[0])
        return candidates[0]
    log.info("%s: %s wins (%.1f us of %d candidates)", desc, best_cfg, best_t * 1e6,
             len(candidates))
    _store(key, best_cfg, [[c, None if math.isinf(t) else t] for c, t in timings])
    return best_cfg
