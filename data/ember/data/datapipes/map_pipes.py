"""Map-style pipes and the conversions between map-style and iterable pipes."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence

from ember.data.datapipes.base import (
    IterDataPipe,
    MapDataPipe,
    PipeIterator,
    check_pipe,
    functional_datapipe,
)
from ember.data.datapipes.context import seed_for
from ember.data.datapipes.iter_basic import _select, _SourceIterator

__all__ = ["IterToMapConverter", "MapBatcher", "MapConcater", "MapMapper", "MapShuffler",
           "MapToIterConverter", "MapZipper", "SequenceWrapper"]


class SequenceWrapper(MapDataPipe):
    """Wraps any sequence (``__getitem__`` + ``__len__``)."""

    def __init__(self, sequence: Sequence, deepcopy: bool = True) -> None:
        if not (hasattr(sequence, "__getitem__") and hasattr(sequence, "__len__")):
            raise TypeError(f"sequence must support [] and len(), got {type(sequence).__name__}")
        if deepcopy:
            try:
                sequence = copy.deepcopy(sequence)
            except TypeError:
                pass
        self.sequence = sequence

    def __getitem__(self, index):
        return self.sequence[index]

    def __len__(self) -> int:
        return len(self.sequence)


@functional_datapipe("map")
class MapMapper(MapDataPipe):
    """``pipe[i]`` is ``fn(source[i])`` (with torchdata's ``input_col`` / ``output_col``)."""

    def __init__(self, datapipe: MapDataPipe, fn: Callable, input_col=None,
                 output_col=None) -> None:
        from ember.data.datapipes.iter_basic import Mapper

        check_pipe(datapipe, "datapipe", MapDataPipe)
        self.source = datapipe
        self._apply = Mapper(_Dummy(), fn, input_col, output_col).apply
        self.fn = fn

    def __getitem__(self, index):
        return self._apply(self.source[index])

    def __len__(self) -> int:
        return len(self.source)


class _Dummy(IterDataPipe):
    def _iterator(self) -> PipeIterator:
        raise TypeError("not iterable")


@functional_datapipe("batch")
class MapBatcher(MapDataPipe):
    """``pipe[i]`` is the list of ``batch_size`` consecutive items starting at ``i*batch_size``."""

    def __init__(self, datapipe: MapDataPipe, batch_size: int, drop_last: bool = False,
                 wrapper_class: Callable = list) -> None:
        check_pipe(datapipe, "datapipe", MapDataPipe)
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.source, self.batch_size = datapipe, batch_size
        self.drop_last, self.wrapper_class = drop_last, wrapper_class

    def __getitem__(self, index: int):
        if not 0 <= index < len(self):
            raise IndexError(f"batch index {index} out of range for {len(self)} batches")
        lo = index * self.batch_size
        hi = min(lo + self.batch_size, len(self.source))
        return self.wrapper_class([self.source[i] for i in range(lo, hi)])

    def __len__(self) -> int:
        n = len(self.source)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def _check_maps(datapipes, name: str) -> tuple:
    if not datapipes:
        raise ValueError(f"{name} expects at least one MapDataPipe")
    for i, dp in enumerate(datapipes):
        check_pipe(dp, f"datapipes[{i}]", MapDataPipe)
    return tuple(datapipes)


@functional_datapipe("concat")
class MapConcater(MapDataPipe):
    """Indexes the pipes one after another."""

    def __init__(self, *datapipes: MapDataPipe) -> None:
        self.datapipes = _check_maps(datapipes, "concat")

    def __getitem__(self, index: int):
        if index < 0:
            index += len(self)
        for dp in self.datapipes:
            if 0 <= index < len(dp):
                return dp[index]
            index -= len(dp)
        raise IndexError("concat index out of range")

    def __len__(self) -> int:
        return sum(len(dp) for dp in self.datapipes)


@functional_datapipe("zip")
class MapZipper(MapDataPipe):
    """``pipe[i]`` is the tuple of ``dp[i]`` for each pipe; length is the shortest."""

    def __init__(self, *datapipes: MapDataPipe) -> None:
        self.datapipes = _check_maps(datapipes, "zip")

    def __getitem__(self, index):
        return tuple(dp[index] for dp in self.datapipes)

    def __len__(self) -> int:
        return min(len(dp) for dp in self.datapipes)


class MapShuffler(IterDataPipe):
    """``map_pipe.shuffle()``: an iterable pipe yielding the map pipe's items in random order."""

    is_random = True
    _seed: int | None = None

    def __init__(self, datapipe: MapDataPipe, *, indices: Sequence | None = None) -> None:
        check_pipe(datapipe, "datapipe", MapDataPipe)
        self.source = datapipe
        self.indices = list(indices) if indices is not None else None
        self._enabled = True

    def set_seed(self, seed: int) -> MapShuffler:
        self._seed = int(seed)
        return self

    def set_shuffle(self, shuffle: bool = True) -> MapShuffler:
        self._enabled = bool(shuffle)
        return self

    def _iterator(self) -> PipeIterator:
        return _MapShuffleIterator(self)

    def __len__(self) -> int:
        return len(self.indices) if self.indices is not None else len(self.source)


MapDataPipe.register_datapipe_as_function("shuffle", MapShuffler)


class _MapShuffleIterator(PipeIterator):
    def __init__(self, pipe: MapShuffler) -> None:
        super().__init__()
        self.pipe, self.seed, self.i = pipe, seed_for(pipe, self.ctx), 0
        self._order()

    def _order(self) -> None:
        p = self.pipe
        self.order = list(p.indices) if p.indices is not None else list(range(len(p.source)))
        if p._enabled:
            random.Random(self.seed).shuffle(self.order)

    def __next__(self):
        if self.i >= len(self.order):
            raise StopIteration
        self.i += 1
        return self.pipe.source[self.order[self.i - 1]]

    def state_dict(self) -> dict:
        return {"seed": self.seed, "i": self.i}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.i = state["seed"], state["i"]
        self._order()


class MapToIterConverter(IterDataPipe):
    """Iterates a map pipe over ``indices`` (default ``range(len(datapipe))``)."""

    def __init__(self, datapipe: MapDataPipe, indices: Sequence | None = None) -> None:
        check_pipe(datapipe, "datapipe", MapDataPipe)
        self.source, self.indices = datapipe, indices

    def _iterator(self) -> PipeIterator:
        return _MapIndexIterator(self)

    def __len__(self) -> int:
        return len(self.indices) if self.indices is not None else len(self.source)


class _MapIndexIterator(PipeIterator):
    def __init__(self, pipe) -> None:
        super().__init__()
        self.pipe, self.i = pipe, 0

    def __next__(self):
        if self.i >= len(self.pipe):
            raise StopIteration
        idx = self.pipe.indices[self.i] if self.pipe.indices is not None else self.i
        self.i += 1
        return self.pipe.source[idx]

    def state_dict(self) -> dict:
        return {"index": self.i}

    def load_state_dict(self, state: dict) -> None:
        self.i = state["index"]


class IterToMapConverter(MapDataPipe):
    """A map pipe over an iterable one: reads it fully on first access into a dict keyed by
    ``key_value_fn(item) -> (key, value)`` (default: items are ``(key, value)`` pairs)."""

    def __init__(self, datapipe: IterDataPipe, key_value_fn: Callable | None = None) -> None:
        check_pipe(datapipe, "datapipe")
        if key_value_fn is not None and not callable(key_value_fn):
            raise TypeError("key_value_fn must be callable")
        self.source, self.key_value_fn = datapipe, key_value_fn
        self._map: dict | None = None

    def _load(self) -> dict:
        if self._map is None:
            out = {}
            for item in self.source:
                kv = self.key_value_fn(item) if self.key_value_fn is not None else item
                if not (isinstance(kv, (tuple, list)) and len(kv) == 2):
                    raise ValueError(f"to_map_datapipe needs (key, value) pairs, got {kv!r}")
                out[kv[0]] = kv[1]
            self._map = out
        return self._map

    def __getitem__(self, key):
        try:
            return self._load()[key]
        except KeyError:
            raise KeyError(f"key {key!r} is not in the map") from None

    def __len__(self) -> int:
        return len(self._load())

    def __getstate__(self):
        return {**self.__dict__, "_map": None}


# Conversions are methods of the *other* kind of pipe.
MapDataPipe.register_datapipe_as_function("to_iter_datapipe", MapToIterConverter)
IterDataPipe.register_datapipe_as_function("to_map_datapipe", IterToMapConverter)
_ = _select, _SourceIterator
