"""No dead code: every top-level function, class and variable of the packages is used.

A small ast-based check in the spirit of vulture. A definition is used when its name appears
outside its own body in package code, tests, pyproject entry points or docs: as a name, an
attribute, an import, or a string that is an identifier or a dotted path ("module:function"
registries, ``__all__``, ``getattr``). A use inside dead code does not count, so the helpers
of dead code are dead too. Functions under a decorator with arguments (``@register(op)``) are
in a table, hence used. Names are matched, not resolved: the check errs towards "used".
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["core", "vision", "audio", "data", "arrow", "tools"]
_IDENT = re.compile(r"[A-Za-z_]\w*")
_PATHLIKE = re.compile(r"[\w.:]+")

# Dead names in files other engineers are rewriting right now ("path:name").
ALLOWED: set[str] = {
    # being removed in #17 work (the compiler restructure)
    "core/ember/core/compiler/capture.py:_ARTIFACTS",
    "core/ember/core/compiler/codegen/wrapper.py:ctypes_function",
    "core/ember/core/compiler/lower.py:_int_out",
    "core/ember/core/compiler/lower.py:_lower_log",
}


def _defined(stmt: ast.stmt) -> str | None:
    """The name a top-level statement defines: a function, a class or ``NAME = ...``."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        name = stmt.name
    elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
          and isinstance(stmt.targets[0], ast.Name)):
        name = stmt.targets[0].id
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        name = stmt.target.id
    else:
        return None
    return None if name.startswith("__") and name.endswith("__") else name


def _registered(stmt: ast.stmt) -> bool:
    return any(isinstance(d, ast.Call) for d in getattr(stmt, "decorator_list", []))


def _is_docstring(node: ast.AST, parent: ast.AST) -> bool:
    body = getattr(parent, "body", None)
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str) and bool(body) and body[0] is node)


def _uses(tree: ast.Module) -> list[tuple[str, str | None]]:
    """(name used, the top-level name whose definition it appears in, or None)."""
    found: list[tuple[str, str | None]] = []

    def visit(node: ast.AST, owner: str | None, parent: ast.AST) -> None:
        if _is_docstring(node, parent):
            return
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            found.append((node.id, owner))
        elif isinstance(node, ast.Attribute):
            found.append((node.attr, owner))
        elif isinstance(node, ast.alias):
            found.extend((part, owner) for part in node.name.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _PATHLIKE.fullmatch(node.value):
                found.extend((word, owner) for word in _IDENT.findall(node.value))
        for child in ast.iter_child_nodes(node):
            visit(child, owner, node)

    for stmt in tree.body:
        visit(stmt, _defined(stmt), tree)
    return found


def dead_code(root: Path, checked: list[Path], users: list[Path], texts: list[Path]) -> list[str]:
    """``path:name`` of the top-level definitions in ``checked`` that nothing uses.

    ``users`` are further Python files (tests) whose uses count; ``texts`` are read for words.
    """
    words = {w for path in texts if path.is_file() for w in _IDENT.findall(path.read_text())}
    uses: list[tuple[str, str | None]] = []
    defs: dict[str, str] = {}
    for path in checked + users:
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(root).as_posix()
        uses += [(name, owner and f"{rel}:{owner}") for name, owner in _uses(tree)]
        if path in checked:
            defs.update({f"{rel}:{name}": name for stmt in tree.body
                         if (name := _defined(stmt)) and not _registered(stmt)})
    dead: set[str] = set()
    while True:
        used = words | {name for name, owner in uses
                        if owner not in dead and (owner not in defs or defs[owner] != name)}
        now = {label for label, name in defs.items() if name not in used}
        if now == dead:
            return sorted(dead)
        dead = now


def test_no_dead_code():
    checked = [p for pkg in PACKAGES for p in sorted((ROOT / pkg / "ember").rglob("*.py"))]
    texts = sorted((ROOT / "docs").glob("*.md"))
    texts += [ROOT / pkg / name for pkg in PACKAGES for name in ("README.md", "pyproject.toml")]
    dead = set(dead_code(ROOT, checked, sorted((ROOT / "tests").rglob("*.py")), texts))
    assert dead - ALLOWED == set(), "unused: remove them (or use them)"


def test_the_check_finds_new_unused_code(tmp_path):
    (tmp_path / "mod.py").write_text(
        "TABLE = {}\n\n\ndef register(op):\n    return lambda fn: TABLE.setdefault(op, fn)\n\n\n"
        "def used():\n    return _helper()\n\n\ndef _helper():\n    return 1\n\n\n"
        "def _never_called():\n    return _only_for_dead()\n\n\ndef _only_for_dead():\n"
        "    return 2\n\n\nclass Orphan:\n    pass\n\n\ndef recursive(n):\n"
        "    return recursive(n - 1)\n\n\nalias = used\n\n\n@register('add')\ndef _add():\n"
        "    pass\n\n\ndef by_name():\n    pass\n\n\ndef documented():\n    pass\n")
    (tmp_path / "test_mod.py").write_text(
        "from mod import used\n\nREGISTRY = {'x': 'mod:by_name'}\n")
    (tmp_path / "doc.md").write_text("`documented()` is the public entry.\n")
    dead = dead_code(tmp_path, [tmp_path / "mod.py"], [tmp_path / "test_mod.py"],
                     [tmp_path / "doc.md"])
    assert dead == ["mod.py:Orphan", "mod.py:_never_called", "mod.py:_only_for_dead",
                    "mod.py:alias", "mod.py:recursive"]
