"""Random pipes: buffered shuffle, in-batch shuffle, bucketbatch, random_split.

Each new iterator takes its seed from the iteration context (see ``context.seed_for``), so a
reading service decides which pipes share seeds across workers; the RNG state is part of the
iterator's state_dict.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from ember.data.datapipes.base import IterDataPipe, PipeIterator, check_pipe, functional_datapipe
from ember.data.datapipes.context import derive_seed, seed_for
from ember.data.datapipes.iter_basic import Batcher, UnBatcher, _SourceIterator

__all__ = ["BucketBatcher", "InBatchShuffler", "RandomSplitter", "Shuffler"]


class _RandomPipe(IterDataPipe):
    """A pipe whose iterators draw random numbers; ``set_seed`` pins its seed."""

    is_random = True
    _seed: int | None = None

    def set_seed(self, seed: int) -> _RandomPipe:
        self._seed = int(seed)
        return self


@functional_datapipe("shuffle")
class Shuffler(_RandomPipe):
    """Buffered shuffle: keeps ``buffer_size`` items and yields a random one as each arrives."""

    def __init__(self, datapipe: IterDataPipe, *, buffer_size: int = 10000,
                 unbatch_level: int = 0) -> None:
        check_pipe(datapipe, "datapipe")
        if not isinstance(buffer_size, int) or buffer_size <= 0:
            raise ValueError(f"buffer_size must be a positive int, got {buffer_size!r}")
        self.source = datapipe if unbatch_level == 0 else UnBatcher(datapipe, unbatch_level)
        self.buffer_size = buffer_size
        self._enabled = True

    def set_shuffle(self, shuffle: bool = True) -> Shuffler:
        self._enabled = bool(shuffle)
        return self

    def _iterator(self) -> PipeIterator:
        return _ShuffleIterator(self)

    def __len__(self) -> int:
        return len(self.source)


class _ShuffleIterator(_SourceIterator):
    def __init__(self, pipe: Shuffler) -> None:
        super().__init__(pipe)
        self.rng = random.Random(seed_for(pipe, self.ctx))
        self.buffer: list = []
        self.src_done = False

    def __next__(self):
        if not self.pipe._enabled:
            return next(self.src)
        buf = self.buffer
        while not self.src_done:
            try:
                item = next(self.src)
            except StopIteration:
                self.src_done = True
                break
            if len(buf) < self.pipe.buffer_size:
                buf.append(item)
                continue
            j = self.rng.randrange(len(buf))
            out, buf[j] = buf[j], item
            return out
        if not buf:
            raise StopIteration
        j = self.rng.randrange(len(buf))
        buf[j], buf[-1] = buf[-1], buf[j]
        return buf.pop()

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict(), "buffer": list(self.buffer),
                "rng": self.rng.getstate(), "src_done": self.src_done}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.buffer = list(state["buffer"])
        self.rng.setstate(state["rng"])
        self.src_done = state["src_done"]


@functional_datapipe("in_batch_shuffle")
class InBatchShuffler(_RandomPipe):
    """Shuffles the items inside each batch."""

    def __init__(self, datapipe: IterDataPipe) -> None:
        check_pipe(datapipe, "datapipe")
        self.source = datapipe

    def _iterator(self) -> PipeIterator:
        return _InBatchIterator(self)


class _InBatchIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.rng = random.Random(seed_for(pipe, self.ctx))

    def __next__(self):
        batch = next(self.src)
        items = list(batch)
        self.rng.shuffle(items)
        return type(batch)(items) if isinstance(batch, (list, tuple)) else items

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict(), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.rng.setstate(state["rng"])


@functional_datapipe("bucketbatch")
class BucketBatcher(IterDataPipe):
    """Batches of similar items: shuffle a pool of ``batch_size * batch_num * bucket_num``,
    sort each bucket of ``batch_size * batch_num`` with ``sort_key``, batch, shuffle batches."""

    def __init__(self, datapipe: IterDataPipe, batch_size: int, drop_last: bool = False,
                 batch_num: int = 100, bucket_num: int = 1, sort_key: Callable | None = None,
                 use_in_batch_shuffle: bool = True) -> None:
        check_pipe(datapipe, "datapipe")
        for name, v in (("batch_size", batch_size), ("batch_num", batch_num),
                        ("bucket_num", bucket_num)):
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        bucket = batch_size * batch_num
        pool = bucket * bucket_num
        dp = datapipe
        self._randoms: list[_RandomPipe] = []
        if bucket_num > 1 or sort_key is None:
            dp = self._random(UnBatcher(InBatchShuffler(Batcher(dp, pool)))
                              if use_in_batch_shuffle else Shuffler(dp, buffer_size=pool))
        if sort_key is not None:
            dp = UnBatcher(Batcher(dp, bucket).map(sort_key))
        dp = Batcher(dp, batch_size, drop_last=drop_last)
        if sort_key is not None:
            dp = self._random(UnBatcher(InBatchShuffler(Batcher(dp, bucket_num)))
                              if use_in_batch_shuffle else Shuffler(dp, buffer_size=bucket))
        self.source = dp

    def _random(self, dp: IterDataPipe) -> IterDataPipe:
        self._randoms.append(dp if isinstance(dp, _RandomPipe) else dp.source)
        return dp

    def set_seed(self, seed: int) -> BucketBatcher:
        for i, dp in enumerate(self._randoms):
            dp.set_seed(derive_seed(seed, i))
        return self

    def _iterator(self) -> PipeIterator:
        return self.source._iterator()


@functional_datapipe("random_split")
class RandomSplitter(IterDataPipe):
    """Splits the source into ``weights.keys()`` parts of exactly proportional sizes, fixed by
    ``seed`` (the same split every epoch). Returns a dict of pipes, or the ``target`` one."""

    def __new__(cls, source_datapipe: IterDataPipe, weights: dict, seed: int,
                total_length: int | None = None, target=None):
        check_pipe(source_datapipe, "source_datapipe")
        if not isinstance(weights, dict) or not weights:
            raise ValueError("weights must be a non-empty dict of split name -> weight")
        if any(not isinstance(w, (int, float)) or w < 0 for w in weights.values()):
            raise ValueError(f"weights must be non-negative numbers, got {weights!r}")
        if total_length is None:
            try:
                total_length = len(source_datapipe)
            except TypeError as e:
                raise ValueError("random_split needs total_length for a source without "
                                 "len()") from e
        splitter = _SplitLabels(list(weights), list(weights.values()), int(seed), total_length)
        children = {k: _SplitChild(source_datapipe, splitter, i)
                    for i, k in enumerate(weights)}
        if target is not None:
            if target not in children:
                raise ValueError(f"target must be one of {list(weights)}, got {target!r}")
            return children[target]
        return children


class _SplitLabels:
    def __init__(self, keys: list, weights: list, seed: int, total_length: int) -> None:
        total = float(sum(weights))
        if total <= 0:
            raise ValueError("weights must not all be zero")
        exact = [w / total * total_length for w in weights]
        counts = [int(x) for x in exact]
        by_rest = sorted(range(len(keys)), key=lambda i: exact[i] - counts[i], reverse=True)
        for i in by_rest[: total_length - sum(counts)]:
            counts[i] += 1
        self.keys, self.counts, self.seed, self.total_length = keys, counts, seed, total_length
        self._labels: np.ndarray | None = None

    def override_seed(self, seed: int) -> None:
        self.seed, self._labels = int(seed), None

    @property
    def labels(self) -> np.ndarray:
        if self._labels is None:
            labels = np.repeat(np.arange(len(self.counts), dtype=np.int32), self.counts)
            self._labels = np.random.default_rng(self.seed).permutation(labels)
        return self._labels

    def __getstate__(self):
        return {**self.__dict__, "_labels": None}


class _SplitChild(IterDataPipe):
    def __init__(self, source: IterDataPipe, splitter: _SplitLabels, index: int) -> None:
        self.source, self.splitter, self.index = source, splitter, index

    def override_seed(self, seed: int) -> _SplitChild:
        self.splitter.override_seed(seed)
        return self

    def _iterator(self) -> PipeIterator:
        return _SplitIterator(self)

    def __len__(self) -> int:
        return self.splitter.counts[self.index]


class _SplitIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.i = 0

    def __next__(self):
        labels = self.pipe.splitter.labels
        while True:
            item = next(self.src)
            i, self.i = self.i, self.i + 1
            if i >= len(labels):
                raise ValueError(f"random_split: the source has more than total_length="
                                 f"{len(labels)} items")
            if labels[i] == self.pipe.index:
                return item

    def state_dict(self) -> dict:
        return {"src": self.src.state_dict(), "i": self.i}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.i = state["i"]
