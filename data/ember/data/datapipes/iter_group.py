"""groupby: buffered grouping of items by key."""

from __future__ import annotations

from collections.abc import Callable

from ember.data.datapipes.base import IterDataPipe, PipeIterator, check_pipe, functional_datapipe
from ember.data.datapipes.iter_basic import _SourceIterator

__all__ = ["Grouper"]


@functional_datapipe("groupby")
class Grouper(IterDataPipe):
    """Groups items by ``group_key_fn``; a group is yielded when it reaches ``group_size``, when
    the buffer (``buffer_size`` items) is full (largest group first), or at the end."""

    def __init__(self, datapipe: IterDataPipe, group_key_fn: Callable, *, keep_key: bool = False,
                 buffer_size: int = 10000, group_size: int | None = None,
                 guaranteed_group_size: int | None = None, drop_remaining: bool = False) -> None:
        check_pipe(datapipe, "datapipe")
        if not callable(group_key_fn):
            raise TypeError("group_key_fn must be callable")
        if buffer_size <= 0:
            raise ValueError(f"buffer_size must be positive, got {buffer_size}")
        if group_size is not None and not 0 < group_size <= buffer_size:
            raise ValueError(f"group_size must be in (0, buffer_size], got {group_size}")
        if guaranteed_group_size is not None:
            if group_size is None or not 0 < guaranteed_group_size <= group_size:
                raise ValueError("guaranteed_group_size must be in (0, group_size]")
        self.source, self.group_key_fn, self.keep_key = datapipe, group_key_fn, keep_key
        self.buffer_size, self.group_size = buffer_size, group_size
        self.guaranteed_group_size = guaranteed_group_size
        self.drop_remaining = drop_remaining

    def _iterator(self) -> PipeIterator:
        return _GroupIterator(self)


class _GroupIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.groups: dict = {}
        self.size = 0
        self.src_done = False

    def _emit(self, key, group):
        return (key, group) if self.pipe.keep_key else group

    def _too_small(self, key, group) -> bool:
        g = self.pipe.guaranteed_group_size
        if g is None or len(group) >= g:
            return False
        if self.pipe.drop_remaining:
            return True
        raise RuntimeError(f"groupby: group {key!r} has {len(group)} items, fewer than "
                           f"guaranteed_group_size={g}; pass drop_remaining=True to drop it")

    def __next__(self):
        p = self.pipe
        while not self.src_done:
            try:
                item = next(self.src)
            except StopIteration:
                self.src_done = True
                break
            key = p.group_key_fn(item)
            group = self.groups.setdefault(key, [])
            group.append(item)
            self.size += 1
            if p.group_size is not None and len(group) == p.group_size:
                del self.groups[key]
                self.size -= len(group)
                return self._emit(key, group)
            if self.size >= p.buffer_size:
                key = max(self.groups, key=lambda k: len(self.groups[k]))
                group = self.groups.pop(key)
                self.size -= len(group)
                if not self._too_small(key, group):
                    return self._emit(key, group)
        while self.groups:
            key = next(iter(self.groups))
            group = self.groups.pop(key)
            self.size -= len(group)
            if not self._too_small(key, group):
                return self._emit(key, group)
        raise StopIteration

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict(), "groups": [[k, list(g)] for k, g in
                                                         self.groups.items()],
                "src_done": self.src_done}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.groups = {k: list(g) for k, g in state["groups"]}
        self.size = sum(len(g) for g in self.groups.values())
        self.src_done = state["src_done"]
