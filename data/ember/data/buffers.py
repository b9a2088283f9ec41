"""BufferList: a read-only list of str / bytes / picklable objects packed in numpy buffers.

A Python list of a million strings is a million refcounted objects; every worker that reads
them after ``fork`` touches their refcounts and so copies their pages (copy-on-read), growing
its RSS by the whole list. A BufferList keeps one bytes buffer plus an offsets array, so
reading an item creates a fresh object and leaves the shared pages untouched.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["BufferList"]

_KINDS = ("str", "bytes", "pickle")


class BufferList(Sequence):
    """An immutable sequence stored as ``data`` (uint8) + ``offsets`` (int64) numpy arrays."""

    def __init__(self, items: Iterable, kind: str | None = None) -> None:
        items = list(items)
        if kind is None:
            if all(isinstance(x, str) for x in items):
                kind = "str"
            elif all(isinstance(x, (bytes, bytearray)) for x in items):
                kind = "bytes"
            else:
                kind = "pickle"
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        if kind == "str":
            encoded = [x.encode("utf-8", "surrogatepass") for x in items]
        elif kind == "bytes":
            encoded = [bytes(x) for x in items]
        else:
            encoded = [pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL) for x in items]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        self.kind = kind

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _get(self, i: int):
        raw = self.data[self.offsets[i]:self.offsets[i + 1]].tobytes()
        if self.kind == "str":
            return raw.decode("utf-8", "surrogatepass")
        return raw if self.kind == "bytes" else pickle.loads(raw)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"BufferList index {index} out of range for length {n}")
        return self._get(index)

    def __deepcopy__(self, memo) -> BufferList:
        return self  # immutable: sharing is safe and keeps workers' memory shared

    def __repr__(self) -> str:
        return f"BufferList(len={len(self)}, kind={self.kind!r}, nbytes={self.data.nbytes})"
