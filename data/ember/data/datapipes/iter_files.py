"""File pipes: list, open, and per-file readers (lines, CSV rows, JSON documents).

Readers that expand one file into many items checkpoint as (source state, file, items
consumed); a restore reopens that file (by path, or from the bytes of an in-memory stream)
and skips the consumed items - a replay bounded by one file.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import os
from collections.abc import Iterator, Sequence

from ember.data.datapipes.base import IterDataPipe, PipeIterator, check_pipe, functional_datapipe
from ember.data.datapipes.iter_basic import _IndexIterator, _SourceIterator

__all__ = ["CSVParser", "FileLister", "FileOpener", "JsonParser", "LineReader"]


class FileLister(IterDataPipe):
    """Paths of the files under ``root`` (a directory, a file, or a list of them) matching
    ``masks`` (glob patterns), sorted."""

    def __init__(self, root: str | Sequence[str] = ".", masks: str | list[str] = "", *,
                 recursive: bool = False, abspath: bool = False,
                 non_deterministic: bool = False, length: int = -1) -> None:
        roots = [root] if isinstance(root, (str, os.PathLike)) else list(root)
        for r in roots:
            if not isinstance(r, (str, os.PathLike)):
                raise TypeError(f"root must be a path or a list of paths, got {type(r).__name__}")
        self.roots, self.recursive, self.abspath = roots, recursive, abspath
        self.masks = [masks] if isinstance(masks, str) else list(masks)
        self.non_deterministic, self.length = non_deterministic, length

    def _match(self, name: str) -> bool:
        masks = [m for m in self.masks if m]
        return not masks or any(fnmatch.fnmatch(name, m) for m in masks)

    def list_files(self) -> list[str]:
        out: list[str] = []
        for root in map(os.fspath, self.roots):
            if os.path.isfile(root):
                found = [root] if self._match(os.path.basename(root)) else []
            elif os.path.isdir(root):
                found = []
                for dirpath, dirnames, filenames in os.walk(root):
                    dirnames.sort()
                    found += [os.path.join(dirpath, f) for f in sorted(filenames)
                              if self._match(f)]
                    if not self.recursive:
                        break
            else:
                raise FileNotFoundError(f"FileLister root {root!r} does not exist")
            out += [os.path.abspath(p) for p in found] if self.abspath else found
        return out

    def _iterator(self) -> PipeIterator:
        return _IndexIterator(self.list_files())

    def __len__(self) -> int:
        if self.length == -1:
            raise TypeError("FileLister has no len() unless length is given")
        return self.length


_OPEN_MODES = ("r", "rb", "rt", "b", "t")


@functional_datapipe("open_files")
class FileOpener(IterDataPipe):
    """Opens each path: yields ``(path, file object)``."""

    def __init__(self, datapipe: IterDataPipe, mode: str = "r", encoding: str | None = None,
                 length: int = -1) -> None:
        check_pipe(datapipe, "datapipe")
        if mode not in _OPEN_MODES:
            raise ValueError(f"mode must be one of {_OPEN_MODES}, got {mode!r}")
        if mode == "b":
            mode = "rb"
        if mode == "t":
            mode = "r"
        if "b" in mode and encoding is not None:
            raise ValueError("encoding must be None in binary mode")
        self.source, self.mode, self.encoding, self.length = datapipe, mode, encoding, length

    def _iterator(self) -> PipeIterator:
        return _OpenIterator(self)

    def __len__(self) -> int:
        if self.length == -1:
            raise TypeError("FileOpener has no len() unless length is given")
        return self.length


class _OpenIterator(_SourceIterator):
    def __next__(self):
        path = next(self.src)
        return path, open(path, self.pipe.mode, encoding=self.pipe.encoding)


def _reopen_info(path, stream) -> dict:
    """How to get this stream again after a restore."""
    if isinstance(stream, io.BytesIO):
        return {"bytes": stream.getvalue()}
    if isinstance(stream, io.StringIO):
        return {"text": stream.getvalue()}
    name = getattr(stream, "name", path)
    if isinstance(name, str) and os.path.isfile(name):
        mode = getattr(stream, "mode", "rb")
        return {"file": name, "binary": "b" in mode,
                "encoding": getattr(stream, "encoding", None)}
    raise RuntimeError(f"cannot checkpoint in the middle of {path!r}: its stream "
                       f"({type(stream).__name__}) cannot be reopened")


def _reopen(info: dict):
    if "bytes" in info:
        return io.BytesIO(info["bytes"])
    if "text" in info:
        return io.StringIO(info["text"])
    if info["binary"]:
        return open(info["file"], "rb")
    return open(info["file"], encoding=info["encoding"])


class PerFileIterator(_SourceIterator):
    """Expands each ``(path, stream)`` from the source with ``pipe.expand(path, stream)``."""

    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.cur: Iterator | None = None
        self.cur_path = None
        self.cur_info: dict | None = None
        self.count = 0

    def _open(self, path, stream) -> None:
        self.cur_path, self.count = path, 0
        self.cur_info = {"stream": stream}
        self.cur = iter(self.pipe.expand(path, stream))

    def __next__(self):
        while True:
            if self.cur is not None:
                try:
                    item = next(self.cur)
                    self.count += 1
                    return item
                except StopIteration:
                    self._finish()
            item = next(self.src)
            if not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError(f"{type(self.pipe).__name__} expects (path, stream) pairs, got "
                                f"{type(item).__name__}")
            self._open(*item)

    def _finish(self) -> None:
        stream = self.cur_info.get("stream") if self.cur_info else None
        if stream is not None and hasattr(stream, "close"):
            stream.close()
        self.cur, self.cur_info = None, None

    def state_dict(self) -> dict:
        cur = None
        if self.cur is not None:
            stream = self.cur_info["stream"]
            cur = {"path": self.cur_path, "count": self.count,
                   "reopen": _reopen_info(self.cur_path, stream)}
        return {"src": self.src.state_dict(), "cur": cur}

    def load_state_dict(self, state: dict) -> None:
        self.src.load_state_dict(state["src"])
        self.cur = None
        cur = state["cur"]
        if cur is not None:
            self._open(cur["path"], _reopen(cur["reopen"]))
            for _ in range(cur["count"]):
                next(self.cur)
            self.count = cur["count"]

    def close(self) -> None:
        if self.cur is not None:
            self._finish()
        super().close()


def _text_lines(stream, decode: bool, encoding: str, errors: str) -> Iterator:
    for line in stream:
        if decode and isinstance(line, bytes):
            line = line.decode(encoding, errors)
        yield line


@functional_datapipe("readlines")
class LineReader(IterDataPipe):
    """Yields ``(path, line)`` (or ``line``) for each line of each ``(path, stream)``."""

    def __init__(self, source_datapipe: IterDataPipe, *, skip_lines: int = 0,
                 strip_newline: bool = True, decode: bool = False, encoding: str = "utf-8",
                 errors: str = "ignore", return_path: bool = True) -> None:
        check_pipe(source_datapipe, "source_datapipe")
        self.source, self.skip_lines = source_datapipe, skip_lines
        self.strip_newline = strip_newline
        self.decode, self.encoding, self.errors = decode, encoding, errors
        self.return_path = return_path

    def expand(self, path, stream) -> Iterator:
        for i, line in enumerate(_text_lines(stream, self.decode, self.encoding, self.errors)):
            if i < self.skip_lines:
                continue
            if self.strip_newline:
                line = line.rstrip(b"\r\n" if isinstance(line, bytes) else "\r\n")
            yield (path, line) if self.return_path else line

    def _iterator(self) -> PipeIterator:
        return PerFileIterator(self)


@functional_datapipe("parse_csv")
class CSVParser(IterDataPipe):
    """Yields each CSV row (a list, or tuple with ``as_tuple``) of each ``(path, stream)``;
    ``fmtparams`` go to :func:`csv.reader`."""

    def __init__(self, source_datapipe: IterDataPipe, *, skip_lines: int = 0, decode: bool = True,
                 encoding: str = "utf-8", errors: str = "ignore", return_path: bool = False,
                 as_tuple: bool = False, **fmtparams) -> None:
        check_pipe(source_datapipe, "source_datapipe")
        self.source, self.skip_lines, self.decode = source_datapipe, skip_lines, decode
        self.encoding, self.errors, self.return_path = encoding, errors, return_path
        self.as_tuple, self.fmtparams = as_tuple, fmtparams

    def expand(self, path, stream) -> Iterator:
        lines = _text_lines(stream, self.decode, self.encoding, self.errors)
        for _ in range(self.skip_lines):
            next(lines, None)
        try:
            for row in csv.reader(lines, **self.fmtparams):
                row = tuple(row) if self.as_tuple else row
                yield (path, row) if self.return_path else row
        except csv.Error as e:
            raise RuntimeError(f"malformed CSV in {path!r}: {e}") from e

    def _iterator(self) -> PipeIterator:
        return PerFileIterator(self)


@functional_datapipe("parse_json_files")
class JsonParser(IterDataPipe):
    """Yields ``(path, parsed JSON)`` for each ``(path, stream)``."""

    def __init__(self, source_datapipe: IterDataPipe, **kwargs) -> None:
        check_pipe(source_datapipe, "source_datapipe")
        self.source, self.kwargs = source_datapipe, kwargs

    def _iterator(self) -> PipeIterator:
        return _JsonIterator(self)


class _JsonIterator(_SourceIterator):
    def __next__(self):
        path, stream = next(self.src)
        try:
            data = stream.read()
        finally:
            stream.close()
        try:
            return path, json.loads(data, **self.pipe.kwargs)
        except (ValueError, UnicodeDecodeError) as e:
            raise RuntimeError(f"invalid JSON in {path!r}: {e}") from e
