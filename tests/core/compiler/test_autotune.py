"""The autotuner: fastest candidate wins, failures are skipped, the winner is cached on disk."""

import json

import pytest

from ember.core.compiler.runtime import autotune


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_fastest_wins_and_second_search_is_a_cache_hit(cache):
    cost = {1: 3.0, 2: 1.0, 4: 2.0}
    seen = []

    def measure(cfg):
        seen.append(cfg["block"])
        return cost[cfg["block"]]

    cands = [{"block": b} for b in cost]
    hits = autotune.stats["cache_hits"]
    assert autotune.tune(["k", "shape=8"], cands, measure) == {"block": 2}
    assert seen == [1, 2, 4]
    assert autotune.tune(["k", "shape=8"], cands, measure) == {"block": 2}
    assert seen == [1, 2, 4]  # nothing timed again
    assert autotune.stats["cache_hits"] == hits + 1
    (entry,) = (cache / "autotune").glob("*.json")
    assert json.loads(entry.read_text())["winner"] == {"block": 2}
    # other shapes are tuned separately
    autotune.tune(["k", "shape=16"], cands, measure)
    assert seen == [1, 2, 4, 1, 2, 4]


def test_failing_candidates_are_skipped_and_corrupt_entries_retuned(cache):
    def measure(cfg):
        if cfg["w"] == 8:
            raise RuntimeError("does not fit")
        return 1.0 / cfg["w"]

    cands = [{"w": 2}, {"w": 8}, {"w": 4}]
    assert autotune.tune(["f"], cands, measure) == {"w": 4}
    (entry,) = (cache / "autotune").glob("*.json")
    entry.write_text("{not json")
    searches = autotune.stats["searches"]
    assert autotune.tune(["f"], cands, measure) == {"w": 4}
    assert autotune.stats["searches"] == searches + 1


def test_all_failing_returns_first_without_caching(cache):
    def boom(cfg):
        raise RuntimeError("no")

    assert autotune.tune(["g"], [{"a": 1}, {"a": 2}], boom) == {"a": 1}
    assert not list((cache / "autotune").glob("*.json"))
    with pytest.raises(ValueError, match="candidate"):
        autotune.tune(["g"], [], boom)


def test_timeit_returns_median_seconds():
    calls = []
    t = autotune.timeit(lambda: calls.append(1), warmup=2, reps=3)
    assert len(calls) == 5 and 0 <= t < 1
