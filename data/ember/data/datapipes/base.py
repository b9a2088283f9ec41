"""DataPipe base classes, functional registration and explicit, checkpointable iterators.

Every built-in pipe returns a :class:`PipeIterator` whose ``state_dict()`` /
``load_state_dict()`` capture and restore the middle of an epoch without replaying it.
A user pipe that defines ``__iter__`` as a generator (or returns a plain iterator) is
wrapped in :class:`ReplayIterator`: its state is the number of items yielded, and
restoring re-runs the generator and skips that many items (documented replay).
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from ember.data.datapipes.context import IterContext, activate, current_context

__all__ = ["IterDataPipe", "MapDataPipe", "PipeIterator", "ReplayIterator",
           "functional_datapipe"]


class PipeIterator:
    """One pass over a pipe: ``__next__`` plus ``state_dict`` / ``load_state_dict``.

    The context (seeds, shard) active at construction is kept in ``self.ctx`` so that
    iterators created later (a new cycle, a reopened source) see the same one.
    """

    def __init__(self) -> None:
        self.ctx: IterContext = current_context()

    def __iter__(self) -> PipeIterator:
        return self

    def __next__(self):
        raise NotImplementedError

    def take(self, k: int) -> list:
        """The next ``k`` items as a list (fewer at the end); pipes that can fetch a run of
        items at once (an index range, a shard of it) override it to skip per-item calls."""
        return list(itertools.islice(self, k))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def iter_source(self, pipe) -> PipeIterator:
        """``iter(pipe)`` under this iterator's context."""
        with activate(self.ctx):
            return as_pipe_iterator(iter(pipe))

    def close(self) -> None:
        """Release threads or files held by this iterator (and its sources)."""


class ReplayIterator(PipeIterator):
    """Fallback state for user pipes written as generators: count, and replay on restore."""

    def __init__(self, make: Callable[[], Iterator]) -> None:
        super().__init__()
        self._make = make
        self._it: Iterator | None = None
        self._count = 0

    def _ensure(self) -> Iterator:
        if self._it is None:
            with activate(self.ctx):
                self._it = iter(self._make())
        return self._it

    def __next__(self):
        it = self._ensure()
        with activate(self.ctx):
            item = next(it)
        self._count += 1
        return item

    def state_dict(self) -> dict:
        return {"replay_count": self._count}

    def load_state_dict(self, state: dict) -> None:
        self._it = None
        self._count = 0
        it = self._ensure()
        with activate(self.ctx):
            for _ in range(state["replay_count"]):
                next(it)
        self._count = state["replay_count"]


class _DelegatingIterator(PipeIterator):
    """Wraps a user iterator that already has ``state_dict`` / ``load_state_dict``."""

    def __init__(self, it) -> None:
        super().__init__()
        self._it = it

    def __next__(self):
        with activate(self.ctx):
            return next(self._it)

    def state_dict(self) -> dict:
        return self._it.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._it.load_state_dict(state)


def as_pipe_iterator(it) -> PipeIterator:
    """Give any iterator the PipeIterator interface (replay fallback if it has no state)."""
    if isinstance(it, PipeIterator):
        return it
    if hasattr(it, "state_dict") and hasattr(it, "load_state_dict"):
        return _DelegatingIterator(it)
    first = [it]

    def make():
        # The first pass reuses the iterator already made; a restore cannot, so it fails loudly.
        if first:
            return first.pop()
        raise RuntimeError(
            "cannot restore this iterator: it has no state_dict() and its source cannot be "
            "re-iterated; write the pipe as an IterDataPipe subclass with a generator __iter__")

    return ReplayIterator(make)


class _FunctionalMixin:
    functions: dict[str, type] = {}

    def __getattr__(self, name: str):
        fn = type(self).functions.get(name)
        if fn is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return functools.partial(fn, self)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(type(self).functions))

    @classmethod
    def register_datapipe_as_function(cls, name: str, pipe_cls: type) -> None:
        if name in cls.functions and cls.functions[name] is not pipe_cls:
            raise ValueError(f"functional name {name!r} is already registered to "
                             f"{cls.functions[name].__name__}")
        cls.functions[name] = pipe_cls


class IterDataPipe(_FunctionalMixin, torch.utils.data.IterableDataset):
    """An iterable pipe; ``iter(pipe)`` returns a checkpointable :class:`PipeIterator`.

    Subclasses implement ``_iterator()``; a subclass that defines ``__iter__`` instead (for
    example as a generator) gets the replay fallback of :class:`ReplayIterator`.
    """

    functions: dict[str, type] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        user_iter = cls.__dict__.get("__iter__")
        if user_iter is not None and user_iter is not IterDataPipe.__iter__:
            cls._user_iter = user_iter
            cls.__iter__ = IterDataPipe.__iter__
            cls._iterator = IterDataPipe._user_iterator

    def __iter__(self) -> PipeIterator:
        ctx = current_context(create=False)
        if ctx is None:
            with activate(IterContext()):
                return self._iterator()
        return self._iterator()

    def _iterator(self) -> PipeIterator:
        raise NotImplementedError(f"{type(self).__name__} must implement _iterator() or __iter__")

    def _user_iterator(self) -> PipeIterator:
        it = self._user_iter()
        if inspect.isgenerator(it) or not (hasattr(it, "state_dict")
                                           and hasattr(it, "load_state_dict")):
            first = [it]
            return ReplayIterator(lambda: first.pop() if first else self._user_iter())
        return _DelegatingIterator(it)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __add__(self, other):
        raise TypeError("use .concat(...) to chain DataPipes")


class MapDataPipe(_FunctionalMixin, torch.utils.data.Dataset):
    """A map-style pipe: ``__getitem__`` and ``__len__``; iterating yields ``pipe[0..len)``."""

    functions: dict[str, type] = {}

    def __getitem__(self, index):
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __add__(self, other):
        raise TypeError("use .concat(...) to chain DataPipes")


def functional_datapipe(name: str) -> Callable[[type], type]:
    """Class decorator: make ``pipe.<name>(...)`` construct this pipe with ``pipe`` first."""
    if not name.isidentifier():
        raise ValueError(f"functional_datapipe name must be an identifier, got {name!r}")

    def register(cls: type) -> type:
        if issubclass(cls, IterDataPipe):
            IterDataPipe.register_datapipe_as_function(name, cls)
        elif issubclass(cls, MapDataPipe):
            MapDataPipe.register_datapipe_as_function(name, cls)
        else:
            raise TypeError(f"functional_datapipe expects an IterDataPipe or MapDataPipe "
                            f"subclass, got {cls!r}")
        return cls

    return register


def check_pipe(value: Any, name: str, kind: type = IterDataPipe) -> None:
    """Raise a TypeError naming ``name`` unless ``value`` is a ``kind`` pipe."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be an {kind.__name__}, got {type(value).__name__}")
