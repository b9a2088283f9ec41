"""ember.arrow's modules import one another one way.

The graph is read from the source with ``ast`` and holds every import between the package's
modules: at module level, inside functions and classes, and ``importlib.import_module``
calls. An import moved into a function still counts, so a cycle cannot hide there.
"""

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "arrow" / "ember" / "arrow"
PACKAGE = "ember.arrow"


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """Every module of the package by dotted name (a package's ``__init__`` is the package)."""
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join([package, *parts])] = path
    return names


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module an ``ImportFrom`` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported(node: ast.AST, importer: str, is_package: bool) -> list[str]:
    """The dotted names one AST node imports (modules, or names inside modules)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        source = _resolve(node, importer, is_package)
        return [f"{source}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def import_graph(package_dir: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its source."""
    modules = module_names(package_dir, package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, is_package):
                # The longest module prefix: "ember.arrow.dtypes" for "from ember.arrow
                # import dtypes", the package itself for "from ember.arrow import me".
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that returns to its start, or None."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        return list(reversed(e.args[1]))
    return None


def test_arrow_modules_import_one_way():
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    assert len(graph) > 10, sorted(graph)
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_docs_list_the_modules_in_an_order_the_imports_keep():
    text = (ROOT / "docs" / "arrow.md").read_text()
    block = text.split("## Module layout", 1)[1].split("```")[1]
    order = [f"{PACKAGE}.{line.split()[0]}" for line in block.splitlines() if line.strip()]
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    assert sorted(order) == sorted(set(graph) - {PACKAGE})
    for module in order:
        later = set(order[order.index(module) + 1:])
        assert not graph[module] & later, (module, "imports", graph[module] & later)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


@pytest.mark.parametrize("hidden", [
    "def f():\n    from pkg.low import x\n",
    "def f():\n    from . import low\n",
    "class C:\n    def f(self):\n        import pkg.low\n",
    "import importlib\n\ndef f():\n    importlib.import_module('pkg.low')\n",
])
def test_a_cycle_inside_a_function_is_found(tmp_path, hidden):
    root = _write(tmp_path, {"__init__.py": "", "low.py": "from pkg import high\n",
                             "high.py": hidden})
    graph = import_graph(root, "pkg")
    assert graph["pkg.high"] == {"pkg.low"}
    assert cycle(graph) is not None


def test_one_way_imports_and_package_names_are_not_cycles(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "from pkg.high import y\nfrom pkg import low\n",
        "low.py": "x = 1\n",
        "high.py": "from pkg.low import x\n\ndef f():\n    from .low import x\n    return x\n",
        "uses_init.py": "from pkg import y\n",
    })
    graph = import_graph(root, "pkg")
    assert graph == {"pkg": {"pkg.high", "pkg.low"}, "pkg.low": set(),
                     "pkg.high": {"pkg.low"}, "pkg.uses_init": {"pkg"}}
    assert cycle(graph) is None
