"""Caches: in memory (after the first full epoch) and on disk (files written once)."""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
from collections import deque
from collections.abc import Callable

from ember.data.datapipes.base import IterDataPipe, PipeIterator, check_pipe, functional_datapipe
from ember.data.datapipes.iter_basic import _SourceIterator

__all__ = ["EndOnDiskCacheHolder", "InMemoryCacheHolder", "OnDiskCacheHolder"]


def _nbytes(item) -> int:
    if hasattr(item, "nbytes"):
        return int(item.nbytes)
    if isinstance(item, (list, tuple)):
        return sys.getsizeof(item) + sum(_nbytes(x) for x in item)
    if isinstance(item, dict):
        return sys.getsizeof(item) + sum(_nbytes(v) for v in item.values())
    return sys.getsizeof(item)


@functional_datapipe("in_memory_cache")
class InMemoryCacheHolder(IterDataPipe):
    """Keeps the items of the first complete epoch (up to ``size`` MB) and replays them from
    memory afterwards. One cache per shard; a cache over the limit is dropped."""

    def __init__(self, source_dp: IterDataPipe, size: int | None = None) -> None:
        check_pipe(source_dp, "source_dp")
        if size is not None and size <= 0:
            raise ValueError(f"size must be a positive number of megabytes, got {size}")
        self.source, self.size = source_dp, size
        self._caches: dict = {}

    def __getstate__(self):
        return {**self.__dict__, "_caches": {}}

    def _iterator(self) -> PipeIterator:
        return _CacheIterator(self)


class _CacheIterator(PipeIterator):
    def __init__(self, pipe) -> None:
        super().__init__()
        self.pipe = pipe
        self.key = (self.ctx.num_shards, self.ctx.shard_id)
        self.cache = pipe._caches.get(self.key)
        self.i = 0
        self.src = None if self.cache is not None else self.iter_source(pipe.source)
        self.filling: list | None = [] if self.src is not None else None
        self.bytes = 0

    def __next__(self):
        if self.cache is not None:
            if self.i >= len(self.cache):
                raise StopIteration
            self.i += 1
            return self.cache[self.i - 1]
        try:
            item = next(self.src)
        except StopIteration:
            if self.filling is not None:
                self.pipe._caches[self.key] = self.filling
                self.filling = None
            raise
        self.i += 1
        if self.filling is not None:
            self.filling.append(item)
            self.bytes += _nbytes(item)
            if self.pipe.size is not None and self.bytes > self.pipe.size * 2**20:
                self.filling = None
        return item

    def state_dict(self) -> dict:
        if self.cache is not None:
            return {"mode": "cache", "i": self.i}
        return {"mode": "source", "src": self.src.state_dict(), "i": self.i}

    def load_state_dict(self, state: dict) -> None:
        self.i, self.filling = state["i"], None
        if state["mode"] == "source":
            self.cache = None
            self.src = self.iter_source(self.pipe.source)
            self.src.load_state_dict(state["src"])
        elif self.pipe._caches.get(self.key) is not None:
            self.cache = self.pipe._caches[self.key]
        else:
            # This process never filled the cache: replay the source up to the same position.
            self.cache, self.src = None, self.iter_source(self.pipe.source)
            for _ in range(self.i):
                next(self.src)


@functional_datapipe("on_disk_cache")
class OnDiskCacheHolder(IterDataPipe):
    """Start of an on-disk cached section: items whose ``filepath_fn(item)`` file exists (and
    matches ``hash_dict`` / ``extra_check_fn``) skip the pipes up to ``end_caching``.

    The section must map each item to exactly one ``(key, data)`` (e.g. a download); a
    section that expands items (archives) raises a RuntimeError saying so."""

    def __init__(self, source_datapipe: IterDataPipe, filepath_fn: Callable | None = None,
                 hash_dict: dict | None = None, hash_type: str = "sha256",
                 extra_check_fn: Callable | None = None) -> None:
        check_pipe(source_datapipe, "source_datapipe")
        if hash_type not in ("sha256", "md5"):
            raise ValueError(f"hash_type must be 'sha256' or 'md5', got {hash_type!r}")
        self.source, self.filepath_fn, self.hash_dict = source_datapipe, filepath_fn, hash_dict
        self.hash_type, self.extra_check_fn = hash_type, extra_check_fn

    def cache_path(self, item) -> str:
        return self.filepath_fn(item) if self.filepath_fn is not None else item

    def is_cached(self, path: str) -> bool:
        if not os.path.isfile(path):
            return False
        if self.hash_dict is not None and path in self.hash_dict:
            h = hashlib.new(self.hash_type)
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            if h.hexdigest() != self.hash_dict[path]:
                return False
        return self.extra_check_fn is None or bool(self.extra_check_fn(path))

    def _iterator(self) -> PipeIterator:
        return _FeedIterator(self)


class _FeedIterator(PipeIterator):
    """What the pipes inside the cached section read: items handed over by end_caching."""

    def __init__(self, holder) -> None:
        super().__init__()
        self.feed = self.ctx.shared.setdefault(("odc", id(holder)), deque())

    def __next__(self):
        if not self.feed:
            raise RuntimeError("on_disk_cache: the pipes between on_disk_cache() and "
                               "end_caching() must yield exactly one item per input item")
        return self.feed.popleft()


def _find_holder(dp) -> OnDiskCacheHolder:
    from ember.data.graph import list_dps, traverse_dps

    for node in list_dps(traverse_dps(dp)):
        if isinstance(node, OnDiskCacheHolder):
            return node
    raise ValueError("end_caching() needs an on_disk_cache() upstream")


@functional_datapipe("end_caching")
class EndOnDiskCacheHolder(IterDataPipe):
    """End of an on-disk cached section: writes each ``(key, data)`` the section yields to
    ``filepath_fn(key)`` (or the holder's path with ``same_filepath_fn``), yields file paths."""

    def __init__(self, datapipe: IterDataPipe, mode: str = "wb",
                 filepath_fn: Callable | None = None, *, same_filepath_fn: bool = False,
                 skip_read: bool = False, timeout: int = 300) -> None:
        check_pipe(datapipe, "datapipe")
        if mode not in ("w", "wb", "wt"):
            raise ValueError(f"mode must be 'w', 'wt' or 'wb', got {mode!r}")
        if same_filepath_fn and filepath_fn is not None:
            raise ValueError("give filepath_fn or same_filepath_fn=True, not both")
        self.source, self.mode, self.filepath_fn = datapipe, mode, filepath_fn
        self.same_filepath_fn, self.skip_read = same_filepath_fn, skip_read
        self.holder = _find_holder(datapipe)

    def _iterator(self) -> PipeIterator:
        return _EndCacheIterator(self)


def _write_atomic(path: str, data, mode: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if isinstance(data, io.IOBase) or hasattr(data, "read"):
        data = data.read()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".part")
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class _EndCacheIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        PipeIterator.__init__(self)
        self.pipe = pipe
        self.items = self.iter_source(pipe.holder.source)
        self.src = self.iter_source(pipe.source)
        self.feed = self.ctx.shared.setdefault(("odc", id(pipe.holder)), deque())

    def __next__(self):
        holder = self.pipe.holder
        item = next(self.items)
        path = holder.cache_path(item)
        if holder.is_cached(path):
            return path
        self.feed.append(item)
        try:
            out = next(self.src)
        except StopIteration:
            raise RuntimeError("on_disk_cache: the cached section yielded nothing for "
                               f"{item!r}") from None
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"end_caching expects (key, data) pairs, got {type(out).__name__}")
        key, data = out
        if self.pipe.same_filepath_fn:
            target = path
        elif self.pipe.filepath_fn is not None:
            target = self.pipe.filepath_fn(key)
        else:
            target = key
        if not self.pipe.skip_read:
            _write_atomic(target, data, self.pipe.mode)
        return target

    def state_dict(self) -> dict:
        return {"items": self.items.state_dict(), "src": self.src.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.items.load_state_dict(state["items"])
        self.src.load_state_dict(state["src"])
