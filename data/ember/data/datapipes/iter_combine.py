"""fork and demux: several child pipes reading one source through a shared buffer.

The buffer lives in the iteration context (one per graph instance), not on the pipe, so
independent instances of the graph never share it.
"""

from __future__ import annotations

import copy as _copy
from collections import deque
from collections.abc import Callable

from ember.data.datapipes.base import IterDataPipe, PipeIterator, check_pipe, functional_datapipe
from ember.data.datapipes.context import IterContext, activate

__all__ = ["Demultiplexer", "Forker"]


class _Hub(IterDataPipe):
    """The shared source behind fork/demux children (a graph node, so traversal sees it)."""

    def __init__(self, source: IterDataPipe, num_instances: int, buffer_size: int,
                 classifier_fn: Callable | None, drop_none: bool, copy: str | None = None) -> None:
        if copy not in (None, "shallow", "deep"):
            raise ValueError(f"copy must be None, 'shallow' or 'deep', got {copy!r}")
        self.source, self.num_instances, self.buffer_size = source, num_instances, buffer_size
        self.classifier_fn, self.drop_none, self.copy = classifier_fn, drop_none, copy

    def copy_item(self, item):
        if self.copy == "shallow":
            return _copy.copy(item)
        return _copy.deepcopy(item) if self.copy == "deep" else item

    def _iterator(self) -> PipeIterator:
        raise TypeError("the buffer behind fork()/demux() is not iterable; iterate its children")


class _HubState:
    def __init__(self, hub: _Hub, ctx: IterContext) -> None:
        self.hub = hub
        with activate(ctx):
            self.src = iter(hub.source)
        self.buffers: list[deque] = [deque() for _ in range(hub.num_instances)]
        self.started: set[int] = set()
        self.exhausted = False

    def _route(self, item) -> int | None:
        if self.hub.classifier_fn is None:
            return None
        k = self.hub.classifier_fn(item)
        if k is None and self.hub.drop_none:
            return -1
        if not isinstance(k, int) or not 0 <= k < self.hub.num_instances:
            raise ValueError(f"demux classifier_fn must return an int in "
                             f"[0, {self.hub.num_instances}), got {k!r}")
        return k

    def next_for(self, child: int):
        while not self.buffers[child]:
            if self.exhausted:
                raise StopIteration
            try:
                item = next(self.src)
            except StopIteration:
                self.exhausted = True
                raise
            k = self._route(item)
            if k == -1:
                continue
            targets = range(self.hub.num_instances) if k is None else (k,)
            for t in targets:
                self.buffers[t].append(self.hub.copy_item(item) if k is None else item)
                limit = self.hub.buffer_size
                if t != child and limit >= 0 and len(self.buffers[t]) > limit:
                    raise BufferError(f"{'fork' if k is None else 'demux'} buffer of child {t} "
                                      f"exceeded buffer_size={limit}; read the children more "
                                      "evenly or raise buffer_size (-1: unbounded)")
        return self.buffers[child].popleft()

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict(), "buffers": [list(b) for b in self.buffers],
                "exhausted": self.exhausted}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.buffers = [deque(b) for b in state["buffers"]]
        self.exhausted = state["exhausted"]


class _Child(IterDataPipe):
    def __init__(self, hub: _Hub, index: int) -> None:
        self.hub, self.index = hub, index

    def _iterator(self) -> PipeIterator:
        return _ChildIterator(self)


class _ChildIterator(PipeIterator):
    def __init__(self, pipe: _Child) -> None:
        super().__init__()
        self.index = pipe.index
        key = ("hub", id(pipe.hub))
        state = self.ctx.shared.get(key)
        if state is None or self.index in state.started:
            state = self.ctx.shared[key] = _HubState(pipe.hub, self.ctx)
        state.started.add(self.index)
        self.state = state

    def __next__(self):
        return self.state.next_for(self.index)

    def state_dict(self) -> dict:
        return {"hub": self.state.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.state.load_state_dict(state["hub"])


def _check_instances(num_instances: int) -> None:
    if not isinstance(num_instances, int) or num_instances < 1:
        raise ValueError(f"num_instances must be a positive int, got {num_instances!r}")


@functional_datapipe("fork")
class Forker(IterDataPipe):
    """``fork(n)`` returns ``n`` children that each yield every item of the source (each
    child's own ``copy.copy`` / ``copy.deepcopy`` of it with ``copy="shallow"`` / ``"deep"``)."""

    def __new__(cls, datapipe: IterDataPipe, num_instances: int, buffer_size: int = 1000,
                copy=None):
        check_pipe(datapipe, "datapipe")
        _check_instances(num_instances)
        if num_instances == 1:
            return datapipe
        hub = _Hub(datapipe, num_instances, buffer_size, None, False, copy)
        return [_Child(hub, i) for i in range(num_instances)]


@functional_datapipe("demux")
class Demultiplexer(IterDataPipe):
    """``demux(n, classifier_fn)`` returns ``n`` children; item goes to child
    ``classifier_fn(item)`` (dropped when that is None and ``drop_none``)."""

    def __new__(cls, datapipe: IterDataPipe, num_instances: int, classifier_fn: Callable,
                drop_none: bool = False, buffer_size: int = 1000):
        check_pipe(datapipe, "datapipe")
        _check_instances(num_instances)
        if not callable(classifier_fn):
            raise TypeError("classifier_fn must be callable")
        hub = _Hub(datapipe, num_instances, buffer_size, classifier_fn, drop_none)
        return [_Child(hub, i) for i in range(num_instances)]
