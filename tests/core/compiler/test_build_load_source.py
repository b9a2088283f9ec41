"""build.load_source: C++ files shipped in a package build through the one cached path; the
cache key covers the headers they include."""

import ctypes
import sys

import pytest

from ember.core.compiler.runtime import build, cache


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A throwaway package ``native_pkg`` with one .cpp and one .h; a private kernel cache."""
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    root = tmp_path / "src" / "native_pkg"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "scale.h").write_text("static inline int scale(int x) { return 3 * x; }\n")
    (root / "twice.cpp").write_text('#include "scale.h"\n'
                                    'extern "C" int twice_scaled(int x) { return 2 * scale(x); }\n')
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    yield root
    sys.modules.pop("native_pkg", None)


def test_builds_once_and_the_key_covers_included_headers(package):
    builds = build.builds
    lib = build.load_source("native_pkg", "twice.cpp")
    assert lib.twice_scaled(ctypes.c_int(5)) == 30
    assert build.load_source("native_pkg", "twice.cpp") is lib  # this process's table
    assert build.builds == builds + 1
    build._loaded.clear()
    assert build.load_source("native_pkg", "twice.cpp").twice_scaled(5) == 30
    assert build.builds == builds + 1  # from the disk cache, digest checked
    (package / "scale.h").write_text("static inline int scale(int x) { return 4 * x; }\n")
    assert build.load_source("native_pkg", "twice.cpp").twice_scaled(5) == 40
    assert build.builds == builds + 2


def test_missing_files_and_includes_outside_the_package_raise(package):
    with pytest.raises(build.BuildError, match="no C\\+\\+ source 'absent.cpp'"):
        build.load_source("native_pkg", "absent.cpp")
    (package / "bad.cpp").write_text('#include "../elsewhere.h"\n')
    with pytest.raises(build.BuildError, match="must name a file beside bad.cpp"):
        build.load_source("native_pkg", "bad.cpp")
    (package / "broken.cpp").write_text("this is not C++\n")
    with pytest.raises(build.BuildError, match="failed"):
        build.load_source("native_pkg", "broken.cpp")


def test_the_attention_source_ships_and_builds():
    lib = build.load_source("ember.core.nn", "attention_native.cpp")
    assert hasattr(lib, "ember_attn_forward") and hasattr(lib, "ember_attn_set_blas")


def test_packages_link_with_a_faster_linker_only_where_the_compiler_drives_one(monkeypatch):
    assert build.libtorch_linker() in ([], ["-fuse-ld=mold"], ["-fuse-ld=lld"],
                                       ["-fuse-ld=gold"])

    class Refused:
        returncode = 1

    tried = []
    monkeypatch.setattr(build.subprocess, "run", lambda cmd, **kw: tried.append(cmd) or Refused)
    assert build.libtorch_linker.__wrapped__() == []
    assert [c[1] for c in tried] == ["-fuse-ld=mold", "-fuse-ld=lld", "-fuse-ld=gold"]


def test_runtime_builds_in_the_background_and_a_dropped_build_is_stopped(tmp_path,
                                                                        monkeypatch):
    import gc
    import os

    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    bad = build.start_runtime("bad.cpp", "this is not C++;\n", {})
    for _ in range(2):  # asked again, the same failure (not a path to a missing object)
        with pytest.raises(build.BuildError, match="packages' runtime"):
            bad.path()
    assert not os.path.exists(bad.tmp.name)

    slow = build.start_runtime("slow.cpp", "#include <ATen/core/Tensor.h>\n", {})
    proc, folder = slow.proc, slow.tmp.name
    assert proc.poll() is None and os.path.isdir(folder)  # still compiling
    del slow  # aot_compile failed before waiting for it
    gc.collect()
    assert proc.returncode is not None and not os.path.exists(folder)

    ok = build.start_runtime("ok.cpp", 'extern "C" int seven() { return 7; }\n', {})
    built = ok.path()
    again = build.start_runtime("ok.cpp", 'extern "C" int seven() { return 7; }\n', {})
    assert again.proc is None and again.path() == built  # cached, checked by digest
