import math

import pytest
import torch

from ember.tools.bench import zoo


def test_matches_uses_a_tolerance_relative_to_each_tensor():
    ref = [torch.tensor([100.0, -50.0]), torch.tensor([1e-3])]
    assert zoo._matches([torch.tensor([100.05, -50.0]), torch.tensor([1e-3])], ref, 1e-3)
    assert not zoo._matches([torch.tensor([100.5, -50.0]), torch.tensor([1e-3])], ref, 1e-3)
    assert not zoo._matches([torch.tensor([100.0, -50.0]), torch.tensor([2e-3])], ref, 1e-3)
    assert not zoo._matches([torch.zeros(3), torch.zeros(1)], ref, 1.0)  # shape differs
    assert not zoo._matches([torch.zeros(2)], ref, 1.0)  # an output is missing
    assert not zoo._matches([torch.tensor([1.0, float("nan")])], [torch.ones(2)], 1.0)
    # dicts compare by key, integer tensors exactly
    assert zoo._matches({"b": torch.tensor([1]), "a": torch.ones(2)},
                        {"a": torch.ones(2), "b": torch.tensor([1])}, 0.0)
    assert not zoo._matches({"b": torch.tensor([2])}, {"b": torch.tensor([1])}, 1.0)


def test_headline_weights_amp_three_to_one():
    assert zoo.headline([2.0, 8.0], [1.0]) == pytest.approx(0.75 * 4.0 + 0.25 * 1.0)
    assert math.isnan(zoo.headline([], [1.0]))


def _tiny_mlp(quick: bool) -> zoo.Workload:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    return zoo.Workload(model, (x,), lambda out: out.float().pow(2).mean())


def test_zoo_reports_every_mode_and_precision_with_accuracy(monkeypatch):
    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo, "MODELS", {"mlp": ("test", _tiny_mlp)})
    monkeypatch.setattr(zoo, "QUICK_MODELS", ("mlp",))
    result = zoo.run(quick=True)
    assert [r[:3] for r in result.rows] == [["mlp", m, p] for m in zoo.MODES
                                            for p in zoo.PRECISIONS]
    ok = result.columns.index("ember ok")
    assert [r[ok] for r in result.rows] == ["yes"] * 4, result.notes
    assert all(r[result.columns.index("ember speedup")] > 0 for r in result.rows)
    assert result.ratio_columns() == ["ember speedup"]
    assert "ember: 4/4 runs compile and match eager (100%)" in result.notes[0]


def test_zoo_rejects_unknown_models():
    with pytest.raises(ValueError, match="unknown zoo model"):
        zoo.run(quick=True, models="nope")


def test_accuracy_falls_back_to_a_float64_reference():
    ref64 = [torch.tensor([1.0, 2.0])]
    eager = [torch.tensor([1.0, 2.04])]          # eager itself is 2% off float64
    close_to_64 = [torch.tensor([1.0, 1.98])]    # 3% from eager, 1% from float64
    wrong = [torch.tensor([1.0, 2.5])]
    assert not zoo._matches(close_to_64, eager, 1e-3)
    assert zoo._accurate(close_to_64, eager, ref64, 1e-3)
    assert not zoo._accurate(wrong, eager, ref64, 1e-3)
    assert not zoo._accurate(close_to_64, eager, None, 1e-3)  # no reference: eager decides


def test_float64_reference_runs_the_same_step_in_double():
    torch.manual_seed(0)
    work = _tiny_mlp(True)
    initial = {k: v.clone() for k, v in work.model.state_dict().items()}
    ref = zoo._float64_reference(work, initial, "training", "cpu")
    assert ref[1].dtype == torch.float64  # gradients of the float64 copy
    eager = zoo._step(work, work.model, "training", "float32", "cpu")()
    assert zoo._rel_error(eager, ref) < 1e-5
    assert work.model[0].weight.dtype == torch.float32  # the original is untouched


class _TwoHeads(torch.nn.Module):
    """A head the loss never reads (googlenet's auxiliary classifiers in training mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head, self.aux = (torch.nn.Linear(8, 8), torch.nn.Linear(8, 3),
                                          torch.nn.Linear(8, 3))

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.head(h), self.aux(h)


def test_training_step_compares_an_unreached_parameter_as_a_zero_gradient():
    """Eager leaves such a parameter's grad None, a compiled graph fills it with zeros; the
    step compares both as zeros of the parameter's shape, so the two agree."""
    torch.manual_seed(0)
    work = zoo.Workload(_TwoHeads(), (torch.randn(4, 8),), lambda out: out[0].pow(2).mean())
    initial = {k: v.clone() for k, v in work.model.state_dict().items()}
    eager = zoo._step(work, work.model, "training", "float32", "cpu")()
    assert work.model.aux.weight.grad is None
    assert eager[-2].shape == work.model.aux.weight.shape and not eager[-2].any()
    work.model.load_state_dict(initial)  # the step took an SGD step
    compiled = zoo._step(work, zoo._compile("ember", work.model), "training", "float32", "cpu")()
    assert zoo._matches(compiled, eager, 1e-5)


def test_a_model_eager_cannot_run_is_an_error_not_a_crash(monkeypatch):
    """A model that fails in eager at the zoo's inputs (inception_v3's auxiliary head below
    299x299) leaves every backend without a timing: the case reports the error."""
    class TooSmall(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("input too small for the pooling")

    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    work = lambda quick: zoo.Workload(TooSmall(), (torch.randn(2, 3),), lambda out: out.sum())
    res = zoo._case(work, True, "inference", "float32", "cpu", rounds=1)
    assert "input too small" in res["eager"]["error"] and "time" not in res["eager"]
    assert not res["ember"]["ok"] and "time" not in res["ember"]
