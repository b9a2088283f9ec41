"""The instruction-set level C++ kernels are built for.

``EMBER_CPU_ISA`` (or ``compile(options={"cpu_isa": ...})``) picks a level: ``native`` (the
default: whatever this CPU has), or one of the x86-64 micro-architecture levels, so a machine
with AVX-512 can build and test the AVX2 code path (``x86-64-v3``). A level this CPU cannot
run is refused up front, since its kernels would die on an illegal instruction.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Level:
    """One selectable level: its ``-march`` value and the CPU flags it needs."""

    march: str
    needs: frozenset[str]
    wide_vectors: bool = False  # ask g++ for 512-bit vectors (it keeps to 256 by default)


_V2 = frozenset({"cx16", "popcnt", "sse4_1", "sse4_2", "ssse3"})
_V3 = _V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "abm"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
LEVELS = {
    "x86-64": Level("x86-64", frozenset()),
    "x86-64-v2": Level("x86-64-v2", _V2),
    "x86-64-v3": Level("x86-64-v3", _V3),
    "x86-64-v4": Level("x86-64-v4", _V4, wide_vectors=True),
}
NAMES = ("native", *LEVELS)
ENV = "EMBER_CPU_ISA"


class IsaError(ValueError):
    """An unknown level, or one this CPU cannot execute."""


def selected(options: dict | None = None) -> str:
    """The level asked for: ``options["cpu_isa"]``, else ``$EMBER_CPU_ISA``, else native."""
    where = "options['cpu_isa']" if (options or {}).get("cpu_isa") else ENV
    name = (options or {}).get("cpu_isa") or os.environ.get(ENV) or "native"
    if name not in NAMES:
        raise IsaError(f"{where} must be one of {', '.join(NAMES)}; got {name!r}")
    if name == "native":
        return name
    why = cannot_run(LEVELS[name].needs)
    if why:
        raise IsaError(f"{where}={name!r}: {why}")
    return name


def cannot_run(needs) -> str | None:
    """Why this CPU cannot run code needing the CPU flags ``needs`` (an x86-64 level's), or
    None when it can."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"needs an x86-64 CPU; this one is {platform.machine()}"
    missing = set(needs) - cpu_flags()
    return f"this CPU lacks {', '.join(sorted(missing))}" if missing else None


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def portable_level() -> str:
    """The highest x86-64 level this CPU runs (what an ahead-of-time package is built for
    under ``native``: any machine of that level can load it)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return "native"
    have = cpu_flags()
    return next(n for n in ("x86-64-v4", "x86-64-v3", "x86-64-v2", "x86-64")
                if LEVELS[n].needs <= have)


def flags(name: str) -> list[str]:
    """The g++ flags for level ``name`` (already checked by ``selected``)."""
    # -mtune=generic: the same code whichever machine builds it, so a cache shared between
    # machines hands each one what it would have built itself. Native builds too: g++ 12's
    # cost model for -mtune=znver3 (what -march=native implies on AMD Zen 3) vectorizes a
    # concatenation's clamped int64 gathers wrongly (one element per row read as 0: bicubic
    # upsampling 7x1 -> 29x1 was off by up to 5e4); generic tuning vectorizes it right.
    if name == "native":
        march, wide = "native", {"avx512f", "avx512vl"} <= cpu_flags()
    else:
        march, wide = LEVELS[name].march, LEVELS[name].wide_vectors
    return [f"-march={march}", "-mtune=generic"] + (["-mprefer-vector-width=512"] if wide else [])


def compiler_features(cxx: str) -> list[str]:
    """The target features ``cxx -march=native`` enables here, one ``-mX=value`` each."""
    try:
        out = subprocess.run([cxx, "-march=native", "-Q", "--help=target"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(ln.split()[0] + "=" + ln.split()[-1] for ln in out.splitlines()
                  if ln.strip().startswith("-m") and len(ln.split()) >= 2)


@functools.lru_cache(maxsize=8)
def target_id(cxx: str, name: str) -> str:
    """What ``-march`` resolves to on this machine, for the cache key: for ``native`` the
    compiler's own list of enabled target features, so two CPUs never share a kernel."""
    if name != "native":
        return name
    # no answer from the compiler: the kernel's view of the CPU decides
    features = compiler_features(cxx) or sorted(cpu_flags())
    return "native:" + hashlib.sha256("\n".join(features).encode()).hexdigest()[:16]
