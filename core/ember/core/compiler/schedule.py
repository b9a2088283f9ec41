"""Scheduling: group IR nodes into kernels and decide which buffers reach memory.

A kernel is an outer loop nest over sizes ``outer`` (parallel) holding a sequence of
stages: ``scalar`` stages run once per outer point, ``loop`` stages run an inner loop over
``rsizes`` computing reductions and/or storing pointwise values. This fuses pointwise
chains, pointwise producers into reductions and pointwise consumers into reduction outputs
(softmax or layer_norm become one kernel). Values consumed only inside their kernel at
the same loop point are forwarded in registers and never stored, while the expression they
grow stays within ``FORWARD_MAX_SIZE`` and ``FORWARD_MAX_DEPTH``. Refused fusions are
logged at DEBUG on ``ember.schedule`` with their reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import sympy

from ember.core.compiler import ir
from ember.core.compiler.ir import Concat, Extern, Pointwise, Reduction, Scatter
from ember.core.compiler.lowering.builders import InputWrite
from ember.core.logs import get_logger

log = get_logger("schedule")


@dataclass
class Item:
    kind: str  # "store" | "reduce" | "scatter"
    node: object
    expr: ir.Expr
    index: object = None  # store index (loop items) in kernel variables; a scatter's
    # target (an ``ir.Gather`` of the buffer it writes)
    var: str = ""  # name of the reduction / scalar result


@dataclass
class Stage:
    kind: str  # "loop" | "scalar" | "scatter"
    rsizes: list
    items: list = field(default_factory=list)


@dataclass
class Kernel:
    name: str
    outer: list
    stages: list
    nodes: list
    stored: set = field(default_factory=set)
    must_store: set = field(default_factory=set)  # read outside the kernel or graph outputs

    @property
    def outputs(self) -> list:
        return [n.buf for n in self.nodes if n.buf.name in self.stored]


class Refused(Exception):
    pass


class _Produced(NamedTuple):
    """A value a kernel under construction computes: ``kind`` "acc" (a reduction's result),
    "scalar" (once per outer point) or "loop" (per inner point); where and how to read it."""

    kind: str
    stage: int
    index: object
    value: ir.Expr
    extent: ir.Extent  # of ``value``, which readers at the same point take in place of loads


# Forwarding puts a producer's whole expression where its readers load it, so a chain of
# fused nodes grows one expression (a value read twice doubles it per link). Code generation
# walks and hashes expressions as trees and renders them recursively: past these bounds the
# reader starts a new kernel and the value goes through memory instead.
FORWARD_MAX_SIZE = 2048
FORWARD_MAX_DEPTH = 128


def _flat(vars_, sizes):
    return sum((v * s for v, s in zip(vars_, ir.contiguous_strides(sizes))), sympy.Integer(0))


def build(nodes: list, outer: list, name: str = "kernel") -> Kernel:
    """Lay ``nodes`` out as one kernel over ``outer``; raises Refused with the reason."""
    b = _Builder(outer)
    for node in nodes:
        b.add(node)
    return b.kernel(name)


class _Builder:
    """A kernel under construction over ``outer``: ``add`` lays out one more node or raises
    Refused and leaves the kernel as it was (so the scheduler tries candidates one node at a
    time instead of rebuilding the kernel for each)."""

    def __init__(self, outer: list):
        self.outer = list(outer)
        self.xs = ir.index_vars("x", len(outer))
        self.flat_o = _flat(self.xs, outer)
        self.produced: dict[str, _Produced] = {}
        # buffers read before any node of this kernel writes them: (stage, index) of each read
        self.outside: dict[str, list] = {}
        self.stages: list[Stage] = []
        self.stage_bufs: list[set] = []  # the buffers each stage reads or writes
        self.nodes: list = []
        self.walks: set = set()  # how loads and stores walk memory (see ``_walk``)

    def kernel(self, name: str) -> Kernel:
        return Kernel(name, list(self.outer), self.stages, list(self.nodes))

    def add(self, node) -> None:
        outer, xs, flat_o, produced, stages = (self.outer, self.xs, self.flat_o, self.produced,
                                               self.stages)
        size = node.buf.size
        if isinstance(node, Reduction):
            if not ir.same_sizes(size, outer):
                raise Refused(f"reduction outer sizes {size} != kernel outer sizes {outer}")
            kind, rsizes = "loop", list(node.rsizes)
            expr = ir.body(node, xs, ir.index_vars("r", len(rsizes)))
            index = None
        elif ir.same_sizes(size, outer):
            kind, rsizes, index = "scalar", [], flat_o
            expr = ir.body(node, xs)
        elif len(size) > len(outer) and ir.same_sizes(size[:len(outer)], outer):
            kind, rsizes = "loop", list(size[len(outer):])
            rs = ir.index_vars("r", len(rsizes))
            expr = ir.body(node, xs + rs)
            index = _flat(xs + rs, size)
        else:
            raise Refused(f"sizes {size} do not extend kernel outer sizes {outer}")
        last = len(stages) - 1
        join = last >= 0 and stages[last].kind == kind and ir.same_sizes(stages[last].rsizes,
                                                                          rsizes)
        all_loads, gathered = ir.loads(expr), ir.gathered(expr)
        touched = {ld.buf for ld in all_loads} | set(gathered) | {node.buf.name}
        if join and not outer and not touched & self.stage_bufs[last]:
            # an independent loop of the same size (the next parameter's update) is a stage
            # of its own: one loop over many parameters' streams at once defeats the
            # hardware's prefetchers (an optimizer step over same-sized parameters ran 4x
            # slower interleaved than one parameter after another)
            join = False
        indirect = gathered & produced.keys()
        if indirect:
            raise Refused(f"{node.buf.name} gathers from {sorted(indirect)} at data-dependent "
                          f"places: they must be complete before this kernel")
        loads = [ld for ld in all_loads if ld.buf in produced]
        if join and any(produced[ld.buf].kind == "acc" and produced[ld.buf].stage == last
                        for ld in loads):
            join = False
        here = last if join else last + 1
        # a loop variable over one element is 0 wherever it appears (a view of size 1 drops it)
        ones = {v: 0 for v, n in zip(xs + ir.index_vars("r", len(rsizes)), outer + rsizes)
                if ir.same(n, 1)}
        subst = {}
        for ld in loads:
            p = produced[ld.buf]
            if p.kind in ("acc", "scalar"):
                if not ir.same(ld.index, flat_o):
                    raise Refused(f"{node.buf.name} reads {ld.buf} at {ld.index}, not at the "
                                  f"current outer point")
                subst[ld] = p.value
            else:
                if kind != "loop" or not ir.same_sizes(stages[p.stage].rsizes, rsizes) or \
                        not ir.same(ld.index.xreplace(ones), p.index.xreplace(ones)):
                    raise Refused(f"{node.buf.name} reads {ld.buf} at another loop point")
                if p.stage == here:
                    subst[ld] = p.value
        reads = [(ld.buf, (here, ld.index.xreplace(ones))) for ld in all_loads
                 if ld.buf not in produced]
        reads += [(b, (here, None)) for b in gathered]
        _check_overwrite(node, expr, here, None if index is None else index.xreplace(ones),
                         self.outside.get(node.buf.name, []) +
                         [r for b, r in reads if b == node.buf.name])
        grown = ir.extent(expr)
        if subst:
            grown = ir.Extent(
                grown.size + sum(produced[ld.buf].extent.size - 1 for ld in all_loads
                                 if ld in subst),
                grown.depth + max(produced[ld.buf].extent.depth for ld in subst))
            if grown.size > FORWARD_MAX_SIZE or grown.depth > FORWARD_MAX_DEPTH:
                raise Refused(f"{node.buf.name} with its producers' values forwarded would be "
                              f"an expression of {grown.size} nodes, {grown.depth} deep")
            expr = ir.map_loads(expr, lambda ld, s=subst: s.get(ld, ld))
        walks = self.walks
        if outer:
            rs = ir.index_vars("r", len(rsizes)) if rsizes else []
            walks = walks | {_walk(ld.index, xs[-1], rs) for ld in ir.loads(expr)}
            if index is not None:
                walks.add(_walk(index, xs[-1], rs))
            if self.nodes and len(walks - {None}) > 1:  # one of the loops would run strided
                raise Refused("mixes row-contiguous and column-contiguous loops")
        # laid out: commit
        self.walks = walks
        for b, r in reads:
            self.outside.setdefault(b, []).append(r)
        if not join:
            stages.append(Stage(kind, rsizes))
            self.stage_bufs.append(set())
        self.stage_bufs[here] |= touched
        stage = stages[here]
        if isinstance(node, Reduction):
            var = f"acc_{node.buf.name}"
            stage.items.append(Item("reduce", node, expr, None, var))
            value = ir.cast(ir.Var(ir.compute_dtype(node.acc_dtype), var), node.buf.dtype)
            produced[node.buf.name] = _Produced("acc", here, flat_o, value, ir.extent(value))
        else:
            stage.items.append(Item("store", node, expr, index))
            produced[node.buf.name] = _Produced("scalar" if kind == "scalar" else "loop", here,
                                                index, expr, grown)
        self.nodes.append(node)


def _memory_order(b: ir.Buffer) -> list[int]:
    """``b``'s dims outermost first in memory (as listed where its strides are symbolic)."""
    order = list(range(len(b.size)))
    if all(sympy.sympify(st).is_Integer for st in b.stride):
        order.sort(key=lambda d: -int(b.stride[d]))
    return order


def scatter_kernel(node: Scatter, name: str) -> Kernel:
    """A scatter as a kernel of its own: a loop stage storing its initial value (walking the
    buffer in memory order), then a "scatter" stage over its iteration sizes."""
    b = node.buf
    n = len(b.size)
    order = _memory_order(b)
    rs = ir.index_vars("r", n)
    at = [rs[order.index(d)] for d in range(n)]
    init = ir.body(node, at, fn=node.init)
    index = sum((v * st for v, st in zip(at, b.stride)), sympy.Integer(0))
    rs = ir.index_vars("r", len(node.size))
    stages = [Stage("loop", [b.size[d] for d in order], [Item("store", node, init, index)]),
              Stage("scatter", list(node.size),
                    [Item("scatter", node, ir.body(node, rs), ir.body(node, rs, fn=node.target))])]
    return Kernel(name, [], stages, [node], {b.name}, {b.name})


def concat_kernel(node: Concat, name: str) -> Kernel:
    """A cat as a kernel of its own without outer loops: one loop stage per part, walking its
    slice of the buffer in memory order (dims of one element left out, so the stage's shared
    outermost loop has work to split) and storing the part's value there."""
    b = node.buf
    n = len(b.size)
    order = _memory_order(b)
    stages, start = [], sympy.Integer(0)
    for part in node.parts:
        dims = [d for d in order if not ir.same(part.size[d], 1)] or order[-1:]
        at = [sympy.Integer(0)] * n
        for r, d in zip(ir.index_vars("r", len(dims)), dims):
            at[d] = r
        value = ir.cast(ir.body(node, at, fn=part.load), ir.compute_dtype(b.dtype))
        place = list(at)
        place[node.dim] = at[node.dim] + start
        index = sum((v * st for v, st in zip(place, b.stride)), sympy.Integer(0))
        stages.append(Stage("loop", [part.size[d] for d in dims],
                            [Item("store", node, value, index)]))
        start = start + part.size[node.dim]
    return Kernel(name, [], stages, [node], {b.name}, {b.name})


_OWN_KERNEL = {Scatter: scatter_kernel, Concat: concat_kernel}


def _check_overwrite(node, expr, here: int, index, reads: list) -> None:
    """A node storing into a buffer this kernel has read (a graph input it overwrites, see
    ``InputWrite``) may join only where every read of the old contents (``reads``: stage and
    index of each) happens at the very element it stores, in the same loop, before the store:
    another element's read could run after the store (another thread, a later pass)."""
    name = node.buf.name
    if name in ir.gathered(expr):
        raise Refused(f"{name} is read at data-dependent places and overwritten")
    if reads and (index is None or any(st != here or i is None or not ir.same(i, index)
                                       for st, i in reads)):
        raise Refused(f"{name} is read at other elements or loops than its overwrite")


def _mutates(n: Extern) -> bool:
    schema = getattr(n.op, "_schema", None)
    return schema is None or any(a.alias_info is not None and a.alias_info.is_write
                                 for a in schema.arguments)


def _walk(index, x_last, rs: list) -> str | None:
    """How a load moves through memory in a loop stage over reduction indices ``rs``: "row"
    (unit stride along the innermost reduction index, moving with the outer one), "column"
    (unit stride along the innermost outer index, moving with a reduction index), or None
    for a load constant along one of the two (a per-row mean, a weight row): those read
    well in either loop order."""
    if not rs:
        return None
    e = sympy.expand(index)
    dx = sympy.diff(e, x_last)
    if sympy.diff(e, rs[-1]) == 1 and dx != 0:
        return "row"
    if dx == 1 and any(sympy.diff(e, r) != 0 for r in rs):
        return "column"
    return None


def loads_walk_outer(k: Kernel) -> bool:
    """The kernel's loads are unit-stride along its innermost outer index and never along a
    reduction index (a reduction across rows, e.g. sum over dim 0): code generators then loop
    over a block of outputs innermost instead of along the reduction."""
    x_last = ir.index_vars("x", len(k.outer))[-1]
    walks = set()
    for st in k.stages:
        if st.kind != "loop" or not st.rsizes:
            continue
        rs = ir.index_vars("r", len(st.rsizes))
        walks |= {_walk(ld.index, x_last, rs) for it in st.items for ld in ir.loads(it.expr)}
    return "column" in walks and "row" not in walks


def _grouped(nodes: list, reads: list) -> tuple[list[int], set[int]]:
    """A run order of ``nodes`` (positions), and the positions it regrouped, in which each
    update chain of a graph that writes its inputs in place (an optimizer step: a parameter's
    moments and the parameter itself) is contiguous, so the greedy fusion below makes it one
    loop; lowering emits such graphs one op over every parameter at a time. Only between
    externs and only in segments holding an ``InputWrite``; other orders are left alone.

    Pointwise nodes of the same sizes joined by what they read from each other form a group;
    groups go in order of their first node, each right after the nodes it needs (producers,
    and readers of old contents it overwrites) when those need nothing from the group, else
    node by node with their needs. Positions only move forward past nodes they do not
    depend on, so this is a topological order of the dependencies the scheduler keeps.
    Kernels of regrouped pointwise nodes have no outer loops: each update is a loop stage, and
    code generators run independent stages in one parallel region (horizontal fusion)."""
    out: list[int] = []
    flat: set[int] = set()
    start = 0
    for i in range(len(nodes) + 1):
        if i == len(nodes) or isinstance(nodes[i], Extern):
            seg = list(range(start, i))
            if any(isinstance(nodes[k], InputWrite) for k in seg):
                out += _group_segment(nodes, reads, seg)
                flat |= set(seg)
            else:
                out += seg
            out += [i] if i < len(nodes) else []
            start = i + 1
    return out, flat


def _group_segment(nodes: list, reads: list, idx: list[int]) -> list[int]:
    writer = {nodes[i].buf.name: i for i in idx}
    preds: dict[int, set[int]] = {i: set() for i in idx}
    parent = {i: i for i in idx}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for j in idx:
        for b in reads[j]:
            w = writer.get(b)
            if w is None or w == j:
                continue
            if w > j:  # j reads the old contents w overwrites
                preds[w].add(j)
                continue
            preds[j].add(w)
            if isinstance(nodes[w], Pointwise) and isinstance(nodes[j], Pointwise) and \
                    ir.same_sizes(nodes[w].buf.size, nodes[j].buf.size):
                parent[find(j)] = find(w)
    groups: dict[int, list[int]] = {}
    for i in idx:
        groups.setdefault(find(i), []).append(i)
    emitted: set[int] = set()
    out: list[int] = []

    def needs(members: list[int], inside: set[int]) -> tuple[set[int], bool]:
        """Unemitted ancestors of ``members`` outside ``inside``; whether one of them needs
        a node of ``inside``."""
        seen: set[int] = set()
        stack = [p for m in members for p in preds[m] if p not in emitted and p not in inside]
        clash = False
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            for q in preds[p]:
                if q in inside:
                    clash = True
                elif q not in emitted and q not in seen:
                    stack.append(q)
        return seen, clash

    def emit(xs):
        for x in sorted(xs):
            if x not in emitted:
                emitted.add(x)
                out.append(x)

    for members in sorted(groups.values(), key=lambda g: g[0]):
        todo = [m for m in members if m not in emitted]
        if not todo:
            continue
        before, clash = needs(todo, set(todo))
        if not clash:
            emit(before)
            emit(todo)
            continue
        for m in todo:
            if m not in emitted:
                emit(needs([m], set())[0])
                emit([m])
    return out


def outer_for(nodes: list) -> list:
    for n in nodes:
        if isinstance(n, Reduction):
            return list(n.buf.size)
    size = nodes[0].buf.size
    return list(size[:-1]) if size else []


def _finalize(k: Kernel, must_store: set[str]) -> Kernel:
    """Decide which buffers are stored; collapse dims of pure pointwise kernels."""
    loaded = set()
    for st in k.stages:
        for it in st.items:
            loaded |= ir.reads_of(it.expr)
    k.stored = {n.buf.name for n in k.nodes if n.buf.name in must_store or n.buf.name in loaded}
    k.must_store = {n.buf.name for n in k.nodes if n.buf.name in must_store}
    if all(isinstance(n, Pointwise) for n in k.nodes) and \
            all(st.kind == "loop" for st in k.stages):
        if len(k.stages) == 1:
            _collapse(k)
        elif not k.outer:
            _collapse_stages(k)
    return k


def _collapse(k: Kernel) -> None:
    """Merge adjacent loop dims whose every index is linear and contiguous across them."""
    st = k.stages[0]
    sizes = list(k.outer) + list(st.rsizes)
    vars_ = ir.index_vars("x", len(k.outer)) + ir.index_vars("r", len(st.rsizes))
    merged = _merge_dims(st.items, sizes, vars_, lambda n: ir.index_vars("x", n - 1) +
                         ir.index_vars("r", 1))
    if merged is not None:
        k.outer, st.rsizes = merged[:-1], merged[-1:]


def _collapse_stages(k: Kernel) -> None:
    """``_collapse`` for each loop of a kernel without outer loops (a horizontal kernel: an
    optimizer's per-parameter updates), so a conv weight's 3x3 window is not the vector loop."""
    for st in k.stages:
        merged = _merge_dims(st.items, list(st.rsizes), ir.index_vars("r", len(st.rsizes)),
                             lambda n: ir.index_vars("r", n))
        if merged is not None:
            st.rsizes = merged


def _merge_dims(items: list, sizes: list, vars_: list, names) -> list | None:
    """Group adjacent dims of the loop nest ``vars_`` over ``sizes`` that every index of
    ``items`` walks contiguously; rewrite the items onto one variable per group (``names(n)``
    gives the n new variables) and return the merged sizes, or None when nothing merges."""
    if any(ir.gathered(it.expr) for it in items):
        return None  # a gather's index is not a linear function of the loop variables
    exprs = [it.index for it in items]
    for it in items:
        exprs += [ld.index for ld in ir.loads(it.expr)]
        exprs += [x.expr for x in ir.walk(it.expr) if isinstance(x, ir.Index)]
    vset = set(vars_)
    coefs = []
    for e in exprs:
        e = sympy.expand(e)
        c = [sympy.diff(e, v) for v in vars_]
        if any(ci.free_symbols & vset for ci in c):
            return None
        coefs.append((e.subs({v: 0 for v in vars_}), c))
    # a dim of size 1 has its variable at 0: it joins whatever group is next to it
    dims = [j for j, n in enumerate(sizes) if not ir.same(n, 1)] or [len(sizes) - 1]
    groups = [[dims[-1]]] if sizes else []
    for j in reversed(dims[:-1]):
        inner = groups[-1][0]
        if all(ir.same(c[j], c[inner] * sizes[inner]) for _, c in coefs):
            groups[-1].insert(0, j)
        else:
            groups.append([j])
    groups.reverse()
    if len(groups) == len(sizes):
        return None
    new_sizes = [ir.numel([sizes[d] for d in g]) for g in groups]
    nv = names(len(groups))
    fresh = ir.index_vars("y", len(groups))  # placeholders: ``names`` may reuse old names
    mapping = {}
    for e, (e0, c) in zip(exprs, coefs):
        mapping[e] = e0 + sum((c[g[-1]] * y for g, y in zip(groups, fresh)), sympy.Integer(0))
    ren = dict(zip(fresh, nv))

    def remap(x):
        if isinstance(x, ir.Load):
            return x._replace(index=mapping[x.index].xreplace(ren))
        if isinstance(x, ir.Index):
            return x._replace(expr=mapping[x.expr].xreplace(ren))
        return None

    for it in items:
        it.index = mapping[it.index].xreplace(ren)
        it.expr = ir.rebuild(it.expr, remap)
    return new_sizes


LOOKAHEAD = 32  # later nodes tried for the open kernel when the next one is refused


def schedule(nodes: list, output_names: set[str]) -> list:
    """Greedy fusion in topological order -> list of Kernel and Extern steps.

    When the next node cannot join the open kernel, later nodes whose inputs are all
    computed already (e.g. layer_norm backward's input gradient behind its weight-gradient
    column sums) are tried first: a node moved earlier never runs before its producers."""
    readers: dict[str, set[int]] = {}
    producer: dict[str, int] = {}
    reads = [ir.node_reads(n) for n in nodes]
    order, flat = _grouped(nodes, reads)
    flat = {k for k, i in enumerate(order) if i in flat}
    nodes, reads = [nodes[i] for i in order], [reads[i] for i in order]
    for i, n in enumerate(nodes):
        for b in reads[i]:
            readers.setdefault(b, set()).add(i)
        for b in (n.outs if isinstance(n, Extern) else [n.buf]):
            if b is not None:
                producer[b.name] = i
    # externs writing their arguments in place: nothing after one is moved before it
    barriers = [i for i, n in enumerate(nodes) if isinstance(n, Extern) and _mutates(n)]
    steps: list = []
    current: list = []
    current_ids: set[int] = set()
    done: set[int] = set()
    builder: _Builder | None = None
    first = -1  # the open kernel's first node

    def close():
        nonlocal current, current_ids, builder
        if current:
            must = set(output_names)
            for n in current:
                outside = readers.get(n.buf.name, set()) - current_ids
                if outside or isinstance(n, InputWrite):
                    must.add(n.buf.name)
            steps.append(_finalize(builder.kernel(f"kernel{len(steps)}"), must))
        current, current_ids, builder = [], set(), None

    def ready(j):
        """Node j's inputs are computed, and moving it here overtakes no node that still
        reads the old contents of a buffer it overwrites, nor a mutating extern."""
        if not all(producer.get(b, j) == j or producer[b] in done for b in reads[j]):
            return False
        if any(k < j and k not in done for k in barriers):
            return False
        name = nodes[j].buf.name
        return not any(k < j and k not in done for k in readers.get(name, ()))

    def outer_of(first: int, cand: list) -> list:
        """The outer loops of a kernel of ``cand`` (starting with node ``first``): none for the
        pointwise updates of grouped segments (each a loop inside one parallel region)."""
        if first in flat and not any(isinstance(n, Reduction) for n in cand):
            return []
        return outer_for(cand)

    def join(j):
        """Add node j to the open kernel (raises Refused, leaving the kernel as it was)."""
        nonlocal builder, current, current_ids
        if j in flat and bool(nodes[j].buf.size) != bool(current[0].buf.size):
            raise Refused("0-dim updates and tensor updates go in separate kernels")
        outer = outer_of(first, current + [nodes[j]])
        if ir.same_sizes(outer, builder.outer):
            builder.add(nodes[j])
        else:  # a reduction sets the outer loops of a pointwise kernel: lay it out again
            b = _Builder(outer)
            for x in current + [nodes[j]]:
                b.add(x)
            builder = b
        current, current_ids = current + [nodes[j]], current_ids | {j}
        done.add(j)

    def pull_forward(start):
        for j in range(start, min(len(nodes), start + LOOKAHEAD)):
            if j in done or isinstance(nodes[j], (Extern, Scatter, Concat)) or not ready(j):
                continue
            try:
                join(j)
            except Refused:
                continue

    for i, n in enumerate(nodes):
        if i in done:
            continue
        if isinstance(n, (Extern, Scatter, Concat)):
            close()
            steps.append(n if isinstance(n, Extern) else
                         _OWN_KERNEL[type(n)](n, f"kernel{len(steps)}"))
            done.add(i)
            continue
        if current:
            try:
                join(i)
                continue
            except Refused as e:
                log.debug("not fusing %s into kernel%d: %s", n.buf.name, len(steps), e)
                pull_forward(i + 1)
                close()
        builder = _Builder(outer_of(i, [n]))
        builder.add(n)
        current, current_ids, first = [n], {i}, i
        done.add(i)
    close()
    return steps
