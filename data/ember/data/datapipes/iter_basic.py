"""Element-wise and structural iterable pipes: wrap, map, filter, batch, shard, combine."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable, Sequence

from torch.utils.data import IterableDataset, default_collate

from ember.data.datapipes.base import (
    IterDataPipe,
    PipeIterator,
    ReplayIterator,
    check_pipe,
    functional_datapipe,
)

__all__ = [
    "Batcher", "Collator", "Concater", "Cycler", "Enumerator", "Filter", "FlatMapper",
    "Header", "IterableWrapper", "Mapper", "Multiplexer", "MultiplexerLongest",
    "ShardingFilter", "UnBatcher", "Zipper",
]


def _is_sequence(obj) -> bool:
    if isinstance(obj, IterableDataset):
        return False
    return (hasattr(obj, "__len__") and hasattr(obj, "__getitem__")
            and not isinstance(obj, (dict, str, bytes)) and not hasattr(obj, "keys"))


class _SourceIterator(PipeIterator):
    """An iterator over one source pipe; its state nests the source's."""

    def __init__(self, pipe) -> None:
        super().__init__()
        self.pipe = pipe
        self.src = self.iter_source(pipe.source)

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])

    def close(self) -> None:
        self.src.close()


class IterableWrapper(IterDataPipe):
    """Wraps any iterable. Sequences resume by index; other iterables by replay."""

    def __init__(self, iterable: Iterable, deepcopy: bool = True) -> None:
        if not isinstance(iterable, Iterable) and not _is_sequence(iterable):
            raise TypeError(f"iterable must be iterable, got {type(iterable).__name__}")
        self.iterable = iterable
        self.deepcopy = deepcopy

    def _data(self):
        if not self.deepcopy:
            return self.iterable
        try:
            return copy.deepcopy(self.iterable)
        except TypeError:
            warnings.warn("IterableWrapper: the iterable cannot be deep-copied; in-place "
                          "changes to it will show in later epochs", stacklevel=3)
            return self.iterable

    def _iterator(self) -> PipeIterator:
        data = self._data()
        if _is_sequence(data):
            return _IndexIterator(data)
        return ReplayIterator(lambda: iter(data))

    def __len__(self) -> int:
        if hasattr(self.iterable, "__len__"):
            return len(self.iterable)
        raise TypeError("IterableWrapper over an unsized iterable has no len()")


class _IndexIterator(PipeIterator):
    def __init__(self, seq: Sequence) -> None:
        super().__init__()
        self.seq, self.n = seq, len(seq)
        self.i = 0

    def __next__(self):
        i = self.i
        if i >= self.n:
            raise StopIteration
        self.i = i + 1
        return self.seq[i]

    def take(self, k: int) -> list:
        i, seq = self.i, self.seq
        end = min(i + max(k, 0), self.n)
        self.i = max(i, end)
        if isinstance(seq, (list, tuple, range)):
            return list(seq[i:end])
        return [seq[j] for j in range(i, end)]

    def state_dict(self) -> dict:
        return {"index": self.i}

    def load_state_dict(self, state: dict) -> None:
        self.i = state["index"]


def _check_fn(fn, name: str = "fn") -> None:
    if not callable(fn):
        raise TypeError(f"{name} must be callable, got {type(fn).__name__}")


def _select(data, input_col):
    if input_col is None:
        return (data,)
    if isinstance(input_col, (list, tuple)):
        return tuple(data[c] for c in input_col)
    return (data[input_col],)


@functional_datapipe("map")
class Mapper(IterDataPipe):
    """Applies ``fn``; ``input_col`` picks the argument(s), ``output_col`` where the result goes.

    ``output_col=None`` replaces the input column (the first one, dropping the others, when
    there are several); ``-1`` appends.
    """

    def __init__(self, datapipe: IterDataPipe, fn: Callable, input_col=None,
                 output_col=None) -> None:
        check_pipe(datapipe, "datapipe")
        _check_fn(fn)
        if input_col is None and output_col is not None:
            raise ValueError("output_col must be None when input_col is None")
        if isinstance(output_col, (list, tuple)):
            if len(output_col) != 1:
                raise ValueError(f"output_col must be a single column, got {output_col!r}")
            output_col = output_col[0]
        self.source, self.fn = datapipe, fn
        self.input_col, self.output_col = input_col, output_col

    def apply(self, data):
        res = self.fn(*_select(data, self.input_col))
        if self.input_col is None:
            return res
        was_tuple = isinstance(data, tuple)
        data = list(data) if was_tuple else copy.copy(data)
        if self.output_col is None:
            if isinstance(self.input_col, (list, tuple)):
                data[self.input_col[0]] = res
                for c in sorted(self.input_col[1:], reverse=True):
                    del data[c]
            else:
                data[self.input_col] = res
        elif self.output_col == -1:
            data.append(res)
        else:
            data[self.output_col] = res
        return tuple(data) if was_tuple else data

    def _iterator(self) -> PipeIterator:
        return _MapIterator(self)

    def __len__(self) -> int:
        return len(self.source)


class _MapIterator(_SourceIterator):
    def __next__(self):
        if self.pipe.input_col is None:
            return self.pipe.fn(next(self.src))
        return self.pipe.apply(next(self.src))


@functional_datapipe("filter")
class Filter(IterDataPipe):
    """Keeps items for which ``filter_fn`` (applied to ``input_col``) is true."""

    def __init__(self, datapipe: IterDataPipe, filter_fn: Callable, input_col=None) -> None:
        check_pipe(datapipe, "datapipe")
        _check_fn(filter_fn, "filter_fn")
        self.source, self.filter_fn, self.input_col = datapipe, filter_fn, input_col

    def _iterator(self) -> PipeIterator:
        return _FilterIterator(self)


class _FilterIterator(_SourceIterator):
    def __next__(self):
        while True:
            item = next(self.src)
            keep = self.pipe.filter_fn(*_select(item, self.pipe.input_col))
            if not isinstance(keep, bool):
                raise ValueError(f"filter_fn must return a bool, got {type(keep).__name__}")
            if keep:
                return item


@functional_datapipe("flatmap")
class FlatMapper(IterDataPipe):
    """Applies ``fn`` (identity if None) and yields each element of the returned iterable."""

    def __init__(self, datapipe: IterDataPipe, fn: Callable | None = None,
                 input_col=None) -> None:
        check_pipe(datapipe, "datapipe")
        if fn is not None:
            _check_fn(fn)
        self.source, self.fn, self.input_col = datapipe, fn, input_col

    def _iterator(self) -> PipeIterator:
        return _FlatMapIterator(self)


class _FlatMapIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.pending: list = []

    def __next__(self):
        while not self.pending:
            item = next(self.src)
            args = _select(item, self.pipe.input_col)
            out = self.pipe.fn(*args) if self.pipe.fn is not None else args[0]
            self.pending = list(out)[::-1]
        return self.pending.pop()

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict(), "pending": list(self.pending)}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.pending = list(state["pending"])


@functional_datapipe("batch")
class Batcher(IterDataPipe):
    """Groups consecutive items into lists (``wrapper_class``) of ``batch_size``."""

    def __init__(self, datapipe: IterDataPipe, batch_size: int, drop_last: bool = False,
                 wrapper_class: Callable = list) -> None:
        check_pipe(datapipe, "datapipe")
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.source, self.batch_size = datapipe, batch_size
        self.drop_last, self.wrapper_class = drop_last, wrapper_class

    def _iterator(self) -> PipeIterator:
        return _BatchIterator(self)

    def __len__(self) -> int:
        n = len(self.source)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class _BatchIterator(_SourceIterator):
    def __next__(self):
        batch = self.src.take(self.pipe.batch_size)
        if not batch or (self.pipe.drop_last and len(batch) < self.pipe.batch_size):
            raise StopIteration
        return self.pipe.wrapper_class(batch)


@functional_datapipe("unbatch")
class UnBatcher(IterDataPipe):
    """Undoes ``batch``: yields the elements ``unbatch_level`` levels down (-1: all levels)."""

    def __init__(self, datapipe: IterDataPipe, unbatch_level: int = 1) -> None:
        check_pipe(datapipe, "datapipe")
        if unbatch_level < -1:
            raise ValueError(f"unbatch_level must be >= -1, got {unbatch_level}")
        self.source, self.unbatch_level = datapipe, unbatch_level

    def _iterator(self) -> PipeIterator:
        return _UnbatchIterator(self)


def _flatten(item, level: int, out: list) -> None:
    if level == 0:
        out.append(item)
    elif isinstance(item, (list, tuple)):
        for x in item:
            _flatten(x, level - 1, out)
    elif level < 0:
        out.append(item)
    else:
        raise IndexError(f"unbatch_level is deeper than the input nesting (at {item!r})")


class _UnbatchIterator(_FlatMapIterator):
    def __next__(self):
        while not self.pending:
            out: list = []
            _flatten(next(self.src), self.pipe.unbatch_level, out)
            self.pending = out[::-1]
        return self.pending.pop()


@functional_datapipe("sharding_filter")
class ShardingFilter(IterDataPipe):
    """Keeps item ``i`` when ``i % num_shards == shard_id``; the shard comes from the reading
    service (or from :meth:`apply_sharding` when iterated directly)."""

    def __init__(self, datapipe: IterDataPipe, sharding_group_filter=None) -> None:
        check_pipe(datapipe, "datapipe")
        self.source, self.sharding_group_filter = datapipe, sharding_group_filter
        self.num_of_instances, self.instance_id = 1, 0

    def is_shardable(self) -> bool:
        return True

    def apply_sharding(self, num_of_instances: int, instance_id: int, sharding_group=None) -> None:
        if not 0 <= instance_id < num_of_instances:
            raise ValueError(f"instance_id must be in [0, {num_of_instances}), got {instance_id}")
        self.num_of_instances, self.instance_id = num_of_instances, instance_id

    def _iterator(self) -> PipeIterator:
        return _ShardIterator(self)

    def __len__(self) -> int:
        n = len(self.source)
        return n // self.num_of_instances + (self.instance_id < n % self.num_of_instances)


class _ShardIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        if self.ctx.num_shards > 1:
            self.n, self.k = self.ctx.num_shards, self.ctx.shard_id
        else:
            self.n, self.k = pipe.num_of_instances, pipe.instance_id
        self.i = 0

    def __next__(self):
        if self.n == 1:
            item = next(self.src)
            self.i += 1
            return item
        while True:
            item = next(self.src)
            i, self.i = self.i, self.i + 1
            if i % self.n == self.k:
                return item

    def take(self, count: int) -> list:
        if count <= 0:
            return []
        # Pull exactly up to this shard's count-th next item, then keep every n-th one.
        first = self.i + (self.k - self.i) % self.n
        chunk = self.src.take(first + (count - 1) * self.n + 1 - self.i)
        start = first - self.i
        self.i += len(chunk)
        return chunk[start::self.n]

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict(), "i": self.i}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.i = state["i"]


@functional_datapipe("header")
class Header(IterDataPipe):
    """Yields at most ``limit`` items."""

    def __init__(self, source_datapipe: IterDataPipe, limit: int | None = 10) -> None:
        check_pipe(source_datapipe, "source_datapipe")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        self.source, self.limit = source_datapipe, limit

    def _iterator(self) -> PipeIterator:
        return _HeaderIterator(self)


class _HeaderIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.n = 0

    def __next__(self):
        if self.pipe.limit is not None and self.n >= self.pipe.limit:
            raise StopIteration
        item = next(self.src)
        self.n += 1
        return item

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict(), "n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.n = state["n"]


@functional_datapipe("cycle")
class Cycler(IterDataPipe):
    """Repeats the source ``count`` times (forever if None)."""

    def __init__(self, source_datapipe: IterDataPipe, count: int | None = None) -> None:
        check_pipe(source_datapipe, "source_datapipe")
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0 or None, got {count}")
        self.source, self.count = source_datapipe, count

    def _iterator(self) -> PipeIterator:
        return _CycleIterator(self)


class _CycleIterator(PipeIterator):
    def __init__(self, pipe) -> None:
        super().__init__()
        self.pipe, self.round = pipe, 0
        self.src = self.iter_source(pipe.source) if pipe.count != 0 else None

    def __next__(self):
        while self.src is not None:
            try:
                return next(self.src)
            except StopIteration:
                self.round += 1
                if self.pipe.count is not None and self.round >= self.pipe.count:
                    self.src = None
                else:
                    self.src = self.iter_source(self.pipe.source)
        raise StopIteration

    def state_dict(self) -> dict:
        return {"round": self.round, "src": None if self.src is None else self.src.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.round = state["round"]
        if state["src"] is None:
            self.src = None
        else:
            self.src = self.iter_source(self.pipe.source)
            self.src.load_state_dict(state["src"])


@functional_datapipe("collate")
class Collator(Mapper):
    """Collates each batch with ``collate_fn`` (default: torch's ``default_collate``)."""

    def __init__(self, datapipe: IterDataPipe, conversion: Callable | None = default_collate,
                 collate_fn: Callable | None = None) -> None:
        fn = collate_fn if collate_fn is not None else conversion
        if fn is None:
            fn = default_collate
        super().__init__(datapipe, fn)


@functional_datapipe("enumerate")
class Enumerator(IterDataPipe):
    """Yields ``(index, item)`` pairs, counting from ``starting_index``."""

    def __init__(self, source_datapipe: IterDataPipe, starting_index: int = 0) -> None:
        check_pipe(source_datapipe, "source_datapipe")
        self.source, self.starting_index = source_datapipe, starting_index

    def _iterator(self) -> PipeIterator:
        return _EnumerateIterator(self)

    def __len__(self) -> int:
        return len(self.source)


class _EnumerateIterator(_HeaderIterator):
    def __next__(self):
        item = next(self.src)
        self.n += 1
        return self.pipe.starting_index + self.n - 1, item


class _MultiSourceIterator(PipeIterator):
    """An iterator over several sources; the state holds each source's."""

    def __init__(self, pipe) -> None:
        super().__init__()
        self.pipe = pipe
        self.srcs = [self.iter_source(p) for p in pipe.datapipes]

    def state_dict(self) -> dict:
        return {"srcs": [s.state_dict() for s in self.srcs]}

    def load_state_dict(self, state: dict) -> None:
        for s, st in zip(self.srcs, state["srcs"]):
            s.load_state_dict(st)

    def close(self) -> None:
        for s in self.srcs:
            s.close()


def _check_pipes(datapipes, name: str) -> tuple:
    if not datapipes:
        raise ValueError(f"{name} expects at least one DataPipe")
    for i, dp in enumerate(datapipes):
        check_pipe(dp, f"datapipes[{i}]")
    return tuple(datapipes)


@functional_datapipe("concat")
class Concater(IterDataPipe):
    """Yields every item of the first pipe, then of the next, and so on."""

    def __init__(self, *datapipes: IterDataPipe) -> None:
        self.datapipes = _check_pipes(datapipes, "concat")

    def _iterator(self) -> PipeIterator:
        return _ConcatIterator(self)

    def __len__(self) -> int:
        return sum(len(dp) for dp in self.datapipes)


class _ConcatIterator(_MultiSourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.k = 0

    def __next__(self):
        while self.k < len(self.srcs):
            try:
                return next(self.srcs[self.k])
            except StopIteration:
                self.k += 1
        raise StopIteration

    def state_dict(self) -> dict:
        return {**super().state_dict(), "k": self.k}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.k = state["k"]


@functional_datapipe("zip")
class Zipper(IterDataPipe):
    """Yields tuples of one item from each pipe until the shortest is exhausted."""

    def __init__(self, *datapipes: IterDataPipe) -> None:
        self.datapipes = _check_pipes(datapipes, "zip")

    def _iterator(self) -> PipeIterator:
        return _ZipIterator(self)

    def __len__(self) -> int:
        return min(len(dp) for dp in self.datapipes)


class _ZipIterator(_MultiSourceIterator):
    def __next__(self):
        return tuple([next(s) for s in self.srcs])


@functional_datapipe("mux")
class Multiplexer(IterDataPipe):
    """Round-robin, one item from each pipe in turn, stopping at the first exhausted one."""

    longest = False

    def __init__(self, *datapipes: IterDataPipe) -> None:
        self.datapipes = _check_pipes(datapipes, "mux")

    def _iterator(self) -> PipeIterator:
        return _MuxIterator(self)


@functional_datapipe("mux_longest")
class MultiplexerLongest(Multiplexer):
    """Round-robin, one item from each pipe in turn, skipping exhausted pipes until all are."""

    longest = True


class _MuxIterator(_MultiSourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.k = 0
        self.done = [False] * len(self.srcs)

    def __next__(self):
        while not all(self.done):
            k = self.k
            self.k = (k + 1) % len(self.srcs)
            if self.done[k]:
                continue
            try:
                return next(self.srcs[k])
            except StopIteration:
                if not self.pipe.longest:
                    self.done = [True] * len(self.srcs)
                    break
                self.done[k] = True
        raise StopIteration

    def state_dict(self) -> dict:
        return {**super().state_dict(), "k": self.k, "done": list(self.done)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.k, self.done = state["k"], list(state["done"])
