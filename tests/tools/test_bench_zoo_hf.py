import pytest
import torch

from ember.tools import cli
from ember.tools.bench import registry, zoo, zoo_suite

pytest.importorskip("transformers")

from ember.tools.bench import zoo_hf


def test_hf_table_is_large_and_varied():
    assert len(zoo_hf.MODELS) >= 24
    families = {m.family for m in zoo_hf.MODELS.values()}
    assert {"encoder", "decoder", "encoder-decoder", "vision", "audio"} <= families
    assert sum(m.train for m in zoo_hf.MODELS.values()) * 2 >= len(zoo_hf.MODELS)
    assert zoo_hf.cases("bert")[-1] == ("training", "float32")


def test_no_dropout_reaches_sub_configs():
    from transformers import CLIPConfig

    config = CLIPConfig()
    zoo_hf._no_dropout(config)
    assert config.text_config.attention_dropout == 0.0
    assert config.vision_config.attention_dropout == 0.0


def _tiny(quick: bool) -> zoo.Workload:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    return zoo.Workload(model, (torch.randn(4, 8),), zoo_hf._loss)


def test_hf_suite_reports_modes_headlines_and_ember_columns(monkeypatch):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_hf, "MODELS", {"mlp": zoo_hf.HFModel("test", _tiny, True)})
    monkeypatch.setattr(zoo_hf, "QUICK_MODELS", ("mlp",))
    result = registry.run("zoo", quick=True, suite="hf")
    assert result.name == "zoo-hf"
    assert [r[:4] for r in result.rows] == [["mlp", "test", "inference", "float32"],
                                            ["mlp", "test", "inference", "amp"],
                                            ["mlp", "test", "training", "float32"]]
    ok = result.columns.index("ember ok")
    assert [r[ok] for r in result.rows] == ["yes"] * 3, result.notes
    breaks = result.columns.index("ember graph breaks")
    assert [r[breaks] for r in result.rows] == [0, 0, 0]
    assert [r[-1] for r in result.rows] == ["none"] * 3
    assert "ember: 3/3 runs compile and match eager" in result.notes[0]
    assert "headline 0.75 x AMP + 0.25 x float32" in result.notes[0]
    assert "training step geomean" in result.notes[0]


def test_hf_suite_keeps_and_reuses_its_rows_in_a_store(monkeypatch, tmp_path):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo_hf, "MODELS", {"mlp": zoo_hf.HFModel("test", _tiny, True)})
    first = zoo.run(quick=True, suite="hf", models="mlp", store=str(tmp_path))
    assert (tmp_path / "mlp.json").exists()

    def no_measuring(*args, **kwargs):
        raise AssertionError("a stored model was measured again")

    monkeypatch.setattr(zoo_suite, "measure", no_measuring)
    again = zoo.run(quick=True, suite="hf", models="mlp", store=str(tmp_path))
    assert again.rows == first.rows and again.notes[0] == first.notes[0]
    assert "ember: 3/3 runs compile and match eager" in again.notes[0]
    assert any("measured in parts" in n for n in again.notes)


def test_zoo_suite_option_is_checked_and_reaches_the_cli(monkeypatch):
    with pytest.raises(ValueError, match="unknown zoo suite"):
        zoo.run(quick=True, suite="nope")
    with pytest.raises(ValueError, match="unknown hf zoo model"):
        zoo.run(quick=True, suite="hf", models="nope")
    assert "suite" in registry.options_of("zoo")
    seen = {}

    def fake_run_many(names, quick=False, progress=True, **options):
        seen.update(options, names=names)
        return iter([])

    monkeypatch.setattr(registry, "run_many", fake_run_many)
    assert cli.main(["bench", "zoo", "--suite", "hf", "--quick", "--no-progress"]) == 0
    assert seen == {"names": ["zoo"], "suite": "hf"}
