"""C++ code generation: one translation unit per graph, one ``extern "C"`` function per kernel.

The outer loop nest is an OpenMP ``parallel for``; inner loops are ``omp simd`` over the
contiguous innermost index; kernels without outer loops parallelise their inner loops with
OpenMP reductions. Sizes are ``int64_t`` arguments, so one build serves every shape.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import NamedTuple

import sympy
import torch

from ember.core.compiler import ir, passes
from ember.core.compiler.codegen.common import ArgKind, cpp_index, signature
from ember.core.compiler.prims import PRIMS, REDUCTIONS
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

# prim -> C++ template: ``{0}``.. are the operands, ``{T}`` the C++ type they compute in.
TEMPLATES: dict[str, str] = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "fma": "std::fma({0}, {1}, {2})",
    "truediv": "({0} / {1})",
    "neg": "(-{0})",
    "abs": "std::abs({0})",
    "maximum": "e_max<{T}>({0}, {1})",
    "minimum": "e_min<{T}>({0}, {1})",
    "sign": "static_cast<{T}>(({0} > 0) - ({0} < 0))",
    "exp": "e_exp({0})",
    "exp2": "std::exp2({0})",
    "expm1": "std::expm1({0})",
    "log": "std::log({0})",
    "log2": "std::log2({0})",
    "log10": "std::log10({0})",
    "log1p": "std::log1p({0})",
    "sqrt": "std::sqrt({0})",
    "rsqrt": "(static_cast<{T}>(1) / std::sqrt({0}))",
    "reciprocal": "(static_cast<{T}>(1) / {0})",
    "sigmoid": "(static_cast<{T}>(1) / (static_cast<{T}>(1) + e_exp(-{0})))",
    "sin": "std::sin({0})",
    "cos": "std::cos({0})",
    "tan": "std::tan({0})",
    "asin": "std::asin({0})",
    "acos": "std::acos({0})",
    "atan": "std::atan({0})",
    "sinh": "std::sinh({0})",
    "cosh": "std::cosh({0})",
    "tanh": "std::tanh({0})",
    "asinh": "std::asinh({0})",
    "acosh": "std::acosh({0})",
    "atanh": "std::atanh({0})",
    "erf": "e_erf({0})",
    "erfc": "std::erfc({0})",
    "floor": "std::floor({0})",
    "ceil": "std::ceil({0})",
    "trunc": "std::trunc({0})",
    "round": "std::nearbyint({0})",
    "pow": "std::pow({0}, {1})",
    "atan2": "std::atan2({0}, {1})",
    "fmod": "e_fmod<{T}>({0}, {1})",
    "remainder": "e_rem<{T}>({0}, {1})",
    "floordiv": "e_floordiv<{T}>({0}, {1})",
    "truncdiv": "e_truncdiv<{T}>({0}, {1})",
    "isnan": "({0} != {0})",
    "isinf": "(std::abs({0}) == INFINITY)",
    "round_bf16": "e_round_bf16({0})",
    "round_fp16": "static_cast<float>(static_cast<_Float16>({0}))",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "logical_and": "({0} && {1})",
    "logical_or": "({0} || {1})",
    "logical_xor": "({0} != {1})",
    "logical_not": "(!{0})",
    "bitwise_and": "static_cast<{T}>({0} & {1})",
    "bitwise_or": "static_cast<{T}>({0} | {1})",
    "bitwise_xor": "static_cast<{T}>({0} ^ {1})",
    "bitwise_not": "static_cast<{T}>(~{0})",
    "where": "e_sel<{R}>({0}, {1}, {2})",
}
# reduction -> its OpenMP ``reduction(op: ...)`` operator
OMP_REDUCTIONS = {"sum": "+", "prod": "*", "max": "max", "min": "min", "any": "|"}

# glibc's libmvec has SIMD versions of these; declaring them lets `omp simd` loops call
# them (glibc only declares them under -ffast-math, which would break NaN semantics).
MVEC_UNARY = ("acos acosh asin asinh atan atanh cbrt cos cosh erfc erf exp10 exp2 exp expm1 "
              "log10 log1p log2 log sin sinh tan tanh").split()
MVEC_BINARY = ("atan2", "pow")


def mvec_declarations() -> str:
    lines = ['extern "C" {', '#define E_SIMD __attribute__((__simd__("notinbranch")))']
    for f in MVEC_UNARY:
        lines.append(f"E_SIMD float {f}f(float); E_SIMD double {f}(double);")
    for f in MVEC_BINARY:
        lines.append(f"E_SIMD float {f}f(float, float); E_SIMD double {f}(double, double);")
    return "\n".join(lines + ["}"]) + "\n"


@functools.lru_cache(maxsize=1)
def prelude() -> str:
    """The helpers every translation unit starts with (``cpp_prelude.h``, package data)."""
    return resources.files("ember.core.compiler.codegen").joinpath("cpp_prelude.h").read_text()


def prim_table_markdown() -> str:
    """The prim set with its C++ spellings as a Markdown table (for the docs); ``|`` escaped."""
    def esc(text: str) -> str:
        return text.replace("|", "\\|")
    rows = ["| prim | arity | kind | C++ |", "|---|---|---|---|"]
    rows += [f"| {n} | {p.arity} | {p.kind} | `{esc(TEMPLATES[n])}` |" for n, p in PRIMS.items()]
    rows += [f"| {n} (reduction) | 1 | reduction | `{esc(OMP_REDUCTIONS[n])}` from {init} |"
             for n, init in REDUCTIONS.items()]
    return "\n".join(rows)


def ctype(dtype: torch.dtype) -> str:
    return CTYPES[ir.compute_dtype(dtype)]


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

    def __init__(self, kernel_bufs: dict, kernel: str = ""):
        self.kernel = kernel  # its name, for logs
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

    def store(self, buf, index, value: str | StoredValue, stored) -> None:
        if buf.name in self.alias:
            self.line(_store(self.alias[buf.name], index, value))
        elif buf.name in stored or buf.name in self.local:
            self.line(_store(buf, self.index(buf.name, index), value))

    def expr(self, e) -> str:
        if e in self.memo:
            return self.memo[e]
        dt = e.dtype
        if isinstance(e, ir.Const):
            return literal(e.value, dt)
        if isinstance(e, ir.Var):
            return self.names.get(e.name, e.name)
        if isinstance(e, (ir.Load, ir.Gather)):
            name = self.alias[e.buf].name if e.buf in self.alias else e.buf
            store = self.bufs[name].dtype
            index = self.index(name, e.index)
            if isinstance(e, ir.Gather):  # each slot becomes the int64 temporary of its value
                index = index.xreplace({
                    ir.gather_slot(k): sympy.Symbol(self.expr(ir.cast(p, torch.int64)),
                                                    integer=True)
                    for k, p in enumerate(e.positions)})
            ref = f"{name}[{cpp_index(index)}]"
            if store == torch.bfloat16:
                s = f"e_bf16_to_f({ref})"
            elif store == torch.float16:
                s = f"static_cast<float>({ref})"
            else:
                s = ref
        elif isinstance(e, ir.Index):
            s = f"static_cast<{ctype(dt)}>({cpp_index(e.expr)})"
        elif isinstance(e, ir.Cast):
            s = f"static_cast<{ctype(dt)}>({self.expr(e.x)})"
        else:
            template = TEMPLATES[e.prim]
            args = [self.expr(a) for a in e.args]
            # operands share one compute type ({T}); {R}: the result's
            s = template.format(*args, T=ctype(e.args[0].dtype), R=ctype(dt))
        self.count += 1
        name = f"t{self.count}"
        self.line(f"{ctype(dt)} {name} = {s};")
        self.memo[e] = name
        return name


# roundings to 16 bits that a store into a buffer of that dtype makes anyway
_ROUNDS_TO = {"round_bf16": torch.bfloat16, "round_fp16": torch.float16}


# prims whose result is one of their value operands (their positions), or its sign flipped
_PICKS = {"maximum": (0, 1), "minimum": (0, 1), "neg": (0,), "abs": (0,), "where": (1, 2)}


class StoredValue(NamedTuple):
    """A value rendered for a store; ``bf16_exact``: it is a bfloat16 value already (its low
    16 bits zero, or NaN), so a bfloat16 store keeps its top half instead of rounding."""

    text: str
    bf16_exact: bool = False


def _bf16_exact(body: _Body, e) -> bool:
    """Whether ``e`` is exactly a bfloat16 value: a bfloat16 load, a rounding to bfloat16, a
    representable constant, or a max / min / negation / magnitude / select of such values
    (a ReLU6 of a rounded batch norm)."""
    if isinstance(e, ir.Const):
        try:
            v = float(e.value)
        except (TypeError, ValueError):
            return False
        return math.isnan(v) or torch.tensor(v).to(torch.bfloat16).item() == v
    if isinstance(e, (ir.Load, ir.Gather)):
        name = body.alias[e.buf].name if e.buf in body.alias else e.buf
        return body.bufs[name].dtype == torch.bfloat16 and e.dtype.is_floating_point
    if isinstance(e, ir.PrimOp):
        if e.prim == "round_bf16":
            return True
        return e.prim in _PICKS and all(_bf16_exact(body, e.args[i]) for i in _PICKS[e.prim])
    return False


def _stored(body: _Body, e, buf) -> StoredValue:
    """``e`` rendered for a store into ``buf``: a rounding to ``buf``'s own 16-bit dtype on top
    is left to the store's conversion, which gives the same bits (rounding is idempotent), so
    each element is converted once instead of three times."""
    target = body.alias.get(buf.name, buf)
    while isinstance(e, ir.PrimOp) and _ROUNDS_TO.get(e.prim) == target.dtype:
        e = e.args[0]
    exact = target.dtype == torch.bfloat16 and _bf16_exact(body, e)
    return StoredValue(body.expr(e), exact)


def _store(buf, index, value: str | StoredValue) -> str:
    exact = isinstance(value, StoredValue) and value.bf16_exact
    text = value.text if isinstance(value, StoredValue) else value
    if buf.dtype == torch.bfloat16:
        text = f"e_bf16_bits({text})" if exact else f"e_f_to_bf16({text})"
    else:
        text = f"static_cast<{CTYPES[buf.dtype]}>({text})"
    return f"{buf.name}[{cpp_index(index)}] = {text};"


def _init(rtype: str, dt: torch.dtype) -> str:
    init = REDUCTIONS[rtype]
    if rtype in ("max", "min") and not dt.is_floating_point:
        lo, hi = _INT_LIMITS[dt]
        return lo if rtype == "max" else hi
    return literal(init, dt)


def _static(e):
    e = sympy.sympify(e)
    return int(e) if e.is_Integer else None


SIMD_MIN_EXTENT = 8


def _too_short_for_simd(size) -> bool:
    """A static inner extent under one AVX2 float vector: ``omp simd`` makes g++ build a
    whole masked vector loop (and, for a reduction, per-lane partial sums) around a few
    elements, several times slower than the plain loop it unrolls (a 2x2 average pool ran
    11x slower)."""
    n = _static(size)
    return n is not None and n < SIMD_MIN_EXTENT


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
                   if any(ld.buf == name for ld in ir.loads(it.expr))]
        if len(stores) != 1 or not readers:
            continue
        (si, sit), = stores
        final = last.items[-1]
        target = final.node.buf
        if final.kind != "store" or target.name not in k.must_store or \
                target.dtype != sit.node.buf.dtype or target in out.values() or \
                si >= len(k.stages) - 1 or readers != [(len(k.stages) - 1, len(last.items) - 1)]:
            continue
        loads = {ld.index for ld in ir.loads(final.expr) if ld.buf == name}
        read_o = any(ld.buf == target.name
                     for st in k.stages for it in st.items for ld in ir.loads(it.expr))
        if loads == {sit.index} and ir.same(sit.index, final.index) and not read_o:
            out[name] = target
    return out


def _replace(e, old, new):
    """``e`` with the sub-expression ``old`` replaced by ``new`` (not inside gathers)."""
    return ir.rebuild(e, lambda x: new if x == old else x if isinstance(x, ir.Gather) else None)


def _stage_outputs_early(k: Kernel, taken: set) -> None:
    """Compute a row value shared by an earlier pass and an output's final store once: the
    earlier pass writes it into the output row and the final pass updates it in place (e.g.
    ``x - max`` in log_softmax, ``x - mean`` in layer_norm), so the final pass runs in L1."""
    loops = [i for i, st in enumerate(k.stages) if st.kind == "loop" and st.rsizes]
    if len(loops) < 2 or loops[-1] != len(k.stages) - 1 or _column_major(k):
        return
    last = k.stages[-1]
    loaded = {ld.buf for st in k.stages for it in st.items for ld in ir.loads(it.expr)}
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
            shared = next((x for x in ir.walk(it.expr) if isinstance(x, ir.PrimOp) and
                           x in earlier and x.dtype == out.dtype and
                           not ir.invariant(x, rset, memo)), None)
            if shared is None:
                continue
            st.items.append(type(it)("store", it.node, shared, it.index))
            it.expr = _replace(it.expr, shared, ir.Load(out.dtype, out.name, it.index))
            taken.add(out.name)
            break


def _function(name: str, params: list, body: _Body) -> str:
    return f'extern "C" void {name}({", ".join(params)}) {{\n' + "\n".join(body.lines) + "\n}\n"


# g++ -O3's time grows about quadratically with the SIMD loops of one function: a cat of 600
# parts as 600 loops in one function took 150 s to build, in functions of 32 loops 3 s; of 8
# loops, densenet121's kernels (a batch norm over the concatenation of up to 32 parts before
# each convolution) build in about half the time of 32 (16 and 4 in between)
STAGES_PER_FUNCTION = 8


@dataclass
class _Parts:
    """Static functions holding a long run of a kernel's independent loop stages, each
    taking all the kernel's parameters (``names`` in order), and their sources."""

    kernel: str
    params: list
    names: list
    buffers: dict
    sources: list = field(default_factory=list)

    def emit(self, body: _Body, stages: list, emit: Callable) -> None:
        """``emit(body, stages)`` for up to ``STAGES_PER_FUNCTION`` stages; past that, each
        run of that many goes into a function of its own that ``body`` calls in order."""
        if len(stages) <= STAGES_PER_FUNCTION:
            emit(body, stages)
            return
        for i in range(0, len(stages), STAGES_PER_FUNCTION):
            name = f"{self.kernel}_part{len(self.sources)}"
            part = _Body(self.buffers, self.kernel)
            emit(part, stages[i:i + STAGES_PER_FUNCTION])
            self.sources.append(f"static __attribute__((noinline)) void {name}("
                                f"{', '.join(self.params)}) {{\n" + "\n".join(part.lines) +
                                "\n}\n")
            body.line(f"{name}({', '.join(self.names)});")

    def source(self, body: _Body) -> str:
        return "".join(self.sources) + _function(self.kernel, self.params, body)


def kernel_source(k: Kernel, buffers: dict, tunable: bool = False) -> tuple[str, list]:
    """C++ source of one kernel and its argument list (data pointers, then sizes).

    ``tunable`` (max-autotune) adds two trailing ``int64_t`` arguments, the OpenMP thread
    count and the chunks per thread of the outer loop, so one build serves every candidate.
    """
    if any(st.kind == "scatter" for st in k.stages):
        return _scatter_source(k, buffers)
    local = _row_locals(k)
    k.stored -= set(local)
    alias = _output_scratch(k, local)
    for name in alias:
        del local[name]
    _stage_outputs_early(k, {b.name for b in alias.values()})
    xs = ir.index_vars("x", len(k.outer))
    sig = signature(k, private=frozenset(local) | frozenset(alias))
    syms = sig.syms
    params = [f"const {CTYPES[buffers[b].dtype]}* __restrict__ {b}" for b in sig.inputs]
    params += [f"{CTYPES[buffers[b].dtype]}* __restrict__ {b}" for b in sig.outputs]
    params += [f"int64_t {s.name}" for s in syms]
    names = list(sig.inputs) + list(sig.outputs) + [s.name for s in syms]
    if tunable:
        params += [f"int64_t {p}" for p in TUNE_PARAMS]
        names += TUNE_PARAMS
    parts = _Parts(k.name, params, names, buffers)
    body = _Body(buffers, k.name)
    body.local = {name: xs for name in local}
    body.alias = alias

    outer_n = ir.numel(k.outer)
    inner_n = sum((ir.numel(st.rsizes) for st in k.stages), sympy.Integer(0))
    work = outer_n * (inner_n if inner_n != 0 else 1)
    static_work = _static(work)
    # the modifier: an ``if`` without one also applies to a combined ``simd``, whose false
    # branch g++ compiles as a scalar loop (every small call of a dynamic kernel unvectorized)
    cond = ("" if static_work is not None
            else f" if(parallel: {cpp_index(work)} >= {PARALLEL_MIN_WORK})")
    par = static_work is None or static_work >= PARALLEL_MIN_WORK
    threads = ""
    if tunable:  # the tuner picks the thread count (1 = serial), so always emit the pragma
        par, cond, threads = True, "", " num_threads(e_nt)"
    outer_parallel = bool(k.outer) and par and _static(outer_n) != 1
    if tunable and k.outer:
        body.line(f"const int64_t e_per = ({cpp_index(outer_n)} + e_nt * e_cpt - 1) / "
                  f"(e_nt * e_cpt);")
        body.line("const int64_t e_chunk = e_per > 0 ? e_per : 1;")
        threads += " schedule(static, e_chunk)"
    if par and not tunable and _horizontal(k):
        _emit_horizontal(body, k, cond, parts)
        return parts.source(body), sig.args(ArgKind.POINTER)
    jam = None if tunable or local or alias else _jam_factors(k)
    if jam:
        _emit_jammed(body, k, jam, cond if par else None)
        return _function(k.name, params, body), sig.args(ArgKind.POINTER)
    if _column_major(k):
        _emit_column(body, k, buffers, (cond + threads) if par else None)
        return _function(k.name, params, body), sig.args(ArgKind.POINTER)
    inner_parallel = par and not outer_parallel
    tables = [] if inner_parallel else _precompute_inner(body, k)
    # each thread's own copy: a table shared into the parallel region is memory a vector
    # math call might write, and g++ then leaves the loop scalar
    private = f" firstprivate({', '.join(tables)})" if tables else ""
    saved_outer = []
    if k.outer:
        if outer_parallel:
            body.line(f"#pragma omp parallel for collapse({len(k.outer)}){cond}{threads}"
                      f"{private}")
        for x, s in zip(xs, k.outer):
            saved_outer.append(body.open(f"for (int64_t {x} = 0; {x} < {cpp_index(s)}; ++{x})"))
        for name, n in local.items():
            body.line(f"{CTYPES[buffers[name].dtype]} {name}[{n}];")
    inner_cond = cond + (" num_threads(e_nt)" if tunable else "")

    def emit(b: _Body, stages: list) -> None:
        for st in stages:
            _emit_stage(b, st, buffers, k.stored, inner_parallel, inner_cond)

    if _horizontal(k) and not local and not alias:  # no stage reads another's locals
        parts.emit(body, k.stages, emit)
    else:
        emit(body, k.stages)
    for saved in reversed(saved_outer):
        body.close(saved)
    return parts.source(body), sig.args(ArgKind.POINTER)


JAM_MIN_REDUCTION = 64  # a shorter row loop is mostly its horizontal sum
JAM_TILE = 8  # accumulators of one jammed row loop (vector registers once vectorized)


def _jam_factors(k: Kernel) -> dict | None:
    """A dot-product kernel (one sum over a long contiguous row of a product of loads, as a
    loop matmul with K inside): for each outer loop one operand ignores, how many of its
    iterations share one row loop. {} or None: no such loop."""
    if not k.outer or len(k.stages) != 1 or any(_static(s) is None for s in k.outer):
        return None
    st = k.stages[0]
    if st.kind != "loop" or len(st.rsizes) != 1 or len(st.items) != 1:
        return None
    it = st.items[0]
    size = _static(st.rsizes[0])
    if it.kind != "reduce" or it.node.rtype != "sum" or it.node.buf.name not in k.stored or \
            not it.node.acc_dtype.is_floating_point or size is None or \
            size < JAM_MIN_REDUCTION:
        return None
    nodes = list(ir.walk(it.expr))
    if not all(isinstance(e, (ir.Load, ir.Cast, ir.PrimOp, ir.Const)) for e in nodes):
        return None
    r = ir.index_vars("r", 1)[0]
    loads = [e for e in nodes if isinstance(e, ir.Load)]
    if not ir.unit_stride(loads, r):
        return None
    xs = ir.index_vars("x", len(k.outer))
    reused = []
    for d, x in enumerate(xs):
        uses = [x in e.index.free_symbols for e in loads]
        if any(uses) and not all(uses):
            reused.append(d)
    factors, tile = {}, 1
    for d in sorted(reused, key=lambda d: -_static(k.outer[d])):
        f = next((f for f in (4, 2) if _static(k.outer[d]) % f == 0 and
                  tile * f <= JAM_TILE), None)
        if f is not None:
            factors[d], tile = f, tile * f
    return factors or None


def _emit_jammed(body: _Body, k: Kernel, factors: dict, cond: str | None) -> None:
    """Unroll-and-jam: outer loops stepping by their factor, one row loop updating an
    accumulator per combination, each load shared by the combinations it does not depend on
    (vit's 10 rows against 4 weight rows: 14 row loads per 40 multiply-adds instead of 80).
    Each accumulator sums the same values in the same order as the plain loop."""
    xs = ir.index_vars("x", len(k.outer))
    st = k.stages[0]
    it = st.items[0]
    rset = set(ir.index_vars("r", 1))
    expr = passes.apply("cpp", it.expr, rset, {}, where=body.kernel)
    if cond is not None:
        body.line(f"#pragma omp parallel for collapse({len(k.outer)}){cond}")
    saved = []
    for d, (x, n) in enumerate(zip(xs, k.outer)):
        step = factors.get(d, 1)
        inc = f"{x} += {step}" if step > 1 else f"++{x}"
        saved.append(body.open(f"for (int64_t {x} = 0; {x} < {cpp_index(n)}; {inc})"))
    combos = [{}]
    for d, f in factors.items():
        combos = [{**c, xs[d]: xs[d] + j} for c in combos for j in range(f)]
    dt = it.node.acc_dtype
    accs = [f"{it.var}_{j}" for j in range(len(combos))]
    for acc in accs:
        body.line(f"{ctype(dt)} {acc} = {_init('sum', dt)};")
    if not _too_short_for_simd(st.rsizes[0]):
        body.line(f"#pragma omp simd reduction(+:{', '.join(accs)})")
    loop = body.open(f"for (int64_t r0 = 0; r0 < {cpp_index(st.rsizes[0])}; ++r0)")
    for acc, shift in zip(accs, combos):
        shifted = ir.map_loads(expr, lambda e, m=shift: e._replace(index=e.index.xreplace(m)))
        body.line(f"{acc} += {body.expr(shifted)};")
    body.close(loop)
    flat = _flat_outer(len(it.node.buf.size), it.node.buf.size)
    for acc, shift in zip(accs, combos):
        body.line(_store(it.node.buf, flat.xreplace(shift), acc))
    for sv in reversed(saved):
        body.close(sv)


def _parallel_if(work) -> tuple[bool, str]:
    """Whether a loop over ``work`` elements may run in parallel, and the OpenMP ``if``
    clause that decides it at run time for symbolic sizes."""
    static = _static(work)
    if static is not None:
        return static >= PARALLEL_MIN_WORK, ""
    return True, f" if(parallel: {cpp_index(work)} >= {PARALLEL_MIN_WORK})"


# buffer dtypes whose elements an ``omp atomic`` update can add to
_ATOMIC = {torch.float32, torch.float64, torch.int64, torch.int32}


def _scatter_source(k: Kernel, buffers) -> tuple[str, list]:
    """A scatter kernel (``schedule.scatter_kernel``): the initial value's loop, then one
    loop over the values, each stored (or added) at the place its positions give. Threads
    split the values only where adds can be atomic; one thread adds plainly."""
    sig = signature(k)
    params = [f"const {CTYPES[buffers[b].dtype]}* __restrict__ {b}" for b in sig.inputs]
    params += [f"{CTYPES[buffers[b].dtype]}* __restrict__ {b}" for b in sig.outputs]
    params += [f"int64_t {s.name}" for s in sig.syms]
    body = _Body(buffers, k.name)
    init, scatter = k.stages
    par, cond = _parallel_if(ir.numel(init.rsizes))
    _emit_loop(body, init.rsizes, init.items, k.stored, par, cond)
    it = scatter.items[0]
    work = ir.numel(scatter.rsizes)
    par, _ = _parallel_if(work)
    if par and it.node.buf.dtype in _ATOMIC:
        scope = body.open(f"if ({cpp_index(work)} >= {PARALLEL_MIN_WORK} && "
                          f"omp_get_max_threads() > 1)")
        _emit_scatter(body, scatter, True)
        body.close(scope)
        scope = body.open("else")
        _emit_scatter(body, scatter, False)
        body.close(scope)
    else:
        _emit_scatter(body, scatter, False)
    return _function(k.name, params, body), sig.args(ArgKind.POINTER)


def _emit_scatter(body: _Body, st, parallel: bool) -> None:
    """The loops of a scatter stage; ``parallel``: threads share the outermost loop and
    every add is atomic."""
    it = st.items[0]
    buf, target = it.node.buf, it.index
    rs = ir.index_vars("r", len(st.rsizes))
    saved = []
    for d, (r, n) in enumerate(zip(rs, st.rsizes)):
        if d == 0 and parallel:
            body.line("#pragma omp parallel for")
        saved.append(body.open(f"for (int64_t {r} = 0; {r} < {cpp_index(n)}; ++{r})"))
    v = body.expr(it.expr)
    index = target.index.xreplace({
        ir.gather_slot(j): sympy.Symbol(body.expr(ir.cast(p, torch.int64)), integer=True)
        for j, p in enumerate(target.positions)})
    ref = f"{buf.name}[{cpp_index(index)}]"
    if not it.node.accumulate:
        body.line(_store(buf, index, v))
    elif buf.dtype == torch.bfloat16:
        body.line(f"{ref} = e_f_to_bf16(e_bf16_to_f({ref}) + {v});")
    elif buf.dtype == torch.float16:
        body.line(f"{ref} = static_cast<_Float16>(static_cast<float>({ref}) + {v});")
    else:
        if parallel:
            body.line("#pragma omp atomic")
        body.line(f"{ref} += static_cast<{CTYPES[buf.dtype]}>({v});")
    for sv in reversed(saved):
        body.close(sv)


def _horizontal(k: Kernel) -> bool:
    """Several loop stages storing pointwise values and no outer loops (independent updates,
    e.g. an optimizer's per-parameter loops): one parallel region runs them all."""
    return not k.outer and len(k.stages) > 1 and all(
        st.kind == "loop" and st.rsizes and all(it.kind == "store" for it in st.items)
        for st in k.stages)


def _emit_horizontal(body: _Body, k: Kernel, cond: str, parts: _Parts) -> None:
    """Horizontal fusion: one ``omp parallel`` region, each stage a work-shared loop without
    the barrier at its end (``nowait``); a barrier only before a stage that reads what an
    earlier stage since the last barrier stored (or stores what one read). One fork/join for
    the whole kernel instead of one per stage (the loops and barriers of a long run of stages
    sit in ``parts``' functions, called inside the region)."""
    body.line(f"#pragma omp parallel{cond}")
    region = body.open("")
    stored: set[str] = set()
    read: set[str] = set()

    def emit(b: _Body, stages: list) -> None:
        nonlocal stored, read
        for st in stages:
            reads = set().union(*(ir.reads_of(it.expr) for it in st.items))
            writes = {it.node.buf.name for it in st.items}
            if reads & stored or writes & read:
                b.line("#pragma omp barrier")
                stored, read = set(), set()
            scope = b.open("")
            _hoist(b, st.items, set(ir.index_vars("r", len(st.rsizes))))
            _emit_loop(b, st.rsizes, st.items, k.stored, True, "", team=True)
            b.close(scope)
            stored |= writes
            read |= reads

    parts.emit(body, k.stages, emit)
    body.close(region)


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
    xl, last = xs[-1], cpp_index(k.outer[-1])
    saved = []
    if cond is not None:
        body.line(f"#pragma omp parallel for collapse({len(k.outer)}){cond}")
    for x, sz in zip(xs[:-1], k.outer[:-1]):
        saved.append(body.open(f"for (int64_t {x} = 0; {x} < {cpp_index(sz)}; ++{x})"))
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
        inner = [body.open(f"for (int64_t {r} = 0; {r} < {cpp_index(sz)}; ++{r})")
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
        inner = [body.open(f"for (int64_t {r} = 0; {r} < {cpp_index(sz)}; ++{r})")
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
        if it.kind == "store":
            if it.node.buf.name in k.stored:
                body.line(_store(it.node.buf, it.index, _stored(body, it.expr, it.node.buf)))
            continue
        _update(body, it, body.names[it.var], body.expr(it.expr))


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


# Prims costing more than a load of a precomputed value: worth a per-kernel table of their
# results when the outer loops would recompute them for every row.
_COSTLY = frozenset({
    "truediv", "reciprocal", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10",
    "log1p", "sigmoid", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
    "asinh", "acosh", "atanh", "erf", "erfc", "pow", "atan2", "fmod", "remainder", "floordiv",
    "truncdiv"})
PRECOMPUTE_MAX = 4096  # elements of one precomputed table (on the stack)
PRECOMPUTE_BYTES = 1 << 16  # all tables of one kernel (each thread copies them)


def _inner_only(e, xset: set, written: set, memo: dict) -> bool:
    """``e`` reads no outer loop variable, no accumulator and no buffer the kernel writes."""
    for x in ir.walk(e):
        if isinstance(x, (ir.Var, ir.Gather)) or \
                isinstance(x, ir.Load) and x.buf in written:
            return False
    return ir.invariant(e, xset, memo)


def _precompute_inner(body: _Body, k: Kernel) -> list[str]:
    """Before the outer loops: tables of the costly sub-expressions that depend on a stage's
    single inner loop variable alone (an NHWC batch norm's ``1 / sqrt(var + eps)`` per
    channel, which the loop nest would otherwise recompute for every pixel). The same
    operations run, once per kernel call, so results are bitwise those of the loop."""
    if not k.outer or _static(ir.numel(k.outer)) == 1:
        return []
    xset = set(ir.index_vars("x", len(k.outer)))
    written = {it.node.buf.name for st in k.stages for it in st.items}
    memo: dict = {}
    rset = set(ir.index_vars("r", 1))
    found: dict = {}  # expression -> its stage's inner size
    others = []  # the expressions of stages that get no tables
    for st in k.stages:
        size = _static(st.rsizes[0]) if len(st.rsizes) == 1 else None
        if st.kind != "loop" or size is None or not 1 < size <= PRECOMPUTE_MAX:
            others += [it.expr for it in st.items]
            continue
        pending = []
        for it in st.items:
            it.expr = passes.apply("cpp", it.expr, rset, {}, where=body.kernel)
            pending.append(it.expr)
        while pending:
            e = pending.pop()
            if isinstance(e, ir.PrimOp) and e.dtype.is_floating_point and \
                    any(isinstance(x, ir.PrimOp) and x.prim in _COSTLY for x in ir.walk(e)) \
                    and not ir.invariant(e, rset, {}) and _inner_only(e, xset, written, memo):
                found[e] = size if found.get(e, size) == size else None
            else:
                pending.extend(ir.operands(e))
    # a table is indexed by the stage's loop variable: a stage of another size must not see it
    for x in (x for e in others for x in ir.walk(e)):
        if x in found:
            found[x] = None
    r = ir.index_vars("r", 1)[0]
    tables, nbytes = [], 0
    for e, size in found.items():
        if size is None or nbytes + size * 8 > PRECOMPUTE_BYTES:
            continue
        nbytes += size * 8
        table = f"e_pre{len(tables)}"
        body.line(f"{ctype(e.dtype)} {table}[{size}];")
        if not _too_short_for_simd(size):
            body.line("#pragma omp simd")
        saved = body.open(f"for (int64_t {r} = 0; {r} < {size}; ++{r})")
        body.line(f"{table}[{r}] = {body.expr(e)};")
        body.close(saved)
        body.memo[e] = f"{table}[{r}]"
        tables.append(table)
    return tables


def _hoist(body: _Body, items, rset: set) -> None:
    """Emit loop-invariant sub-expressions before the inner loop, after the
    ``divide_by_reciprocal`` pass (what eager's softmax / norms compute)."""
    memo: dict = {}

    def visit(e):
        if isinstance(e, (ir.PrimOp, ir.Cast, ir.Load)) and ir.invariant(e, rset, memo):
            body.expr(e)
        elif isinstance(e, ir.Cast):
            visit(e.x)
        elif isinstance(e, ir.PrimOp):
            for a in e.args:
                visit(a)

    for it in items:
        if rset:
            it.expr = passes.apply("cpp", it.expr, rset, memo, where=body.kernel)
            visit(it.expr)


# Vector math calls short enough that a reduction beside them is slowed by its accumulator's
# spill and reload around the call (a vector call clobbers every vector register). Measured:
# exp (softmax) gains ~15% per row from a separate re-read loop; erf (gelu) loses ~3%.
_SHORT_CALLS = frozenset({"exp"})


def _calls(e) -> bool:
    return any(isinstance(x, ir.PrimOp) and x.prim in _SHORT_CALLS and x.dtype.is_floating_point
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
                    s.node.buf.dtype == it.expr.dtype and set(rs) <= s.index.free_symbols and
                    (s.node.buf.name in stored or s.node.buf.name in body.alias or
                     s.node.buf.name in body.local)), None)
        if src is not None:
            load = ir.Load(it.expr.dtype, src.node.buf.name, src.index)
            out.append(type(it)("reduce", it.node, load, None, it.var))
    return out


def _emit_stage(body: _Body, st, buffers, stored, inner_parallel: bool, cond: str) -> None:
    reds = [it for it in st.items if it.kind == "reduce"]
    if st.kind == "scalar":
        for it in st.items:
            body.store(it.node.buf, it.index, _stored(body, it.expr, it.node.buf), stored)
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
    n = cpp_index(size)
    b, j = (sympy.Symbol(v, integer=True, nonnegative=True) for v in ("e_b", "e_j"))
    scope = body.open("")  # its own block: a row loop may hold several such sums
    for it in items:
        body.line(f"{ctype(it.node.acc_dtype)} {it.var}_l[{LANES}] = {{}};")
    body.line(f"const int64_t e_nb = {n} / {LANES} * {LANES};")
    saved = body.open(f"for (int64_t e_b = 0; e_b < e_nb; e_b += {LANES})")
    body.line("#pragma omp simd")
    inner = body.open(f"for (int64_t e_j = 0; e_j < {LANES}; ++e_j)")
    for it in items:
        load = it.expr._replace(index=it.expr.index.xreplace({r: b + j}))
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


def _emit_loop(body: _Body, rsizes, items, stored, inner_parallel: bool, cond: str,
               team: bool = False) -> None:
    """One loop nest over ``rsizes`` computing ``items`` (accumulators declared already);
    ``team``: inside a parallel region already, the outermost loop is shared without a
    barrier at its end (``_emit_horizontal``)."""
    clauses = []
    for it in items:
        if it.kind == "reduce":
            clauses.append(f"reduction({OMP_REDUCTIONS[it.node.rtype]}:{it.var})")
            if it.node.rtype in ("max", "min") and it.node.acc_dtype.is_floating_point:
                clauses.append(f"reduction(|:{it.var}_nan)")
    red = (" " + " ".join(clauses)) if clauses else ""
    rs = ir.index_vars("r", len(rsizes))
    saved = []
    for d, (r, s) in enumerate(zip(rs, rsizes)):
        innermost = d == len(rs) - 1
        if d == 0 and team:
            body.line(f"#pragma omp for{' simd' if innermost else ''} nowait")
        elif d == 0 and inner_parallel:
            simd = " simd" if innermost else ""
            body.line(f"#pragma omp parallel for{simd}{red}{cond}")
        elif innermost and not _too_short_for_simd(s):
            body.line(f"#pragma omp simd{red}")
        saved.append(body.open(f"for (int64_t {r} = 0; {r} < {cpp_index(s)}; ++{r})"))
    for it in items:
        if it.kind == "store":
            body.store(it.node.buf, it.index, _stored(body, it.expr, it.node.buf), stored)
            continue
        _update(body, it, it.var, body.expr(it.expr))
    for s in reversed(saved):
        body.close(s)


def _flat_outer(n: int, size) -> object:
    xs = ir.index_vars("x", n)
    return sum((v * s for v, s in zip(xs, ir.contiguous_strides(size))), sympy.Integer(0))


def translation_unit(kernels: list[str], libmvec: bool) -> str:
    """The prelude, glibc's SIMD math declarations when ``libmvec`` links, then the kernels."""
    mvec = mvec_declarations() if libmvec else ""
    return prelude() + mvec + "\n" + "\n".join(kernels)
