"""The iteration context: which shard an iterator reads and the seeds of its random pipes.

Iterators take their context when they are created (a thread-local "current" context), so
several independent instances of one pipe graph can run side by side in one process, each
a different shard - pipes themselves are never mutated or deep-copied for sharding.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

__all__ = ["IterContext", "activate", "current_context", "derive_seed"]


@dataclass
class IterContext:
    """Shard and seeds for one instance of a pipe graph.

    ``pipe_seeds`` maps ``id(pipe)`` of each random pipe to its seed (see
    :func:`ember.data.graph.seed_graph`); ``shared`` holds per-instance objects that several
    iterators share (the buffer behind ``fork`` / ``demux`` children).
    """

    num_shards: int = 1
    shard_id: int = 0
    pipe_seeds: dict[int, int] = field(default_factory=dict)
    shared: dict = field(default_factory=dict)


_local = threading.local()


def current_context(create: bool = True) -> IterContext | None:
    ctx = getattr(_local, "ctx", None)
    if ctx is None and create:
        ctx = IterContext()
    return ctx


@contextlib.contextmanager
def activate(ctx: IterContext | None) -> Iterator[None]:
    """Make ``ctx`` current for iterators created inside the block."""
    prev = getattr(_local, "ctx", None)
    _local.ctx = ctx
    try:
        yield
    finally:
        _local.ctx = prev


def derive_seed(*parts) -> int:
    """A 63-bit seed from any tuple of ints/strings (stable across processes and runs)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def seed_for(pipe, ctx: IterContext | None) -> int:
    """The seed a random pipe's new iterator uses: explicit, from the context, or drawn."""
    explicit = getattr(pipe, "_seed", None)
    if explicit is not None:
        return explicit
    if ctx is not None and id(pipe) in ctx.pipe_seeds:
        return ctx.pipe_seeds[id(pipe)]
    # Outside DataLoader2: follow torch's global RNG, so torch.manual_seed makes it repeatable.
    return int(torch.empty((), dtype=torch.int64).random_().item())
