"""Loop IR: buffers, lazily computed tensor values, and the nodes the scheduler fuses.

A tensor value is read through ``load(index) -> Expr`` where ``index`` is a list of sympy
expressions over symbolic sizes. An ``Expr`` is one of the records below: immutable named
tuples, hashable, so equal sub-trees are shared (common-subexpression elimination):

    Load(dtype, buf, index)          Const(dtype, value)        Index(dtype, expr)
    Cast(dtype, x)                   PrimOp(dtype, prim, args)  Var(dtype, name)
    Gather(dtype, buf, index, positions)

Each record's ``kind`` (an ``ExprKind``) tells them apart, also where two records hold equal
fields. A gather is a load at a data-dependent place: its ``index`` holds the placeholder
symbols ``gather_slot(k)``, each standing for the int64 value of ``positions[k]`` (indexing,
embedding, upsampling). The buffer it reads is always computed before its kernel starts.

``dtype`` is the compute dtype: float16/bfloat16 are computed in float32.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import sympy
import torch

_UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
SUPPORTED_DTYPES = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                    torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool}


class ExprKind(enum.IntEnum):
    """What an expression record is (an int enum: hashed and compared at C speed)."""

    LOAD = 0
    GATHER = 1
    CONST = 2
    INDEX = 3
    CAST = 4
    PRIM = 5
    VAR = 6


class Load(NamedTuple):
    """``buf[index]``, read in the compute dtype."""

    dtype: torch.dtype
    buf: str
    index: sympy.Expr
    kind: ExprKind = ExprKind.LOAD


class Gather(NamedTuple):
    """``buf[index]`` where ``index`` holds ``gather_slot(k)`` for the value of ``positions[k]``."""

    dtype: torch.dtype
    buf: str
    index: sympy.Expr
    positions: tuple
    kind: ExprKind = ExprKind.GATHER


class Const(NamedTuple):
    """A literal (bool, int or float, as ``dtype`` wants)."""

    dtype: torch.dtype
    value: object
    kind: ExprKind = ExprKind.CONST


class Index(NamedTuple):
    """The value of an index expression (sizes, loop variables) as ``dtype``."""

    dtype: torch.dtype
    expr: sympy.Expr
    kind: ExprKind = ExprKind.INDEX


class Cast(NamedTuple):
    """``x`` converted to ``dtype``."""

    dtype: torch.dtype
    x: Expr
    kind: ExprKind = ExprKind.CAST


class PrimOp(NamedTuple):
    """The prim ``prim`` (see ``prims.PRIMS``) applied to ``args``; ``dtype`` is its result's."""

    dtype: torch.dtype
    prim: str
    args: tuple
    kind: ExprKind = ExprKind.PRIM


class Var(NamedTuple):
    """A named value of the kernel (a reduction's accumulator)."""

    dtype: torch.dtype
    name: str
    kind: ExprKind = ExprKind.VAR


Expr = Load | Gather | Const | Index | Cast | PrimOp | Var


class Unsupported(Exception):
    """Raised by a lowering that cannot handle its node; the node falls back to ATen."""


class EagerOnly(Exception):
    """Raised by a lowering whose node no ATen call inside the graph computes as eager does
    (it depends on how eager's tensors share storage): the whole graph runs in eager."""


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return _UPCAST.get(dtype, dtype)


def const(value, dtype: torch.dtype) -> Const:
    dtype = compute_dtype(dtype)
    if dtype == torch.bool:
        value = bool(value)
    elif dtype.is_floating_point:
        value = float(value)
    else:
        value = int(value)
    return Const(dtype, value)


def cast(x: Expr, dtype: torch.dtype) -> Expr:
    dtype = compute_dtype(dtype)
    if x.dtype == dtype:
        return x
    if isinstance(x, Const):
        return const(x.value, dtype)
    return Cast(dtype, x)


def op(name: str, dtype: torch.dtype, *args: Expr) -> PrimOp:
    return PrimOp(compute_dtype(dtype), name, args)


def operands(e: Expr) -> tuple:
    """The sub-expressions ``e`` computes from (a gather's positions, a cast's value)."""
    if isinstance(e, PrimOp):
        return e.args
    if isinstance(e, Cast):
        return (e.x,)
    if isinstance(e, Gather):
        return e.positions
    return ()


def walk(e: Expr):
    """Yield every sub-expression of ``e`` (pre-order)."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(operands(x))


class Extent(NamedTuple):
    """How big an expression is as a tree: what a walk of it visits and how deep code that
    recurses over it goes."""

    size: int  # sub-expressions counted once per occurrence (a shared one as often as used)
    depth: int  # the longest chain of operands


def extent(e: Expr) -> Extent:
    """``e``'s ``Extent``, in time linear in its distinct sub-expressions and without
    recursion (a forwarded value shared by two readers doubles the size, not the work)."""
    memo: dict[int, Extent] = {}
    stack = [(e, False)]
    while stack:
        x, ready = stack.pop()
        if id(x) in memo:
            continue
        args = operands(x)
        if ready or not args:
            subs = [memo[id(a)] for a in args]
            memo[id(x)] = Extent(1 + sum(s.size for s in subs),
                                 1 + max((s.depth for s in subs), default=0))
        else:
            stack.append((x, True))
            stack.extend((a, False) for a in args)
    return memo[id(e)]


def gather_slot(k: int) -> sympy.Symbol:
    """Placeholder for the k-th position value of a gather inside its index expression."""
    return sympy.Symbol(f"gather_slot{k}", integer=True)


def size_symbols(index) -> set:
    """The symbols of a load's or gather's index other than gather slots: loop variables and
    sizes, which a kernel binds."""
    return {f for f in sympy.sympify(index).free_symbols if not f.name.startswith("gather_slot")}


def gather(dtype: torch.dtype, buf: str, index, positions: Sequence[Expr]) -> Gather:
    return Gather(compute_dtype(dtype), buf, index, tuple(positions))


def reads_of(e: Expr) -> set[str]:
    """Buffers ``e`` reads, directly or through a gather."""
    return {x.buf for x in walk(e) if isinstance(x, (Load, Gather))}


def gathered(e: Expr) -> set[str]:
    """Buffers ``e`` reads at data-dependent places."""
    return {x.buf for x in walk(e) if isinstance(x, Gather)}


def loads(e: Expr) -> list[Load]:
    """The plain loads in ``e`` (gathers excluded)."""
    return [x for x in walk(e) if isinstance(x, Load)]


def unit_stride(loads: Sequence[Load], var) -> bool:
    """Each load moves by one element as ``var`` steps by one (a contiguous row along it)."""
    return all(same(sympy.diff(e.index, var), sympy.Integer(1)) for e in loads)


def rebuild(e: Expr, fn: Callable[[Expr], Expr | None], memo: dict | None = None) -> Expr:
    """``e`` with every sub-expression ``x`` for which ``fn(x)`` is not None replaced by it
    (not looked into further), and the rest rebuilt over their rewritten operands."""
    memo = {} if memo is None else memo
    if e in memo:
        return memo[e]
    out = fn(e)
    if out is None:
        if isinstance(e, PrimOp):
            out = e._replace(args=tuple(rebuild(a, fn, memo) for a in e.args))
        elif isinstance(e, Cast):
            out = e._replace(x=rebuild(e.x, fn, memo))
        elif isinstance(e, Gather):
            out = e._replace(positions=tuple(rebuild(a, fn, memo) for a in e.positions))
        else:
            out = e
    memo[e] = out
    return out


def map_loads(e: Expr, fn: Callable[[Load], Expr], memo: dict | None = None) -> Expr:
    """Rebuild ``e`` with every load replaced by ``fn(load)``."""
    return rebuild(e, lambda x: fn(x) if isinstance(x, Load) else None, memo)


def invariant(e: Expr, loop_vars: set, memo: dict) -> bool:
    """``e`` does not depend on the loop variables ``loop_vars`` (``memo`` caches answers for
    one set of variables)."""
    if e in memo:
        return memo[e]
    if isinstance(e, Load):
        out = not (e.index.free_symbols & loop_vars)
    elif isinstance(e, Gather):
        out = not (e.index.free_symbols & loop_vars) and all(
            [invariant(a, loop_vars, memo) for a in e.positions])
    elif isinstance(e, Index):
        out = not (e.expr.free_symbols & loop_vars)
    elif isinstance(e, Cast):
        out = invariant(e.x, loop_vars, memo)
    elif isinstance(e, PrimOp):
        out = all([invariant(a, loop_vars, memo) for a in e.args])
    else:
        out = True
    memo[e] = out
    return out


def index_vars(prefix: str, n: int) -> list[sympy.Symbol]:
    return [sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True) for i in range(n)]


def contiguous_strides(size: Sequence) -> list:
    strides, acc = [], sympy.Integer(1)
    for s in reversed(size):
        strides.append(acc)
        acc = acc * s
    return strides[::-1]


def numel(size: Sequence):
    out = sympy.Integer(1)
    for s in size:
        out = out * s
    return out


def same(a, b) -> bool:
    """Symbolic equality of two index/size expressions."""
    return a == b or sympy.expand(a - b) == 0


def same_sizes(a: Sequence, b: Sequence) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


@dataclass(eq=False)
class Buffer:
    """A tensor in memory: a graph input, a constant, or a node's output."""

    name: str
    dtype: torch.dtype
    size: list
    stride: list


class TensorValue:
    """A lowered tensor: a ``StridedView`` of a buffer or a ``Lazy`` expression. Each kind
    defines ``load``; this base is only their common type."""

    dtype: torch.dtype
    size: list

    def load(self, index: Sequence) -> Expr:
        raise NotImplementedError  # abstract: StridedView and Lazy override it


@dataclass(eq=False)
class StridedView(TensorValue):
    """A strided window on a buffer; every view op on a buffer is one of these, no copy."""

    buf: Buffer
    size: list
    stride: list
    offset: object = sympy.Integer(0)

    @property
    def dtype(self) -> torch.dtype:
        return self.buf.dtype

    @classmethod
    def of(cls, buf: Buffer) -> StridedView:
        return cls(buf, list(buf.size), list(buf.stride))

    def flat_index(self, index: Sequence):
        out = self.offset
        for i, st, sz in zip(index, self.stride, self.size):
            if sz != 1:
                out = out + i * st
        return out

    def load(self, index: Sequence) -> Expr:
        return Load(compute_dtype(self.dtype), self.buf.name, self.flat_index(index))

    def is_natural(self) -> bool:
        return (self.offset == 0 and same_sizes(self.size, self.buf.size)
                and same_sizes(self.stride, self.buf.stride))

    def is_contiguous(self) -> bool:
        want = contiguous_strides(self.size)
        return all(sz == 1 or same(st, w) for st, w, sz in zip(self.stride, want, self.size))


# Position (in the graph's node list) of the IR node whose body is being evaluated: a Lazy
# realized at position p is read from memory by nodes after p and inlined by nodes before.
_reader = [1 << 62]


@dataclass(eq=False)
class Lazy(TensorValue):
    """A pointwise value not yet in memory: ``fn(index) -> Expr`` (inlined into readers)."""

    dtype: torch.dtype
    size: list
    fn: Callable[[Sequence], Expr]
    realized: StridedView | None = None
    realized_at: int = -1
    source: StridedView | None = None  # set when this value is an exact copy of a view
    permuted: tuple | None = None  # (lazy value, dims) when this is a permutation of one
    layout: tuple | None = None  # dims outermost first, when eager's tensor is dense but not
    # contiguous (channels-last, say): memory order of the buffer it is realized into

    def load(self, index: Sequence) -> Expr:
        if self.realized is not None and self.realized_at < _reader[0]:
            return self.realized.load(index)
        return self.fn(index)


def body(node, *index, fn: Callable | None = None) -> Expr:
    """Evaluate ``node.fn`` (or ``fn``) as that node (so lazies realized after it are still
    inlined)."""
    saved, _reader[0] = _reader[0], node.pos
    try:
        return (node.fn if fn is None else fn)(*index)
    finally:
        _reader[0] = saved


def scatter_body(node: Scatter) -> tuple:
    """A scatter's ``(init, target, value)`` expressions over ``x*`` (the buffer's dims) and
    ``r*`` (its iteration dims)."""
    xs, rs = index_vars("x", len(node.buf.size)), index_vars("r", len(node.size))
    return (body(node, xs, fn=node.init), body(node, rs, fn=node.target),
            body(node, rs, fn=node.fn))


@dataclass(eq=False)
class Pointwise:
    """Computes ``buf[i] = fn(i)`` over ``buf.size``."""

    buf: Buffer
    fn: Callable[[Sequence], Expr]
    pos: int = 0


@dataclass(eq=False)
class Reduction:
    """``buf[o] = reduce_r fn(o, r)`` over outer sizes ``buf.size`` and ``rsizes``."""

    buf: Buffer
    rsizes: list
    rtype: str
    acc_dtype: torch.dtype
    fn: Callable[[Sequence, Sequence], Expr]
    pos: int = 0


@dataclass(eq=False)
class Extern:
    """An ATen call at run time (extern op or eager fallback) writing ``outs``."""

    op: object
    args: tuple
    kwargs: dict
    outs: list
    out_tree: object  # "single" | "tuple" | "list"
    fallback: bool = False
    reads: list = field(default_factory=list)
    pos: int = 0


@dataclass(eq=False)
class Scatter:
    """``buf = init(i)`` over ``buf.size``, then ``buf[target(j)] = fn(j)`` (``+=`` when
    ``accumulate``) over ``size``: index_put, whose places are data (``target`` gives a
    ``Gather`` of ``buf``: where to write, not a read)."""

    buf: Buffer
    init: Callable[[Sequence], Expr]
    size: list
    target: Callable[[Sequence], Gather]
    fn: Callable[[Sequence], Expr]
    accumulate: bool
    pos: int = 0


@dataclass(eq=False)
class Concat:
    """``buf = cat(parts, dim)`` with each part's values stored straight into its slice of
    ``buf``, one loop per part: a part computed only for the cat (a ReLU after a convolution)
    never reaches memory on its own, and no element tests which part it belongs to."""

    buf: Buffer
    parts: list  # TensorValue of each part, in order along ``dim``
    dim: int
    pos: int = 0


Node = Pointwise | Reduction | Extern | Scatter | Concat


class IndexCheck(NamedTuple):
    """A bool scalar the kernels compute; the wrapper raises ``IndexError(message)`` after
    the kernels when it is true (an index tensor held a value out of range)."""

    flag: StridedView
    message: str


def node_reads(node: Node) -> set[str]:
    """Names of the buffers a node reads."""
    if isinstance(node, Extern):
        return {b.name for b in node.reads}
    if isinstance(node, Scatter):
        init, target, value = scatter_body(node)
        return (reads_of(init) | reads_of(value) |
                set().union(*(reads_of(p) for p in target.positions))) - {node.buf.name}
    if isinstance(node, Concat):
        return set().union(*(reads_of(body(node, index_vars("x", len(part.size)), fn=part.load))
                             for part in node.parts))
    if isinstance(node, Pointwise):
        e = body(node, index_vars("x", len(node.buf.size)))
    else:
        e = body(node, index_vars("x", len(node.buf.size)), index_vars("r", len(node.rsizes)))
    return reads_of(e)


def op_count(e: Expr) -> int:
    """Arithmetic ops in ``e``; a gather's position arithmetic counts as part of its load."""
    out, stack = 0, [e]
    while stack:
        x = stack.pop()
        if isinstance(x, PrimOp):
            out += 1
            stack.extend(x.args)
        elif isinstance(x, Cast):
            stack.append(x.x)
    return out
