"""Optional dependencies: a missing one raises an ImportError naming the pip extra to install.

Every Ember package imports its optional dependencies through ``require`` (one module) or
``needs_extra`` (a block that imports several), e.g.
``pd = require("pandas", "ember-arrow[pandas]", "from_pandas()")``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Iterable, Iterator
from types import ModuleType

__all__ = ["require", "needs_extra", "missing_extra_error"]


def missing_extra_error(module: str, extra: str, feature: str) -> ImportError:
    """The ImportError for ``feature`` when ``module`` (installed by ``extra``) is missing."""
    return ImportError(f"{feature} needs the optional dependency {module!r}, which is not "
                       f"installed; install it with: pip install '{extra}'", name=module)


def _absent(exc: ModuleNotFoundError, modules: Iterable[str]) -> str | None:
    """Which of ``modules`` ``exc`` is about, if that module is really not installed."""
    top = (exc.name or "").partition(".")[0]
    for module in modules:
        if top == module.partition(".")[0] and importlib.util.find_spec(top) is None:
            return top
    return None


@contextlib.contextmanager
def needs_extra(extra: str, modules: Iterable[str], feature: str) -> Iterator[None]:
    """Inside the block, a ModuleNotFoundError for one of ``modules`` names ``extra``."""
    modules = list(modules)
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = _absent(exc, modules)
        if missing is None:
            raise
        raise missing_extra_error(missing, extra, feature) from exc


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import and return ``module``; if it is not installed, say to ``pip install extra``."""
    with needs_extra(extra, [module], feature):
        return importlib.import_module(module)
