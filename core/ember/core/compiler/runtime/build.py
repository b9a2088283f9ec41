"""Build a C++ translation unit into a shared library (g++ -O3 -march=<level> -fopenmp).

``load(source)`` returns a ``ctypes.CDLL``: from this process's table, else from the disk
cache (no compiler run), else built. ``load(source, units=...)`` builds the same library from
``source`` split into several translation units, compiled in parallel (one g++ per core) and
linked: g++ spends about 0.1 ms per byte of generated kernels at -O3, so a large graph's
library is built in a fraction of the time. The cache key covers the source, the compiler and its
version, the flags and the instruction-set target (``runtime/isa.py``). A cached library is
loaded only after its bytes match the SHA-256 written beside it at build time (a truncated or
altered file would crash the process inside ``dlopen``), and only if it names its own key (a
valid library of another graph moved under this key would silently compute something else);
anything else is rebuilt with a warning.

``load_source(package, name)`` does the same for a hand-written ``.cpp`` file shipped inside
a package (package data), together with the ``.h`` files beside it that it includes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import importlib.resources
import os
import re
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

from ember.core import parallel
from ember.core.compiler.runtime import cache, isa
from ember.core.logs import get_logger

log = get_logger("cache")
codegen_log = get_logger("codegen")
# -fno-trapping-math lets g++ compute both sides of a select in SIMD loops (no masked ops);
# -ffp-contract=off: g++ fused a * b + c into one FMA in a vector body but not in its scalar
# tail, so an element's rounding hung on its position and on the ISA (eager and Inductor
# round twice); the multiply-adds we want fused are written as e_vfma
BASE_FLAGS = ["-O3", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno", "-fno-trapping-math",
              "-ffp-contract=off", "-w", "-std=c++17"]
KEY_SYMBOL = "ember_cache_key"  # every library names the cache key it was built for


def flags(options: dict | None = None) -> list[str]:
    """The g++ command-line flags for the selected instruction-set level."""
    return BASE_FLAGS[:1] + isa.flags(isa.selected(options)) + BASE_FLAGS[1:]


@functools.lru_cache(maxsize=1)
def has_libmvec() -> bool:
    """glibc's vector math library (SIMD exp/log/tanh/erf...) is available to link."""
    return ctypes.util.find_library("mvec") is not None


_loaded: dict[str, ctypes.CDLL] = {}
forked_child = False  # set in a child process after fork: kernels must run on one thread
builds = 0  # number of libraries built in this process (tests count them)
units_built = 0  # number of translation units compiled for them


class BuildError(RuntimeError):
    pass


@functools.lru_cache(maxsize=1)
def compiler() -> tuple[str, str]:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise BuildError("no C++ compiler found (install g++ or set CXX)")
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True)
    return cxx, out.stdout.splitlines()[0] if out.stdout else ""


@functools.lru_cache(maxsize=1)
def libtorch_linker() -> list[str]:
    """The flag choosing the fastest linker the compiler can drive for a library that links
    libtorch: GNU ld reads libtorch_cpu's symbol tables slowly (0.37 s a package where gold
    takes 0.14 s); with no faster one installed, the default."""
    cxx, _ = compiler()
    for name in ("mold", "lld", "gold"):
        probe = subprocess.run([cxx, f"-fuse-ld={name}", "-Wl,--version"], capture_output=True,
                               text=True)
        if probe.returncode == 0:
            return [f"-fuse-ld={name}"]
    return []


def _digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _write(folder: str, files: dict[str, str]) -> None:
    for file, text in files.items():
        with open(os.path.join(folder, file), "w") as f:
            f.write(text)


def _install(built: str, target) -> None:
    """Move ``built`` into the cache entry ``target``, its digest landing first: a reader
    that finds the entry also finds its digest."""
    digest = built + ".sha256"
    with open(digest, "w") as f:
        f.write(_digest(built))
    os.replace(digest, target.with_suffix(".sha256"))
    os.replace(built, target)


def _run_all(commands: list[list[str]]) -> None:
    """Run the compiler ``commands`` at once; BuildError with the first failure's output."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in commands]
    failed = [(c, err) for c, p in zip(commands, procs)
              for _, err in [p.communicate()] if p.returncode != 0]
    if failed:
        raise BuildError(f"{failed[0][0][0]} failed:\n{failed[0][1][-4000:]}")


def _build(units: list[str], target, build_flags: list[str], name: str = "k.cpp",
           headers: dict[str, str] | None = None) -> ctypes.CDLL:
    """Compile ``units`` (one: written as ``name``, with ``headers`` beside it; several:
    compiled in parallel, then linked) into the cache entry ``target`` and load it.

    The library is loaded under its unique build path, before it moves into place: dlopen
    hands back any library it already mapped under the same path, which after a rejected
    entry (see ``load``) would be the rejected one."""
    global builds, units_built
    cxx, _ = compiler()
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        so = os.path.join(tmp, "k.so")
        libs = ["-lmvec"] if has_libmvec() else []
        if len(units) == 1:
            _write(tmp, {**(headers or {}), name: units[0]})
            _run_all([[cxx, *build_flags, os.path.join(tmp, name), "-o", so, *libs]])
        else:
            names = [f"u{i}.cpp" for i in range(len(units))]
            _write(tmp, {**(headers or {}), **dict(zip(names, units))})
            objs = [os.path.join(tmp, n[:-4] + ".o") for n in names]
            _run_all([[cxx, *build_flags, "-c", os.path.join(tmp, n), "-o", o]
                      for n, o in zip(names, objs)])
            _run_all([[cxx, *build_flags, *objs, "-o", so, *libs]])
        builds += 1
        units_built += len(units)
        lib = ctypes.CDLL(so)
        _install(so, target)
    return lib


def _check_entry(target, k: str) -> str | None:
    """Why the cached library at ``target`` must not be loaded, or None when it is sound."""
    try:
        expected = target.with_suffix(".sha256").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return "no digest beside it"
    try:
        if _digest(target) != expected:
            return "its bytes do not match the digest written at build time"
    except OSError as e:
        return f"unreadable ({e})"
    return None


def _names_key(lib: ctypes.CDLL, k: str) -> bool:
    try:
        return (ctypes.c_char * (len(k) + 1)).in_dll(lib, KEY_SYMBOL).value == k.encode()
    except ValueError:  # the symbol is missing
        return False


def load(source: str, options: dict | None = None,
         units: list[str] | None = None) -> ctypes.CDLL:
    """The library of ``source`` built for the instruction-set level ``options`` select;
    ``units``: the same code as several translation units (each with the prelude) to build
    it from in parallel. ``source`` alone names the library in the cache."""
    return _load(source, options, units=units)


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def _package_sources(package: str, name: str) -> dict[str, str]:
    """``name`` and every header it includes with quotes (transitively), read from the
    package's files; a quoted include must name a file beside it."""
    root = importlib.resources.files(package)
    files: dict[str, str] = {}
    todo = [name]
    while todo:
        file = todo.pop()
        if file in files:
            continue
        if os.path.basename(file) != file or file in (".", ".."):
            raise BuildError(f"{package}: {file!r} must name a file beside {name}")
        try:
            files[file] = (root / file).read_text(encoding="utf-8")
        except OSError as e:
            raise BuildError(f"{package} has no C++ source {file!r} ({e}); is it package "
                             "data?") from e
        todo += _INCLUDE.findall(files[file])
    return files


def load_source(package: str, name: str, options: dict | None = None) -> ctypes.CDLL:
    """The library built from the C++ file ``name`` shipped in ``package`` (package data),
    cached and checked as :func:`load` does; the cache key covers the headers it includes.

    Raises :class:`BuildError` (no compiler, a compile error, a missing file); callers that
    have a torch-op path log it and keep that path."""
    files = _package_sources(package, name)
    source = files.pop(name)
    return _load(source, options, name, files)


def load_kernels(package: str, name: str, signatures: dict[str, list], what: str,
                 log) -> ctypes.CDLL | None:
    """``load_source`` for a package's optional native kernels: each symbol of ``signatures``
    gets its argument types and an int status result; None (logged on ``log`` at INFO, with
    ``what`` naming the kernels) where the build fails and the caller's torch-op path serves."""
    try:
        lib = load_source(package, name)
    except Exception as e:  # no compiler, a build failure, a missing file
        log.info("%s unavailable (%s); using torch ops", what, e)
        return None
    for symbol, argtypes in signatures.items():
        fn = getattr(lib, symbol)
        fn.restype, fn.argtypes = ctypes.c_int, argtypes
    return lib


def _load(source: str, options: dict | None, name: str = "k.cpp",
          headers: dict[str, str] | None = None,
          units: list[str] | None = None) -> ctypes.CDLL:
    cxx, version = compiler()
    level = isa.selected(options)
    build_flags = flags(options)
    # the key of a bare source (``load``) is what it has always been
    files = [] if headers is None else [name, *(p for h in sorted(headers.items()) for p in h)]
    k = cache.key(source, " ".join(build_flags), cxx, version, isa.target_id(cxx, level),
                  str(has_libmvec()), *files)
    if k in _loaded:
        return _loaded[k]
    key_line = f'\nextern "C" const char {KEY_SYMBOL}[] = "{k}";\n'
    units = [u + key_line if i == 0 else u for i, u in enumerate(units or [source])]
    target = cache.entry(k, ".so")
    if target.exists():
        problem = _check_entry(target, k)
        if problem is None:
            try:
                lib = ctypes.CDLL(str(target))
            except OSError as e:
                problem = f"it does not load ({e})"
            else:
                if _names_key(lib, k):
                    log.debug("cache hit %s", target)
                    _loaded[k] = lib
                    return lib
                problem = "it was built for another cache key"
        log.warning("cache entry %s is not used: %s; rebuilding it", target, problem)
    else:
        log.debug("cache miss %s", target)
    lib = _build(units, target, build_flags, name, headers)
    _loaded[k] = lib
    return lib


def torch_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags for C++ that uses ATen from the torch wheel (no Python)."""
    import torch
    from torch.utils import cpp_extension

    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    cflags = [f"-I{p}" for p in cpp_extension.include_paths()] + \
        [f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    libdirs = cpp_extension.library_paths()
    lflags = [f"-L{p}" for p in libdirs] + [f"-Wl,-rpath,{p}" for p in libdirs] + \
        ["-ltorch", "-ltorch_cpu", "-lc10"]
    return cflags, lflags


class RuntimeBuild:
    """A package ATen runtime object: found in the cache, or compiling in the background (its
    ATen headers cost seconds to parse) so that the compile overlaps the model's export and
    lowering. ``path()`` waits for it; a build nobody waited for is stopped when its record
    is dropped (a failed ``aot_compile``)."""

    def __init__(self, target: Path, proc: subprocess.Popen | None = None,
                 tmp: tempfile.TemporaryDirectory | None = None):
        self.target, self.proc, self.tmp = target, proc, tmp
        self.error: BuildError | None = None
        self._stop = weakref.finalize(self, _stop_build, proc, tmp) if proc else None

    def path(self) -> str:
        global builds
        if self.proc is not None:
            proc, self.proc = self.proc, None
            self._stop.detach()
            try:
                _, err = proc.communicate()
                builds += 1
                if proc.returncode != 0:
                    self.error = BuildError(f"{compiler()[0]} failed on the packages' "
                                            f"runtime:\n{err[-4000:]}")
                else:
                    _install(os.path.join(self.tmp.name, "runtime.o"), self.target)
            finally:
                self.tmp.cleanup()
        if self.error is not None:
            raise self.error
        return str(self.target)


def _stop_build(proc: subprocess.Popen, tmp: tempfile.TemporaryDirectory) -> None:
    proc.kill()
    proc.communicate()
    tmp.cleanup()


# The runtime only sequences calls into ATen: -O2 took 0.6 s longer than -O1 to build its
# dispatcher half and ran no faster (per-call latency of the encoder and resnet18 packages).
RUNTIME_OPT = "-O1"


def start_runtime(name: str, text: str, headers: dict[str, str]) -> RuntimeBuild:
    """The cached object of a package's ATen runtime ``name`` (built once per machine,
    compiler and flags, and checked against its digest), its build started if it is not."""
    cxx, version = compiler()
    cmd = [cxx, RUNTIME_OPT, "-fPIC", "-fvisibility=hidden", "-std=c++17", "-w",
           *torch_flags()[0]]
    k = cache.key(text, *headers.values(), " ".join(cmd), cxx, version)
    target = cache.entry(k, ".o")
    if target.exists() and _check_entry(target, k) is None:
        return RuntimeBuild(target)
    tmp = tempfile.TemporaryDirectory(dir=target.parent)
    _write(tmp.name, {**headers, name: text})
    proc = subprocess.Popen([*cmd, "-c", name, "-o", "runtime.o"], cwd=tmp.name,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return RuntimeBuild(target, proc, tmp)


def build_library(kernels: str, wrapper: str, headers: dict[str, str],
                  runtime: list[RuntimeBuild], options: dict | None = None) -> bytes:
    """Compile an ahead-of-time package's kernels (as the JIT builds them) and its wrapper in
    parallel, link them with the ATen runtime's objects (``start_runtime``) against libtorch,
    and return the library's bytes."""
    global builds
    cxx, _ = compiler()
    level_flags = isa.flags(isa.selected(options))
    lflags = torch_flags()[1]
    base = [f for f in BASE_FLAGS if f != "-shared"]
    with tempfile.TemporaryDirectory(prefix="ember-aot-") as tmp:
        _write(tmp, {**headers, "kernels.cpp": kernels, "wrapper.cpp": wrapper})
        jobs = {
            "kernels": [cxx, base[0], *level_flags, *base[1:], "-c", "kernels.cpp",
                        "-o", "kernels.o"],
            # the wrapper only sequences calls into the runtime and our kernels (no ATen
            # header, no loops): optimizing it costs seconds on a large model and saves nothing
            "wrapper": [cxx, "-O0", "-fPIC", "-fvisibility=hidden", "-std=c++17", "-w",
                        "-c", "wrapper.cpp", "-o", "wrapper.o"],
        }
        procs = {k: subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
                 for k, cmd in jobs.items()}
        for name, proc in procs.items():
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise BuildError(f"{cxx} failed on the package's {name}:\n{err[-4000:]}")
        libs = ["-lmvec"] if has_libmvec() else []
        proc = subprocess.run([cxx, "-shared", "-fopenmp", *libtorch_linker(), "kernels.o",
                               "wrapper.o", *(r.path() for r in runtime),
                               "-o", "model.so", *lflags, *libs], cwd=tmp,
                              capture_output=True, text=True)
        builds += 1
        if proc.returncode != 0:
            raise BuildError(f"{cxx} failed to link the package:\n{proc.stderr[-4000:]}")
        with open(os.path.join(tmp, "model.so"), "rb") as f:
            return f.read()


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


parallel.after_fork_in_child(_serial_after_fork)
