"""A JIT wrapper's internal buffers in one arena that outlives the call.

Each call of a compiled CPU graph allocated its buffers afresh, and large ones come from the
OS every time (an mmap, or heap the allocator trimmed on the last free), so their pages fault
on first touch in every call: about a third of resnet18's bfloat16 inference at small inputs,
whose per-call weight casts are 22 MB. ``place`` gives each internal buffer of static size an
offset in one byte arena, packed by lifetime (buffers alive at the same step never share
bytes); the wrapper takes a ready arena from its graph's free list per call and puts it back
before returning (a concurrent or re-entrant call makes its own). Buffers that may outlive the
call keep their own allocation: graph outputs, check flags, and anything an aliasing extern
reads (its result may be a view of it). So does what an op placing a view by its storage
offset reads (``as_strided_scatter``), since an arena slot does not start its storage.
"""

from __future__ import annotations

from typing import NamedTuple

import sympy

from ember.core.compiler.codegen.wrapper import (
    _NAMES,
    Alias,
    Alloc,
    ArenaBuffer,
    CallExtern,
    Check,
    GiveArena,
    Return,
    TakeArena,
    _names_in,
    may_alias,
)
from ember.core.compiler.ir import Buffer

ALIGN = 64  # bytes: each buffer starts on a cache line (and a full AVX-512 vector)
# an arena larger than this is not made: the graph's buffers are allocated per call as before
MAX_BYTES = 1 << 30


class _Group(NamedTuple):
    """One allocation and the names that alias it, with its lifetime in steps."""

    root: Buffer
    nbytes: int
    first: int
    last: int


def _static_nbytes(b: Buffer) -> int | None:
    """Bytes the buffer's strided layout spans, or None when a size is symbolic."""
    dims = list(b.size) + list(b.stride)
    if not all(isinstance(d, (int, sympy.Integer)) for d in dims):
        return None
    if any(int(s) == 0 for s in b.size):
        return 0
    span = 1 + sum((int(s) - 1) * int(st) for s, st in zip(b.size, b.stride))
    return span * b.dtype.itemsize


def _reads_storage_offset(op) -> bool:
    """An op whose arguments count a ``storage_offset`` from the start of the storage
    (``as_strided_scatter``): an arena slot starts further in, so it would read elsewhere."""
    schema = getattr(op, "_schema", None)
    return schema is not None and any(a.name == "storage_offset" for a in schema.arguments)


def _groups(steps: list) -> list[_Group]:
    root: dict[str, str] = {}
    allocs: dict[str, Buffer] = {}
    escaped: set[str] = set()
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, s in enumerate(steps):
        if isinstance(s, Alloc):
            root[s.buf.name] = s.buf.name
            allocs[s.buf.name] = s.buf
            first[s.buf.name] = i
        elif isinstance(s, Alias):
            root[s.name] = root.get(s.src, s.src)
        elif isinstance(s, CallExtern) and (may_alias(s.step.op) or
                                            _reads_storage_offset(s.step.op)):
            escaped |= _names_in(s.step.args) | _names_in(list(s.step.kwargs.values()))
        elif isinstance(s, Return):
            escaped |= _names_in(s.outputs)
        elif isinstance(s, Check):
            escaped.add(s.flag.buf.name)
        for n in _NAMES.get(type(s), lambda _: ())(s):
            r = root.get(n, n)
            last[r] = i
    escaped = {root.get(n, n) for n in escaped}
    out = []
    for name, b in allocs.items():
        nbytes = _static_nbytes(b)
        if name not in escaped and nbytes:
            out.append(_Group(b, nbytes, first[name], last[name]))
    return out


def _offsets(groups: list[_Group]) -> list[int]:
    """First-fit by decreasing size: the lowest aligned offset whose bytes no group alive at
    an overlapping step holds."""
    order = sorted(range(len(groups)), key=lambda k: (-groups[k].nbytes, groups[k].first))
    offsets: list[int | None] = [None] * len(groups)
    for k in order:
        g = groups[k]
        busy = sorted((offsets[j], offsets[j] + groups[j].nbytes) for j in range(len(groups))
                      if offsets[j] is not None and groups[j].first <= g.last
                      and g.first <= groups[j].last)
        at = 0
        for lo, hi in busy:
            if at + g.nbytes <= lo:
                break
            at = max(at, -(-hi // ALIGN) * ALIGN)
        offsets[k] = at
    return offsets


def place(steps: list) -> list:
    """``steps`` (a wrapper plan for CPU) with its internal static buffers carved from one
    arena: a ``TakeArena`` first, ``ArenaBuffer`` for their ``Alloc``, ``GiveArena`` before
    the ``Return``. Unchanged when no buffer qualifies or the arena would pass MAX_BYTES."""
    groups = _groups(steps)
    if not groups:
        return steps
    offsets = _offsets(groups)
    nbytes = max(o + g.nbytes for o, g in zip(offsets, groups))
    if nbytes > MAX_BYTES:
        return steps
    slot = {g.root.name: k for k, g in enumerate(groups)}
    slots = [(g.root, o) for g, o in zip(groups, offsets)]
    out = [TakeArena(nbytes, slots)]
    for s in steps:
        if isinstance(s, Alloc) and s.buf.name in slot:
            out.append(ArenaBuffer(s.buf, slot[s.buf.name]))
            continue
        if isinstance(s, Return):
            out.append(GiveArena())
        out.append(s)
    return out

