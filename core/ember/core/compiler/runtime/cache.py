"""On-disk cache of built kernels, keyed by a hash of the source and the build command.

Location: ``$EMBER_CACHE_DIR`` (default ``~/.cache/ember``). Entries are written to a
temporary name and renamed, so concurrent processes never see half-written files.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("EMBER_CACHE_DIR")
    path = Path(root) if root else Path.home() / ".cache" / "ember"
    path.mkdir(parents=True, exist_ok=True)
    return path


def key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def entry(k: str, suffix: str) -> Path:
    d = cache_dir() / "cpp" / k[:2]
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{k}{suffix}"
