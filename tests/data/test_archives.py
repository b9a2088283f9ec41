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


# --- bounded members ------------------------------------------------------------------------

def _zip_of_zeros(path, size, name="zeros.bin"):
    """A deflated member of ``size`` zero bytes, written in chunks (never held whole)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open(name, "w", force_zip64=size >= 1 << 31) as f:
            chunk = bytes(1 << 20)
            for _ in range(size >> 20):
                f.write(chunk)
    return str(path)


def _peak_bytes(fn) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_zip_bomb_refused_by_ratio_before_allocating(tmp_path):
    from ember.data.datapipes.iter import ArchiveMemberTooLarge

    path = _zip_of_zeros(tmp_path / "bomb.zip", 64 << 20)
    assert (tmp_path / "bomb.zip").stat().st_size < 1 << 20

    def read():
        with pytest.raises(ArchiveMemberTooLarge, match=r"'zeros.bin' expands .*zip bomb"):
            _read(path, "zip")
    assert _peak_bytes(read) < 8 << 20
    dp = FileOpener(FileLister(path), mode="b").load_from_zip(max_compression_ratio=None)
    assert [len(s.read()) for _, s in dp] == [64 << 20]  # the bound can be lifted


@pytest.mark.parametrize("loader", ["tar", "zip"])
def test_member_above_max_member_size_is_refused(tmp_path, loader):
    from ember.data.datapipes.iter import ArchiveMemberTooLarge

    payload = bytes(range(256)) * (3 << 12)  # 3 MiB
    path = (_tar(tmp_path / "a.tar.gz", [("big.bin", "file", payload)]) if loader == "tar"
            else _zip(tmp_path / "a.zip", [("big.bin", payload, None)]))
    dp = FileOpener(FileLister(path), mode="b")
    make = (lambda **kw: dp.load_from_tar(**kw)) if loader == "tar" else (
        lambda **kw: dp.load_from_zip(**kw))
    with pytest.raises(ArchiveMemberTooLarge, match=r"'big.bin' holds 3145728 bytes, above "
                                                    r"max_member_size=1048576"):
        list(make(max_member_size=1 << 20))
    assert [s.read() for _, s in make(max_member_size=4 << 20)] == [payload]
    assert [s.read() for _, s in make(max_member_size=None)] == [payload]


@pytest.mark.parametrize("kw", [{"max_member_size": 0}, {"max_member_size": 1.5},
                                {"max_member_size": True}, {"max_compression_ratio": -1},
                                {"max_compression_ratio": "x"}])
def test_bad_bounds_are_rejected(tmp_path, kw):
    dp = FileOpener(FileLister(str(tmp_path)), mode="b")
    with pytest.raises(ValueError, match=next(iter(kw))):
        dp.load_from_zip(**kw)
    if "max_member_size" in kw:
        with pytest.raises(ValueError, match="max_member_size"):
            dp.load_from_tar(**kw)


@pytest.mark.slow
def test_three_gib_of_zeros_in_a_3_mb_zip_is_refused_fast_and_small(tmp_path):
    """The issue's case: 3 GiB of zeros deflated to about 3 MB, refused from its header by the
    default size bound, in bounded memory."""
    from ember.data.datapipes.iter import ArchiveMemberTooLarge

    path = _zip_of_zeros(tmp_path / "bomb.zip", 3 << 30)
    assert (tmp_path / "bomb.zip").stat().st_size < 4 << 20

    def read():
        with pytest.raises(ArchiveMemberTooLarge, match=r"'zeros.bin' holds 3221225472 bytes"):
            _read(path, "zip")
    assert _peak_bytes(read) < 8 << 20
