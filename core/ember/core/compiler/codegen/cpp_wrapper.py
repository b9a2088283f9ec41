"""The C++ renderer of a wrapper plan (``codegen/wrapper.py``), for ahead-of-time packages.

It spells the same steps as the Python wrapper in C++: sizes bound from the inputs, buffers
allocated (those of static size carved from an arena kept between calls, as in the JIT;
``codegen/arena.py``), our kernels called with data pointers, extern ATen ops called boxed
through the dispatcher (any registered op, no per-op code), and one C entry the loaders
call::

    int <entry>(void* const* args, void** outputs, char* err, int64_t err_len);

``args`` are ``at::Tensor*`` (the graph's placeholders in order, then its constants);
``outputs`` receive ``new at::Tensor`` objects the caller owns; the graph's new values of
buffers and inputs it updates in place are copied into their ``args`` instead. The status
is 0, or one of ``BadInput`` (1), ``Failed`` (2), ``IndexError`` (3) with a message in
``err``. The inputs the caller supplies are checked first (device, dtype, rank, static
sizes, dynamic ranges). The wrapper sees only ``cpp_wrapper_prelude.h`` (no ATen header);
every call into ATen goes through the runtime (``cpp_wrapper_runtime.cpp`` and
``cpp_wrapper_dispatch.cpp``), built once per machine."""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources

import sympy
import torch

from ember.core.compiler.codegen import cpp
from ember.core.compiler.codegen.common import ArgKind, cpp_index
from ember.core.compiler.codegen.wrapper import (
    Alias,
    Alloc,
    ArenaBuffer,
    BindInput,
    BindSize,
    BindSymbol,
    CallExtern,
    CallKernel,
    Check,
    FixStrides,
    GiveArena,
    Release,
    Return,
    TakeArena,
    WrapperStep,
)
from ember.core.compiler.ir import StridedView, Unsupported

# dtype -> the prelude's ``ember_aot::Dtype`` enumerator (c10::ScalarType's values)
SCALAR_TYPES = {
    torch.float32: "kFloat", torch.float64: "kDouble", torch.float16: "kHalf",
    torch.bfloat16: "kBFloat16", torch.int64: "kLong", torch.int32: "kInt", torch.int16: "kShort",
    torch.int8: "kChar", torch.uint8: "kByte", torch.bool: "kBool",
    torch.complex64: "kComplexFloat", torch.complex128: "kComplexDouble",
}
_LAYOUTS = {torch.strided: "ember_aot::kStrided"}
_MEMORY_FORMATS = {torch.contiguous_format: "ember_aot::kContiguousFormat",
                   torch.channels_last: "ember_aot::kChannelsLast",
                   torch.preserve_format: "ember_aot::kPreserveFormat"}


def _enum(a) -> str | None:
    """The C++ enumerator of a dtype, layout or memory format argument (None: not one)."""
    if isinstance(a, torch.dtype):
        return scalar_type(a)
    if isinstance(a, torch.layout):
        return _LAYOUTS.get(a)
    if isinstance(a, torch.memory_format):
        return _MEMORY_FORMATS.get(a)
    return None


# A linear on a packaged weight of at least this many elements (K * N) runs through
# ``ember_aot::PackedLinear``; oneDNN's fixed cost per call outweighs what packing saves on
# smaller ones ([M, 256] @ [256, 256] measured behind ATen's sgemm up to M = 64).
PACKED_MIN_WEIGHT = 1 << 17
# A 2-D convolution's: oneDNN reorders its weight on every call otherwise. On resnet18's
# shapes from 2^16 elements up a packed call took 0.56-1.01x the time at batch 1 and 8
# ([512, 512, 3, 3] at 7x7: 0.56x / 0.72x); smaller weights came out within 5% either way.
PACKED_MIN_CONV_WEIGHT = 1 << 16

# operator namespaces whose kernels libtorch registers in C++ (others need Python)
NATIVE_NAMESPACES = ("aten", "mkldnn")


@dataclass(frozen=True)
class InputSpec:
    """A caller-supplied graph input: its placeholder position, name, dtype and sizes."""

    pos: int
    name: str
    dtype: torch.dtype
    size: tuple  # ints and sympy expressions over the dynamic dimensions


def prelude() -> str:
    """``cpp_wrapper_prelude.h`` (package data), included by every generated wrapper: a tensor
    handle and the calls a wrapper makes, declared without ATen's headers."""
    return resources.files("ember.core.compiler.codegen").joinpath(
        "cpp_wrapper_prelude.h").read_text()


RUNTIME_SOURCES = ("cpp_wrapper_runtime.cpp", "cpp_wrapper_dispatch.cpp")


def runtime() -> tuple[dict[str, str], dict[str, str]]:
    """The prelude's bodies on ATen (package data): ``(sources, headers)``, each source built
    once per machine into its own object, in parallel, and linked into every package."""
    files = resources.files("ember.core.compiler.codegen")
    sources = {name: files.joinpath(name).read_text() for name in RUNTIME_SOURCES}
    return sources, {"cpp_wrapper_runtime.h": files.joinpath("cpp_wrapper_runtime.h").read_text()}


def scalar_type(dtype: torch.dtype) -> str:
    if dtype not in SCALAR_TYPES:
        raise Unsupported(f"dtype {dtype} has no ahead-of-time spelling")
    return f"ember_aot::{SCALAR_TYPES[dtype]}"


def _ints(xs) -> str:
    return "{" + ", ".join(cpp_index(x) for x in xs) + "}"


def _double(x: float) -> str:
    if math.isnan(x):  # compiler builtins: the wrapper includes no <limits>
        return "__builtin_nan(\"\")"
    if math.isinf(x):
        return ("" if x > 0 else "-") + "__builtin_inf()"
    return repr(float(x))


class CppWrapper:
    """Spells a plan as a C++ translation unit calling the kernels of ``kernel_specs``."""

    def __init__(self, entry: str, buffers: dict, n_args: int, constants: list[str],
                 inputs: list[InputSpec], ranges: dict, write_back: dict | None,
                 release: str, packed_dtypes: frozenset = frozenset({torch.float32})):
        self.entry = entry  # the C entry's symbol
        self.release = release  # the C entry emptying the caches kept between calls
        self.packed_dtypes = packed_dtypes  # weights of these dtypes are packed for oneDNN
        self.buffers = buffers
        self.n_args = n_args  # placeholders; the constants follow them in ``args``
        self.constants = constants
        self.inputs, self.ranges = inputs, ranges
        self.user_args = {f"arg{spec.pos}" for spec in inputs}  # the caller's tensors
        # output position -> the argument it is copied into (not handed out)
        self.write_back = dict(write_back or {})
        self.lines: list[str] = []
        self.decls: dict[str, str] = {}  # kernel prototypes
        self.ops: dict[str, str] = {}  # qualified op name -> static handle variable
        self.tmp = 0
        self.arena_offsets: list[int] = []  # byte offset of each arena slot

    # ------------------------------------------------------------------ arguments
    def _tensor(self, a) -> str:
        if not isinstance(a, StridedView):
            raise Unsupported(f"expected a tensor argument, got {type(a).__name__}")
        if a.is_natural():
            return a.buf.name
        return (f"ember_aot::view({a.buf.name}, {_ints(a.size)}, {_ints(a.stride)}, "
                f"{cpp_index(a.offset)})")

    def _optional_tensor(self, a) -> str:
        return "ember_aot::Tensor()" if a is None else self._tensor(a)

    def _push(self, a, typ) -> str:
        """``a`` as one ``ember_aot::Call`` push, spelled for the schema type ``typ``."""
        kind = typ.kind()
        if kind == "OptionalType":
            return ".none()" if a is None else self._push(a, typ.getElementType())
        if a is None:
            return ".none()"
        if kind == "TensorType":
            return f".tensor({self._tensor(a)})"
        enum = _enum(a)  # TorchScript spells ScalarType, Layout and MemoryFormat as int
        if enum is not None and kind in ("IntType", "ScalarTypeType", "LayoutType",
                                         "MemoryFormatType"):
            return f".i({enum})"
        if kind in ("IntType", "SymIntType"):
            return f".i({self._int(a)})"
        if kind == "FloatType":
            return f".f({self._float(a)})"
        if kind == "BoolType":
            return f".b({'true' if a else 'false'})"
        if kind == "NumberType":  # a Scalar
            if isinstance(a, bool):
                return f".b({'true' if a else 'false'})"
            if isinstance(a, int) or (isinstance(a, sympy.Expr) and a.is_integer):
                return f".i({self._int(a)})"
            return f".f({self._float(a)})"
        if kind == "StringType":
            return f".str({_c_string(a)})"
        if kind == "DeviceObjType":
            dev = torch.device(a)
            if dev.type != "cpu":
                raise Unsupported(f"ahead-of-time packages run on CPU; an op asks for {dev}")
            return ".cpu()"
        if kind == "ListType":
            return self._list(a, typ.getElementType())
        raise Unsupported(f"argument {a!r} of type {typ} has no ahead-of-time spelling")

    def _list(self, items, elem) -> str:
        kind = elem.kind()
        if kind in ("IntType", "SymIntType"):
            return f".ints({{{', '.join(self._int(x) for x in items)}}})"
        if kind == "FloatType":
            return f".floats({{{', '.join(self._float(x) for x in items)}}})"
        if kind == "BoolType":
            return f".bools({{{', '.join('true' if x else 'false' for x in items)}}})"
        if kind == "TensorType":
            return f".tensors({{{', '.join(self._tensor(x) for x in items)}}})"
        if kind == "OptionalType" and elem.getElementType().kind() == "TensorType":
            inner = ", ".join("ember_aot::Tensor()" if x is None else self._tensor(x)
                              for x in items)
            return f".optional_tensors({{{inner}}})"
        if kind == "OptionalType" and elem.getElementType().kind() == "NumberType":
            return f".optional_scalars({{{', '.join(self._opt_scalar(x) for x in items)}}})"
        raise Unsupported(f"list argument of {elem} has no ahead-of-time spelling")

    def _opt_scalar(self, a) -> str:
        if a is None:
            return "{ember_aot::OptScalar::kNone, 0, 0.0}"
        if isinstance(a, (bool, int)) or (isinstance(a, sympy.Expr) and a.is_integer):
            return f"{{ember_aot::OptScalar::kInt, {self._int(a)}, 0.0}}"
        return f"{{ember_aot::OptScalar::kFloat, 0, {self._float(a)}}}"

    @staticmethod
    def _int(a) -> str:
        if isinstance(a, bool):
            return "1" if a else "0"
        if isinstance(a, int):
            return f"{a}LL" if abs(a) > 2**31 - 1 else str(a)
        if isinstance(a, sympy.Expr):
            return cpp_index(a)
        raise Unsupported(f"expected an integer, got {a!r}")

    @staticmethod
    def _float(a) -> str:
        if isinstance(a, sympy.Expr):
            return f"static_cast<double>({cpp_index(a)})"
        if isinstance(a, (int, float)):
            return _double(float(a))
        raise Unsupported(f"expected a number, got {a!r}")

    # ------------------------------------------------------------------ steps
    def render(self, steps: list[WrapperStep]) -> str:
        for s in steps:
            getattr(self, "_" + type(s).__name__)(s)
        body = "\n".join("  " + ln for ln in self.lines)
        checks = "\n".join("  " + ln for ln in self._input_checks())
        decls = "\n".join(self.decls.values())
        consts = "".join(f"  ember_aot::Tensor {name} = ember_aot::arg(args, {self.n_args + i});\n"
                         for i, name in enumerate(self.constants))
        return f"""#include "cpp_wrapper_prelude.h"

extern "C" {{
{decls}
}}

static void ember_graph(void* const* args, void** outputs) {{
{checks}
{consts}{body}
}}

extern "C" __attribute__((visibility("default")))
int {self.entry}(void* const* args, void** outputs, char* err, int64_t err_len) {{
  return ember_aot::run_graph(ember_graph, args, outputs, err, err_len);
}}

extern "C" __attribute__((visibility("default")))
void {self.release}() {{ ember_aot::release_caches(); }}
"""

    def _input_checks(self) -> list[str]:
        out, bound = [], {}
        for spec in self.inputs:
            t, name = f"in{spec.pos}", _c_string(spec.name)
            out.append(f"const ember_aot::Tensor {t} = ember_aot::arg(args, {spec.pos});")
            out.append(f"ember_aot::expect_rank({t}, {name}, {len(spec.size)});")
            out.append(f"ember_aot::expect_dtype({t}, {name}, {scalar_type(spec.dtype)});")
            for d, s in enumerate(spec.size):
                s = sympy.sympify(s)
                if s.is_Integer:
                    out.append(f"ember_aot::expect_size({t}, {name}, {d}, {int(s)});")
                elif isinstance(s, sympy.Symbol) and s not in bound:
                    lo, hi = self.ranges.get(s.name, (0, 2**62))
                    bound[s] = True
                    out.append(f"ember_aot::expect_range({t}.size({d}), {name}, {d}, "
                               f"{_c_string(s.name)}, {lo}, {hi});")
                    out.append(f"const int64_t chk_{s.name} = {t}.size({d});")
                else:
                    want = cpp_index(s.subs({b: sympy.Symbol(f"chk_{b.name}") for b in bound}))
                    if s.free_symbols - set(bound):
                        raise Unsupported(f"input {spec.name!r} dimension {d} is {s}, which no "
                                          f"earlier dimension binds")
                    out.append(f"ember_aot::expect_equal({t}.size({d}), {want}, {name}, {d}, "
                               f"{_c_string(str(s))});")
        return out

    def _BindInput(self, s: BindInput):
        self.lines.append(f"ember_aot::Tensor {s.name} = ember_aot::arg(args, {s.pos});")

    def _BindSize(self, s: BindSize):
        self.lines.append(f"const int64_t {s.sym.name} = {s.buf.name}.{s.what}({s.dim});")

    def _BindSymbol(self, s: BindSymbol):
        raise Unsupported(f"size symbol {s.sym} is a graph input of its own; ahead-of-time "
                          f"packages take sizes from their tensors")

    def _FixStrides(self, s: FixStrides):
        for b in s.bufs:
            self.lines.append(f"{b.name} = ember_aot::fix({b.name}, {_ints(b.size)}, "
                              f"{_ints(b.stride)}, {scalar_type(b.dtype)});")

    def _Alias(self, s: Alias):
        src = s.src if s.layout is None else \
            f"ember_aot::view({s.src}, {_ints(s.layout.size)}, {_ints(s.layout.stride)}, 0)"
        self.lines.append(f"ember_aot::Tensor {s.name} = {src};  // {s.why}")

    def _Alloc(self, s: Alloc):
        b = s.buf
        self.lines.append(f"ember_aot::Tensor {b.name} = ember_aot::empty({_ints(b.size)}, "
                          f"{_ints(b.stride)}, {scalar_type(b.dtype)});")

    def _TakeArena(self, s: TakeArena):
        self.arena_offsets = [offset for _, offset in s.slots]
        self.lines.append("static ember_aot::ArenaPool ember_arenas;")
        self.lines.append(f"const ember_aot::Lease ember_arena(ember_arenas, {s.nbytes}LL);")

    def _ArenaBuffer(self, s: ArenaBuffer):
        b = s.buf
        self.lines.append(f"ember_aot::Tensor {b.name} = ember_arena.slot("
                          f"{self.arena_offsets[s.slot]}, {_ints(b.size)}, {_ints(b.stride)}, "
                          f"{scalar_type(b.dtype)});")

    def _GiveArena(self, s: GiveArena):
        pass  # the lease gives the arena back as the graph returns or throws

    def _CallKernel(self, s: CallKernel):
        params, args = [], []
        for a in s.spec:
            if a.kind is ArgKind.POINTER:
                ctype = cpp.CTYPES[self.buffers[a.value].dtype]
                params.append(f"{ctype}*")
                args.append(f"static_cast<{ctype}*>({a.value}.data())")
            elif a.kind is ArgKind.SIZE:
                params.append("int64_t")
                args.append(cpp_index(a.value))
            else:
                raise Unsupported("ahead-of-time packages call C++ kernels only")
        self.decls[s.name] = f"void {s.name}({', '.join(params)});"
        self.lines.append(f"{s.name}({', '.join(args)});")

    def _op_handle(self, op) -> str:
        schema = getattr(op, "_schema", None)
        if schema is None:
            raise Unsupported(f"{op} is not an operator ahead-of-time packages can call")
        ns = schema.name.split("::")[0]
        if ns not in NATIVE_NAMESPACES:
            raise Unsupported(f"{schema.name} is registered from Python; a package running "
                              f"without Python cannot call it")
        key = f"{schema.name}.{schema.overload_name}"
        if key not in self.ops:
            self.ops[key] = f"op{len(self.ops)}"
        return self.ops[key]

    def _packaged_weight(self, w, rank: int, min_elements: int) -> bool:
        """``w`` is a weight of ``rank`` dimensions the package holds, of a dtype it packs,
        read whole in its own layout, with at least ``min_elements`` elements."""
        name = w.buf.name if isinstance(w, StridedView) else None
        packaged = name is not None and name not in self.user_args and (
            name in self.constants or name.startswith("arg"))
        return packaged and w.dtype in self.packed_dtypes and len(w.size) == rank and \
            w.is_natural() and all(sympy.sympify(d).is_Integer for d in w.size) and \
            math.prod(int(d) for d in w.size) >= min_elements

    def _bias(self, bias, w) -> bool:
        """``bias`` is None or a whole 1-D tensor of ``w``'s dtype, one value per output."""
        return bias is None or (isinstance(bias, StridedView) and bias.is_natural() and
                                bias.dtype == w.dtype and list(bias.size) == [w.size[0]])

    def _linear_operands(self, step):
        """(x, [N, K] weight, bias or None) of a linear on a packaged weight (``addmm`` /
        ``mm`` by its transpose, or oneDNN's linear), else None."""
        op, args = step.op, step.args
        if step.kwargs or step.out_tree != "single":
            return None
        if op is torch.ops.mkldnn._linear_pointwise.default and len(args) == 6 and \
                args[3:] == ("none", [], ""):
            x, w, bias = args[:3]
        elif op in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default):
            x, wt, bias = (*args[:2], None) if op is torch.ops.aten.mm.default else \
                (args[1], args[2], args[0])
            if len(args) != (2 if bias is None else 3) or not isinstance(wt, StridedView) or \
                    len(wt.size) != 2:
                return None
            w = StridedView(wt.buf, wt.size[::-1], wt.stride[::-1], wt.offset)
        else:
            return None
        if not self._packaged_weight(w, 2, PACKED_MIN_WEIGHT) or not w.is_contiguous() or \
                not isinstance(x, StridedView) or x.dtype != w.dtype or not self._bias(bias, w):
            return None
        return x, w, bias

    def _conv_operands(self, step):
        """(x, weight, bias or None, stride, padding, dilation, groups) of a 2-D convolution
        on a packaged weight, else None."""
        if step.op is not torch.ops.aten.convolution.default or step.kwargs or \
                step.out_tree != "single" or len(step.args) != 9:
            return None
        x, w, bias, stride, padding, dilation, transposed, _, groups = step.args
        ints = (stride, padding, dilation)
        if transposed or not isinstance(groups, int) or \
                not all(len(v) == 2 and all(isinstance(i, int) for i in v) for v in ints):
            return None
        if not self._packaged_weight(w, 4, PACKED_MIN_CONV_WEIGHT) or \
                not isinstance(x, StridedView) or x.dtype != w.dtype or not self._bias(bias, w):
            return None
        return x, w, bias, stride, padding, dilation, groups

    def _packed_call(self, step, kind: str, call: str) -> None:
        """``step``'s one output from ``call`` on a per-call-site ``ember_aot::<kind>``."""
        self.tmp += 1
        (b,) = step.outs
        self.lines += [
            f"static ember_aot::{kind} packed{self.tmp};",
            f"ember_aot::Tensor {b.name} = ember_aot::fix(packed{self.tmp}.run({call}), "
            f"{_ints(b.size)}, {_ints(b.stride)}, {scalar_type(b.dtype)});  "
            f"// {step.op}, packed weight"]

    def _CallExtern(self, s: CallExtern):
        if s.out:
            raise Unsupported("the C++ wrapper calls externs boxed: plan it without extern_out")
        step = s.step
        # a weight packed once for oneDNN, kept between calls
        linear = self._linear_operands(step)
        if linear is not None:
            x, w, bias = linear
            self._packed_call(step, "PackedLinear", f"{self._tensor(x)}, {self._tensor(w)}, "
                                                    f"{self._optional_tensor(bias)}")
            return
        conv = self._conv_operands(step)
        if conv is not None:
            x, w, bias, stride, padding, dilation, groups = conv
            self._packed_call(step, "PackedConv", f"{self._tensor(x)}, {self._tensor(w)}, "
                                                  f"{self._optional_tensor(bias)}, "
                                                  f"{_ints(stride)}, {_ints(padding)}, "
                                                  f"{_ints(dilation)}, {groups}")
            return
        handle = self._op_handle(step.op)
        schema = step.op._schema
        pushes = []
        for i, arg in enumerate(schema.arguments):
            if i < len(step.args):
                v = step.args[i]
            elif arg.name in step.kwargs:
                v = step.kwargs[arg.name]
            elif arg.has_default_value():
                v = arg.default_value
            else:
                raise Unsupported(f"{schema.name}: argument {arg.name!r} is missing")
            pushes.append(self._push(v, arg.type))
        self.tmp += 1
        call = f"call{self.tmp}"
        outs = [b for b in step.outs if b is not None]
        if outs:
            self.lines.append(f"ember_aot::Tensor {', '.join(b.name for b in outs)};")
        self.lines.append("{  // the call's stack (its returns) is freed at the block's end")
        self.lines.append(f"static void* const {handle}_{self.tmp} = "
                          f"ember_aot::op({_c_string(schema.name)}, "
                          f"{_c_string(schema.overload_name)});")
        self.lines.append(f"ember_aot::Call {call}({handle}_{self.tmp});")
        if pushes:
            self.lines.append(f"{call}{''.join(pushes)};")
        self.lines.append(f"{call}.run();  // {step.op}, boxed")
        for k, b in enumerate(step.outs):
            if b is None:
                continue
            if step.out_tree == "list":
                got = f"{call}.out_list({k})"
            else:
                got = f"{call}.out({0 if step.out_tree == 'single' else k})"
            self.lines.append(f"{b.name} = ember_aot::fix({got}, {_ints(b.size)}, "
                              f"{_ints(b.stride)}, {scalar_type(b.dtype)});")
        self.lines.append("}")

    def _Check(self, s: Check):
        self.lines.append(f"ember_aot::check_index({self._tensor(s.flag)}, "
                          f"{_c_string(s.message)});")

    def _Release(self, s: Release):
        self.lines += [f"{name} = ember_aot::Tensor();" for name in s.names]

    def _Return(self, s: Return):
        for i, o in enumerate(s.outputs):  # every output made before any is handed out
            out = "ember_aot::Tensor()" if o is None else self._tensor(o)
            self.lines.append(f"ember_aot::Tensor out{i} = {out};")
        if self.write_back:
            into = list(self.write_back.items())
            for j, (_, a) in enumerate(into):
                self.lines.append(f"const ember_aot::Tensor into{j} = ember_aot::arg(args, {a});")
            dsts = "{" + ", ".join(f"into{j}" for j in range(len(into))) + "}"
            own = {o: j for j, (o, _) in enumerate(into)}
            # no output may read memory an earlier copy overwrote
            for i in range(len(s.outputs)):
                self.lines.append(f"out{i} = ember_aot::apart(out{i}, {dsts}, {own.get(i, -1)});")
            for j, (o, _) in enumerate(into):
                self.lines.append(f"ember_aot::write_back(into{j}, out{o});")
        handed = [i for i in range(len(s.outputs)) if i not in self.write_back]
        for k, i in enumerate(handed):
            self.lines.append(f"outputs[{k}] = ember_aot::release(out{i});")


def _c_string(s: str) -> str:
    out = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{out}"'
