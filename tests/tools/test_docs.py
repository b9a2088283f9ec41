"""docs/ names only things that exist: every `ember.x.y` it mentions resolves."""

import importlib
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ["README.md", "compiler.md", "core.md", "vision.md", "audio.md", "data.md",
         "arrow.md", "tools.md"]


def _is_log_component(dotted: str) -> bool:
    """``ember.<component>`` is a logger name when set_logs accepts the component."""
    from ember.core import set_logs

    parts = dotted.split(".")
    if len(parts) != 2:
        return False
    try:
        set_logs(**{parts[1]: None})  # None restores the default level: no side effect
    except ValueError:
        return False
    return True


def _resolve(dotted: str):
    if _is_log_component(dotted):
        return dotted
    parts = dotted.split(".")
    for i in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_every_page_exists_and_is_linked_from_the_index():
    index = (DOCS / "README.md").read_text()
    for page in PAGES:
        assert (DOCS / page).is_file(), page
        if page != "README.md":
            assert f"]({page})" in index, page


@pytest.mark.parametrize("page", PAGES)
def test_ember_names_in_docs_resolve(page):
    text = (DOCS / page).read_text()
    names = set(re.findall(r"\b(ember(?:\.[A-Za-z_]\w*)+)", text))
    names = {n for n in names if not n.startswith("ember.<")}
    assert names or page == "README.md"
    for name in sorted(names):
        try:
            _resolve(name)
        except (ImportError, AttributeError) as exc:
            pytest.fail(f"{page} mentions {name}, which does not exist ({exc})")
