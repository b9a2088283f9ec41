"""Loop IR: buffers, lazily computed tensor values, and the nodes the scheduler fuses.

A tensor value is read through ``load(index) -> Expr`` where ``index`` is a list of sympy
expressions over symbolic sizes. ``Expr`` is a hashable tuple (so equal sub-trees CSE):

    ("load", dtype, buffer, index)   ("const", dtype, value)   ("index", dtype, sympy expr)
    ("cast", dtype, x)               ("op", dtype, prim, *operands)   ("var", dtype, name)
    ("gather", dtype, buffer, index, *positions)

A gather is a load at a data-dependent place: its ``index`` holds the placeholder symbols
``gather_slot(k)``, each standing for the int64 value of ``positions[k]`` (indexing,
embedding, upsampling). The buffer it reads is always computed before its kernel starts.

``dtype`` is the compute dtype: float16/bfloat16 are computed in float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import sympy
import torch

Expr = tuple
_UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
SUPPORTED_DTYPES = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                    torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool}


class Unsupported(Exception):
    """Raised by a lowering that cannot handle its node; the node falls back to ATen."""


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return _UPCAST.get(dtype, dtype)


def const(value, dtype: torch.dtype) -> Expr:
    dtype = compute_dtype(dtype)
    if dtype == torch.bool:
        value = bool(value)
    elif dtype.is_floating_point:
        value = float(value)
    else:
        value = int(value)
    return ("const", dtype, value)


def cast(x: Expr, dtype: torch.dtype) -> Expr:
    dtype = compute_dtype(dtype)
    if x[1] == dtype:
        return x
    if x[0] == "const":
        return const(x[2], dtype)
    return ("cast", dtype, x)


def op(name: str, dtype: torch.dtype, *args: Expr) -> Expr:
    return ("op", compute_dtype(dtype), name, *args)


def walk(e: Expr):
    """Yield every sub-expression of ``e`` (pre-order)."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        if x[0] == "cast":
            stack.append(x[2])
        elif x[0] in ("op", "gather"):
            stack.extend(x[3:] if x[0] == "op" else x[4:])


def gather_slot(k: int) -> sympy.Symbol:
    """Placeholder for the k-th position value of a gather inside its index expression."""
    return sympy.Symbol(f"gather_slot{k}", integer=True)


def size_symbols(index) -> set:
    """The symbols of a load's or gather's index other than gather slots: loop variables and
    sizes, which a kernel binds."""
    return {f for f in sympy.sympify(index).free_symbols if not f.name.startswith("gather_slot")}


def gather(dtype: torch.dtype, buf: str, index, positions: Sequence[Expr]) -> Expr:
    return ("gather", compute_dtype(dtype), buf, index, *positions)


def reads_of(e: Expr) -> set[str]:
    """Buffers ``e`` reads, directly or through a gather."""
    return {x[2] for x in walk(e) if x[0] in ("load", "gather")}


def gathered(e: Expr) -> set[str]:
    """Buffers ``e`` reads at data-dependent places."""
    return {x[2] for x in walk(e) if x[0] == "gather"}


def map_loads(e: Expr, fn: Callable[[Expr], Expr], memo: dict | None = None) -> Expr:
    """Rebuild ``e`` with every load replaced by ``fn(load)``."""
    memo = {} if memo is None else memo
    if e in memo:
        return memo[e]
    kind = e[0]
    if kind == "load":
        out = fn(e)
    elif kind == "cast":
        out = ("cast", e[1], map_loads(e[2], fn, memo))
    elif kind == "op":
        out = ("op", e[1], e[2], *(map_loads(a, fn, memo) for a in e[3:]))
    elif kind == "gather":
        out = (*e[:4], *(map_loads(a, fn, memo) for a in e[4:]))
    else:
        out = e
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
    dtype: torch.dtype
    size: list

    def load(self, index: Sequence) -> Expr:
        raise NotImplementedError


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
        return ("load", compute_dtype(self.dtype), self.buf.name, self.flat_index(index))

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

    def load(self, index: Sequence) -> Expr:
        if self.realized is not None and self.realized_at < _reader[0]:
            return self.realized.load(index)
        return self.fn(index)


def body(node, *index) -> Expr:
    """Evaluate ``node.fn`` as that node (so lazies realized after it are still inlined)."""
    saved, _reader[0] = _reader[0], node.pos
    try:
        return node.fn(*index)
    finally:
        _reader[0] = saved


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


Node = Pointwise | Reduction | Extern


def node_reads(node: Node) -> set[str]:
    """Names of the buffers a node reads."""
    if isinstance(node, Extern):
        return {b.name for b in node.reads}
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
        if x[0] == "op":
            out += 1
            stack.extend(x[3:])
        elif x[0] == "cast":
            stack.append(x[2])
    return out
