"""Archive readers (tar, zip) that refuse members escaping the archive.

A member whose name is absolute, contains ``..``, or is a link or special file raises
:class:`UnsafeArchiveError` naming the archive and the member; a corrupt archive raises
RuntimeError. Members are read into memory and yielded as ``(archive/member, BytesIO)``.
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

__all__ = ["TarArchiveLoader", "UnsafeArchiveError", "ZipArchiveLoader", "check_member_name"]


class UnsafeArchiveError(RuntimeError):
    """An archive member would be written or read outside the archive."""


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

    def __init__(self, datapipe: IterDataPipe, mode: str = "r:*", length: int = -1) -> None:
        check_pipe(datapipe, "datapipe")
        if not mode.startswith("r"):
            raise ValueError(f"mode must be a tarfile read mode ('r:*', 'r:gz', ...), got {mode!r}")
        self.source, self.mode, self.length = datapipe, mode, length

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
                    f = tar.extractfile(member)
                    yield os.path.join(path, name), io.BytesIO(f.read())
        except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
            raise RuntimeError(f"corrupt tar archive {path!r}: {e}") from e

    def _iterator(self) -> PipeIterator:
        return PerFileIterator(self)


@functional_datapipe("load_from_zip")
class ZipArchiveLoader(IterDataPipe):
    """Yields ``(archive_path/member, BytesIO)`` for each regular file in each zip stream."""

    def __init__(self, datapipe: IterDataPipe, length: int = -1) -> None:
        check_pipe(datapipe, "datapipe")
        self.source, self.length = datapipe, length

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
                    yield os.path.join(path, name), io.BytesIO(zf.read(info))
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error) as e:
            raise RuntimeError(f"corrupt zip archive {path!r}: {e}") from e

    def _iterator(self) -> PipeIterator:
        return PerFileIterator(self)
