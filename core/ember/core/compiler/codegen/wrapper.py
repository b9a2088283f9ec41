"""The Python wrapper of a compiled graph: binds sizes, allocates, calls kernels and externs.

It is generated as Python source (printed by ``EMBER_LOGS=output_code``) and exec'd; kernels
are called through ctypes with data pointers and int64 sizes. Dead buffers of the same
layout are reused for later kernel outputs.
"""

from __future__ import annotations

import sympy
import torch

from ember.core.compiler import ir, modes
from ember.core.compiler.codegen.common import ArgKind, py_index
from ember.core.compiler.ir import Buffer, Extern, StridedView, Unsupported
from ember.core.compiler.schedule import Kernel


def _fix_strides(t: torch.Tensor, size: tuple, stride: tuple) -> torch.Tensor:
    """Return ``t`` laid out with ``stride`` (a copy only when a real dim disagrees)."""
    if t.stride() == stride:
        return t
    if all(s == 1 or a == b for s, a, b in zip(size, t.stride(), stride)):
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


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


class WrapperBuilder:
    """Generates ``call(args)`` for one graph."""

    def __init__(self, inputs: list, constants: dict, outputs: list, device: str = "cpu",
                 options: dict | None = None, checks: list | None = None):
        self.inputs, self.constants, self.outputs = inputs, constants, outputs
        self.checks: list[ir.IndexCheck] = checks or []
        # a tuned kernel re-runs on its real arguments: none of them may be overwritten
        self.inplace = not modes.tunes_kernels(options)
        self.device = "" if device == "cpu" else f", device={device!r}"  # allocations
        self.lines: list[str] = []
        self.globals: dict = {"torch": torch, "_fix": _fix_strides, "_view": _fast_view,
                              "_empty": torch.empty_strided, "_empty_cpu": _fast_empty_cpu}
        self.bound: set = set()

    def _const(self, value) -> str:
        name = f"c{len(self.globals)}"
        self.globals[name] = value
        return name

    def _bind(self) -> None:
        for pos, inp in enumerate(self.inputs):
            if isinstance(inp, Buffer):
                self.lines.append(f"{inp.name} = args[{pos}]")
                for d, (s, st) in enumerate(zip(inp.size, inp.stride)):
                    for e, what in ((s, "size"), (st, "stride")):
                        if isinstance(e, sympy.Symbol) and e not in self.bound:
                            self.lines.append(f"{e.name} = {inp.name}.{what}({d})")
                            self.bound.add(e)
            elif isinstance(inp, sympy.Symbol) and inp not in self.bound:
                self.lines.append(f"{inp.name} = args[{pos}]")
                self.bound.add(inp)
        fixes = [inp for inp in self.inputs if isinstance(inp, Buffer) and inp.size]
        for inp in fixes:
            self._need(inp.size + inp.stride)
        if fixes:  # one comparison on the common path, the per-input check only on a miss
            got = "".join(f"{inp.name}.stride(), " for inp in fixes)
            want = "".join(f"{_tup(inp.stride)}, " for inp in fixes)
            self.lines.append(f"if ({got}) != ({want}):")
            self.lines += [f"    {inp.name} = _fix({inp.name}, {_tup(inp.size)}, "
                           f"{_tup(inp.stride)})" for inp in fixes]
        for name, t in self.constants.items():
            self.globals[name] = t

    def _need(self, exprs) -> None:
        for e in exprs:
            missing = sympy.sympify(e).free_symbols - self.bound
            if missing:
                raise Unsupported(f"size symbols {sorted(map(str, missing))} are not bound "
                                  f"by any input")

    def _arg(self, a) -> str:
        if isinstance(a, StridedView):
            if a.is_natural():
                return a.buf.name
            self._need(a.size + a.stride + [a.offset])
            return f"_view({a.buf.name}, {_tup(a.size)}, {_tup(a.stride)}, {py_index(a.offset)})"
        if isinstance(a, sympy.Expr):
            self._need([a])
            return py_index(a) if a.is_integer else f"float({py_index(a)})"
        if isinstance(a, (list, tuple)):
            inner = "".join(self._arg(x) + ", " for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner})"
        if a is None or isinstance(a, (bool, int, str)):
            return repr(a)
        if isinstance(a, float):
            return repr(a) if a == a and abs(a) != float("inf") else self._const(a)
        return self._const(a)

    def generate(self, steps: list, libs: dict, buffers: dict) -> tuple[str, dict]:
        self._bind()
        last_use: dict[str, int] = {}
        for i, step in enumerate(steps):
            names = ([b.name for b in step.reads] if isinstance(step, Extern) else
                     list(_kernel_args(libs, step)))
            for n in names:
                last_use[n] = i
        out_names = {o.buf.name for o in self.outputs if isinstance(o, StridedView)}
        out_names |= {c.flag.buf.name for c in self.checks}  # read after every kernel
        pool: dict[str, list[str]] = {}
        reusable: set[str] = set()
        segment = None  # reduce-overhead: the native entry running the current kernel run
        for i, step in enumerate(steps):
            if isinstance(step, Extern):
                self._extern(step)
                schema = getattr(step.op, "_schema", None)  # None: a higher-order op
                aliasing = schema is None or any(r.alias_info is not None
                                                 for r in schema.returns)
                if aliasing:
                    reusable -= {b.name for b in step.reads}
                else:  # fresh tensors: their memory may serve later kernels
                    reusable |= {b.name for b in step.outs if b is not None and b.name not in
                                 out_names and b.name in last_use}
            else:
                fn, arg_spec = libs[step.name]
                segment = libs.get(f"seg:{step.name}", segment)
                inplace = _inplace_candidates(step, {n for n in reusable if last_use[n] == i},
                                              buffers) if self.inplace else {}
                for b in step.outputs:
                    self._need(b.size + b.stride)
                    key = f"{_tup(b.size)}{_tup(b.stride)}{b.dtype}"
                    src = inplace.get(b.name)
                    if src is not None and f"{_tup(src.size)}{_tup(src.stride)}{src.dtype}" == key:
                        self.lines.append(f"{b.name} = {src.name}  # in place")
                        reusable.discard(src.name)
                        inplace = {k: v for k, v in inplace.items() if v is not src}
                    elif pool.get(key):
                        self.lines.append(f"{b.name} = {pool[key].pop()}  # reuse")
                    elif not self.device:
                        self.lines.append(f"{b.name} = _empty_cpu({_tup(b.size)}, "
                                          f"{_tup(b.stride)}, {b.dtype})")
                    else:
                        self.lines.append(f"{b.name} = _empty({_tup(b.size)}, "
                                          f"{_tup(b.stride)}, dtype={b.dtype}{self.device})")
                    if b.name not in out_names:
                        reusable.add(b.name)
                if segment is None:
                    self._call(step.name, fn, arg_spec)
                elif step.name == segment[2][-1]:  # allocations done: run the whole segment
                    self._call(f"seg_{segment[2][0]}", segment[0], segment[1])
                    segment = None
            for n, last in last_use.items():
                if last == i and n in reusable:
                    b = self._buffer(steps, n)
                    key = f"{_tup(b.size)}{_tup(b.stride)}{b.dtype}"
                    pool.setdefault(key, []).append(n)
                    reusable.discard(n)
        for c in self.checks:
            self.lines.append(f"if {self._arg(c.flag)}.item(): raise IndexError({c.message!r})")
        rets = []
        for o in self.outputs:
            rets.append("None" if o is None else self._arg(o))
        self.lines.append(f"return [{', '.join(rets)}]")
        src = "def call(args):\n" + "\n".join("    " + ln for ln in self.lines) + "\n"
        return src, self.globals

    def _call(self, name: str, fn, arg_spec: list) -> None:
        self.globals[name] = fn
        args = [f"{a.value}.data_ptr()" if a.kind is ArgKind.POINTER else
                a.value if a.kind is ArgKind.TENSOR else py_index(a.value) for a in arg_spec]
        for a in arg_spec:
            if a.kind is ArgKind.SIZE:
                self._need([a.value])
        self.lines.append(f"{name}({', '.join(args)})")

    @staticmethod
    def _buffer(steps, name):
        for s in steps:
            outs = s.outs if isinstance(s, Extern) else s.outputs
            for b in outs:
                if b is not None and b.name == name:
                    return b
        raise KeyError(name)

    def _extern(self, step: Extern) -> None:
        op = self._const(step.op)
        kwargs = ", ".join(f"{k!r}: {self._arg(v)}" for k, v in step.kwargs.items())
        call = f"{op}(*{self._arg(tuple(step.args))}, **{{{kwargs}}})  # {step.op}"
        outs = [b for b in step.outs]
        if step.out_tree == "single":
            self.lines.append(f"{outs[0].name} = {call}")
        else:
            self.lines.append(f"_r = {call}")
            for k, b in enumerate(outs):
                if b is not None:
                    self.lines.append(f"{b.name} = _r[{k}]")
        for b in outs:
            if b is not None and b.size:
                self._need(b.size + b.stride)
                self.lines.append(f"{b.name} = _fix({b.name}, {_tup(b.size)}, {_tup(b.stride)})")


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


def _kernel_args(libs, k: Kernel):
    _, spec = libs[k.name]
    return [a.value for a in spec if a.kind is not ArgKind.SIZE]
