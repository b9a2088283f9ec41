"""On-disk cache of built kernels, keyed by a hash of the source and the build command.

Location: ``$EMBER_CACHE_DIR`` (default ``~/.cache/ember``). Entries are written to a
temporary name and renamed, so concurrent processes never see half-written files. A cache
directory that cannot be written (read-only, wrong owner) is replaced for this process by a
private temporary one, with one warning.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ember.core.logs import get_logger

log = get_logger("cache")
ENV = "EMBER_CACHE_DIR"
_private: dict[Path, Path] = {}  # unwritable directory -> this process's stand-in
_writable_dirs: set[Path] = set()


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            return True
    except OSError:
        return False


def cache_dir() -> Path:
    root = os.environ.get(ENV)
    path = Path(root) if root else Path.home() / ".cache" / "ember"
    if path in _private:
        return _private[path]
    if path in _writable_dirs or _writable(path):
        _writable_dirs.add(path)
        return path
    stand_in = Path(tempfile.mkdtemp(prefix="ember-cache-"))
    _private[path] = stand_in
    log.warning("kernel cache %s cannot be written; using %s for this process (set %s to a "
                "writable directory to keep kernels between runs)", path, stand_in, ENV)
    return stand_in


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
