"""`ember bench zoo --suite vision`: the registry-discovered model table, its workloads, and
a quick end-to-end run on one tiny model (Ember only, as the other zoo tests)."""

from __future__ import annotations

import pytest
import torch

from ember.tools import cli
from ember.tools.bench import registry, zoo, zoo_store, zoo_suite, zoo_vision
from ember.vision import models

pytestmark = pytest.mark.usefixtures("one_thread")


def test_table_covers_the_whole_registry():
    found = zoo_vision.discover()
    assert set(found) == set(models.list_models())
    assert set(zoo_vision.INFERENCE_ONLY) <= set(found)   # each names a real builder
    table = zoo_vision.table()
    assert set(table) == set(found)
    families = {m.family for m in table.values()}
    assert {"classification", "segmentation", "video", "detection"} <= families
    assert table["lraspp_mobilenet_v3_large"].family == "segmentation"
    assert table["r2plus1d_18"].family == "video"
    assert table["retinanet_resnet50_fpn"].family == "detection"
    assert sum(m.family == "classification" for m in table.values()) >= 70


@pytest.mark.parametrize("name", ["squeezenet1_1", "lraspp_mobilenet_v3_large", "mc3_18",
                                  "ssdlite320_mobilenet_v3_large", "inception_v3"])
def test_workloads_run_eagerly_with_their_loss(name):
    torch.manual_seed(0)
    work = zoo_vision.table()[name].build(True)
    out = work.model.train()(*(work.train_args or work.args))
    loss = work.loss(out)
    assert loss.ndim == 0 and torch.isfinite(loss)
    if name.startswith("ssdlite"):   # detection inference: score threshold 0 keeps boxes
        with torch.no_grad():
            dets = work.model.eval()(*work.args)
        assert len(dets) == 2 and all(len(d["boxes"]) == 20 for d in dets)


@pytest.mark.parametrize("name", ["googlenet", "efficientnet_b0"])
def test_training_workloads_draw_no_random_masks(name):
    """Dropout and stochastic depth are off (p = 0), so a training step is the same whatever
    the random state: a compiled graph drawing its masks in another order than eager (both
    backends did on googlenet, whose auxiliary heads drop out too) is still comparable."""
    work = zoo_vision.table()[name].build(True)
    drops = [m for m in work.model.modules() if isinstance(m, torch.nn.Dropout) or
             type(m).__name__ == "StochasticDepth"]
    assert drops and all(m.p == 0.0 for m in drops)
    outs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        out = work.model.train()(*work.args)
        outs.append(out[0] if isinstance(out, tuple) else out)
    assert torch.equal(outs[0], outs[1])


def _tiny(quick: bool) -> zoo.Workload:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(4, 3))
    return zoo.Workload(model, (torch.randn(2, 3, 8, 8),), zoo._mean_square)


def test_vision_suite_reports_every_mode_and_precision(monkeypatch):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_vision, "table",
                        lambda: {"tiny": zoo_vision.VisionModel("classification", _tiny)})
    monkeypatch.setattr(zoo_vision, "QUICK_MODELS", ("tiny",))
    result = registry.run("zoo", quick=True, suite="vision")
    assert result.name == "zoo-vision"
    assert [r[:4] for r in result.rows] == [
        ["tiny", "classification", mode, precision]
        for mode in ("inference", "training") for precision in ("float32", "amp")]
    ok = result.columns.index("ember ok")
    assert [r[ok] for r in result.rows] == ["yes"] * 4, result.notes
    assert "ember: 4/4 runs compile and match eager" in result.notes[0]
    assert any(n.startswith("inference only: regnet_y_128gf") for n in result.notes)


def test_zoo_modes_choose_the_runs_and_are_checked(monkeypatch):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_vision, "table",
                        lambda: {"tiny": zoo_vision.VisionModel("classification", _tiny)})
    monkeypatch.setattr(zoo_vision, "QUICK_MODELS", ("tiny",))
    monkeypatch.setenv("EMBER_ZOO_MODES", "inference")
    result = registry.run("zoo", quick=True, suite="vision")
    assert [r[2:4] for r in result.rows] == [["inference", "float32"], ["inference", "amp"]]
    assert "modes: inference only (EMBER_ZOO_MODES)" in result.notes
    assert result.notes[0].endswith("training step geomean AMP -, float32 -"), result.notes[0]
    monkeypatch.setenv("EMBER_ZOO_MODES", "inference,train")
    with pytest.raises(ValueError, match=r"unknown zoo mode\(s\) \['train'\]"):
        zoo_vision.run(quick=True)


def test_an_inference_only_model_gets_no_training_runs(monkeypatch):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_vision, "table",
                        lambda: {"tiny": zoo_vision.VisionModel("classification", _tiny)})
    monkeypatch.setattr(zoo_vision, "INFERENCE_ONLY", {"tiny": "too big"})
    result = zoo_vision.run(quick=True, models="tiny")
    assert [r[2:4] for r in result.rows] == [["inference", "float32"], ["inference", "amp"]]
    assert "inference only: tiny (too big)" in result.notes


def test_a_stored_part_gets_only_its_missing_runs_measured(monkeypatch, tmp_path):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_vision, "table",
                        lambda: {"tiny": zoo_vision.VisionModel("classification", _tiny)})
    monkeypatch.setenv("EMBER_ZOO_MODES", "inference")
    first = zoo.run(quick=True, suite="vision", models="tiny", store=str(tmp_path))
    assert [r[2:4] for r in first.rows] == [["inference", "float32"], ["inference", "amp"]]
    asked, measure = [], zoo_suite.measure

    def recording(suite, name, entry, *args):
        asked.append(list(entry.cases))
        return measure(suite, name, entry, *args)

    monkeypatch.setattr(zoo_suite, "measure", recording)
    monkeypatch.delenv("EMBER_ZOO_MODES")
    full = zoo.run(quick=True, suite="vision", models="tiny", store=str(tmp_path))
    assert asked == [[("training", "float32"), ("training", "amp")]]
    assert full.rows[:2] == first.rows
    assert [r[2:4] for r in full.rows[2:]] == [["training", "float32"], ["training", "amp"]]
    kept = zoo_store.load(tmp_path, "tiny", zoo_suite.columns(("ember",)))
    assert kept.rows == full.rows and len(kept.sittings) == 1
    assert kept.sittings[0]["machine"] == kept.machine

    monkeypatch.setenv("EMBER_ZOO_MODES", "training")
    again = zoo.run(quick=True, suite="vision", models="tiny", store=str(tmp_path))
    assert asked == [[("training", "float32"), ("training", "amp")]]   # nothing measured
    assert again.rows == full.rows[2:]
    assert "ember: 2/2 runs compile and match eager" in again.notes[0]


def test_stored_only_reports_the_store_and_measures_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_vision, "table",
                        lambda: {"tiny": zoo_vision.VisionModel("classification", _tiny),
                                 "other": zoo_vision.VisionModel("classification", _tiny)})
    monkeypatch.setenv("EMBER_ZOO_MODES", "inference")
    first = zoo.run(quick=True, suite="vision", models="tiny", store=str(tmp_path))
    monkeypatch.delenv("EMBER_ZOO_MODES")
    monkeypatch.setenv("EMBER_ZOO_STORED_ONLY", "1")

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured under EMBER_ZOO_STORED_ONLY")

    monkeypatch.setattr(zoo_suite, "measure", no_measuring)
    report = zoo.run(quick=True, suite="vision", models="tiny,other", store=str(tmp_path))
    assert report.rows == first.rows
    assert ("not measured yet (EMBER_ZOO_STORED_ONLY): tiny (training float32, training amp); "
            "other (inference float32, inference amp, training float32, training amp)"
            in report.notes)
    assert "ember: 2/2 runs compile and match eager" in report.notes[0]
    with pytest.raises(ValueError, match="no --store"):
        zoo.run(quick=True, suite="vision", models="tiny")


def test_store_merge_refuses_a_run_kept_twice(tmp_path):
    cols = zoo_suite.columns(("ember",))
    row = ["tiny", "classification", "inference", "amp", 1.0, "yes", 1.0, 0.1, 0, "none"]
    part = zoo_store.Part("tiny", cols, [row])
    with pytest.raises(zoo_store.StoreError, match="cannot add"):
        zoo_store.merge(part, zoo_store.Part("tiny", cols, [list(row)]))
    zoo_store.save(tmp_path, zoo_store.Part("tiny", cols, [row, list(row)]))
    with pytest.raises(zoo_store.StoreError, match="holds a run twice"):
        zoo_store.load(tmp_path, "tiny", cols)


def test_vision_suite_names_are_checked_and_reach_the_cli(monkeypatch):
    with pytest.raises(ValueError, match="unknown vision zoo model"):
        zoo.run(quick=True, suite="vision", models="nope")
    seen = {}

    def fake_run_many(names, quick=False, progress=True, **options):
        seen.update(options, names=names)
        return iter([])

    monkeypatch.setattr(registry, "run_many", fake_run_many)
    assert cli.main(["bench", "zoo", "--suite", "vision", "--quick", "--no-progress"]) == 0
    assert seen == {"names": ["zoo"], "suite": "vision"}


def test_store_keeps_each_models_rows_and_the_next_run_reuses_them(monkeypatch, tmp_path):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_vision, "table",
                        lambda: {"tiny": zoo_vision.VisionModel("classification", _tiny)})
    first = zoo.run(quick=True, suite="vision", models="tiny", store=str(tmp_path))
    assert (tmp_path / "tiny.json").exists()
    assert any("measured in parts" in n for n in first.notes)

    def no_measuring(*args, **kwargs):
        raise AssertionError("a stored model was measured again")

    monkeypatch.setattr(zoo_suite, "measure", no_measuring)
    again = zoo.run(quick=True, suite="vision", models="tiny", store=str(tmp_path))
    assert again.rows == first.rows
    assert again.notes[0] == first.notes[0]   # the summary is recomputed from the rows
    assert "ember: 4/4 runs compile and match eager" in again.notes[0]


def test_a_bad_stored_part_is_named_not_reused(monkeypatch, tmp_path):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_vision, "table",
                        lambda: {"tiny": zoo_vision.VisionModel("classification", _tiny)})
    (tmp_path / "tiny.json").write_text('{"model": "tiny", "colu')
    with pytest.raises(zoo_store.StoreError, match="tiny.json is unreadable"):
        zoo.run(quick=True, suite="vision", models="tiny", store=str(tmp_path))
    zoo_store.save(tmp_path, zoo_store.Part("tiny", ["model", "other"], [["tiny", 1]]))
    with pytest.raises(zoo_store.StoreError, match="another table"):
        zoo.run(quick=True, suite="vision", models="tiny", store=str(tmp_path))
    with pytest.raises(ValueError, match="default suite has no store"):
        zoo.run(quick=True, store=str(tmp_path))


def test_store_option_reaches_the_vision_suite(monkeypatch):
    seen = {}

    def fake_run_many(names, quick=False, progress=True, **options):
        seen.update(options)
        return iter([])

    monkeypatch.setattr(registry, "run_many", fake_run_many)
    assert cli.main(["bench", "zoo", "--suite", "vision", "--store", "parts",
                     "--no-progress"]) == 0
    assert seen == {"suite": "vision", "store": "parts"}


def test_zoo_summary_prints_a_dash_for_a_geomean_over_no_runs():
    """A training-only run has no inference speed-ups: '-' there, not 'nanx'."""
    from ember.tools.bench import zoo

    line = zoo.suite_summary("ember", 2, 2, {("ember", "training", "amp"): [1.5],
                                              ("ember", "training", "float32"): [2.0]},
                             training=("amp", "float32"))
    assert line == ("ember: 2/2 runs compile and match eager; inference geomean speed-up "
                    "AMP -, float32 -, headline 0.75 x AMP + 0.25 x float32 = -; training step "
                    "geomean AMP 1.50x, float32 2.00x")
