"""``python -m ember.core.aot --cflags | --libs``: flags to build C++ against <ember/aot.h>
and the torch wheel's libtorch."""

from __future__ import annotations

import argparse
import os
import sys


def include_dir() -> str:
    """The directory holding ``ember/aot.h``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def cflags() -> list[str]:
    from ember.core.compiler.runtime.build import torch_flags

    return ["-std=c++17", f"-I{include_dir()}", *torch_flags()[0]]


def libs() -> list[str]:
    from ember.core.compiler.runtime.build import torch_flags

    return [*torch_flags()[1], "-ldl"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ember.core.aot", description=__doc__)
    p.add_argument("--cflags", action="store_true", help="compiler flags")
    p.add_argument("--libs", action="store_true", help="linker flags")
    a = p.parse_args(argv)
    if not (a.cflags or a.libs):
        p.error("give --cflags and/or --libs")
    out = (cflags() if a.cflags else []) + (libs() if a.libs else [])
    print(" ".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
