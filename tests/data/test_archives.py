"""Archive readers: contents match tarfile/zipfile, escaping members and corrupt files refused."""

import io
import stat
import tarfile
import zipfile

import pytest

from ember.data.datapipes.iter import FileLister, FileOpener, UnsafeArchiveError


def _tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                info.type = {"sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                             "fifo": tarfile.FIFOTYPE, "dir": tarfile.DIRTYPE}[kind]
                info.linkname = payload.decode()
                tar.addfile(info)
    return str(path)


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, payload, mode in members:
            info = zipfile.ZipInfo(name)
            if mode is not None:
                info.external_attr = mode << 16
            zf.writestr(info, payload)
    return str(path)


def _read(path, loader):
    dp = FileOpener(FileLister(path), mode="b")
    dp = dp.load_from_tar() if loader == "tar" else dp.load_from_zip()
    return [(p, s.read()) for p, s in dp]


def test_tar_contents_match_tarfile(tmp_path):
    path = _tar(tmp_path / "a.tar.gz", [("d", "dir", b""), ("d/x.txt", "file", b"hello"),
                                       ("y.bin", "file", b"\x00\x01")])
    got = _read(path, "tar")
    with tarfile.open(path) as ref:
        expected = [(f"{path}/{m.name}", ref.extractfile(m).read()) for m in ref if m.isfile()]
    assert got == expected


def test_zip_contents_match_zipfile(tmp_path):
    path = _zip(tmp_path / "a.zip", [("d/x.txt", b"hi", None), ("z", b"zz", 0o100644)])
    with zipfile.ZipFile(path) as ref:
        expected = [(f"{path}/{n}", ref.read(n)) for n in ref.namelist()]
    assert _read(path, "zip") == expected


@pytest.mark.parametrize("member,match", [
    (("../evil.txt", "file", b"x"), "'..'"),
    (("a/../../evil.txt", "file", b"x"), "'..'"),
    (("/etc/evil", "file", b"x"), "absolute"),
    (("link", "sym", b"/etc/passwd"), "link"),
    (("hard", "hard", b"../outside"), "link"),
    (("pipe", "fifo", b""), "special file"),
])
def test_tar_refuses_escaping_members(tmp_path, member, match):
    path = _tar(tmp_path / "bad.tar.gz", [("ok.txt", "file", b"fine"), member])
    with pytest.raises(UnsafeArchiveError, match=match):
        _read(path, "tar")


@pytest.mark.parametrize("name,mode,match", [
    ("../evil", None, "'..'"),
    ("/abs/evil", None, "absolute"),
    ("C:/evil", None, "absolute"),
    ("link", stat.S_IFLNK | 0o777, "symbolic link"),
])
def test_zip_refuses_escaping_members(tmp_path, name, mode, match):
    path = _zip(tmp_path / "bad.zip", [(name, b"x", mode)])
    with pytest.raises(UnsafeArchiveError, match=match):
        _read(path, "zip")


@pytest.mark.parametrize("loader", ["tar", "zip"])
def test_corrupt_archives_raise_runtime_error(tmp_path, loader):
    good = (_tar(tmp_path / "g.tar.gz", [("x", "file", b"a" * 1000)]) if loader == "tar"
            else _zip(tmp_path / "g.zip", [("x", b"a" * 1000, None)]))
    data = open(good, "rb").read()
    bad = tmp_path / f"bad.{loader}"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError, match=f"corrupt {loader}"):
        _read(str(bad), loader)
    bad.write_bytes(b"not an archive at all" * 10)
    with pytest.raises(RuntimeError, match=f"corrupt {loader}"):
        _read(str(bad), loader)


def test_archive_reader_resumes_mid_archive(tmp_path, resume):
    path = _tar(tmp_path / "r.tar", [(f"m{i}", "file", bytes([i]) * 3) for i in range(5)])
    make = lambda: FileOpener(FileLister(path), mode="b").load_from_tar().map(
        lambda ps: (ps[0], ps[1].read()))
    rest, restored = resume(make, 2)
    assert rest == restored and rest[0][0].endswith("m2")
