"""Build a C++ translation unit into a shared library (g++ -O3 -march=native -fopenmp).

``load(source)`` returns a ``ctypes.CDLL``: from this process's table, else from the disk
cache (no compiler run), else built. A cache entry that fails to load is rebuilt.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import subprocess
import tempfile

from ember.core.compiler.runtime import cache
from ember.core.logs import get_logger

log = get_logger("cache")
codegen_log = get_logger("codegen")
# -fno-trapping-math lets g++ compute both sides of a select in SIMD loops (no masked ops)
FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno",
         "-fno-trapping-math", "-w", "-std=c++17"]


def _has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512f" in line for line in f)
    except OSError:
        return False


# g++ keeps to 256-bit vectors even on AVX-512 machines; ATen's own kernels use 512 there
if _has_avx512():
    FLAGS.append("-mprefer-vector-width=512")


@functools.lru_cache(maxsize=1)
def has_libmvec() -> bool:
    """glibc's vector math library (SIMD exp/log/tanh/erf...) is available to link."""
    return ctypes.util.find_library("mvec") is not None
_loaded: dict[str, ctypes.CDLL] = {}
forked_child = False  # set in a child process after fork: kernels must run on one thread
builds = 0  # number of compiler runs in this process (tests count them)


class BuildError(RuntimeError):
    pass


@functools.lru_cache(maxsize=1)
def compiler() -> tuple[str, str]:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise BuildError("no C++ compiler found (install g++ or set CXX)")
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True)
    return cxx, out.stdout.splitlines()[0] if out.stdout else ""


def _build(source: str, target) -> None:
    global builds
    cxx, _ = compiler()
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = os.path.join(tmp, "k.cpp")
        so = os.path.join(tmp, "k.so")
        with open(src, "w") as f:
            f.write(source)
        libs = ["-lmvec"] if has_libmvec() else []
        proc = subprocess.run([cxx, *FLAGS, src, "-o", so, *libs], capture_output=True,
                              text=True)
        builds += 1
        if proc.returncode != 0:
            raise BuildError(f"{cxx} failed:\n{proc.stderr[-4000:]}")
        os.replace(so, target)


def load(source: str) -> ctypes.CDLL:
    cxx, version = compiler()
    k = cache.key(source, " ".join(FLAGS), cxx, version, str(has_libmvec()))
    if k in _loaded:
        return _loaded[k]
    target = cache.entry(k, ".so")
    if target.exists():
        try:
            with open(target, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    raise OSError("not an ELF shared library")
            lib = ctypes.CDLL(str(target))
            log.debug("cache hit %s", target)
            _loaded[k] = lib
            return lib
        except OSError as e:
            log.warning("corrupt cache entry %s (%s); rebuilding", target, e)
            target.unlink(missing_ok=True)
    log.debug("cache miss %s", target)
    _build(source, target)
    lib = ctypes.CDLL(str(target))
    _loaded[k] = lib
    return lib


def _serial_after_fork() -> None:
    """libgomp's thread pool does not survive fork: a team of more than one thread in the child
    (a DataLoader worker, say) would wait forever on the parent's threads. Child processes run
    our kernels on one thread (torch's DataLoader workers do the same for ATen)."""
    global forked_child
    forked_child = True
    try:
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(1)
    except (OSError, AttributeError):
        pass  # no libgomp loaded: no OpenMP team to lose


os.register_at_fork(after_in_child=_serial_after_fork)
