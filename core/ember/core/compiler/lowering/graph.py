"""The graph walk: each FX node of an ATen graph through its lowering, in topological order.

Placeholders and constants become buffers; a node without a lowering, or whose lowering
refuses it, becomes an ATen call (an extern by design, or an eager fallback logged once per op
on ``ember.fallback``). Values read by several nodes are realized into buffers when
recomputing them would cost more than a store.
"""

from __future__ import annotations

import logging
import operator
from collections import Counter

import sympy
import torch
from torch.fx import GraphModule
from torch.fx import Node as FxNode

from ember.core.compiler import ir
from ember.core.compiler.ir import (
    Buffer,
    Extern,
    Lazy,
    Pointwise,
    StridedView,
    TensorValue,
    Unsupported,
    contiguous_strides,
)
from ember.core.compiler.lowering import foreach, ops, pooling  # noqa: F401  (the op table)
from ember.core.compiler.lowering.builders import (
    LOWERINGS,
    Ctx,
    Decline,
    InputWrite,
    bload,
    meta_val,
    sym,
)
from ember.core.compiler.lowering.externs import is_extern, needs_eager_layout
from ember.core.compiler.runtime.triton_libdevice import interpreted
from ember.core.logs import get_logger

log = get_logger("lower")
_fallback_log = get_logger("fallback")
_logged_fallbacks: set[str] = set()
_NODE_VAL = object()  # _extern: the value is the node's own (meta["val"])

# Prims worth storing rather than recomputing when a value has several readers.
_COSTLY = {"exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "erf", "erfc", "sigmoid",
           "pow", "sin", "cos", "tan", "atan2"}


class GraphLowering:
    """Walks an FX graph, building IR nodes in topological order."""

    def __init__(self, gm: GraphModule, device: str = "cpu", inference: bool = False,
                 triton: bool = False):
        self.gm = gm
        self.device = device  # kernels run on this device type (CUDA for Triton codegen)
        self.triton = triton  # Triton kernels (no scatter kernels there), else C++
        self.inference = inference  # no backward will follow (AOT's inference graph)
        self.nodes: list = []
        self.inputs: list = []  # (placeholder position, Buffer | sympy.Symbol | None)
        self.constants: dict[str, torch.Tensor] = {}
        self.outputs: list = []
        self.fallback_ops: list[str] = []
        self.checks: list[ir.IndexCheck] = []
        self.reductions: dict = {}  # (value id, dims, type, dtypes) -> (value, buffer)
        self.checked: dict = {}  # (index id, size, wrap, message) -> index: checks made
        self._count = 0
        self.env: dict[FxNode, object] = {}
        self.input_writes: Counter = Counter()  # placeholder -> FX nodes writing into it
        self.retargeted: set[int] = set()  # ids of buffers renamed to the input they overwrite
        # what IR nodes and lazy values read, computed once (a value read later through a
        # lazy realized since reads its buffer instead: only fresh names drop out)
        self._reads: dict = {}

    def new_buffer(self, dtype, size, stride=None) -> Buffer:
        self._count += 1
        return Buffer(f"buf{self._count}", dtype, list(size),
                      list(stride) if stride is not None else contiguous_strides(size))

    def add(self, node):
        node.pos = len(self.nodes)
        self.nodes.append(node)
        return node

    def realize(self, x) -> StridedView:
        if isinstance(x, StridedView):
            return x
        if isinstance(x, Lazy):
            if x.realized is None:
                order = x.layout
                if order is None:
                    buf = self.new_buffer(x.dtype, x.size)
                    node = self.add(Pointwise(buf, x.fn))
                    view = StridedView.of(buf)
                else:  # eager's memory order: loops (and stores) walk the buffer in it
                    buf = self.new_buffer(x.dtype, [x.size[d] for d in order])
                    at = [order.index(d) for d in range(len(order))]
                    node = self.add(Pointwise(buf, lambda i, f=x.fn: f([i[k] for k in at])))
                    view = StridedView(buf, list(x.size), [buf.stride[k] for k in at])
                x.realized, x.realized_at = view, node.pos
            return x.realized
        raise TypeError(f"cannot realize {type(x).__name__}")

    def run(self) -> None:
        debug = log.isEnabledFor(logging.DEBUG)
        self._live: list = []  # lowered FX nodes, pruned to those a later node still reads
        self._order = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        self._last_use = {n: max((self._order[u] for u in n.users), default=-1)
                          for n in self.gm.graph.nodes}
        for node in self.gm.graph.nodes:
            for a in _written_args(node):
                # a write whose target is not a view of a placeholder: in-place stores of
                # inputs are off for the graph (counted under None, see _copy_into_input)
                self.input_writes[_root(a)] += 1
        for node in self.gm.graph.nodes:
            first = len(self.nodes)
            self.env[node] = self._lower(node)
            self._live.append(node)
            if debug and node.op == "call_function":
                made = ", ".join(f"{type(n).__name__} {_written(n)}" for n in self.nodes[first:])
                log.debug("%s (%s) -> %s", node.name, node.target,
                          made or "a value inlined into its readers")
        if log.isEnabledFor(logging.INFO):
            kinds = Counter(type(n).__name__ for n in self.nodes)
            fallbacks = sum(isinstance(n, Extern) and n.fallback for n in self.nodes)
            log.info("%d FX nodes -> %d IR nodes: %d pointwise, %d reductions, %d externs "
                     "(%d in eager ATen), %d index checks", len(self.gm.graph.nodes),
                     len(self.nodes), kinds["Pointwise"], kinds["Reduction"], kinds["Extern"],
                     fallbacks, len(self.checks))

    def _arg(self, a):
        if isinstance(a, FxNode):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self._arg(v) for k, v in a.items()}
        if isinstance(a, (torch.SymInt, torch.SymFloat)):
            return sym(a)
        return a

    def _lower(self, node: FxNode):
        val = meta_val(node)
        if node.op == "placeholder":
            pos = len(self.inputs)
            if _is_effect_token(node):
                # AOTAutograd passes None for an effect token at run time and drops the token
                # outputs; the token only orders the with_effects calls (see _with_effects)
                self.inputs.append(None)
                return None
            if isinstance(val, torch.Tensor):
                self._check_tensor(val)
                buf = Buffer(f"arg{pos}", val.dtype, [sym(s) for s in val.shape],
                             [sym(s) for s in val.stride()])
                self.inputs.append(buf)
                return StridedView.of(buf)
            self.inputs.append(sym(val) if isinstance(val, (torch.SymInt, int)) else None)
            return sym(val) if isinstance(val, (torch.SymInt, torch.SymFloat, int, float)) \
                else val
        if node.op == "get_attr":
            t = getattr(self.gm, node.target)
            if not isinstance(t, torch.Tensor):
                raise Unsupported(f"get_attr of {type(t).__name__}")
            if t.layout == torch._mkldnn:
                return t  # a prepacked weight (freezing): handed to its extern call as is
            self._check_tensor(t)
            name = f"const{len(self.constants)}"
            self.constants[name] = t
            return StridedView.of(Buffer(name, t.dtype, [sym(s) for s in t.shape],
                                         [sym(s) for s in t.stride()]))
        if node.op == "output":
            outs = node.args[0]
            self.outputs = [self._output(self._arg(o), o) for o in outs]
            return None
        if node.target is operator.getitem:
            src = self._arg(node.args[0])
            return src[node.args[1]]
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
                not isinstance(node.target, torch._ops.OpOverload)
                and isinstance(val, (int, float, bool))):
            return sym(val)
        if node.target is torch.ops.higher_order.with_effects:
            return self._with_effects(node)
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            raise Unsupported(f"higher-order op {node.target.name()}: the graph runs in eager")
        args, kwargs = self._arg(node.args), self._arg(node.kwargs)
        target = node.target
        if target is torch.ops.aten.copy_.default and not kwargs:
            out = self._copy_into_input(node, *args)
            if out is not None:
                return out
        packet = getattr(target, "_overloadpacket", None)
        lowering = LOWERINGS.get(packet)
        if lowering is not None and self._supported(node):
            try:
                out = lowering(Ctx(self, node), *args, **kwargs)
                return self._maybe_realize(node, out)
            except Decline:
                pass
            except Unsupported as e:
                self._note_fallback(target, str(e))
        elif not is_extern(packet):
            self._note_fallback(target, "no lowering")
        return self._extern(node, args, kwargs, fallback=not is_extern(packet))

    def _check_tensor(self, t) -> None:
        # complex tensors may enter the graph: only externs/eager ops touch them
        # (``_supported`` keeps them out of kernels)
        if t.device.type != self.device or t.layout != torch.strided or t.dtype not in \
                ir.SUPPORTED_DTYPES and not t.dtype.is_complex:
            raise Unsupported(f"tensor on {t.device} / {t.layout} / {t.dtype}")

    def _supported(self, node: FxNode) -> bool:
        vals = [meta_val(node)] + [meta_val(a) for a in node.all_input_nodes]
        for v in vals:
            for t in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(t, torch.Tensor) and (t.device.type != self.device or t.dtype not in
                                                    ir.SUPPORTED_DTYPES):
                    return False
        return True

    def _note_fallback(self, target, reason: str) -> None:
        name = str(target)
        self.fallback_ops.append(name)
        if name not in _logged_fallbacks:
            _logged_fallbacks.add(name)
            _fallback_log.info("%s runs in eager ATen: %s", name, reason)

    def _maybe_realize(self, node: FxNode, out):
        if isinstance(out, Lazy) and out.realized is None and out.layout is None:
            out.layout = _stored_order(node, out)
        if isinstance(out, list):  # foreach ops, pooling: each value's readers go through getitem
            uses = Counter()
            for u in node.users:
                if u.target is operator.getitem and isinstance(u.args[1], int):
                    uses[u.args[1]] += len(u.users)
                else:
                    uses.update(range(len(out)))
            vals = meta_val(node)
            for i, v in enumerate(out):
                if v is None:   # an output no node reads (see pooling)
                    continue
                if isinstance(v, Lazy) and v.realized is None and v.layout is None and \
                        isinstance(vals, (list, tuple)):
                    v.layout = dense_order(vals[i], len(v.size))
                self._realize_shared(v, uses[i])
            return out
        return self._realize_shared(out, len(node.users))

    def _realize_shared(self, out, users: int):
        if isinstance(out, Lazy):
            e = out.fn(ir.index_vars("x", len(out.size)))
            ops = ir.op_count(e)
            if ops == 0 and not ir.reads_of(e):
                return out  # a constant or an index (zeros, iota): cheaper than any load
            costly = any(isinstance(x, ir.PrimOp) and x.prim in _COSTLY for x in ir.walk(e))
            if ops > 64 or (users > 1 and (ops > 3 or users > 3 or costly)):
                self.realize(out)
        return out

    def extern_call(self, target, args: tuple, val):
        """An ATen call chosen by a lowering (not the node's own op) returning a tensor shaped
        like ``val``, or a tuple of them when ``val`` is a tuple (None: an output the call
        does not compute); ``args`` hold realized views."""
        reads = [a.buf for a in args if isinstance(a, StridedView)]
        vals = val if isinstance(val, tuple) else (val,)
        outs = [None if v is None else self.new_buffer(v.dtype, [sym(s) for s in v.shape],
                                                       _fresh_strides(v))
                for v in vals]
        tree = "tuple" if isinstance(val, tuple) else "single"
        self.add(Extern(target, args, {}, outs, tree, False, reads))
        views = tuple(None if b is None else StridedView.of(b) for b in outs)
        return views if tree == "tuple" else views[0]

    def _with_effects(self, node: FxNode):
        """``with_effects(token, op, *args)`` (AOTAutograd orders a side-effecting op, such
        as linalg's error checks, by threading a token) -> ``op`` as an extern call, and the
        token passed through unchanged, as Inductor unwraps it: externs run in graph order,
        which is the order the token stands for. Values: ``(token, *op's results)``."""
        token, op, *op_args = node.args
        if not isinstance(op, torch._ops.OpOverload):
            raise Unsupported(f"with_effects of {op}: the graph runs in eager")
        n_ret = len(op._schema.returns)
        val = meta_val(node)
        op_val = () if n_ret == 0 else val[1] if n_ret == 1 else tuple(val[1:])
        args, kwargs = self._arg(tuple(op_args)), self._arg(node.kwargs)
        out = self._extern(node, args, kwargs, fallback=not is_extern(op._overloadpacket),
                           target=op, val=op_val, fx_args=(tuple(op_args), node.kwargs))
        return (self._arg(token), *([] if n_ret == 0 else [out] if n_ret == 1 else out))

    def _extern(self, node: FxNode, args, kwargs, fallback: bool, target=None, val=_NODE_VAL,
                fx_args=None):
        """``node``'s op (or ``target``, giving ``val``) as an ATen call at run time;
        ``fx_args``: the FX arguments and keyword arguments ``args``, ``kwargs`` came from
        (default the node's)."""
        reads: list[Buffer] = []
        target = node.target if target is None else target

        schema = getattr(target, "_schema", None)
        pure = schema is not None and not any(
            x.alias_info is not None for x in [*schema.arguments, *schema.returns])
        if schema is not None and not pure:
            self._realize_readers_of(_written_buffers(schema, args, kwargs), node)

        def conv(a):
            if pure and isinstance(a, Lazy) and a.realized is None and a.source is not None:
                a = a.source  # ATen takes any strides: skip the copy (e.g. mm of a clone)
            if pure and isinstance(a, Lazy) and a.realized is None and a.permuted is not None:
                inner, dims = a.permuted  # store in natural order, hand ATen a permuted view
                v = self.realize(inner)
                reads.append(v.buf)
                return StridedView(v.buf, [v.size[d] for d in dims], [v.stride[d] for d in dims],
                                   v.offset)
            if isinstance(a, TensorValue):
                v = self.realize(a)
                reads.append(v.buf)
                return v
            if isinstance(a, (list, tuple)):
                return type(a)(conv(x) for x in a)
            return a

        args, kwargs = conv(args), {k: conv(v) for k, v in kwargs.items()}
        if needs_eager_layout(target):
            fx_args, fx_kwargs = fx_args or (node.args, node.kwargs)
            args = self._in_eager_layout(args, fx_args, reads)
            kwargs = {k: self._in_eager_layout(v, fx_kwargs.get(k), reads)
                      for k, v in kwargs.items()}
        val = meta_val(node) if val is _NODE_VAL else val
        vals = val if isinstance(val, (list, tuple)) else [val]
        outs = []
        for v in vals:
            if isinstance(v, torch.Tensor):
                strides = _fresh_strides(v) if pure else [sym(s) for s in v.stride()]
                outs.append(self.new_buffer(v.dtype, [sym(s) for s in v.shape], strides))
            else:
                outs.append(None)
        tree = "list" if isinstance(val, list) else "tuple" if isinstance(val, tuple) \
            else "single"
        self.add(Extern(target, args, kwargs, outs, tree, fallback, reads))
        views = [StridedView.of(b) if b is not None else None for b in outs]
        return views if tree != "single" else views[0]

    def _in_eager_layout(self, a, fx, reads: list):
        """``a`` (an extern's argument, from FX argument ``fx``) with each tensor in eager's
        strides where ours differ or its last dim is not contiguous (a copy laid out as
        ``fx``'s value)."""
        if isinstance(a, (list, tuple)):
            fxs = fx if isinstance(fx, (list, tuple)) and len(fx) == len(a) else [None] * len(a)
            return type(a)(self._in_eager_layout(x, f, reads) for x, f in zip(a, fxs))
        if not isinstance(a, StridedView) or not a.size:
            return a
        val = meta_val(fx) if isinstance(fx, FxNode) else None
        unit_last = ir.same(a.size[-1], sympy.Integer(1)) or \
            ir.same(a.stride[-1], sympy.Integer(1))
        if unit_last and _same_layout(a, val):
            return a
        v = self._in_layout_of(a, val)
        reads.append(v.buf)
        return v

    def _in_layout_of(self, v: StridedView, val) -> StridedView:
        """A copy of ``v`` laid out as eager's ``val`` (row-major when that is not one dense
        block)."""
        out = Lazy(v.dtype, list(v.size), v.load)
        out.layout = dense_order(val, len(v.size))
        return self.realize(out)

    def _copy_into_input(self, node: FxNode, dst, src, non_blocking=False):
        """``copy_(input, value)`` (AOTAutograd's input mutation epilogue) as a pointwise node
        storing ``value`` straight into the input's buffer: the value's loop writes the input
        and no fresh buffer and extern copy follow. Only for the one write into a contiguous
        CPU input whose whole buffer is ``dst`` (``wrapper.plan`` never allocates or rebinds a
        kernel output that is a graph input), and not under Triton's interpreter (a CPU graph
        may then be Triton code, whose kernels max-autotune re-runs); None leaves the call to
        the extern ``copy_``.

        Values that read the input's old contents and are read later are computed before the
        write (``_realize_readers_of``); ``value`` itself is then read from the input."""
        buf = dst.buf if isinstance(dst, StridedView) else None
        if buf is None or self.device != "cpu" or not dst.is_natural() or \
                not any(buf is b for b in self.inputs) or not isinstance(src, TensorValue) or \
                self.input_writes[_root(node.args[0])] != 1 or self.input_writes[None] or \
                len(src.size) > len(buf.size) or not _contiguous(buf) or interpreted():
            return None
        if self._retarget(src, buf, node):
            return StridedView.of(buf)
        # ``src`` itself computed into the input, when no later node reads it (an output or a
        # view of it would otherwise alias the input, where eager has a fresh tensor)
        last = self._last_use.get(node.args[1], 1 << 62) if isinstance(node.args[1], FxNode) \
            else 1 << 62
        whole = isinstance(src, Lazy) and src.realized is None and src.dtype == buf.dtype \
            and ir.same_sizes(src.size, buf.size) and last <= self._order[node]
        if whole:  # ``src``'s own reads of the old contents happen in the store's loop
            src.realized = StridedView.of(Buffer(f"{buf.name}_new", buf.dtype, buf.size,
                                                 buf.stride))
            src.realized_at = -1
        try:
            self._realize_readers_of({buf.name}, node)
        finally:
            if whole:
                src.realized = None
        size = list(buf.size)
        fn = src.fn if whole else (lambda i, s=src: bload(s, size, i, buf.dtype))
        write = self.add(InputWrite(buf, fn))
        if not _schedulable(write):  # reads the input at elements other than the one it stores
            self.nodes.pop()
            return None
        if whole:
            src.realized, src.realized_at = StridedView.of(buf), write.pos
        return StridedView.of(buf)

    def _retarget(self, src, buf: Buffer, node: FxNode) -> bool:
        """``src`` already computed into a fresh buffer (a value with several readers): its
        node writes the input instead, renamed, when nothing after that node reads the input's
        old contents (IR nodes, or values still to be read); readers of the fresh buffer then
        read the input, which holds the same value from that node on."""
        if not isinstance(src, Lazy) or src.realized is None or not src.realized.is_natural() \
                or not 0 <= src.realized_at < len(self.nodes):
            return False
        at = self.nodes[src.realized_at]
        old = src.realized.buf
        if type(at) is not Pointwise or at.buf is not old or old.dtype != buf.dtype or \
                not ir.same_sizes(old.size, buf.size) or not _contiguous(old):
            return False
        later = self.nodes[at.pos + 1:]
        if any(buf.name in self._reads_of(n) for n in later) or \
                self._pending_readers({buf.name}, node) or \
                any(isinstance(n, Extern) and old.name in self._reads_of(n) for n in later):
            return False  # (an extern could return a view of the input as a fresh value)
        name, old.name = old.name, buf.name
        write = InputWrite(old, at.fn, at.pos)
        if not _schedulable(write):
            old.name = name
            return False
        self.nodes[at.pos] = write
        self.retargeted.add(id(old))
        return True

    def _pending_readers(self, written: set[str], node: FxNode) -> list:
        """Lazy values not computed yet that read ``written`` and that a node after ``node``
        still reads."""
        out = []
        now = self._order[node]
        self._live = [fx for fx in self._live if self._last_use[fx] > now]
        for fx in self._live:  # nodes some reader after ``node`` still reads
            value = self.env[fx]
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(v, Lazy) and v.realized is None and written & self._reads_of(v):
                    out.append(v)
        return out

    def _reads_of(self, x) -> set[str]:
        """Buffers an IR node or an unrealized lazy value reads (cached)."""
        out = self._reads.get(x)
        if out is None:
            out = ir.node_reads(x) if not isinstance(x, Lazy) else \
                ir.reads_of(x.fn(ir.index_vars("x", len(x.size))))
            self._reads[x] = out
        return out

    def _realize_readers_of(self, written: set[str], node: FxNode) -> None:
        """Compute now every lazy value that reads a buffer ``node`` overwrites and that a later
        node still reads: inlined after the write, it would read the new contents (the momentum
        buffers of SGD's nesterov step, a clone of the gradients updated in place after it)."""
        if not written:
            return
        for v in self._pending_readers(written, node):
            self.realize(v)

    def _output(self, v, node=None):
        if isinstance(v, Lazy):
            return self.realize(v)
        if isinstance(v, StridedView) and id(v.buf) in self.retargeted:
            # a fresh tensor in the graph's meaning, now the input it was copied into
            return self.realize(Lazy(v.dtype, list(v.size), v.load))
        if isinstance(v, StridedView) and isinstance(node, FxNode) and \
                self._fresh(v.buf) and not _same_layout(v, meta_val(node)):
            # a buffer laid out our way: handed out in eager's layout, which AOTAutograd's
            # view replay on outputs assumes
            return self._in_layout_of(v, meta_val(node))
        return v

    def _fresh(self, buf) -> bool:
        """``buf`` is computed by this graph: no input and no constant."""
        return all(b is not buf for b in self.inputs) and buf.name not in self.constants


def _same_layout(v: StridedView, val) -> bool:
    """``v`` has ``val``'s strides on every dim longer than one (True when ``val`` is no
    tensor, its strides are symbolic, or it is not dense: nothing to compare with)."""
    if not isinstance(val, torch.Tensor) or val.layout != torch.strided or \
            not (val.is_contiguous() or dense_order(val, val.dim()) is not None):
        return True
    for size, ours, theirs in zip(v.size, v.stride, val.stride()):
        if type(theirs) is not int:
            return True
        if not ir.same(size, sympy.Integer(1)) and not ir.same(ours, sympy.Integer(theirs)):
            return False
    return True


def _is_effect_token(node: FxNode) -> bool:
    """A placeholder that only feeds ``with_effects`` as its token (AOTAutograd's effect
    token for a side-effecting op)."""
    with_effects = torch.ops.higher_order.with_effects
    return bool(node.users) and all(u.target is with_effects and u.args[0] is node
                                    for u in node.users)


def _fresh_strides(v: torch.Tensor) -> list:
    """Strides of a buffer that an op returning a fresh tensor fills, from its meta value
    ``v``: ``v``'s, unless a dimension longer than one has stride 0 (a meta kernel that kept
    an expanded input's layout, as as_strided_scatter's does; the op itself returns a dense
    tensor, and no copy can make one that overlaps): then row-major."""
    shape = [sym(s) for s in v.shape]
    if any(isinstance(st, int) and st == 0 and not (isinstance(n, int) and n == 1)
           for n, st in zip(v.shape, v.stride())):
        return ir.contiguous_strides(shape)
    return [sym(s) for s in v.stride()]


_PERMUTES = {torch.ops.aten.permute.default, torch.ops.aten.transpose.int,
             torch.ops.aten.t.default}


def _unit_stride_loads(e: ir.Expr, inner: sympy.Symbol) -> int:
    """Loads in ``e`` that step one element per step of the index ``inner``."""
    return sum(ir.unit_stride([ld], inner) for ld in ir.loads(e))


def _stored_order(node: FxNode, out: Lazy) -> tuple | None:
    """The memory order a value is stored in if realized (None: contiguous): eager's, except
    for a permuted view that no graph output returns, whose meta strides are only its base's
    order. There it is contiguous when more of the value's loads then run along the inner
    loop (a layer norm over a transposed input, used again through a transpose back, would
    otherwise be stored transposed and read by its users with a stride)."""
    order = dense_order(meta_val(node), len(out.size))
    if order is None or node.target not in _PERMUTES or \
            any(u.op == "output" for u in node.users):
        return order
    idx = ir.index_vars("x", len(out.size))
    e = out.fn(idx)
    if _unit_stride_loads(e, idx[-1]) > _unit_stride_loads(e, idx[order[-1]]):
        return None
    return order


def dense_order(val, rank: int) -> tuple | None:
    """The dims of ``val`` outermost first when it is a dense, non-contiguous tensor of static
    strides and ``rank`` dims (channels-last, a stored permutation); None otherwise. Only the
    outermost dim's size may be symbolic (a dynamic batch)."""
    if not isinstance(val, torch.Tensor) or val.dim() != rank or rank < 2 or \
            val.layout != torch.strided:
        return None
    sizes, strides = list(val.shape), list(val.stride())
    if not all(type(v) is int for v in strides):
        return None
    order = tuple(sorted(range(rank), key=lambda d: (-strides[d], d)))
    if any(type(s) is int and s == 0 for s in sizes) or \
            not all(type(sizes[d]) is int for d in order[1:]):
        return None

    def one(s):  # a symbolic size is taken as not 1
        return type(s) is int and s == 1

    expect = 1
    for d in reversed(order):
        if not one(sizes[d]) and strides[d] != expect:
            return None  # overlapping or with gaps: not one dense block
        expect *= sizes[d]
    moved = [d for d in order if not one(sizes[d])]
    return None if moved == sorted(moved) else order


def _written_args(node: FxNode) -> list:
    """The FX nodes a call writes in place (schema arguments marked ``a!``)."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    if schema is None:
        return []
    out = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        v = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
        out += [x for x in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(x, FxNode)]
    return out


def _root(x: FxNode) -> FxNode | None:
    """The placeholder ``x`` is a view of (through view ops), or None."""
    if not isinstance(x, FxNode):
        return None
    while x.op == "call_function":
        schema = getattr(x.target, "_schema", None)
        if schema is None or not schema.returns or schema.returns[0].alias_info is None \
                or not x.args or not isinstance(x.args[0], FxNode):
            return None
        x = x.args[0]
    return x if x.op == "placeholder" else None


def _schedulable(node: InputWrite) -> bool:
    """The scheduler can lay ``node`` out as a kernel of its own (it reads the input it
    overwrites only at the element it stores)."""
    from ember.core.compiler import schedule

    try:
        schedule.build([node], schedule.outer_for([node]))
    except schedule.Refused as e:
        log.debug("%s stays an extern copy_: %s", node.buf.name, e)
        return False
    return True


def _contiguous(buf: Buffer) -> bool:
    want = contiguous_strides(buf.size)
    return all(ir.same(sz, 1) or ir.same(st, w) for sz, st, w in zip(buf.size, buf.stride, want))


def _written_buffers(schema, args, kwargs) -> set[str]:
    """Names of the buffers an op call writes in place (schema arguments marked ``a!``)."""
    out = set()
    for i, a in enumerate(schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        v = args[i] if i < len(args) else kwargs.get(a.name)
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, StridedView):
                out.add(x.buf.name)
    return out


def _written(node) -> str:
    """The buffers an IR node writes, for the DEBUG log."""
    bufs = node.outs if isinstance(node, Extern) else [node.buf]
    return ", ".join(b.name for b in bufs if b is not None)
