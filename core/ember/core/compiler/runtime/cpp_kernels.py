"""Build a graph's C++ kernels into one shared library and bind them as Python callables.

``load(steps, buffers, options) -> (libs, source)``: ``libs[kernel] = (callable, spec)``.
Under max-autotune the callables are ``TunedKernel``s; otherwise every run of two or more
consecutive kernels also gets one ``extern "C"`` entry that calls them in order, bound as
``libs["seg:<first kernel>"] = (callable, spec, kernel names)``: one ctypes call per run.
A large graph's kernels are built as several translation units in parallel (:func:`units`).
"""

from __future__ import annotations

import ctypes

from ember.core import parallel
from ember.core.compiler import modes
from ember.core.compiler.codegen import cpp
from ember.core.compiler.codegen.common import ArgKind
from ember.core.compiler.ir import Scatter
from ember.core.compiler.lowering.builders import InputWrite
from ember.core.compiler.runtime import build
from ember.core.compiler.runtime.tuned import TunedKernel
from ember.core.compiler.schedule import Kernel

# ctypes binds foreign functions of at most this many arguments; an entry taking more (an
# optimizer step over hundreds of parameters, a long run of kernels) is called through a
# ``<name>_packed(const int64_t*)`` shim that unpacks one array
CTYPES_MAX_ARGS = 1024
# kernel source per translation unit below which splitting a graph's library gains less than
# the extra g++ start and prelude (~0.3 s): 64 KB takes g++ several seconds at -O3
UNIT_MIN_CHARS = 64_000


def _needs_packing(spec: list, extra: int = 0) -> bool:
    return len(spec) + extra > CTYPES_MAX_ARGS


def packed_source(name: str, spec: list, buffers: dict, extra: int = 0) -> str:
    """The ``<name>_packed`` shim: ``name``'s arguments (pointers, sizes, then ``extra``
    integers) read from one ``int64_t`` array."""
    args = [f"reinterpret_cast<{cpp.CTYPES[buffers[a.value].dtype]}*>(a[{i}])"
            if a.kind is ArgKind.POINTER else f"a[{i}]" for i, a in enumerate(spec)]
    args += [f"a[{len(spec) + j}]" for j in range(extra)]
    return (f'extern "C" void {name}_packed(const int64_t* a) {{\n'
            f'  {name}({", ".join(args)});\n}}\n')


def _bind(lib: ctypes.CDLL, name: str, spec: list, extra: int = 0):
    if _needs_packing(spec, extra):
        fn = getattr(lib, f"{name}_packed")
        fn.argtypes, fn.restype = [ctypes.c_void_p], None
        array = ctypes.c_int64 * (len(spec) + extra)
        return lambda *args: fn(array(*args))
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_void_p if a.kind is ArgKind.POINTER else ctypes.c_int64
                   for a in spec] + [ctypes.c_int64] * extra
    fn.restype = None
    return fn


def runs(steps: list) -> list[list[Kernel]]:
    """Maximal runs of consecutive kernels (externs split them)."""
    out, cur = [], []
    for s in steps:
        if isinstance(s, Kernel):
            cur.append(s)
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


def segment_source(name: str, kernels: list[Kernel], specs: dict, buffers: dict):
    """One entry calling ``kernels`` in order; its arguments are the union of theirs."""
    spec: list = []
    for k in kernels:
        spec += [a for a in specs[k.name] if a not in spec]
    spec = [a for a in spec if a.kind is ArgKind.POINTER] + \
        [a for a in spec if a.kind is ArgKind.SIZE]
    pos = {a: i for i, a in enumerate(spec)}
    params = [f"void* p{i}" if a.kind is ArgKind.POINTER else f"int64_t p{i}"
              for i, a in enumerate(spec)]
    lines = [f'extern "C" void {name}({", ".join(params)}) {{']
    for k in kernels:
        args = []
        for a in specs[k.name]:
            i = pos[a]
            args.append(f"static_cast<{cpp.CTYPES[buffers[a.value].dtype]}*>(p{i})"
                        if a.kind is ArgKind.POINTER else f"p{i}")
        lines.append(f"  {k.name}({', '.join(args)});")
    return "\n".join(lines + ["}"]) + "\n", spec


def kernel_sources(kernels: list[Kernel], buffers: dict,
                   tuned: frozenset[str] = frozenset()) -> tuple[dict, dict]:
    """Each kernel's ``(C++ source, argument spec)`` and the specs alone; kernels named in
    ``tuned`` take the tuning parameters."""
    sources = {k.name: cpp.kernel_source(k, buffers, tunable=k.name in tuned) for k in kernels}
    return sources, {name: spec for name, (_, spec) in sources.items()}


def units(groups: list[list[str]], libmvec: bool) -> list[str] | None:
    """``groups`` of kernel sources (a group must stay together: a run and its entry) as one
    translation unit per core, balanced by size; None when one unit is as fast."""
    size = sum(len(src) for group in groups for src in group)
    n = min(parallel.cores(), len(groups), size // UNIT_MIN_CHARS)
    if n < 2:
        return None
    parts: list[list[str]] = [[] for _ in range(n)]
    sizes = [0] * n
    for group in sorted(groups, key=lambda g: -sum(map(len, g))):
        i = sizes.index(min(sizes))
        parts[i] += group
        sizes[i] += sum(map(len, group))
    return [cpp.translation_unit(part, libmvec) for part in parts]


def load(steps: list, buffers: dict, options: dict | None) -> tuple[dict, str]:
    kernels = [s for s in steps if isinstance(s, Kernel)]
    if not kernels:
        return {}, ""
    tune = modes.tunes_kernels(options)
    # a kernel writing a graph input in place must run once per call: never tuned (tuning
    # times candidates by re-running the kernel on its real arguments); scatter kernels
    # take no tuning parameters
    tuned = {k.name for k in kernels if tune and not any(isinstance(n, (InputWrite, Scatter))
                                                         for n in k.nodes)}
    sources, specs = kernel_sources(kernels, buffers, frozenset(tuned))
    extra = {name: len(cpp.TUNE_PARAMS) if name in tuned else 0 for name in sources}
    # each kernel with its packing shim; a run's kernels with the entry calling them
    groups = {name: [src] + ([packed_source(name, spec, buffers, extra[name])]
                             if _needs_packing(spec, extra[name]) else [])
              for name, (src, spec) in sources.items()}
    segments = []
    if modes.native_entry(options):
        for run in (r for r in runs(steps) if len(r) > 1):
            name = f"seg_{run[0].name}"
            src, spec = segment_source(name, run, specs, buffers)
            group = groups[run[0].name]
            for k in run[1:]:
                group += groups.pop(k.name)
            group.append(src)
            if _needs_packing(spec):
                group.append(packed_source(name, spec, buffers))
            segments.append((name, spec, [k.name for k in run]))
    libmvec = build.has_libmvec()
    tu = cpp.translation_unit([src for group in groups.values() for src in group], libmvec)
    lib = build.load(tu, options, units(list(groups.values()), libmvec))
    libs: dict = {}
    for name, (src, spec) in sources.items():
        if name in tuned:
            fn = _bind(lib, name, spec, extra=extra[name])
            n_bufs = sum(a.kind is ArgKind.POINTER for a in spec)
            libs[name] = (TunedKernel(fn, name, src, n_bufs), spec)
        else:
            libs[name] = (_bind(lib, name, spec), spec)
    for name, spec, names in segments:
        libs[f"seg:{names[0]}"] = (_bind(lib, name, spec), spec, names)
    return libs, tu
