"""A model table (the hf and vision suites) run through the zoo's measurement, model by model.

Both suites share the row layout (model, family, mode, precision, eager ms, per backend ok /
speed-up / compile s, Ember vs Inductor, Ember's graph breaks and eager ops), the per-model
measurement, and the summary lines recomputed from the rows, so that rows kept on disk by
:mod:`ember.tools.bench.zoo_store` from an earlier sitting count like rows measured now.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ember.tools.bench import zoo, zoo_store
from ember.tools.bench.harness import _report


@dataclass
class Entry:
    """One model of a suite: its family, workload builder, and (mode, precision) runs."""

    family: str
    build: Callable[[bool], zoo.Workload]
    cases: list[tuple[str, str]]


def columns(backends) -> list[str]:
    """The suites' table header for ``backends``."""
    out = ["model", "family", "mode", "precision", "eager ms"]
    for b in backends:
        out += [f"{b} ok", f"{b} speedup", f"{b} compile s"]
    if "inductor" in backends and "ember" in backends:
        out.append("ember vs inductor speedup")
    return out + ["ember graph breaks", "ember eager ops"]


def measure(suite: str, name: str, entry: Entry, quick: bool, device: str, rounds: int,
            cols: list[str], tolerance: Callable[[str, str], float]) -> zoo_store.Part:
    """One model's rows: each of its (mode, precision) runs through :func:`zoo._case`."""
    backends = zoo.BACKENDS
    rows, errors = [], []
    passed = dict.fromkeys(backends, 0)
    for mode, precision in entry.cases:
        _report(f"{suite} {name} {mode} {precision}")
        res = zoo._case(entry.build, quick, mode, precision, device, rounds,
                        tol=tolerance(precision, mode))
        eager_t = res["eager"].get("time")
        row = [name, entry.family, mode, precision, eager_t * 1e3 if eager_t else "error"]
        cells, times = zoo.backend_cells(res, backends, eager_t, f"{name} {mode} {precision}",
                                         errors, passed)
        row += cells
        if "ember vs inductor speedup" in cols:
            row.append(times["inductor"] / times["ember"] if len(times) == 2 else "-")
        ember = res.get("ember", {})
        row += [ember.get("graph_breaks", "-"), " ".join(ember.get("eager_ops", [])) or "none"]
        rows.append(row)
    return zoo_store.Part(name, cols, rows, errors)


def tally(cols: list[str], rows: Iterable[list], backends) -> tuple[dict, dict]:
    """Runs that matched per backend, and the speed-ups per (backend, mode, precision)."""
    passed, speedups = dict.fromkeys(backends, 0), {}
    for row in rows:
        mode, precision = row[2], row[3]
        for b in backends:
            if row[cols.index(f"{b} ok")].startswith("yes"):
                passed[b] += 1
                speedups.setdefault((b, mode, precision), []).append(
                    row[cols.index(f"{b} speedup")])
    return passed, speedups


def _stored(suite: str, name: str, entry: Entry, quick: bool, device: str, rounds: int,
            cols: list[str], tolerance: Callable[[str, str], float], folder: Path,
            part: zoo_store.Part) -> zoo_store.Part:
    """``part`` (stored) for this run's cases: the runs it lacks measured now and kept with it."""
    missing = [case for case in entry.cases if case not in part.runs()]
    if missing:
        _report(f"{suite} {name}: stored runs {part.runs()}, measuring {missing}")
        new = measure(suite, name, Entry(entry.family, entry.build, missing), quick, device,
                      rounds, cols, tolerance)
        part = zoo_store.merge(part, new)
        zoo_store.save(folder, part)
    return zoo_store.select(part, entry.cases)


def stored_only() -> bool:
    """``EMBER_ZOO_STORED_ONLY=1``: report the store's rows and measure nothing (a suite
    still running in parts, reported so far)."""
    return os.environ.get("EMBER_ZOO_STORED_ONLY", "") not in ("", "0")


def store_notes(table: dict[str, Entry], names: list[str], parts: list[zoo_store.Part],
                store: str | None) -> list[str]:
    """The report's store lines: where the rows come from and, under :func:`stored_only`,
    the runs not measured yet."""
    notes = [zoo_store.provenance(parts, store)] if store and parts else []
    if stored_only():
        notes.append("not measured yet (EMBER_ZOO_STORED_ONLY): "
                     + ("; ".join(_not_stored(table, names, parts)) or "none"))
    return notes


def _not_stored(table: dict[str, Entry], names: list[str],
                parts: list[zoo_store.Part]) -> list[str]:
    """``model (mode precision, ...)`` for each asked run missing from ``parts``."""
    have = {p.model: set(p.runs()) for p in parts}
    out = []
    for name in names:
        missing = [f"{m} {p}" for m, p in table[name].cases if (m, p) not in have.get(name, ())]
        if missing:
            out.append(f"{name} ({', '.join(missing)})")
    return out


def run(suite: str, table: dict[str, Entry], names: list[str], quick: bool, device: str,
        tolerance: Callable[[str, str], float], store: str | None) -> list[zoo_store.Part]:
    """Each named model's part: from ``store`` when kept there (its missing runs measured and
    added), else measured (and kept); under :func:`stored_only`, only what is stored."""
    rounds = 3 if quick else 5
    cols = columns(zoo.BACKENDS)
    folder = Path(store) if store else None
    if stored_only() and folder is None:
        raise ValueError("EMBER_ZOO_STORED_ONLY reports a --store folder's rows; no --store "
                         "was given")
    parts = []
    with zoo._fresh_caches():
        for name in names:
            part = zoo_store.load(folder, name, cols) if folder else None
            if stored_only():
                runs = [c for c in table[name].cases if part and c in part.runs()]
                if runs:
                    parts.append(zoo_store.select(part, runs))
                continue
            if part is not None:
                part = _stored(suite, name, table[name], quick, device, rounds, cols,
                               tolerance, folder, part)
            else:
                part = measure(suite, name, table[name], quick, device, rounds, cols, tolerance)
                if folder:
                    zoo_store.save(folder, part)
            parts.append(part)
    return parts
