"""C++ code generation: one translation unit per graph, one ``extern "C"`` function per kernel.

The outer loop nest is an OpenMP ``parallel for``; inner loops are ``omp simd`` over the
contiguous innermost index; kernels without outer loops parallelise their inner loops with
OpenMP reductions. Sizes are ``int64_t`` arguments, so one build serves every shape.
"""

from __future__ import annotations

import math

import sympy
import torch

from ember.core.compiler import ir
from ember.core.compiler.prims import CPP_PRELUDE, PRIMS, REDUCTIONS, mvec_declarations
from ember.core.compiler.schedule import Kernel, loads_walk_outer

CTYPES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "_Float16",
    torch.bfloat16: "uint16_t", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
}
_INT_LIMITS = {
    torch.int64: ("(-9223372036854775807LL - 1)", "9223372036854775807LL"),
    torch.int32: ("(-2147483647 - 1)", "2147483647"), torch.int16: ("-32768", "32767"),
    torch.int8: ("-128", "127"), torch.uint8: ("0", "255"), torch.bool: ("false", "true"),
}
PARALLEL_MIN_WORK = 1 << 16  # elements of work below which a fork/join costs more than it saves


def ctype(dtype: torch.dtype) -> str:
    return CTYPES[ir.compute_dtype(dtype)]


def index_str(e, lang: str = "c") -> str:
    """Print a non-negative integer index expression as C++ or Python."""
    e = sympy.sympify(e)
    if e.is_Integer:
        return str(int(e))
    if e.is_Float:
        return repr(float(e))
    if e.is_Symbol:
        return e.name
    if e.is_Add:
        return "(" + " + ".join(index_str(a, lang) for a in e.args) + ")"
    if e.is_Mul:
        num, den = sympy.fraction(e)
        if den != 1 and _is_float_expr(e):
            return f"({index_str(num, lang)} / {index_str(den, lang)})" if lang == "py" else \
                f"(static_cast<double>({index_str(num, lang)}) / {index_str(den, lang)})"
        if den != 1:
            return index_str(sympy.floor(e), lang)
        return "(" + " * ".join(index_str(a, lang) for a in e.args) + ")"
    if e.is_Pow and e.exp.is_Integer and e.exp > 0:
        return "(" + " * ".join([index_str(e.base, lang)] * int(e.exp)) + ")"
    div = "//" if lang == "py" else "/"
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        return f"({index_str(num, lang)} {div} {index_str(den, lang)})"
    if isinstance(e, sympy.Mod):
        return f"({index_str(e.args[0], lang)} % {index_str(e.args[1], lang)})"
    if isinstance(e, (sympy.Max, sympy.Min)):
        fn = ("max" if isinstance(e, sympy.Max) else "min")
        if lang == "py":
            return f"{fn}({', '.join(index_str(a, lang) for a in e.args)})"
        a = [index_str(x, lang) for x in e.args]
        out = a[0]
        for b in a[1:]:
            cmp = ">" if fn == "max" else "<"
            out = f"(({out}) {cmp} ({b}) ? ({out}) : ({b}))"
        return out
    name = type(e).__name__  # torch's shape-env functions (torch.utils._sympy.functions)
    a = [index_str(x, lang) for x in e.args]
    if name in ("FloorDiv", "CleanDiv") and len(a) == 2:
        return f"({a[0]} {div} {a[1]})"
    if name in ("IntTrueDiv", "FloatTrueDiv") and len(a) == 2:
        return f"({a[0]} / {a[1]})" if lang == "py" else \
            f"(static_cast<double>({a[0]}) / static_cast<double>({a[1]}))"
    if name == "ToFloat" and len(a) == 1:
        return f"float({a[0]})" if lang == "py" else f"static_cast<double>({a[0]})"
    if name in ("PythonMod", "Mod") and len(a) == 2:
        return f"({a[0]} % {a[1]})"
    if name == "ModularIndexing" and len(a) == 3:
        return f"(({a[0]} {div} {a[1]}) % {a[2]})"
    if name == "CeilDiv" and len(a) == 2:
        return f"(({a[0]} + {a[1]} - 1) {div} {a[1]})"
    if name in ("Identity", "TruncToInt") and len(a) == 1:
        return a[0]
    raise ir.Unsupported(f"cannot print index {e!r}")  # the graph falls back to eager


def _is_float_expr(e) -> bool:
    return any(a.is_Float for a in e.atoms(sympy.Number)) or any(
        type(f).__name__ in ("ToFloat", "FloatTrueDiv", "IntTrueDiv")
        for f in e.atoms(sympy.Function))


def literal(value, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        suffix = "f" if dtype == torch.float32 else ""
        if math.isnan(value):
            return f"static_cast<{ctype(dtype)}>(NAN)"
        if math.isinf(value):
            return f"static_cast<{ctype(dtype)}>({'-' if value < 0 else ''}INFINITY)"
        return f"{float(value)!r}{suffix}"
    if dtype == torch.int64:
        return f"static_cast<int64_t>({int(value)}LL)" if value < 0 else f"{int(value)}LL"
    return f"static_cast<{ctype(dtype)}>({int(value)})"


class _Body:
    """Emits statements with common-subexpression elimination and nested scopes."""

    def __init__(self, kernel_bufs: dict):
        self.lines: list[str] = []
        self.memo: dict = {}
        self.depth = 1
        self.count = 0
        self.bufs = kernel_bufs
        self.names: dict[str, str] = {}  # variable -> how to reference it (accumulator slots)
        self.local: dict[str, list] = {}  # row-local scratch buffers -> outer loop variables
        self.alias: dict[str, object] = {}  # scratch buffer -> output buffer holding it

    def line(self, s: str) -> None:
        self.lines.append("  " * self.depth + s)

    def open(self, s: str) -> dict:
        self.line(s + " {")
        self.depth += 1
        return dict(self.memo)

    def close(self, saved: dict) -> None:
        self.depth -= 1
        self.line("}")
        self.memo = saved

    def index(self, name: str, index):
        """Index into ``name``; a row-local scratch buffer drops the outer-loop part."""
        if name in self.local:
            return index.xreplace({x: 0 for x in self.local[name]})
        return index

    def store(self, buf, index, value: str, stored) -> None:
        if buf.name in self.alias:
            self.line(_store(self.alias[buf.name], index, value))
        elif buf.name in stored or buf.name in self.local:
            self.line(_store(buf, self.index(buf.name, index), value))

    def expr(self, e) -> str:
        if e in self.memo:
            return self.memo[e]
        kind, dt = e[0], e[1]
        if kind == "const":
            return literal(e[2], dt)
        if kind == "var":
            return self.names.get(e[2], e[2])
        if kind in ("load", "gather"):
            name = self.alias[e[2]].name if e[2] in self.alias else e[2]
            store = self.bufs[name].dtype
            index = self.index(name, e[3])
            if kind == "gather":  # each slot becomes the int64 temporary holding its value
                index = index.xreplace({
                    ir.gather_slot(k): sympy.Symbol(self.expr(ir.cast(p, torch.int64)),
                                                    integer=True)
                    for k, p in enumerate(e[4:])})
            ref = f"{name}[{index_str(index)}]"
            if store == torch.bfloat16:
                s = f"e_bf16_to_f({ref})"
            elif store == torch.float16:
                s = f"static_cast<float>({ref})"
            else:
                s = ref
        elif kind == "index":
            s = f"static_cast<{ctype(dt)}>({index_str(e[2])})"
        elif kind == "cast":
            s = f"static_cast<{ctype(dt)}>({self.expr(e[2])})"
        else:
            _, _, template = PRIMS[e[2]]
            args = [self.expr(a) for a in e[3:]]
            s = template.format(*args, T=ctype(e[3][1]))  # operands share one compute type
        self.count += 1
        name = f"t{self.count}"
        self.line(f"{ctype(dt)} {name} = {s};")
        self.memo[e] = name
        return name


def _store(buf, index, value: str) -> str:
    if buf.dtype == torch.bfloat16:
        value = f"e_f_to_bf16({value})"
    else:
        value = f"static_cast<{CTYPES[buf.dtype]}>({value})"
    return f"{buf.name}[{index_str(index)}] = {value};"


def _init(rtype: str, dt: torch.dtype) -> str:
    _, init = REDUCTIONS[rtype]
    if rtype in ("max", "min") and not dt.is_floating_point:
        lo, hi = _INT_LIMITS[dt]
        return lo if rtype == "max" else hi
    return literal(init, dt)


def _static(e):
    e = sympy.sympify(e)
    return int(e) if e.is_Integer else None


LOCAL_MAX = 1 << 14  # elements of a row-local scratch buffer (on the stack)
LOCAL_BYTES = 1 << 18  # all scratch buffers of one kernel


def _row_locals(k: Kernel) -> dict:
    """Buffers only this kernel reads, written and re-read within one outer iteration:
    they live in a per-row scratch array instead of memory the size of the tensor."""
    if not k.outer or _column_major(k):
        return {}
    out = {}
    for st in k.stages:
        n = _static(ir.numel(st.rsizes)) if st.kind == "loop" else None
        for it in st.items:
            name = it.kind == "store" and it.node.buf.name
            if name and name in k.stored and name not in k.must_store and n and \
                    n <= LOCAL_MAX and (sum(out.values()) + n) * 8 <= LOCAL_BYTES:
                out[name] = n
    return out


TUNE_PARAMS = ("e_nt", "e_cpt")  # tunable kernels' trailing arguments: threads, chunks/thread


def _output_scratch(k: Kernel, local: dict) -> dict:
    """Row-local scratch buffers that can live in an output's row instead of on the stack.

    A scratch value stored at the very index where the kernel's last stage stores an output
    of the same dtype, and read only by that store (softmax's exp before scaling): writing it
    into the output row makes the write-allocate traffic overlap the math of the earlier
    pass, and the last pass runs in L1 (what eager's softmax does).
    """
    if not local or k.stages[-1].kind != "loop":
        return {}
    last = k.stages[-1]
    out = {}
    for name in local:
        stores = [(i, it) for i, st in enumerate(k.stages) for it in st.items
                  if it.kind == "store" and it.node.buf.name == name]
        readers = [(i, j) for i, st in enumerate(k.stages) for j, it in enumerate(st.items)
                   if any(x[0] == "load" and x[2] == name for x in ir.walk(it.expr))]
        if len(stores) != 1 or not readers:
            continue
        (si, sit), = stores
        final = last.items[-1]
        target = final.node.buf
        if final.kind != "store" or target.name not in k.must_store or \
                target.dtype != sit.node.buf.dtype or target in out.values() or \
                si >= len(k.stages) - 1 or readers != [(len(k.stages) - 1, len(last.items) - 1)]:
            continue
        loads = {x[3] for x in ir.walk(final.expr) if x[0] == "load" and x[2] == name}
        read_o = any(x[0] == "load" and x[2] == target.name
                     for st in k.stages for it in st.items for x in ir.walk(it.expr))
        if loads == {sit.index} and ir.same(sit.index, final.index) and not read_o:
            out[name] = target
    return out


def _replace(e, old, new, memo: dict):
    if e == old:
        return new
    if e in memo:
        return memo[e]
    if e[0] == "cast":
        out = ("cast", e[1], _replace(e[2], old, new, memo))
    elif e[0] == "op":
        out = ("op", e[1], e[2], *(_replace(a, old, new, memo) for a in e[3:]))
    else:
        out = e
    memo[e] = out
    return out


def _stage_outputs_early(k: Kernel, taken: set) -> None:
    """Compute a row value shared by an earlier pass and an output's final store once: the
    earlier pass writes it into the output row and the final pass updates it in place (e.g.
    ``x - max`` in log_softmax, ``x - mean`` in layer_norm), so the final pass runs in L1."""
    loops = [i for i, st in enumerate(k.stages) if st.kind == "loop" and st.rsizes]
    if len(loops) < 2 or loops[-1] != len(k.stages) - 1 or _column_major(k):
        return
    last = k.stages[-1]
    loaded = {x[2] for st in k.stages for it in st.items for x in ir.walk(it.expr)
              if x[0] == "load"}
    rset = set(ir.index_vars("r", len(last.rsizes)))
    for it in list(last.items):
        out = it.node.buf
        if it.kind != "store" or out.name not in k.must_store or out.name in taken or \
                out.name in loaded or ir.compute_dtype(out.dtype) != out.dtype:
            continue
        for si in reversed(loops[:-1]):
            st = k.stages[si]
            if not ir.same_sizes(st.rsizes, last.rsizes):
                continue
            earlier = {x for e in st.items for x in ir.walk(e.expr)}
            memo: dict = {}
            shared = next((x for x in ir.walk(it.expr) if x[0] == "op" and x in earlier and
                           x[1] == out.dtype and not _invariant(x, rset, memo)), None)
            if shared is None:
                continue
            st.items.append(type(it)("store", it.node, shared, it.index))
            it.expr = _replace(it.expr, shared, ("load", out.dtype, out.name, it.index), {})
            taken.add(out.name)
            break


def kernel_source(k: Kernel, buffers: dict, tunable: bool = False) -> tuple[str, list]:
    """C++ source of one kernel and its argument list: ("buf", name) / ("sym", symbol).

    ``tunable`` (max-autotune) adds two trailing ``int64_t`` arguments, the OpenMP thread
    count and the chunks per thread of the outer loop, so one build serves every candidate.
    """
    local = _row_locals(k)
    k.stored -= set(local)
    alias = _output_scratch(k, local)
    for name in alias:
        del local[name]
    _stage_outputs_early(k, {b.name for b in alias.values()})
    xs = ir.index_vars("x", len(k.outer))
    loop_syms = set(xs)
    read, free = set(), set()
    for st in k.stages:
        loop_syms |= set(ir.index_vars("r", len(st.rsizes)))
        for s in st.rsizes:
            free |= sympy.sympify(s).free_symbols
        for it in st.items:
            for x in ir.walk(it.expr):
                if x[0] in ("load", "gather"):
                    read.add(x[2])
                    free |= ir.size_symbols(x[3])
                elif x[0] == "index":
                    free |= x[2].free_symbols
            if it.index is not None:
                free |= sympy.sympify(it.index).free_symbols
    for s in k.outer:
        free |= sympy.sympify(s).free_symbols
    free -= loop_syms
    stored = [b.name for b in k.outputs]
    read -= set(local) | set(alias)
    bufs = sorted(read - set(stored)) + stored
    syms = sorted(free, key=lambda s: s.name)
    params = [f"const {CTYPES[buffers[b].dtype]}* __restrict__ {b}" for b in sorted(
        read - set(stored))]
    params += [f"{CTYPES[buffers[b].dtype]}* __restrict__ {b}" for b in stored]
    params += [f"int64_t {s.name}" for s in syms]
    if tunable:
        params += [f"int64_t {p}" for p in TUNE_PARAMS]
    body = _Body(buffers)
    body.local = {name: xs for name in local}
    body.alias = alias

    outer_n = ir.numel(k.outer)
    inner_n = sum((ir.numel(st.rsizes) for st in k.stages), sympy.Integer(0))
    work = outer_n * (inner_n if inner_n != 0 else 1)
    static_work = _static(work)
    cond = "" if static_work is not None else f" if({index_str(work)} >= {PARALLEL_MIN_WORK})"
    par = static_work is None or static_work >= PARALLEL_MIN_WORK
    threads = ""
    if tunable:  # the tuner picks the thread count (1 = serial), so always emit the pragma
        par, cond, threads = True, "", " num_threads(e_nt)"
    outer_parallel = bool(k.outer) and par and _static(outer_n) != 1
    if tunable and k.outer:
        body.line(f"const int64_t e_per = ({index_str(outer_n)} + e_nt * e_cpt - 1) / "
                  f"(e_nt * e_cpt);")
        body.line("const int64_t e_chunk = e_per > 0 ? e_per : 1;")
        threads += " schedule(static, e_chunk)"
    if _column_major(k):
        _emit_column(body, k, buffers, (cond + threads) if par else None)
        src = f'extern "C" void {k.name}({", ".join(params)}) {{\n' + "\n".join(body.lines) + \
            "\n}\n"
        return src, [("buf", b) for b in bufs] + [("sym", s) for s in syms]
    saved_outer = []
    if k.outer:
        if outer_parallel:
            body.line(f"#pragma omp parallel for collapse({len(k.outer)}){cond}{threads}")
        for x, s in zip(xs, k.outer):
            saved_outer.append(body.open(f"for (int64_t {x} = 0; {x} < {index_str(s)}; ++{x})"))
        for name, n in local.items():
            body.line(f"{CTYPES[buffers[name].dtype]} {name}[{n}];")
    inner_parallel = par and not outer_parallel
    inner_cond = cond + (" num_threads(e_nt)" if tunable else "")
    for st in k.stages:
        _emit_stage(body, st, buffers, k.stored, inner_parallel, inner_cond)
    for saved in reversed(saved_outer):
        body.close(saved)
    src = f'extern "C" void {k.name}({", ".join(params)}) {{\n' + "\n".join(body.lines) + "\n}\n"
    return src, [("buf", b) for b in bufs] + [("sym", s) for s in syms]


COLUMN_BLOCK = 64


def _column_major(k: Kernel) -> bool:
    """Reduce across rows (e.g. sum over dim 0): memory is contiguous along the innermost
    outer index, not along the reduction index, so loop over a block of outputs innermost."""
    if not k.outer or not any(it.kind == "reduce" for st in k.stages for it in st.items):
        return False
    return loads_walk_outer(k)


def _emit_column(body: _Body, k: Kernel, buffers, cond: str | None) -> None:
    """Outer loops, then blocks of COLUMN_BLOCK outputs with per-output accumulator arrays;
    every stage runs its inner loops outside a SIMD loop over the block."""
    xs = ir.index_vars("x", len(k.outer))
    xl, last = xs[-1], index_str(k.outer[-1])
    saved = []
    if cond is not None:
        body.line(f"#pragma omp parallel for collapse({len(k.outer)}){cond}")
    for x, sz in zip(xs[:-1], k.outer[:-1]):
        saved.append(body.open(f"for (int64_t {x} = 0; {x} < {index_str(sz)}; ++{x})"))
    saved.append(body.open(f"for (int64_t xb = 0; xb < {last}; xb += {COLUMN_BLOCK})"))
    body.line(f"const int64_t xe = (xb + {COLUMN_BLOCK} < {last}) ? xb + {COLUMN_BLOCK} : {last};")
    reds = [it for st in k.stages for it in st.items if it.kind == "reduce"]
    if _short_reductions(k):
        _emit_lanes_outer(body, k, xl, reds)
        for sv in reversed(saved):
            body.close(sv)
        return
    slot = f"[{xl} - xb]"
    for it in reds:
        dt = it.node.acc_dtype
        body.line(f"{ctype(dt)} {it.var}[{COLUMN_BLOCK}];")
        body.line(f"int {it.var}_nan[{COLUMN_BLOCK}];")
        body.line(f"for (int64_t {xl} = xb; {xl} < xe; ++{xl}) {{ {it.var}{slot} = "
                  f"{_init(it.node.rtype, dt)}; {it.var}_nan{slot} = 0; }}")
        body.names[it.var] = f"{it.var}{slot}"
    xloop = f"for (int64_t {xl} = xb; {xl} < xe; ++{xl})"
    for st in k.stages:
        rs = ir.index_vars("r", len(st.rsizes)) if st.kind == "loop" else []
        inner = [body.open(f"for (int64_t {r} = 0; {r} < {index_str(sz)}; ++{r})")
                 for r, sz in zip(rs, st.rsizes)]
        body.line("#pragma omp simd")
        inner.append(body.open(xloop))
        _emit_items(body, k, st)
        for sv in reversed(inner):
            body.close(sv)
        if any(it.kind == "reduce" for it in st.items):
            sv = body.open(xloop)
            _finish_reductions(body, k, st, slot)
            body.close(sv)
    for sv in reversed(saved):
        body.close(sv)


SHORT_REDUCTION = 16


def _short_reductions(k: Kernel) -> bool:
    """Every loop stage reduces over at most SHORT_REDUCTION static elements (a matmul with
    a small K): lanes over outputs outermost then keep each accumulator in a register."""
    sizes = [_static(ir.numel(st.rsizes)) for st in k.stages if st.kind == "loop"]
    return bool(sizes) and all(n is not None and n <= SHORT_REDUCTION for n in sizes)


def _emit_lanes_outer(body: _Body, k: Kernel, xl, reds: list) -> None:
    """One SIMD loop over the block of outputs; inside it each stage's short inner loops
    update scalar accumulators (vector registers once vectorized)."""
    body.line("#pragma omp simd")
    lane = body.open(f"for (int64_t {xl} = xb; {xl} < xe; ++{xl})")
    for it in reds:
        dt = it.node.acc_dtype
        body.line(f"{ctype(dt)} {it.var} = {_init(it.node.rtype, dt)};")
        body.line(f"int {it.var}_nan = 0;")
        body.names[it.var] = it.var
    for st in k.stages:
        rs = ir.index_vars("r", len(st.rsizes)) if st.kind == "loop" else []
        inner = [body.open(f"for (int64_t {r} = 0; {r} < {index_str(sz)}; ++{r})")
                 for r, sz in zip(rs, st.rsizes)]
        _emit_items(body, k, st)
        for sv in reversed(inner):
            body.close(sv)
        _finish_reductions(body, k, st, "")
    body.close(lane)


def _emit_items(body: _Body, k: Kernel, st) -> None:
    """A column kernel stage's items: stores, and updates of the accumulators in
    ``body.names``."""
    for it in st.items:
        v = body.expr(it.expr)
        if it.kind == "store":
            if it.node.buf.name in k.stored:
                body.line(_store(it.node.buf, it.index, v))
            continue
        _update(body, it, body.names[it.var], v)


def _finish_reductions(body: _Body, k: Kernel, st, slot: str) -> None:
    """After a stage's loops: NaN-propagating max/min, then the stored reductions."""
    for it in st.items:
        if it.kind != "reduce":
            continue
        acc = body.names[it.var]
        if it.node.rtype in ("max", "min") and it.node.acc_dtype.is_floating_point:
            body.line(f"if ({it.var}_nan{slot}) {acc} = "
                      f"static_cast<{ctype(it.node.acc_dtype)}>(NAN);")
        if it.node.buf.name in k.stored:
            flat = _flat_outer(len(it.node.buf.size), it.node.buf.size)
            body.line(_store(it.node.buf, flat, acc))


def _update(body: _Body, it, acc: str, v: str) -> None:
    rtype = it.node.rtype
    if rtype == "sum":
        body.line(f"{acc} += {v};")
    elif rtype == "prod":
        body.line(f"{acc} *= {v};")
    elif rtype == "any":
        body.line(f"{acc} = {acc} | {v};")
    else:
        cmp = ">" if rtype == "max" else "<"
        body.line(f"{acc} = ({v} {cmp} {acc}) ? {v} : {acc};")
        if it.node.acc_dtype.is_floating_point:
            nan = acc.replace(it.var, it.var + "_nan", 1)
            body.line(f"{nan} |= ({v} != {v});")


def _invariant(e, rset: set, memo: dict) -> bool:
    """``e`` does not depend on the inner loop variables ``rset``."""
    if e in memo:
        return memo[e]
    kind = e[0]
    if kind == "load":
        out = not (e[3].free_symbols & rset)
    elif kind == "gather":
        out = not (e[3].free_symbols & rset) and all([_invariant(a, rset, memo)
                                                      for a in e[4:]])
    elif kind == "index":
        out = not (e[2].free_symbols & rset)
    elif kind == "cast":
        out = _invariant(e[2], rset, memo)
    elif kind == "op":
        out = all([_invariant(a, rset, memo) for a in e[3:]])
    else:
        out = True
    memo[e] = out
    return out


# Prims whose result jumps on a one-bit change of a floating-point argument.
_DISCONTINUOUS = frozenset({"floor", "ceil", "trunc", "round", "floordiv", "truncdiv", "fmod",
                            "remainder", "sign", "eq", "ne", "lt", "le", "gt", "ge"})


def _hoist(body: _Body, items, rset: set) -> None:
    """Emit loop-invariant sub-expressions before the inner loop; divisions by an invariant
    become multiplications by its reciprocal (what eager's softmax / norms do)."""
    memo: dict = {}

    def rewrite(e, exact=False):
        # ``exact``: the value feeds a rounding or comparing op, where the reciprocal's last
        # bit can flip the result (round(x / 1000) at x = 2500); keep the true division there
        if e[0] == "cast":
            return ("cast", e[1], rewrite(e[2], exact))
        if e[0] != "op":
            return e
        exact = exact or e[2] in _DISCONTINUOUS
        args = tuple(rewrite(a, exact) for a in e[3:])
        if e[2] == "truediv" and not exact and e[1].is_floating_point \
                and _invariant(args[1], rset, memo) and not _invariant(args[0], rset, memo):
            return ("op", e[1], "mul", args[0], ("op", e[1], "reciprocal", args[1]))
        return ("op", e[1], e[2], *args)

    def visit(e):
        if e[0] in ("op", "cast", "load") and _invariant(e, rset, memo):
            body.expr(e)
        elif e[0] == "cast":
            visit(e[2])
        elif e[0] == "op":
            for a in e[3:]:
                visit(a)

    for it in items:
        if rset:
            it.expr = rewrite(it.expr)
            visit(it.expr)


# Vector math calls short enough that a reduction beside them is slowed by its accumulator's
# spill and reload around the call (a vector call clobbers every vector register). Measured:
# exp (softmax) gains ~15% per row from a separate re-read loop; erf (gelu) loses ~3%.
_SHORT_CALLS = frozenset({"exp"})


def _calls(e) -> bool:
    return any(x[0] == "op" and x[2] in _SHORT_CALLS and x[1].is_floating_point
               for x in ir.walk(e))


def _reread(body: _Body, st, stored, rs) -> list:
    """Reductions of a value this row loop also stores, where computing it makes a short
    vector math call: they move to a second loop that re-reads the stored row from cache
    (softmax's sum of exp, as eager does). Returns those reductions with the value as a load."""
    out = []
    for it in st.items:
        if it.kind != "reduce" or not _calls(it.expr):
            continue
        src = next((s for s in st.items if s.kind == "store" and s.expr == it.expr and
                    s.node.buf.dtype == it.expr[1] and set(rs) <= s.index.free_symbols and
                    (s.node.buf.name in stored or s.node.buf.name in body.alias or
                     s.node.buf.name in body.local)), None)
        if src is not None:
            load = ("load", it.expr[1], src.node.buf.name, src.index)
            out.append(type(it)("reduce", it.node, load, None, it.var))
    return out


def _emit_stage(body: _Body, st, buffers, stored, inner_parallel: bool, cond: str) -> None:
    reds = [it for it in st.items if it.kind == "reduce"]
    if st.kind == "scalar":
        for it in st.items:
            v = body.expr(it.expr)
            body.store(it.node.buf, it.index, v, stored)
        return
    for it in reds:
        dt = it.node.acc_dtype
        body.line(f"{ctype(dt)} {it.var} = {_init(it.node.rtype, dt)};")
        if it.node.rtype in ("max", "min") and dt.is_floating_point:
            body.line(f"int {it.var}_nan = 0;")
    rs = ir.index_vars("r", len(st.rsizes))
    _hoist(body, st.items, set(rs))
    later = [] if inner_parallel else _reread(body, st, stored, rs)
    moved = {it.var for it in later}
    _emit_loop(body, st.rsizes, [it for it in st.items if it.var not in moved or
                                 it.kind != "reduce"], stored, inner_parallel, cond)
    if later and len(rs) == 1 and all(it.node.rtype == "sum" for it in later):
        _emit_lane_sums(body, rs[0], st.rsizes[0], later)
    elif later:
        _emit_loop(body, st.rsizes, later, stored, inner_parallel, cond)
    for it in reds:
        dt = it.node.acc_dtype
        if it.node.rtype in ("max", "min") and dt.is_floating_point:
            body.line(f"if ({it.var}_nan) {it.var} = static_cast<{ctype(dt)}>(NAN);")
        if it.node.buf.name in stored:
            flat = _flat_outer(len(it.node.buf.size), it.node.buf.size)
            body.line(_store(it.node.buf, flat, it.var))


LANES = 64  # partial sums of a re-read row: four AVX-512 vectors, four independent adds


def _emit_lane_sums(body: _Body, r, size, items) -> None:
    """Sums of a row re-read from cache, as LANES partial sums added pairwise at the end: one
    vector accumulator would make the loop wait on each add's latency."""
    n = index_str(size)
    b, j = (sympy.Symbol(v, integer=True, nonnegative=True) for v in ("e_b", "e_j"))
    scope = body.open("")  # its own block: a row loop may hold several such sums
    for it in items:
        body.line(f"{ctype(it.node.acc_dtype)} {it.var}_l[{LANES}] = {{}};")
    body.line(f"const int64_t e_nb = {n} / {LANES} * {LANES};")
    saved = body.open(f"for (int64_t e_b = 0; e_b < e_nb; e_b += {LANES})")
    body.line("#pragma omp simd")
    inner = body.open(f"for (int64_t e_j = 0; e_j < {LANES}; ++e_j)")
    for it in items:
        load = it.expr[:3] + (it.expr[3].xreplace({r: b + j}),)
        body.line(f"{it.var}_l[e_j] += {body.expr(load)};")
    body.close(inner)
    body.close(saved)
    saved = body.open(f"for (int64_t e_w = {LANES // 2}; e_w >= 1; e_w /= 2)")
    body.line("#pragma omp simd")
    inner = body.open("for (int64_t e_j = 0; e_j < e_w; ++e_j)")
    for it in items:
        body.line(f"{it.var}_l[e_j] += {it.var}_l[e_j + e_w];")
    body.close(inner)
    body.close(saved)
    for it in items:
        body.line(f"{it.var} += {it.var}_l[0];")
    body.line(f"#pragma omp simd {' '.join(f'reduction(+:{it.var})' for it in items)}")
    saved = body.open(f"for (int64_t {r} = e_nb; {r} < {n}; ++{r})")
    for it in items:
        body.line(f"{it.var} += {body.expr(it.expr)};")
    body.close(saved)
    body.close(scope)


def _emit_loop(body: _Body, rsizes, items, stored, inner_parallel: bool, cond: str) -> None:
    """One loop nest over ``rsizes`` computing ``items`` (accumulators declared already)."""
    clauses = []
    for it in items:
        if it.kind == "reduce":
            clauses.append(f"reduction({REDUCTIONS[it.node.rtype][0]}:{it.var})")
            if it.node.rtype in ("max", "min") and it.node.acc_dtype.is_floating_point:
                clauses.append(f"reduction(|:{it.var}_nan)")
    red = (" " + " ".join(clauses)) if clauses else ""
    rs = ir.index_vars("r", len(rsizes))
    saved = []
    for d, (r, s) in enumerate(zip(rs, rsizes)):
        innermost = d == len(rs) - 1
        if d == 0 and inner_parallel:
            simd = " simd" if innermost else ""
            body.line(f"#pragma omp parallel for{simd}{red}{cond}")
        elif innermost:
            body.line(f"#pragma omp simd{red}")
        saved.append(body.open(f"for (int64_t {r} = 0; {r} < {index_str(s)}; ++{r})"))
    for it in items:
        v = body.expr(it.expr)
        if it.kind == "store":
            body.store(it.node.buf, it.index, v, stored)
            continue
        _update(body, it, it.var, v)
    for s in reversed(saved):
        body.close(s)


def _flat_outer(n: int, size) -> object:
    xs = ir.index_vars("x", n)
    return sum((v * s for v, s in zip(xs, ir.contiguous_strides(size))), sympy.Integer(0))


def translation_unit(kernels: list[str]) -> str:
    from ember.core.compiler.runtime.build import has_libmvec

    mvec = mvec_declarations() if has_libmvec() else ""
    return CPP_PRELUDE + mvec + "\n" + "\n".join(kernels)
