"""Generated Triton modules on disk: ``$EMBER_CACHE_DIR/triton/<kk>/<key>.py``, imported from there.

Triton's ``@jit`` reads a kernel's source from its file, so generated code must live in a real
file; the binaries it builds on a GPU go to Triton's own cache. Files are written to a
temporary name and renamed, so concurrent processes never import half a module.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

from ember.core.compiler.runtime import cache
from ember.core.logs import get_logger

log = get_logger("cache")
_loaded: dict[str, ModuleType] = {}


def path_for(source: str):
    k = cache.key("triton", source)
    d = cache.cache_dir() / "triton" / k[:2]
    d.mkdir(parents=True, exist_ok=True)
    return k, d / f"ember_triton_{k}.py"


def load(source: str) -> ModuleType:
    """The module of ``source``: from this process's table, else the disk cache, else written."""
    k, path = path_for(source)
    if k in _loaded:
        return _loaded[k]
    try:
        ok = path.read_text() == source
    except (OSError, UnicodeDecodeError):  # missing, or damaged on disk: write it anew
        ok = False
    if not ok:
        log.debug("writing %s", path)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    else:
        log.debug("cache hit %s", path)
    name = f"ember_triton_{k}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton resolves a kernel's globals through its module
    spec.loader.exec_module(module)
    _loaded[k] = module
    return module
