"""The monorepo's promises: namespace packages, one-way dependencies, pins the ranges admit."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["core", "vision", "audio", "data", "arrow", "tools"]
# ARCHITECTURE.md: which ember packages each one may import.
ALLOWED = {
    "core": {"core"},
    "vision": {"core", "vision"},
    "audio": {"core", "audio"},
    "data": {"core", "data"},
    "arrow": {"core", "data", "arrow"},
    "tools": set(PACKAGES),
}


def _pyproject(pkg: str) -> dict:
    return tomllib.loads((ROOT / pkg / "pyproject.toml").read_text())


def test_namespace_has_no_init():
    for pkg in PACKAGES:
        assert not (ROOT / pkg / "ember" / "__init__.py").exists(), pkg
        assert (ROOT / pkg / "ember" / pkg / "__init__.py").exists(), pkg


def test_declared_ember_dependencies_match_architecture():
    for pkg in PACKAGES:
        deps = {Requirement(r).name for r in _pyproject(pkg)["project"]["dependencies"]}
        ember = {d.removeprefix("ember-") for d in deps if d.startswith("ember-")}
        assert ember == ALLOWED[pkg] - {pkg}, pkg


def test_constraints_satisfy_every_declared_range():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            pins[req.name.lower()] = next(iter(req.specifier)).version
    assert pins["torch"] == "2.13.0"
    for pkg in PACKAGES:
        project = _pyproject(pkg)["project"]
        reqs = list(project["dependencies"])
        for extra in project.get("optional-dependencies", {}).values():
            reqs += extra
        for raw in reqs:
            req = Requirement(raw)
            if req.name.lower() in pins:
                assert req.specifier.contains(pins[req.name.lower()]), (pkg, raw)


def _modules(pkg: str) -> list[str]:
    root = ROOT / pkg / "ember" / pkg
    names = [f"ember.{pkg}"]
    for info in pkgutil.walk_packages([str(root)], prefix=f"ember.{pkg}."):
        names.append(info.name)
    return names


_BLOCKER = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        parts = name.split(".")
        if len(parts) >= 2 and parts[0] == "ember" and parts[1] in BLOCKED:
            raise ImportError(f"{{name}} must not be imported here")
        return None
sys.meta_path.insert(0, Block())
import importlib
for mod in {modules!r}:
    importlib.import_module(mod)
print("ok", len({modules!r}))
"""


@pytest.mark.parametrize("pkg", [p for p in PACKAGES if p != "tools"])
def test_package_imports_only_what_it_declares(pkg):
    blocked = sorted(set(PACKAGES) - ALLOWED[pkg])
    code = _BLOCKER.format(blocked=blocked, modules=_modules(pkg))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
