"""`ember bench detection`'s detection comparison (the run itself is in
test_bench_quick_all's slow set: it compiles Faster R-CNN twice)."""

import math

import torch

from ember.tools.bench import BENCHMARKS
from ember.tools.bench.detection import BOX_TOL, compare_detections


def _dets(boxes, labels):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
            "labels": torch.tensor(labels, dtype=torch.int64), "scores": torch.ones(len(labels))}


def test_registered():
    assert BENCHMARKS["detection"][0] == "ember.tools.bench.detection:run"


def test_same_detections_in_any_order_within_tolerance():
    ref = [_dets([[0, 0, 10, 10], [5, 5, 20, 30]], [1, 2]), _dets([], [])]
    got = [_dets([[5, 5, 20, 30], [0, 0, 10.1, 10]], [2, 1]), _dets([], [])]
    share, diff = compare_detections(got, ref)
    assert share == 1.0 and abs(diff - 0.1) < 1e-5
    assert compare_detections([_dets([], [])], [_dets([], [])]) == (1.0, 0.0)


def test_different_detections():
    ref = [_dets([[0, 0, 10, 10], [0, 0, 5, 5]], [1, 1])]
    moved = [_dets([[0, 0, 10 + 2 * BOX_TOL, 10], [0, 0, 5, 5]], [1, 1])]
    assert compare_detections(moved, ref)[0] == 1 / 3    # one found of 2 + 1 extra
    relabeled = [_dets([[0, 0, 10, 10], [0, 0, 5, 5]], [3, 1])]
    assert compare_detections(relabeled, ref)[0] == 1 / 3
    assert compare_detections([_dets([], [])], ref) == (0.0, 0.0)
    assert compare_detections([], ref) == (0.0, math.inf)


def test_rewarm_resets_once_then_warms_every_row_alike(monkeypatch):
    from ember.tools.bench import detection

    log = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: log.append("reset"))
    entries = {name: {"fn": (lambda images, name=name: log.append(name)),
                      "context": detection.contextlib.nullcontext}
               for name in ("b", "a", "c")}
    detection._rewarm(entries, [])
    assert log == ["reset"] + [n for n in ("b", "a", "c") for _ in range(detection.WARMUP)]


def test_compile_order_is_the_one_given(monkeypatch):
    from ember.tools.bench import detection

    compiled = []

    def fake_compile(variant, model, images):
        compiled.append(variant)
        raise RuntimeError("stop")  # a backend that fails is a note: nothing more to time

    monkeypatch.setattr(detection, "_compile", fake_compile)
    monkeypatch.setattr(detection, "_build", lambda side: torch.nn.Identity())
    monkeypatch.setattr(detection, "_images", lambda n, side: [])
    monkeypatch.setattr(detection, "compare_timings",
                        lambda calls, **kw: {name: 1.0 for name in calls})
    monkeypatch.setattr(detection, "compare_detections", lambda got, ref: (1.0, 0.0))
    order = ["ember-freezing", "inductor"]
    result = detection.run(order=order, threads=[1], size=(1, 8, 1))
    assert compiled == [detection.VARIANTS[n] for n in order]
    assert [r[1] for r in result.rows] == ["eager"]
    assert sum(n.startswith("error: ") for n in result.notes) == 2
