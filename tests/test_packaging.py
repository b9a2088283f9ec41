"""The six distributions are fit for PyPI, and their wheels work without the checkout."""

import importlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from ember.core.extras import missing_extra_error, needs_extra, require

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["core", "vision", "audio", "data", "arrow", "tools"]
DISTS = [f"ember-{p}" for p in PACKAGES]
EXTRAS = {
    "core": {"cuda": {"triton"}},
    "arrow": {"pandas": {"pandas"}, "polars": {"polars"}},
    "tools": {"chart": {"matplotlib"},
              "bench": {"librosa", "pandas", "polars", "torchdata", "transformers"}},
}


def _project(pkg: str) -> dict:
    return tomllib.loads((ROOT / pkg / "pyproject.toml").read_text())["project"]


def test_metadata_fit_for_pypi():
    version = _project("core")["version"]
    license_text = (ROOT / "LICENSE").read_text()
    assert "BSD 3-Clause" in license_text and "The Ember authors" in license_text
    for pkg in PACKAGES:
        project = _project(pkg)
        assert project["version"] == version, pkg
        assert project["license"] == "BSD-3-Clause", pkg
        assert project["license-files"] == ["LICENSE"], pkg
        assert (ROOT / pkg / "LICENSE").read_text() == license_text, pkg
        assert project["authors"] == [{"name": "The Ember authors"}], pkg
        assert {"Homepage", "Documentation", "Source", "Issues"} <= set(project["urls"]), pkg
        assert "Programming Language :: Python :: 3 :: Only" in project["classifiers"], pkg
        assert not any(c.startswith("License ::") for c in project["classifiers"]), pkg
        readme = (ROOT / pkg / project["readme"]).read_text()
        assert readme.startswith(f"# ember-{pkg}\n"), pkg
        assert "pip install" in readme and "```python" in readme or pkg == "tools", pkg
        assert f"/docs/{pkg}.md" in readme, pkg
        for raw in project["dependencies"]:
            req = Requirement(raw)
            if req.name.startswith("ember-"):
                assert str(req.specifier) == f"=={version}", (pkg, raw)


def test_optional_dependencies_are_extras():
    for pkg in PACKAGES:
        declared = {name: {Requirement(r).name for r in reqs}
                    for name, reqs in _project(pkg).get("optional-dependencies", {}).items()}
        assert declared == EXTRAS.get(pkg, {}), pkg
    from ember.tools.bench.registry import BENCH_PEERS

    assert set(BENCH_PEERS) == EXTRAS["tools"]["bench"]


def test_a_missing_extra_names_what_to_install():
    with pytest.raises(ImportError, match=r"pip install 'ember-arrow\[pandas\]'") as info:
        require("ember_absent_module", "ember-arrow[pandas]", "from_pandas()")
    assert info.value.name == "ember_absent_module"
    assert "from_pandas() needs the optional dependency 'ember_absent_module'" in str(info.value)
    assert require("json", "ember-core[x]", "f") is json
    # only the listed modules, and only when really absent, are reported as the extra
    with pytest.raises(ModuleNotFoundError, match="ember_other_absent"):
        with needs_extra("ember-core[x]", ["ember_absent_module"], "f"):
            import ember_other_absent  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="json.nope"):
        with needs_extra("ember-core[x]", ["json"], "f"):
            importlib.import_module("json.nope")
    assert isinstance(missing_extra_error("m", "e[x]", "f"), ImportError)


def test_chart_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    from ember.tools.bench.harness import BenchResult, write_chart

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = BenchResult("fake", "t", ["case", "speedup"], [["a", 2.0]])
    with pytest.raises(ImportError, match=r"--chart needs .*pip install 'ember-tools\[chart\]'"):
        write_chart(tmp_path / "c.png", [result])


def test_bench_without_its_peer_names_the_extra(monkeypatch):
    from ember.tools.bench import registry

    module = type(sys)("ember_fake_bench")

    def run(quick=False):
        import ember_absent_peer  # noqa: F401

    module.run = run
    monkeypatch.setitem(sys.modules, "ember_fake_bench", module)
    monkeypatch.setitem(registry.BENCHMARKS, "fake-peer", ("ember_fake_bench:run", "test"))
    monkeypatch.setattr(registry, "BENCH_PEERS", ("ember_absent_peer",))
    with pytest.raises(ImportError, match=r"ember bench fake-peer needs .*ember-tools\[bench\]"):
        registry.run("fake-peer", quick=True)


def test_env_reports_the_ember_distributions():
    from ember.tools.env import report

    rows = dict(report())
    for dist in DISTS:
        assert rows[dist].split()[0] == _project("core")["version"], (dist, rows[dist])


_CHECK = """
import importlib, importlib.metadata, json, pkgutil, sys, sysconfig
from pathlib import Path
site = Path(sysconfig.get_paths()["purelib"]).resolve()
names = []
for pkg in {packages!r}:
    mod = importlib.import_module("ember." + pkg)
    assert Path(mod.__file__).resolve().is_relative_to(site), mod.__file__
    names += [m.name for m in pkgutil.walk_packages(mod.__path__, "ember." + pkg + ".")]
for name in names:
    importlib.import_module(name)
out = {{"modules": len(names), "files": {{}}}}
for dist in {dists!r}:
    d = importlib.metadata.distribution(dist)
    assert Path(str(d.locate_file(""))).resolve() == site, (dist, d.locate_file(""))
    assert d.read_text("direct_url.json") is None or "editable" not in d.read_text(
        "direct_url.json"), dist
    out["files"][dist] = [str(f) for f in d.files]
print(json.dumps(out))
"""


def _copy_sources(dest: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "build", "*.egg-info", "*.so")
    for name in ["Makefile", "LICENSE"]:
        shutil.copy2(ROOT / name, dest / name)
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, symlinks=True, ignore=skip)


def _dependency_view(dest: Path) -> Path:
    """This environment's site-packages without any ember distribution (links only)."""
    site = Path(sysconfig.get_paths()["purelib"])
    dest.mkdir()
    for entry in site.iterdir():
        if entry.name.startswith(("ember", "__editable__")) or entry.suffix == ".pth":
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


@pytest.mark.slow
def test_wheels_install_and_import_without_the_checkout(tmp_path):
    """`make wheels`, then the wheels (not editable) in a fresh venv import every module."""
    src, dist, venv = tmp_path / "src", tmp_path / "dist", tmp_path / "venv"
    src.mkdir()
    _copy_sources(src)
    # a header placed in every package proves that package data reaches the installed wheel
    for pkg in PACKAGES:
        (src / pkg / "ember" / pkg / "_packaging_probe.h").write_text("// probe\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    subprocess.run(["make", "-C", str(src), "-o", ".venv/.ember-installed", "wheels",
                    f"PY={sys.executable}", f"DIST={dist}"], check=True, env=env,
                   capture_output=True, timeout=600)
    wheels = sorted(dist.glob("ember_*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == sorted(d.replace("-", "_") for d in DISTS)

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   env=env, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True,
                             env=env).stdout.strip()
    # third-party dependencies come from this environment, never the ember checkout
    deps = _dependency_view(tmp_path / "deps")
    (Path(purelib) / "deps.pth").write_text(f"{deps}\n")
    # no index: ember-* pins resolve among the built wheels, the rest is already installed
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-index", "--find-links", str(dist), *DISTS],
                   check=True, env=env, cwd=tmp_path, timeout=300)

    code = _CHECK.format(packages=PACKAGES, dists=DISTS)
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["modules"] > 100
    for pkg, dist_name in zip(PACKAGES, DISTS):
        files = set(report["files"][dist_name])
        assert f"ember/{pkg}/_packaging_probe.h" in files, dist_name
        native = [p.relative_to(ROOT / pkg).as_posix()
                  for ext in ("*.h", "*.cpp") for p in (ROOT / pkg / "ember").rglob(ext)]
        assert set(native) <= files, (dist_name, set(native) - files)
        assert any(f.endswith("licenses/LICENSE") for f in files), dist_name

    env_out = subprocess.run([venv / "bin" / "ember", "env"], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=120, check=True).stdout
    for dist_name in DISTS:
        line = next(ln for ln in env_out.splitlines() if ln.startswith(dist_name + " "))
        assert line.split()[1:] == ["0.1.0"], line
