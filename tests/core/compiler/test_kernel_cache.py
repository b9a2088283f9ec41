"""The on-disk kernel cache cannot crash or lie, and kernels are keyed by instruction set."""

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ember.core.compiler.runtime import build, cache, isa

FN = lambda x: (x - 0.123).tanh() * 7
OTHER = lambda x: (x + 0.5).sigmoid() * 3


@pytest.fixture
def cache_warnings(caplog):
    caplog.set_level(logging.WARNING, logger="ember.cache")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "ember.cache"]


def _only_entry(root):
    (entry,) = list((root / "cpp").rglob("*.so"))
    return entry


def _replace(path, data: bytes) -> None:
    path.unlink()  # a new file: never scribble over a library this process has mapped
    path.write_bytes(data)


def _run_again(ecompile, fn=FN):
    build._loaded.clear()
    x = torch.randn(33)
    torch.testing.assert_close(ecompile(fn)(x), fn(x))


@pytest.mark.parametrize("damage", ["truncate", "bit_flips", "empty"])
def test_damaged_library_is_rebuilt_with_a_warning_never_loaded(ecompile, fresh_cache,
                                                                cache_warnings, damage):
    ecompile(FN)(torch.randn(33))
    entry = _only_entry(fresh_cache)
    data = bytearray(entry.read_bytes())
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "bit_flips":
        gen = torch.Generator().manual_seed(0)
        for pos in torch.randint(0, len(data) * 8, (10,), generator=gen).tolist():
            data[pos // 8] ^= 1 << (pos % 8)
    else:
        data = bytearray()
    _replace(entry, bytes(data))
    builds = build.builds
    _run_again(ecompile)
    assert build.builds == builds + 1
    assert any("not used" in m and "digest" in m for m in cache_warnings())
    builds = build.builds
    _run_again(ecompile)  # the rebuilt entry is sound again: served from disk
    assert build.builds == builds


def test_missing_digest_is_rebuilt(ecompile, fresh_cache, cache_warnings):
    ecompile(FN)(torch.randn(33))
    _only_entry(fresh_cache).with_suffix(".sha256").unlink()
    builds = build.builds
    _run_again(ecompile)
    assert build.builds == builds + 1
    assert any("no digest" in m for m in cache_warnings())


_SCRIPT = """
import torch, ember.core
for f in (lambda x: (x - 0.123).tanh() * 7, lambda x: (x + 0.5).sigmoid() * 3):
    x = torch.randn(33)
    torch.testing.assert_close(ember.core.compile(f)(x), f(x))
    torch._dynamo.reset()
"""


def _in_new_process(cache_dir):
    env = {"EMBER_CACHE_DIR": str(cache_dir), "EMBER_LOGS": "+cache", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, timeout=300,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def test_later_processes_neither_crash_on_nor_trust_a_bad_entry(tmp_path):
    """The reported failures, each in a new process (dlopen returns a library it already
    mapped by path, so only a new process reads the file): a truncated library killed every
    later run with SIGBUS; another graph's valid library under a key gave wrong results."""
    log = _in_new_process(tmp_path)
    first, second = [ln.split()[-1] for ln in log.splitlines() if "cache miss" in ln]
    first, second = Path(first), Path(second)
    impostor = second.read_bytes()
    second.unlink()
    second.write_bytes(impostor[:len(impostor) // 2])  # truncated
    first.unlink()
    first.write_bytes(impostor)  # the other graph's library, with its correct digest
    shutil.copy(second.with_suffix(".sha256"), first.with_suffix(".sha256"))
    log = _in_new_process(tmp_path)  # compares both graphs with eager
    assert "built for another cache key" in log and "do not match the digest" in log


def test_unwritable_cache_directory_falls_back_with_one_warning(ecompile, tmp_path,
                                                                monkeypatch, cache_warnings):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    build._loaded.clear()
    _run_again(ecompile)
    _run_again(ecompile, OTHER)
    warnings = [m for m in cache_warnings() if "cannot be written" in m]
    assert len(warnings) == 1 and "EMBER_CACHE_DIR" in warnings[0]
    assert cache.cache_dir() != blocker / "cache"


def test_cache_key_names_the_instruction_set(ecompile, fresh_cache, monkeypatch):
    if "x86-64-v3" not in isa.NAMES or not isa.LEVELS["x86-64-v3"].needs <= isa.cpu_flags():
        pytest.skip("this CPU has no AVX2")
    ecompile(FN)(torch.randn(33))
    monkeypatch.setenv(isa.ENV, "x86-64-v3")
    _run_again(ecompile)
    libs = list((fresh_cache / "cpp").rglob("*.so"))
    assert len(libs) == 2  # one per level: an AVX-512 kernel is never handed to AVX2
    assert "-march=x86-64-v3" in build.flags()
    assert "-march=native" in build.flags({"cpu_isa": "native"})


def test_native_key_depends_on_the_cpu(monkeypatch):
    cxx, _ = build.compiler()
    isa.target_id.cache_clear()
    here = isa.target_id(cxx, "native")
    assert here.startswith("native:") and isa.target_id(cxx, "x86-64-v3") == "x86-64-v3"
    monkeypatch.setattr(isa, "compiler_features", lambda cxx: [])  # CPU flags decide
    isa.target_id.cache_clear()
    monkeypatch.setattr(isa, "cpu_flags", lambda: frozenset({"sse2", "avx2"}))
    avx2 = isa.target_id(cxx, "native")
    monkeypatch.setattr(isa, "cpu_flags", lambda: frozenset({"sse2", "avx2", "avx512f"}))
    isa.target_id.cache_clear()
    assert isa.target_id(cxx, "native") != avx2
    isa.target_id.cache_clear()


def test_every_level_builds_with_generic_tuning():
    """-march=native alone tunes for this CPU: g++ 12's Zen 3 cost model vectorized a
    concatenation's clamped gathers wrongly (test_interpolation_matches_eager), and the
    code would differ from the same level built on another machine."""
    for name in isa.NAMES:
        if name == "native" or isa.LEVELS[name].needs <= isa.cpu_flags():
            assert "-mtune=generic" in isa.flags(name), name


def test_bad_or_unrunnable_levels_are_refused(monkeypatch):
    monkeypatch.setenv(isa.ENV, "avx9000")
    with pytest.raises(ValueError, match="EMBER_CPU_ISA must be one of"):
        isa.selected()
    monkeypatch.setenv(isa.ENV, "x86-64-v4")
    monkeypatch.setattr(isa, "cpu_flags", lambda: isa.LEVELS["x86-64-v3"].needs)
    with pytest.raises(ValueError, match="lacks avx512"):
        isa.selected()
    with pytest.raises(ValueError, match="options\\['cpu_isa'\\]"):
        isa.selected({"cpu_isa": "x86-64-v4"})


def test_own_exp_and_erf_give_the_same_bits_at_every_level(ecompile, monkeypatch):
    fn = lambda x: (x.exp(), torch.erf(x))
    x = torch.cat([torch.linspace(-110, 95, 20_001), torch.tensor([float("nan"), 0.0])])
    outs = {}
    for level in ["native", "x86-64-v3"]:
        if level != "native" and not isa.LEVELS[level].needs <= isa.cpu_flags():
            continue
        monkeypatch.setenv(isa.ENV, level)
        outs[level] = ecompile(fn)(x)
    for a, b in zip(*outs.values()):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))
