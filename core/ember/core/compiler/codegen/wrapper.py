"""The wrapper of a compiled graph: binds sizes, allocates, calls kernels and externs.

``plan`` decides what the wrapper does (which buffers to allocate, reuse or overwrite in
place, which kernels and ATen calls to make, in order) as a list of typed steps; renderers
only spell them: ``PythonWrapper`` here (exec'd by the JIT, printed by
``EMBER_LOGS=output_code``), ``codegen/cpp_wrapper.py`` for ahead-of-time packages. Dead
buffers of the same layout are reused for later kernel outputs.
"""

from __future__ import annotations

from typing import NamedTuple

import sympy
import torch

from ember.core.compiler import ir
from ember.core.compiler.codegen.common import ArgKind, py_index
from ember.core.compiler.ir import Buffer, Extern, StridedView, Unsupported
from ember.core.compiler.schedule import Kernel

aten = torch.ops.aten


class BindInput(NamedTuple):
    pos: int
    name: str


class BindSize(NamedTuple):
    """``sym = <buf>.size(dim)`` (or ``.stride(dim)``): where a size symbol comes from."""

    sym: sympy.Symbol
    buf: Buffer
    what: str  # "size" | "stride"
    dim: int


class BindSymbol(NamedTuple):
    """A size symbol passed as its own graph input."""

    pos: int
    sym: sympy.Symbol


class FixStrides(NamedTuple):
    """Inputs whose strides must equal the compiled ones (copied only when they differ)."""

    bufs: list


class Alias(NamedTuple):
    """A kernel output written into a dead buffer (``why``: "in place" or "reuse");
    ``layout``: the output's buffer when its sizes or strides differ from the dead one's (the
    same dense memory seen through other dimensions: the alias is a view in its layout)."""

    name: str
    src: str
    why: str
    layout: Buffer | None = None


class Alloc(NamedTuple):
    buf: Buffer


class CallKernel(NamedTuple):
    name: str  # the kernel (or segment: a run of kernels) entry
    key: str  # its entry in the loaded ``libs``
    spec: list  # KernelArg list


class CallExtern(NamedTuple):
    """``out``: the call writes its one output into the buffer the plan allocated or reused
    for it (the op's ``out=`` form, ``OUT_VARIANTS``), not into a tensor ATen allocates."""

    step: Extern
    out: bool = False


class Check(NamedTuple):
    """Raise IndexError(message) when the kernels set ``flag``."""

    flag: StridedView
    message: str


class Return(NamedTuple):
    outputs: list  # StridedView | None


class Release(NamedTuple):
    """Drop the handles of buffers no later step names: their memory goes back to the
    allocator for the call's later allocations, still warm in cache, instead of every
    buffer living until the call returns (and each call writing into cold memory)."""

    names: list


class TakeArena(NamedTuple):
    """Take a ready arena from the graph's free list, or make one (``codegen/arena.py``):
    ``slots`` holds (buffer, byte offset) per buffer it carries."""

    nbytes: int
    slots: list


class ArenaBuffer(NamedTuple):
    """``buf`` is the arena's view at ``slot`` (in place of an ``Alloc``)."""

    buf: Buffer
    slot: int


class GiveArena(NamedTuple):
    """Put the arena back on the free list for the next call."""


WrapperStep = (BindInput | BindSize | BindSymbol | FixStrides | Alias | Alloc | CallKernel |
               CallExtern | Check | Return | Release | TakeArena | ArenaBuffer | GiveArena)


# Extern ops called through their ``out=`` form when the wrapper may (``plan(extern_out=True)``):
# op -> the Python binding taking ``out=`` (torch's C++ fast path, not OpOverload.__call__)
OUT_VARIANTS: dict = {
    aten.mm.default: torch.mm,
    aten.addmm.default: torch.addmm,
    aten.bmm.default: torch.bmm,
    aten.baddbmm.default: torch.baddbmm,
}


# Extern ops the Python wrapper calls through torch's own binding for them (arguments parsed
# in C++, the schema's names and order) rather than OpOverload.__call__'s boxed call, which
# costs about 4 us more per call (a mobilenet forward makes 52 convolutions)
BINDINGS: dict = {
    aten.convolution.default: torch.convolution,
    aten.cat.default: torch.cat,
    aten.constant_pad_nd.default: torch.constant_pad_nd,
    aten.embedding.default: torch.embedding,
    aten.index_select.default: torch.index_select,
    aten.gather.default: torch.gather,
    aten.cumsum.default: torch.cumsum,
    aten.argmax.default: torch.argmax,
    aten.argmin.default: torch.argmin,
    aten.topk.default: torch.topk,
    aten.native_dropout.default: torch.native_dropout,
    aten._adaptive_avg_pool2d.default: torch._adaptive_avg_pool2d,
    aten.avg_pool2d.default: torch._C._nn.avg_pool2d,
    aten.max_pool2d_with_indices.default: torch._C._nn.max_pool2d_with_indices,
}


def _out_variant(step: Extern, buffers: dict) -> Buffer | None:
    """The buffer an extern may write through its ``out=`` form: a listed op returning one
    row-major contiguous tensor (the layout ATen would allocate for it)."""
    if step.fallback or step.out_tree != "single" or step.op not in OUT_VARIANTS:
        return None
    b = step.outs[0]
    if b is None or not b.size:
        return None
    return b if ir.same_sizes(list(b.stride), ir.contiguous_strides(b.size)) else None


def layout_key(b: Buffer) -> tuple:
    """Buffers of one key can hold each other's values: dense layouts of as many elements
    of one dtype (an NHWC kernel output and a channels-last NCHW one), else equal layouts."""
    if _dense(b):
        return ("dense", str(sympy.expand(ir.numel(b.size))), b.dtype)
    return (tuple(map(str, b.size)), tuple(map(str, b.stride)), b.dtype)


def _dense(b: Buffer) -> bool:
    """Its elements fill its memory without gaps or overlaps (in some order of its dims)."""
    left = [d for d in range(len(b.size)) if not ir.same(b.size[d], sympy.Integer(1))]
    acc = sympy.Integer(1)
    while left:
        d = next((d for d in left if ir.same(b.stride[d], acc)), None)
        if d is None:
            return False
        left.remove(d)
        acc = acc * b.size[d]
    return True


def may_alias(op) -> bool:
    """Whether an extern's result may share memory with an argument (its schema says so, or
    it has none: a higher-order op)."""
    schema = getattr(op, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _alias(b: Buffer, src: Buffer, why: str) -> Alias:
    same = ir.same_sizes(b.size, src.size) and ir.same_sizes(b.stride, src.stride)
    return Alias(b.name, src.name, why, None if same else b)


class _Planner:
    def __init__(self, inputs, outputs, checks, specs, segments, inplace, extern_out=False):
        self.inputs, self.outputs, self.checks = inputs, outputs, checks
        self.specs, self.segments, self.inplace = specs, segments, inplace
        self.extern_out = extern_out
        self.bound: set = set()
        self.out: list = []

    def need(self, exprs) -> None:
        for e in exprs:
            missing = sympy.sympify(e).free_symbols - self.bound
            if missing:
                raise Unsupported(f"size symbols {sorted(map(str, missing))} are not bound "
                                  f"by any input")

    def need_arg(self, a) -> None:
        if isinstance(a, StridedView):
            if not a.is_natural():
                self.need(a.size + a.stride + [a.offset])
        elif isinstance(a, sympy.Expr):
            self.need([a])
        elif isinstance(a, (list, tuple)):
            for x in a:
                self.need_arg(x)

    def bind(self) -> None:
        def bind_from(inp: Buffer, what: str) -> None:
            for d, e in enumerate(getattr(inp, what)):
                if isinstance(e, sympy.Symbol) and e not in self.bound:
                    self.out.append(BindSize(e, inp, what, d))
                    self.bound.add(e)

        for pos, inp in enumerate(self.inputs):
            if isinstance(inp, Buffer):
                self.out.append(BindInput(pos, inp.name))
                bind_from(inp, "size")
            elif isinstance(inp, sympy.Symbol) and inp not in self.bound:
                self.out.append(BindSymbol(pos, inp))
                self.bound.add(inp)
        # a stride gives only the symbols no size does: it equals a size only in the layout
        # the graph was traced with (a dimension of size 1 may have any stride)
        for inp in self.inputs:
            if isinstance(inp, Buffer):
                bind_from(inp, "stride")
        fixes = [inp for inp in self.inputs if isinstance(inp, Buffer) and inp.size]
        for inp in fixes:
            self.need(inp.size + inp.stride)
        if fixes:
            self.out.append(FixStrides(fixes))

    def run(self, steps: list, buffers: dict) -> list:
        self.bind()
        input_names = {b.name for b in self.inputs if isinstance(b, Buffer)}
        last_use: dict[str, int] = {}
        for i, step in enumerate(steps):
            names = ([b.name for b in step.reads] if isinstance(step, Extern) else
                     [a.value for a in self.specs[step.name] if a.kind is not ArgKind.SIZE])
            for n in names:
                last_use[n] = i
        out_names = {o.buf.name for o in self.outputs if isinstance(o, StridedView)}
        out_names |= {c.flag.buf.name for c in self.checks}  # read after every kernel
        pool: dict[tuple, list[str]] = {}
        reusable: set[str] = set()
        segment = None  # the native entry running the current run of kernels
        for i, step in enumerate(steps):
            if isinstance(step, Extern):
                self.need_arg(list(step.args))
                self.need_arg(list(step.kwargs.values()))
                for b in step.outs:
                    if b is not None and b.size:
                        self.need(b.size + b.stride)
                dst = _out_variant(step, buffers) if self.extern_out else None
                if dst is not None:  # its inputs are still live: only dead buffers are pooled
                    key = layout_key(dst)
                    self.out.append(_alias(dst, buffers[pool[key].pop()], "reuse")
                                    if pool.get(key) else Alloc(dst))
                self.out.append(CallExtern(step, dst is not None))
                if may_alias(step.op):
                    reusable -= {b.name for b in step.reads}
                else:  # fresh tensors: their memory may serve later kernels
                    reusable |= {b.name for b in step.outs if b is not None and b.name not in
                                 out_names and b.name in last_use}
            else:
                segment = self.segments.get(step.name, segment)
                inplace = _inplace_candidates(step, {n for n in reusable if last_use[n] == i},
                                              buffers) if self.inplace else {}
                for b in step.outputs:
                    self.need(b.size + b.stride)
                    if b.name in input_names:  # the kernel writes a graph input in place
                        continue
                    key = layout_key(b)
                    src = inplace.get(b.name)
                    if src is not None and layout_key(src) == key:
                        self.out.append(_alias(b, src, "in place"))
                        reusable.discard(src.name)
                        inplace = {k: v for k, v in inplace.items() if v is not src}
                    elif pool.get(key):
                        self.out.append(_alias(b, buffers[pool[key].pop()], "reuse"))
                    else:
                        self.out.append(Alloc(b))
                    if b.name not in out_names:
                        reusable.add(b.name)
                if segment is None:
                    self.need([a.value for a in self.specs[step.name]
                               if a.kind is ArgKind.SIZE])
                    self.out.append(CallKernel(step.name, step.name, self.specs[step.name]))
                elif step.name == segment[2][-1]:  # allocations done: run the whole segment
                    seg_spec = segment[1]
                    self.need([a.value for a in seg_spec if a.kind is ArgKind.SIZE])
                    self.out.append(CallKernel(f"seg_{segment[2][0]}", f"seg:{segment[2][0]}",
                                               seg_spec))
                    segment = None
            for n, last in last_use.items():
                if last == i and n in reusable:
                    pool.setdefault(layout_key(buffers[n]), []).append(n)
                    reusable.discard(n)
        for c in self.checks:
            self.need_arg(c.flag)
            self.out.append(Check(c.flag, c.message))
        for o in self.outputs:
            if o is not None:
                self.need_arg(o)
        self.out.append(Return(list(self.outputs)))
        return _with_releases(self.out)


def _names_in(a) -> set:
    if isinstance(a, StridedView):
        return {a.buf.name}
    if isinstance(a, (list, tuple)):
        return set().union(*map(_names_in, a))
    return set()


# the buffers each kind of step brings into being, and the buffer names each step mentions
_MADE = {
    Alloc: lambda s: {s.buf.name},
    Alias: lambda s: {s.name},
    CallExtern: lambda s: {b.name for b in s.step.outs if b is not None},
}


def _extern_names(s: CallExtern) -> set:
    return _names_in(s.step.args) | _names_in(list(s.step.kwargs.values())) | \
        _MADE[CallExtern](s)


_NAMES = {
    BindInput: lambda s: {s.name},
    BindSize: lambda s: {s.buf.name},
    BindSymbol: lambda s: set(),
    FixStrides: lambda s: {b.name for b in s.bufs},
    Alias: lambda s: {s.name, s.src},
    Alloc: lambda s: {s.buf.name},
    ArenaBuffer: lambda s: {s.buf.name},
    CallKernel: lambda s: {a.value for a in s.spec if a.kind is not ArgKind.SIZE},
    CallExtern: _extern_names,
    Check: lambda s: {s.flag.buf.name},
    Return: lambda s: _names_in(s.outputs),
}


def _with_releases(steps: list) -> list:
    """``steps`` with a ``Release`` after the last step naming each buffer the wrapper made
    (inputs and constants belong to the caller; outputs live on)."""
    made: set = set()
    last: dict[str, int] = {}
    for i, s in enumerate(steps):
        if type(s) in _MADE:
            made |= _MADE[type(s)](s)
        for n in _NAMES[type(s)](s):
            last[n] = i
    dead: dict[int, list] = {}
    for n, i in last.items():
        if n in made and not isinstance(steps[i], Return):
            dead.setdefault(i, []).append(n)
    out = []
    for i, s in enumerate(steps):
        out.append(s)
        if i in dead:
            out.append(Release(sorted(dead[i], key=lambda n: (len(n), n))))
    return out


def plan(inputs: list, outputs: list, checks: list, steps: list, specs: dict,
         buffers: dict, *, inplace: bool = True, segments: dict | None = None,
         extern_out: bool = False) -> list[WrapperStep]:
    """The wrapper's steps for one graph.

    ``specs[kernel]``: its argument list; ``segments[kernel]``: the native entry
    ``(name, spec, kernel names)`` a run of kernels starting there is called through;
    ``inplace``: outputs may overwrite dying inputs (off when kernels are re-run to tune);
    ``extern_out``: ``OUT_VARIANTS`` ops write into buffers the plan allocates or reuses
    (the Python renderer's; the C++ one calls every op boxed).
    """
    return _Planner(inputs, outputs, checks or [], specs, segments or {}, inplace,
                    extern_out).run(steps, buffers)


def _inplace_candidates(k: Kernel, dying: set, buffers: dict) -> dict:
    """Outputs that may overwrite a buffer dying in this kernel: in a single pointwise loop,
    the dying buffer is read by that output's item alone, only at the element it stores."""
    if len(k.stages) != 1 or any(it.kind != "store" for it in k.stages[0].items):
        return {}
    readers: dict[str, list] = {}
    gathered = set().union(*(ir.gathered(it.expr) for it in k.stages[0].items))
    dying = dying - gathered  # read at data-dependent places: never overwritten in place
    for it in k.stages[0].items:
        loads = ir.loads(it.expr)
        for src in {ld.buf for ld in loads if ld.buf in dying}:
            idx = {ld.index for ld in loads if ld.buf == src}
            readers.setdefault(src, []).append((it, idx))
    stored = {b.name for b in k.outputs}
    out = {}
    for src, users in readers.items():
        if len(users) == 1:
            it, idx = users[0]
            if it.node.buf.name in stored and it.node.buf.name not in out and idx == {it.index}:
                out[it.node.buf.name] = buffers[src]
    return out


# ---------------------------------------------------------------- the Python renderer


def _fix_strides(t: torch.Tensor, size: tuple, stride: tuple,
                 dtype: torch.dtype | None = None) -> torch.Tensor:
    """Return ``t`` laid out with ``stride`` (a copy only when a real dim disagrees) and, where
    given, of ``dtype``: the fake kernel's dtype, which later kernels read the buffer as (the
    CPU kernel of ``_batch_norm_with_update_functional`` returns bfloat16 running statistics
    where its fake kernel says float32).

    ``None`` stays ``None``: an extern may return an undefined tensor where its fake kernel
    made an empty one (CUDA flash attention's debug mask)."""
    if t is None:
        return t
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if t.stride() == stride:
        return t
    if all(s == 1 or a == b for s, a, b in zip(size, t.stride(), stride)):
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _make_arena(nbytes: int, slots: list) -> list[torch.Tensor]:
    """A fresh arena (``TakeArena``): one allocation and each slot's view of it, in slot
    order; made outside inference mode, so a later call outside it may write the views."""
    with torch.inference_mode(False):
        base = torch.empty(nbytes, dtype=torch.uint8).untyped_storage()
        views = []
        for b, offset in slots:
            t = torch.empty(0, dtype=b.dtype)
            t.set_(base, offset // t.element_size(), [int(s) for s in b.size],
                   [int(s) for s in b.stride])
            views.append(t)
    return views


def _view(t: torch.Tensor, size: tuple, stride: tuple, offset: int) -> torch.Tensor:
    """A view of ``t`` with ``offset`` counted from ``t``'s first element.

    ``torch.as_strided`` counts the offset from the start of the storage, and a buffer can
    itself be a view (an extern such as ``unfold`` returns one) that starts further in.
    """
    return t.as_strided(size, stride, t.storage_offset() + offset)


# torch's C++ helpers for generated wrappers (what Inductor's wrappers call): the same
# results as ``_view`` and ``torch.empty_strided`` on CPU at about half the per-call cost
_guards = getattr(torch._C._dynamo, "guards", None)
_fast_view = getattr(_guards, "_reinterpret_tensor", None) or _view
_fast_empty_cpu = getattr(_guards, "_empty_strided_cpu", None) or \
    (lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype))


def _tup(xs) -> str:
    return "(" + "".join(py_index(x) + ", " for x in xs) + ")"


class PythonWrapper:
    """Spells a plan as ``def call(args)`` Python source plus the globals it needs."""

    def __init__(self, constants: dict, libs: dict, device: str = "cpu"):
        self.libs = libs
        self.device = "" if device == "cpu" else f", device={device!r}"  # allocations
        self.lines: list[str] = []
        self.globals: dict = {"torch": torch, "_fix": _fix_strides, "_view": _fast_view,
                              "_empty": torch.empty_strided, "_empty_cpu": _fast_empty_cpu}
        self.globals.update(constants)

    def _const(self, value) -> str:
        name = f"c{len(self.globals)}"
        self.globals[name] = value
        return name

    def _arg(self, a) -> str:
        if isinstance(a, StridedView):
            if a.is_natural():
                return a.buf.name
            return f"_view({a.buf.name}, {_tup(a.size)}, {_tup(a.stride)}, {py_index(a.offset)})"
        if isinstance(a, sympy.Expr):
            return py_index(a) if a.is_integer else f"float({py_index(a)})"
        if isinstance(a, (list, tuple)):
            inner = "".join(self._arg(x) + ", " for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner})"
        if a is None or isinstance(a, (bool, int, str)):
            return repr(a)
        if isinstance(a, float):
            return repr(a) if a == a and abs(a) != float("inf") else self._const(a)
        return self._const(a)

    def render(self, steps: list[WrapperStep]) -> tuple[str, dict]:
        for s in steps:
            getattr(self, "_" + type(s).__name__)(s)
        src = "def call(args):\n" + "\n".join("    " + ln for ln in self.lines) + "\n"
        return src, self.globals

    def _BindInput(self, s: BindInput):
        self.lines.append(f"{s.name} = args[{s.pos}]")

    def _BindSize(self, s: BindSize):
        self.lines.append(f"{s.sym.name} = {s.buf.name}.{s.what}({s.dim})")

    def _BindSymbol(self, s: BindSymbol):
        self.lines.append(f"{s.sym.name} = args[{s.pos}]")

    def _FixStrides(self, s: FixStrides):
        # one comparison on the common path, the per-input check only on a miss
        got = "".join(f"{b.name}.stride(), " for b in s.bufs)
        want = "".join(f"{_tup(b.stride)}, " for b in s.bufs)
        self.lines.append(f"if ({got}) != ({want}):")
        self.lines += [f"    {b.name} = _fix({b.name}, {_tup(b.size)}, {_tup(b.stride)})"
                       for b in s.bufs]

    def _Alias(self, s: Alias):
        if s.layout is None:
            self.lines.append(f"{s.name} = {s.src}  # {s.why}")
        else:
            b = s.layout
            self.lines.append(f"{s.name} = _view({s.src}, {_tup(b.size)}, {_tup(b.stride)}, 0)"
                              f"  # {s.why}")

    def _Alloc(self, s: Alloc):
        b = s.buf
        if not self.device:
            self.lines.append(f"{b.name} = _empty_cpu({_tup(b.size)}, {_tup(b.stride)}, "
                              f"{b.dtype})")
        else:
            self.lines.append(f"{b.name} = _empty({_tup(b.size)}, {_tup(b.stride)}, "
                              f"dtype={b.dtype}{self.device})")

    def _TakeArena(self, s: TakeArena):
        self.globals["_arenas"] = []
        self.globals["_new_arena"] = lambda: _make_arena(s.nbytes, s.slots)
        self.lines.append(f"_a = _arenas.pop() if _arenas else _new_arena()  # {s.nbytes} bytes")

    def _ArenaBuffer(self, s: ArenaBuffer):
        self.lines.append(f"{s.buf.name} = _a[{s.slot}]")

    def _GiveArena(self, s: GiveArena):
        self.lines.append("_arenas.append(_a)")

    def _CallKernel(self, s: CallKernel):
        self.globals[s.name] = self.libs[s.key][0]
        args = [f"{a.value}.data_ptr()" if a.kind is ArgKind.POINTER else
                a.value if a.kind is ArgKind.TENSOR else py_index(a.value) for a in s.spec]
        self.lines.append(f"{s.name}({', '.join(args)})")

    def _CallExtern(self, s: CallExtern):
        step = s.step
        if s.out:
            fn = self._const(OUT_VARIANTS[step.op])
            args = "".join(self._arg(a) + ", " for a in step.args)
            kwargs = "".join(f"{k}={self._arg(v)}, " for k, v in step.kwargs.items())
            b = step.outs[0]
            self.lines.append(f"{fn}({args}{kwargs}out={b.name})  # {step.op}, out=")
            return
        fast = BINDINGS.get(step.op)
        op = self._const(fast if fast is not None and "self" not in step.kwargs else step.op)
        kwargs = ", ".join(f"{k!r}: {self._arg(v)}" for k, v in step.kwargs.items())
        call = f"{op}(*{self._arg(tuple(step.args))}, **{{{kwargs}}})  # {step.op}"
        if step.out_tree == "single":
            b = step.outs[0]
            # an op that returns nothing (one_hot's _assert_async checks) is a bare call
            self.lines.append(call if b is None else f"{b.name} = {call}")
        else:
            self.lines.append(f"_r = {call}")
            for k, b in enumerate(step.outs):
                if b is not None:
                    self.lines.append(f"{b.name} = _r[{k}]")
            self.lines.append("del _r")
        for b in step.outs:
            if b is not None:
                self.lines.append(f"{b.name} = _fix({b.name}, {_tup(b.size)}, {_tup(b.stride)}, "
                                  f"{b.dtype})")

    def _Check(self, s: Check):
        self.lines.append(f"if {self._arg(s.flag)}.item(): raise IndexError({s.message!r})")

    def _Release(self, s: Release):
        self.lines.append(f"del {', '.join(s.names)}")

    def _Return(self, s: Return):
        rets = ["None" if o is None else self._arg(o) for o in s.outputs]
        self.lines.append(f"return [{', '.join(rets)}]")


def segments_of(libs: dict) -> dict:
    """``plan``'s ``segments`` from the libs ``cpp_kernels.load`` returns."""
    return {key[4:]: entry for key, entry in libs.items() if key.startswith("seg:")}


def specs_of(libs: dict) -> dict:
    return {key: entry[1] for key, entry in libs.items() if not key.startswith("seg:")}
