"""Every name ember.audio shares with torchaudio is compared, with the same signature (#22).

The shared names are found, not listed: the ``__all__`` of each ember module intersected with
its torchaudio counterpart's. A shared name must be claimed by a comparison in a test_*parity*.py
file (a case's ``compares`` or a test function's ``compares`` attribute) or sit in EXCLUDED with a
reason, so new shared API fails here until it is compared. Signatures must agree in parameter
names, kinds and defaults (annotations are spelled differently and are not compared).
"""

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchaudio")

# namespace -> (ember module, torchaudio module)
NAMESPACES = {
    "functional": ("ember.audio.functional", "torchaudio.functional"),
    "transforms": ("ember.audio.transforms", "torchaudio.transforms"),
    "models": ("ember.audio.models", "torchaudio.models"),
    "compliance.kaldi": ("ember.audio.compliance.kaldi", "torchaudio.compliance.kaldi"),
}

# Shared names with no numeric comparison, and why. Keep this short.
EXCLUDED: dict[str, str] = {}


def shared_names() -> set[str]:
    out = set()
    for ns, (em, ta) in NAMESPACES.items():
        common = set(importlib.import_module(em).__all__) & set(
            importlib.import_module(ta).__all__)
        out |= {f"{ns}:{n}" for n in common}
    return out


def claimed_names() -> set[str]:
    out = set()
    for path in sorted(Path(__file__).parent.glob("test_*parity*.py")):
        name = f"_peers_audio_claims_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod   # dataclasses look their module up while the file executes
        try:
            spec.loader.exec_module(mod)
        finally:
            del sys.modules[name]
        for case in getattr(mod, "CASES", ()):
            out |= set(case.compares)
        for obj in vars(mod).values():
            out |= set(getattr(obj, "compares", ()))
    return out


def test_every_shared_name_has_a_comparison():
    shared, claimed = shared_names(), claimed_names()
    missing = sorted(shared - claimed - EXCLUDED.keys())
    assert not missing, f"shared with torchaudio but not compared in tests/peers/audio: {missing}"


def test_claims_and_exclusions_name_shared_api():
    shared, claimed = shared_names(), claimed_names()
    assert not claimed - shared, f"compares names that are not shared: {claimed - shared}"
    assert not EXCLUDED.keys() - shared, f"stale exclusions: {EXCLUDED.keys() - shared}"
    assert not EXCLUDED.keys() & claimed, f"both compared and excluded: {EXCLUDED.keys() & claimed}"


def test_the_intersection_is_not_empty():
    # guards the enumeration itself: a renamed module must not make the suite vacuous
    counts = {ns: sum(n.startswith(ns + ":") for n in shared_names()) for ns in NAMESPACES}
    assert all(counts.values()), counts


def _params(fn):
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(fn).parameters.values()]


def _signatures(obj):
    """(name, kind, default) lists of a function, or of a class's __init__ and forward."""
    if inspect.isclass(obj):
        out = {"__init__": _params(obj.__init__)}
        if hasattr(obj, "forward"):
            out["forward"] = _params(obj.forward)
        return out
    return {"": _params(obj)}


@pytest.mark.parametrize("name", sorted(shared_names()))
def test_signatures_are_identical(name):
    ns, attr = name.split(":")
    em, ta = (importlib.import_module(m) for m in NAMESPACES[ns])
    assert _signatures(getattr(em, attr)) == _signatures(getattr(ta, attr))
