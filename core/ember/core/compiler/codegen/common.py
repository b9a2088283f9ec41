"""What both code generators and the wrapper share: printing index expressions (C++ or
Python) and a kernel's signature (the buffers and size symbols it takes, in argument order).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

import sympy

from ember.core.compiler import ir
from ember.core.compiler.schedule import Kernel


class _IndexPrinter:
    """Prints a non-negative integer index expression over sizes and loop variables; a
    language overrides the spellings that differ (division, conversion to float, min/max)."""

    floordiv = "/"

    def true_div(self, a: str, b: str) -> str:
        raise NotImplementedError

    def float_div(self, num: str, den: str) -> str:
        """A product with a denominator in a float-valued expression."""
        raise NotImplementedError

    def to_float(self, a: str) -> str:
        raise NotImplementedError

    def min_max(self, fn: str, args: list[str]) -> str:
        raise NotImplementedError

    def to_int(self, rounding: str, a: str) -> str:
        """A float index expression rounded to an integer: "trunc", "floor" or "ceil"."""
        raise NotImplementedError

    def __call__(self, e) -> str:
        p = self
        e = sympy.sympify(e)
        if e.is_Integer:
            return str(int(e))
        if e.is_Float:
            return repr(float(e))
        if e.is_Symbol:
            return e.name
        if e.is_Add:
            return "(" + " + ".join(p(a) for a in e.args) + ")"
        if e.is_Mul:
            num, den = sympy.fraction(e)
            if den != 1 and _is_float_expr(e):
                return self.float_div(p(num), p(den))
            if den != 1:
                return p(sympy.floor(e))
            return "(" + " * ".join(p(a) for a in e.args) + ")"
        if e.is_Pow and e.exp.is_Integer and e.exp > 0:
            return "(" + " * ".join([p(e.base)] * int(e.exp)) + ")"
        div = self.floordiv
        if isinstance(e, sympy.floor):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return f"({p(num)} {div} {p(den)})"
        if isinstance(e, sympy.Mod):
            return f"({p(e.args[0])} % {p(e.args[1])})"
        if isinstance(e, (sympy.Max, sympy.Min)):
            return self.min_max("max" if isinstance(e, sympy.Max) else "min",
                                [p(x) for x in e.args])
        name = type(e).__name__  # torch's shape-env functions (torch.utils._sympy.functions)
        a = [p(x) for x in e.args]
        if name in ("FloorDiv", "CleanDiv") and len(a) == 2:
            return f"({a[0]} {div} {a[1]})"
        if name in ("IntTrueDiv", "FloatTrueDiv") and len(a) == 2:
            return self.true_div(a[0], a[1])
        if name == "ToFloat" and len(a) == 1:
            return self.to_float(a[0])
        if name in ("PythonMod", "Mod") and len(a) == 2:
            return f"({a[0]} % {a[1]})"
        if name == "ModularIndexing" and len(a) == 3:
            return f"(({a[0]} {div} {a[1]}) % {a[2]})"
        if name == "CeilDiv" and len(a) == 2:
            return f"(({a[0]} + {a[1]} - 1) {div} {a[1]})"
        if name in ("Max", "Min") and a:  # torch's own Max/Min (not sympy's classes)
            return self.min_max(name.lower(), a)
        if name == "Identity" and len(a) == 1:
            return a[0]
        if name in ("TruncToInt", "FloorToInt", "CeilToInt") and len(a) == 1:
            return self.to_int(name[:-5].lower(), a[0])
        raise ir.Unsupported(f"cannot print index {e!r}")  # the graph falls back to eager


class _CppIndexPrinter(_IndexPrinter):
    floordiv = "/"

    def true_div(self, a, b):
        return f"(static_cast<double>({a}) / static_cast<double>({b}))"

    def float_div(self, num, den):
        return f"(static_cast<double>({num}) / {den})"

    def to_float(self, a):
        return f"static_cast<double>({a})"

    def to_int(self, rounding, a):
        return f"static_cast<int64_t>({a})" if rounding == "trunc" else \
            f"static_cast<int64_t>(std::{rounding}({a}))"

    def min_max(self, fn, args):
        cmp = ">" if fn == "max" else "<"
        out = args[0]
        for b in args[1:]:
            out = f"(({out}) {cmp} ({b}) ? ({out}) : ({b}))"
        return out


class _PyIndexPrinter(_IndexPrinter):
    floordiv = "//"

    def true_div(self, a, b):
        return f"({a} / {b})"

    float_div = true_div

    def to_float(self, a):
        return f"float({a})"

    def to_int(self, rounding, a):
        if rounding == "trunc":
            return f"int({a})"
        return f"int(({a}) // 1)" if rounding == "floor" else f"(-int((-({a})) // 1))"

    def min_max(self, fn, args):
        return f"{fn}({', '.join(args)})"


cpp_index = _CppIndexPrinter()  # C++ kernels
py_index = _PyIndexPrinter()  # the Python wrapper, Triton kernels and launchers


def _is_float_expr(e) -> bool:
    return any(a.is_Float for a in e.atoms(sympy.Number)) or any(
        type(f).__name__ in ("ToFloat", "FloatTrueDiv", "IntTrueDiv")
        for f in e.atoms(sympy.Function))


class ArgKind(enum.Enum):
    """How the wrapper passes a kernel argument."""

    POINTER = "pointer"  # a buffer's data pointer (C++ kernels, called through ctypes)
    TENSOR = "tensor"  # the tensor itself (Triton kernels)
    SIZE = "size"  # an int64 size symbol


class KernelArg(NamedTuple):
    kind: ArgKind
    value: object  # the buffer's name (POINTER, TENSOR) or the size symbol (SIZE)


@dataclass(frozen=True)
class Signature:
    """A kernel's arguments: buffers it only reads (sorted), buffers it writes, then the size
    symbols its loops and indices need (sorted by name)."""

    inputs: list[str]
    outputs: list[str]
    syms: list[sympy.Symbol]

    def args(self, buffers: ArgKind) -> list[KernelArg]:
        """The argument list, buffers passed as ``buffers`` (POINTER or TENSOR)."""
        return [KernelArg(buffers, b) for b in self.inputs + self.outputs] + \
            [KernelArg(ArgKind.SIZE, s) for s in self.syms]


def signature(k: Kernel, private: frozenset[str] = frozenset()) -> Signature:
    """The arguments of ``k``; ``private`` names buffers the kernel keeps to itself (row-local
    scratch), which are not arguments."""
    loop_syms = set(ir.index_vars("x", len(k.outer)))
    read, free = set(), set()
    for st in k.stages:
        loop_syms |= set(ir.index_vars("r", len(st.rsizes)))
        for s in st.rsizes:
            free |= sympy.sympify(s).free_symbols
        for it in st.items:
            target = it.index if isinstance(it.index, ir.Gather) else None  # a scatter's
            exprs = [it.expr] + (list(target.positions) if target is not None else [])
            for x in (x for e in exprs for x in ir.walk(e)):
                if isinstance(x, (ir.Load, ir.Gather)):
                    read.add(x.buf)
                    free |= ir.size_symbols(x.index)
                elif isinstance(x, ir.Index):
                    free |= sympy.sympify(x.expr).free_symbols
            if target is not None:
                free |= ir.size_symbols(target.index)
            elif it.index is not None:
                free |= sympy.sympify(it.index).free_symbols
    for s in k.outer:
        free |= sympy.sympify(s).free_symbols
    free -= loop_syms
    stored = [b.name for b in k.outputs]
    read -= set(private)
    return Signature(sorted(read - set(stored)), stored, sorted(free, key=lambda s: s.name))
