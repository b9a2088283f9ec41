"""Every name ember.vision shares with torchvision has a comparison in tests/peers (issue #19).

The shared names are found, not listed: the public names of each ember module intersected
with those of its torchvision counterpart. A shared name must be claimed by a test in a
test_*parity*.py module here (its ``@compares(...)``) or sit in EXCLUDED with the reason;
new shared API therefore fails here until it is compared.
"""

import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest

pytest.importorskip("torchvision")

# namespace -> (ember module, torchvision module)
NAMESPACES = {
    "transforms.v2": ("ember.vision.transforms", "torchvision.transforms.v2"),
    "functional": ("ember.vision.transforms.functional", "torchvision.transforms.v2.functional"),
    "io": ("ember.vision.io", "torchvision.io"),
    "ops": ("ember.vision.ops", "torchvision.ops"),
    "tv_tensors": ("ember.vision.tv_tensors", "torchvision.tv_tensors"),
}

# Shared names with no numeric comparison, and why. Keep this short.
EXCLUDED: dict[str, str] = {}


def public_names(module) -> set[str]:
    names = getattr(module, "__all__", None)
    if names is None:   # torchvision.transforms.v2 and its functional have no __all__
        names = [n for n in dir(module) if not n.startswith("_")]
    return {n for n in names if not inspect.ismodule(getattr(module, n, None))
            or n == "functional"}


def shared_names() -> set[str]:
    out = set()
    for ns, (em, tv) in NAMESPACES.items():
        common = public_names(importlib.import_module(em)) & public_names(
            importlib.import_module(tv))
        out |= {f"{ns}:{n}" for n in common}
    return out


def claimed_names() -> set[str]:
    """The ``@compares`` names of every comparison module here (test_parity.py, the ops
    cases in test_ops_parity.py, ...)."""
    out = set()
    for path in sorted(Path(__file__).parent.glob("test_*parity*.py")):
        spec = importlib.util.spec_from_file_location(f"_peers_claims_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for obj in vars(mod).values():
            out |= set(getattr(obj, "compares", ()))
    return out


def test_every_shared_name_has_a_comparison():
    shared, claimed = shared_names(), claimed_names()
    missing = sorted(shared - claimed - EXCLUDED.keys())
    assert not missing, f"shared with torchvision but not compared in tests/peers: {missing}"


def test_claims_and_exclusions_name_shared_api():
    shared, claimed = shared_names(), claimed_names()
    assert not claimed - shared, f"@compares names that are not shared: {claimed - shared}"
    assert not EXCLUDED.keys() - shared, f"stale exclusions: {EXCLUDED.keys() - shared}"
    assert not EXCLUDED.keys() & claimed, f"both compared and excluded: {EXCLUDED.keys() & claimed}"
    assert all(reason.strip() for reason in EXCLUDED.values())


def test_the_intersection_is_not_empty():
    # guards the enumeration itself: a renamed module must not make the suite vacuous
    counts = {ns: sum(n.startswith(ns + ":") for n in shared_names()) for ns in NAMESPACES}
    assert all(counts.values()), counts
