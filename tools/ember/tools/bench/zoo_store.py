"""A zoo suite's rows kept per model on disk, so a suite too long for one sitting runs in parts.

``ember bench zoo --suite vision --store DIR`` writes each model's rows to ``DIR/<model>.json``
as soon as the model is done; a later run with the same ``DIR`` reuses them and measures only
what is not stored yet: the models missing, and a stored model's runs missing (a folder filled
with ``EMBER_ZOO_MODES=inference`` gets its training rows added by a later full run). Each
stored part records when and on which machine each sitting measured it, and the report says
so. Every row is a self-contained round-robin comparison, so rows from different sittings stay
comparable as ratios.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ember.tools.bench.harness import machine_line


class StoreError(ValueError):
    """A stored part that cannot be used: unreadable, or another table's columns."""


@dataclass
class Part:
    """One model's measured rows and errors, with when and where they were measured."""

    model: str
    columns: list[str]
    rows: list[list]
    errors: list[str] = field(default_factory=list)
    measured: str = ""
    machine: str = ""
    # later sittings that added runs: {"measured": ..., "machine": ...} each
    sittings: list[dict] = field(default_factory=list)

    def runs(self) -> list[tuple[str, str]]:
        """The (mode, precision) of each row."""
        return [(row[2], row[3]) for row in self.rows]


def _path(store: Path, model: str) -> Path:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", model):
        raise StoreError(f"model name {model!r} is not usable as a store file name")
    return Path(store) / f"{model}.json"


def load(store: Path, model: str, columns: list[str]) -> Part | None:
    """The stored part of ``model``, or None when there is none yet."""
    path = _path(store, model)
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        part = Part(**doc)
    except (OSError, ValueError, TypeError) as exc:
        raise StoreError(f"stored zoo part {path} is unreadable ({exc}); delete it to "
                         "measure the model again") from exc
    if part.model != model or part.columns != list(columns):
        raise StoreError(f"stored zoo part {path} is for another table (model "
                         f"{part.model!r}, {len(part.columns)} columns); delete it to "
                         "measure the model again")
    if len(set(part.runs())) != len(part.rows):
        raise StoreError(f"stored zoo part {path} holds a run twice ({part.runs()}); delete "
                         "it to measure the model again")
    return part


def _stamp(part: Part) -> Part:
    part.measured = part.measured or _dt.datetime.now(_dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    part.machine = part.machine or machine_line()
    return part


def merge(stored: Part, new: Part) -> Part:
    """``stored`` with the runs of ``new`` (measured in a later sitting) added after its own."""
    clash = set(stored.runs()) & set(new.runs())
    if clash or new.model != stored.model or new.columns != stored.columns:
        raise StoreError(f"cannot add {new.model!r}'s runs {new.runs()} to the stored part of "
                         f"{stored.model!r} (runs {stored.runs()})")
    _stamp(new)
    return Part(stored.model, stored.columns, stored.rows + new.rows,
                stored.errors + new.errors, stored.measured, stored.machine,
                stored.sittings + [{"measured": new.measured, "machine": new.machine}]
                + new.sittings)


def select(part: Part, runs: list[tuple[str, str]]) -> Part:
    """The rows (and errors) of ``part`` for ``runs``, in that order; all must be stored."""
    by_run = dict(zip(part.runs(), part.rows))
    labels = tuple(f"{part.model} {mode} {precision} " for mode, precision in runs)
    return Part(part.model, part.columns, [by_run[r] for r in runs],
                [e for e in part.errors if e.startswith(labels)], part.measured, part.machine,
                part.sittings)


def save(store: Path, part: Part) -> None:
    """Write ``part`` (atomically: a half-written file never looks stored)."""
    path = _path(store, part.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    _stamp(part)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(part.__dict__, default=str) + "\n")
    tmp.replace(path)


def provenance(parts: list[Part], store: str | Path) -> str:
    """One note line: how many models came from the store, when and on which machines."""
    sittings = [s for p in parts for s in [{"measured": p.measured, "machine": p.machine}]
                + p.sittings]
    when = sorted(s["measured"] for s in sittings)
    machines = sorted({s["machine"].rsplit(";", 1)[0] for s in sittings})
    return (f"rows of {len(parts)} model(s) measured in parts and kept in {store} (`--store`), "
            f"{when[0]} to {when[-1]}, on: " + " | ".join(machines))
