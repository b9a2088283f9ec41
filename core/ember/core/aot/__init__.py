"""Ahead-of-time packages: ``aot_compile`` an exported model into one ``.pt2`` file that
``aot_load`` (Python) or ``ember::aot::Model`` (C++, ``<ember/aot.h>``, no Python) runs."""

from ember.core.aot.loader import AOTInputError, AOTModel, aot_load
from ember.core.aot.package import PackageError

__all__ = ["aot_compile", "aot_load", "AOTModel", "AOTCompileError", "AOTExportError",
           "AOTInputError", "PackageError"]


def __getattr__(name: str):
    # compiling pulls in torch.export and the compiler; a process that only loads needs
    # neither (imported on first use)
    if name in ("aot_compile", "AOTCompileError"):
        from ember.core.aot import compile as _compile

        return getattr(_compile, name)
    if name == "AOTExportError":
        from ember.core.aot.export import AOTExportError

        return AOTExportError
    raise AttributeError(f"module 'ember.core.aot' has no attribute {name!r}")
