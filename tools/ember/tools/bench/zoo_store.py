"""A zoo suite's rows kept per model on disk, so a suite too long for one sitting runs in parts.

``ember bench zoo --suite vision --store DIR`` writes each model's rows to ``DIR/<model>.json``
as soon as the model is done; a later run with the same ``DIR`` reuses them and measures only
the models not stored yet. Each stored part records when and on which machine it was measured,
and the report says so. Every row is a self-contained round-robin comparison, so rows from
different sittings stay comparable as ratios.
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
    return part


def save(store: Path, part: Part) -> None:
    """Write ``part`` (atomically: a half-written file never looks stored)."""
    path = _path(store, part.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    part.measured = part.measured or _dt.datetime.now(_dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    part.machine = part.machine or machine_line()
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(part.__dict__, default=str) + "\n")
    tmp.replace(path)


def provenance(parts: list[Part], store: str | Path) -> str:
    """One note line: how many models came from the store, when and on which machines."""
    when = sorted(p.measured for p in parts)
    machines = sorted({p.machine.rsplit(";", 1)[0] for p in parts})
    return (f"rows of {len(parts)} model(s) measured in parts and kept in {store} (`--store`), "
            f"{when[0]} to {when[-1]}, on: " + " | ".join(machines))
