"""Archive readers (tar, zip) that refuse members escaping the archive or too big to hold.

A member whose name is absolute, contains ``..``, or is a link or special file raises
:class:`UnsafeArchiveError` naming the archive and the member; a corrupt archive raises
RuntimeError. Members are read into memory and yielded as ``(archive/member, BytesIO)``, so
each is bounded: one above ``max_member_size`` bytes, or (zip) a large one that expands more
than ``max_compression_ratio`` times, raises :class:`ArchiveMemberTooLarge` before anything is
allocated, and reads stop at the bound even where an archive's header lies about a size.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator

from ember.data.datapipes.base import IterDataPipe, PipeIterator, check_pipe, functional_datapipe
from ember.data.datapipes.iter_files import PerFileIterator

__all__ = ["ArchiveMemberTooLarge", "TarArchiveLoader", "UnsafeArchiveError",
           "ZipArchiveLoader", "check_member_name"]

# Defaults: no member above 1 GiB; a zip member above RATIO_FLOOR bytes that expands more than
# 200x is a bomb (deflate's ceiling is about 1032x; ordinary data stays far below 200x).
MAX_MEMBER_SIZE = 1 << 30
MAX_COMPRESSION_RATIO = 200.0
RATIO_FLOOR = 16 << 20
_CHUNK = 1 << 20


class UnsafeArchiveError(RuntimeError):
    """An archive member would be written or read outside the archive."""


class ArchiveMemberTooLarge(UnsafeArchiveError):
    """An archive member is larger, or expands more, than the loader's bounds allow."""


def _check_bounds(max_member_size, max_compression_ratio) -> None:
    if max_member_size is not None and (not isinstance(max_member_size, int)
                                        or isinstance(max_member_size, bool)
                                        or max_member_size <= 0):
        raise ValueError(f"max_member_size must be a positive int (bytes) or None, "
                         f"got {max_member_size!r}")
    if max_compression_ratio is not None and not (
            isinstance(max_compression_ratio, (int, float))
            and not isinstance(max_compression_ratio, bool) and max_compression_ratio > 0):
        raise ValueError(f"max_compression_ratio must be a positive number or None, "
                         f"got {max_compression_ratio!r}")


def _too_large(archive: str, member: str, size: int, limit: int) -> ArchiveMemberTooLarge:
    return ArchiveMemberTooLarge(
        f"{archive}: member {member!r} holds {size} bytes, above max_member_size={limit} "
        "(raise max_member_size, or None for no bound, to read it)")


def _read_bounded(stream, archive: str, member: str, limit: int | None) -> bytes:
    """The member's bytes in chunks, stopping with an error once more than ``limit`` arrive."""
    buf = io.BytesIO()
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return buf.getvalue()
        buf.write(chunk)
        if limit is not None and buf.tell() > limit:
            raise _too_large(archive, member, buf.tell(), limit)


def check_member_name(archive: str, name: str) -> str:
    """Return the normalised member name, or raise if it escapes the archive."""
    if not name or "\x00" in name:
        raise UnsafeArchiveError(f"{archive}: member name {name!r} is empty or has a NUL byte")
    unified = name.replace("\\", "/")
    if unified.startswith("/") or (len(unified) > 1 and unified[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute path")
    if ".." in unified.split("/"):
        raise UnsafeArchiveError(f"{archive}: member {name!r} escapes the archive with '..'")
    return posixpath.normpath(unified)


@functional_datapipe("load_from_tar")
class TarArchiveLoader(IterDataPipe):
    """Yields ``(archive_path/member, BytesIO)`` for each regular file in each tar stream."""

    def __init__(self, datapipe: IterDataPipe, mode: str = "r:*", length: int = -1, *,
                 max_member_size: int | None = MAX_MEMBER_SIZE) -> None:
        check_pipe(datapipe, "datapipe")
        if not mode.startswith("r"):
            raise ValueError(f"mode must be a tarfile read mode ('r:*', 'r:gz', ...), got {mode!r}")
        _check_bounds(max_member_size, None)
        self.source, self.mode, self.length = datapipe, mode, length
        self.max_member_size = max_member_size

    def expand(self, path, stream) -> Iterator:
        try:
            with tarfile.open(fileobj=stream, mode=self.mode) as tar:
                for member in tar:
                    name = check_member_name(path, member.name)
                    if member.isdir():
                        continue
                    if member.issym() or member.islnk():
                        raise UnsafeArchiveError(f"{path}: member {member.name!r} is a link "
                                                 f"(to {member.linkname!r}); links are refused")
                    if not member.isfile():
                        raise UnsafeArchiveError(f"{path}: member {member.name!r} is a special "
                                                 "file (device or FIFO); refused")
                    limit = self.max_member_size
                    if limit is not None and member.size > limit:
                        raise _too_large(path, member.name, member.size, limit)
                    data = _read_bounded(tar.extractfile(member), path, member.name, limit)
                    yield os.path.join(path, name), io.BytesIO(data)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
            raise RuntimeError(f"corrupt tar archive {path!r}: {e}") from e

    def _iterator(self) -> PipeIterator:
        return PerFileIterator(self)


@functional_datapipe("load_from_zip")
class ZipArchiveLoader(IterDataPipe):
    """Yields ``(archive_path/member, BytesIO)`` for each regular file in each zip stream."""

    def __init__(self, datapipe: IterDataPipe, length: int = -1, *,
                 max_member_size: int | None = MAX_MEMBER_SIZE,
                 max_compression_ratio: float | None = MAX_COMPRESSION_RATIO) -> None:
        check_pipe(datapipe, "datapipe")
        _check_bounds(max_member_size, max_compression_ratio)
        self.source, self.length = datapipe, length
        self.max_member_size, self.max_compression_ratio = max_member_size, max_compression_ratio

    def _check_declared(self, path: str, info: zipfile.ZipInfo) -> None:
        limit, ratio = self.max_member_size, self.max_compression_ratio
        if limit is not None and info.file_size > limit:
            raise _too_large(path, info.filename, info.file_size, limit)
        if (ratio is not None and info.file_size > RATIO_FLOOR
                and info.file_size > ratio * max(info.compress_size, 1)):
            raise ArchiveMemberTooLarge(
                f"{path}: member {info.filename!r} expands {info.compress_size} -> "
                f"{info.file_size} bytes ({info.file_size / max(info.compress_size, 1):.0f}x), "
                f"above max_compression_ratio={ratio} (a zip bomb?); raise the bound, or None "
                "for no bound, to read it")

    def expand(self, path, stream) -> Iterator:
        try:
            with zipfile.ZipFile(stream) as zf:
                for info in zf.infolist():
                    name = check_member_name(path, info.filename)
                    if info.is_dir():
                        continue
                    mode = info.external_attr >> 16
                    if mode and stat.S_ISLNK(mode):
                        raise UnsafeArchiveError(f"{path}: member {info.filename!r} is a "
                                                 "symbolic link; links are refused")
                    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                        raise UnsafeArchiveError(f"{path}: member {info.filename!r} is a "
                                                 "special file; refused")
                    self._check_declared(path, info)
                    with zf.open(info) as member:
                        data = _read_bounded(member, path, info.filename, self.max_member_size)
                    yield os.path.join(path, name), io.BytesIO(data)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error) as e:
            raise RuntimeError(f"corrupt zip archive {path!r}: {e}") from e

    def _iterator(self) -> PipeIterator:
        return PerFileIterator(self)
