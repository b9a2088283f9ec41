"""The zoo's accuracy rule (zoo._accurate) on real training steps of two small models: it
accepts rounding noise (another summation order, gradients whose true value is ~0) and
rejects miscompiles (a perturbed, sign-flipped or zeroed gradient, a transposed weight, a
missing term); its float64 arbitration (zoo._arbitrated) accepts a ReLU decided the other
way at its kink and still rejects the miscompiles."""

import copy

import pytest
import torch
import torch.nn.functional as F

from ember.tools.bench import zoo

TOL = zoo.TOLERANCE[("float32", "training")]


class _ConvBN(torch.nn.Module):
    """conv3x3 -> BN -> conv1x1 -> BN -> relu -> conv3x3 -> BN -> relu -> mean -> linear.

    The first BN's bias gradient is mathematically zero: a per-channel shift goes through the
    1x1 convolution (no padding) as a per-channel shift, which the second BN (training mode)
    removes; numerically it is rounding noise.
    """

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 8, 1, bias=False), torch.nn.BatchNorm2d(8)
        self.c3 = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.b3 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 5)
        self.bug = None

    def _bn1(self, x):
        if self.bug != "manual bn":
            return self.b1(x)
        # the same training-mode batch norm written out: another backward, other roundings
        mean = x.mean((0, 2, 3), keepdim=True)
        var = (x - mean).pow(2).mean((0, 2, 3), keepdim=True)
        scale = (self.b1.weight / (var.flatten() + self.b1.eps).sqrt()).view(1, -1, 1, 1)
        return (x - mean) * scale + self.b1.bias.view(1, -1, 1, 1)

    def forward(self, x):
        x = self.b2(self.c2(self._bn1(self.c1(x)))).relu()
        if self.bug == "transpose":  # a square weight used transposed
            x = x + F.conv2d(x, self.c2.weight.transpose(0, 1))
        x = self.b3(self.c3(x))
        if self.bug == "relu flip":  # the ReLU input nearest zero decided the other way
            i = x.detach().abs().flatten().argmin()
            keep = (x > 0).flatten()
            keep[i] = ~keep[i]
            x = x * keep.view_as(x)
        elif self.bug != "missing term":
            x = x.relu()
        return self.fc(x.mean((2, 3)))


class _MLPBlock(torch.nn.Module):
    """Transformer-ish: LayerNorm -> square projection -> GELU MLP with a residual -> head."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj = torch.nn.LayerNorm(16), torch.nn.Linear(16, 16)
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)
        self.head = torch.nn.Linear(16, 5)
        self.bug = None

    def forward(self, x):
        w = self.proj.weight.t() if self.bug == "transpose" else self.proj.weight
        h = F.linear(self.norm(x), w, self.proj.bias)
        y = self.down(F.gelu(self.up(h)))
        if self.bug != "missing term":
            y = y + h
        return self.head(y)


def _build(name: str):
    torch.manual_seed(0)
    if name == "convbn":
        return _ConvBN(), torch.randn(4, 3, 6, 6)
    return _MLPBlock(), torch.randn(4, 8, 16)


def _workload(model, x, order=None) -> zoo.Workload:
    """Cross-entropy training workload; ``order`` permutes the batch (the same step, summed in
    another order)."""
    y = (torch.arange(x.shape[:-1].numel() if x.dim() == 3 else x.shape[0]) % 5).view(
        x.shape[0], -1)
    if order is not None:
        x, y = x[order], y[order]
    y = y.flatten()
    return zoo.Workload(model, (x,), lambda out: F.cross_entropy(out.flatten(0, -2), y))


def _step(name: str, bug=None, order=None):
    model, x = _build(name)
    model.train()
    model.bug = bug
    return zoo._step(_workload(model, x, order), model, "training", "float32", "cpu")()


def _ref64(name: str):
    model, x = _build(name)
    model.train()
    initial = copy.deepcopy(model.state_dict())
    return zoo._float64_reference(_workload(model, x), initial, "training", "cpu")


@pytest.fixture(scope="module", params=["convbn", "mlp"])
def case(request):
    name = request.param
    return name, _step(name), _ref64(name)


def test_the_conv_net_has_a_gradient_whose_true_value_is_zero():
    ref64, eager = _ref64("convbn"), _step("convbn")
    typical = torch.tensor([zoo._rms(t) for t in ref64]).median()
    bias1 = 1 + [n for n, _ in _ConvBN().named_parameters()].index("b1.bias")
    assert zoo._rms(ref64[bias1]) < 1e-12 * typical
    assert zoo._rms(eager[bias1]) > 0  # float32 rounding noise


def test_accepts_the_same_step_in_another_summation_order(case):
    name, eager, ref64 = case
    other = _step(name, order=torch.tensor([2, 0, 3, 1]))  # the batch in another order
    assert zoo._rel_error(other, eager) > 0
    assert zoo._accuracy_failures(other, eager, ref64, TOL) == []


def test_accepts_batch_norm_written_out_with_its_noise_on_the_zero_gradient():
    eager, ref64 = _step("convbn"), _ref64("convbn")
    other = _step("convbn", bug="manual bn")
    bias1 = 1 + [n for n, _ in _ConvBN().named_parameters()].index("b1.bias")
    # the ~0 gradient: the two float32 runs disagree on the order of its own magnitude
    assert (other[bias1] - eager[bias1]).abs().max() > 0.5 * eager[bias1].abs().max()
    assert zoo._accuracy_failures(other, eager, ref64, TOL) == []


def test_accepts_noise_on_a_zero_gradient_that_the_relative_test_rejects():
    eager, ref64 = _step("convbn"), _ref64("convbn")
    bias1 = 1 + [n for n, _ in _ConvBN().named_parameters()].index("b1.bias")
    noisy = [t.clone() for t in eager]
    # ten times eager's own noise on the ~0 gradient (another kernel's summation order)
    noisy[bias1] = eager[bias1] + 10 * (eager[bias1] - ref64[bias1].float()).flip(0)
    assert zoo._tensor_rel_error(noisy[bias1], eager[bias1]) > TOL  # the first test fails
    assert zoo._accurate(noisy, eager, ref64, TOL)


def _nonzero_gradients(ref64) -> list[int]:
    """Indices of the gradients whose float64 value is not ~0."""
    typical = float(torch.tensor([zoo._rms(t) for t in ref64]).median())
    return [i for i in range(1, len(ref64)) if zoo._rms(ref64[i]) > 1e-6 * typical]


@pytest.mark.parametrize("factor", [1.01, 1.1, -1.0, 0.0])
def test_rejects_one_gradient_scaled_flipped_or_zeroed(case, factor):
    name, eager, ref64 = case
    indices = _nonzero_gradients(ref64)
    assert len(indices) >= 8
    for i in indices:
        wrong = [t.clone() for t in eager]
        wrong[i] = wrong[i] * factor
        assert not zoo._accurate(wrong, eager, ref64, TOL), (name, i, factor)


@pytest.mark.parametrize("bug", ["transpose", "missing term"])
def test_rejects_a_miscompiled_model(case, bug):
    name, eager, ref64 = case
    failures = zoo._accuracy_failures(_step(name, bug=bug), eager, ref64, TOL)
    assert failures, (name, bug)


def test_integers_and_structure_stay_exact():
    ref64 = [torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([3])]
    eager = [torch.tensor([1.0, 2.0]), torch.tensor([3])]
    assert zoo._accurate(eager, eager, ref64, 1.0)
    assert not zoo._accurate([eager[0], torch.tensor([4])], eager, ref64, 1.0)
    assert not zoo._accurate(eager[:1], eager, ref64, 1.0)
    assert not zoo._accurate([torch.ones(3), eager[1]], eager, ref64, 1.0)
    assert not zoo._accurate([torch.tensor([1.0, float("nan")]), eager[1]], eager, ref64, 1.0)


def _step64(name: str, bug=None, order=None):
    """The float64 step of the model with ``bug`` (a backend's float64 compile)."""
    model, x = _build(name)
    model.train()
    model.bug = bug
    initial = copy.deepcopy(model.state_dict())
    return zoo._float64_step(_workload(model, x, order), initial, "training", "cpu")


def test_a_relu_flipped_at_its_kink_fails_the_rule_but_passes_in_float64():
    eager, ref64 = _step("convbn"), _ref64("convbn")
    flipped = _step("convbn", bug="relu flip")
    assert zoo._accuracy_failures(flipped, eager, ref64, TOL)  # percents on the gradients
    assert zoo._rel_error(flipped[:1], eager[:1]) < 1e-4       # the loss barely moves
    other64 = _step64("convbn", order=torch.tensor([2, 0, 3, 1]))
    assert zoo._rel_error(other64, ref64) > 0
    assert zoo._arbitrated(flipped, eager, other64, ref64, TOL)


@pytest.mark.parametrize("bug", ["transpose", "missing term", "relu flip"])
def test_float64_arbitration_rejects_a_miscompile_in_float64(bug):
    eager, ref64 = _step("convbn"), _ref64("convbn")
    flipped = _step("convbn", bug="relu flip")
    assert not zoo._arbitrated(flipped, eager, _step64("convbn", bug=bug), ref64, TOL)


@pytest.mark.parametrize("bug", ["transpose", "missing term"])
def test_float64_arbitration_rejects_a_miscompile_in_float32_alone(bug):
    eager, ref64 = _step("convbn"), _ref64("convbn")
    wrong = _step("convbn", bug=bug)
    assert not zoo._arbitrated(wrong, eager, _step64("convbn"), ref64, TOL)


def test_float64_arbitration_rejects_a_flipped_or_zeroed_gradient():
    eager, ref64 = _step("convbn"), _ref64("convbn")
    for i in _nonzero_gradients(ref64):
        for factor in (-1.0, 0.0):
            wrong = [t.clone() for t in eager]
            wrong[i] = wrong[i] * factor
            assert not zoo._arbitrated(wrong, eager, ref64, ref64, TOL), (i, factor)


@pytest.mark.parametrize("bug64, label", [(None, "yes (float64)"), ("transpose", "NO")])
def test_a_case_judges_a_failed_float32_training_step_in_float64(monkeypatch, bug64, label):
    """zoo._case with a stand-in backend whose float32 step flips a ReLU at its kink and whose
    float64 step is right (or transposes a weight)."""
    def compile_(backend, model):
        if backend != "eager":
            model.bug = "relu flip" if model.b1.weight.dtype == torch.float32 else bug64
        return model

    monkeypatch.setattr(zoo, "BACKENDS", ("ember",))
    monkeypatch.setattr(zoo, "_compile", compile_)
    res = zoo._case(lambda quick: _workload(*_build("convbn")), True, "training", "float32",
                    "cpu", rounds=1)
    cells, _ = zoo.backend_cells(res, ("ember",), res["eager"]["time"], "convbn", [],
                                 {"ember": 0})
    assert cells[0] == label


AMP_TOL = zoo.TOLERANCE[("amp", "training")]
# float64, eager and a compiled run of efficientnet_b7's AMP training loss in the vision zoo
# (batch 2 at 64x64: eager's own logits are 40% RMS off float64 there)
B7_LOSS = {"float64": 3.4401, "eager": 2.9730, "compiled": 5.5896}


def test_an_amp_loss_as_far_from_float64_as_chance_puts_it_passes():
    ref64 = [torch.tensor(B7_LOSS["float64"], dtype=torch.float64)]
    eager, got = [torch.tensor(B7_LOSS["eager"])], [torch.tensor(B7_LOSS["compiled"])]
    # 4.6x eager's error: past the 3x of a larger tensor, inside the 10x of one draw
    assert 3 < abs(B7_LOSS["compiled"] - B7_LOSS["float64"]) / \
        abs(B7_LOSS["eager"] - B7_LOSS["float64"]) < 10
    assert zoo._accurate(got, eager, ref64, AMP_TOL)
    assert not zoo._accurate(got, eager, ref64, TOL)  # float32's rule keeps 3x


def test_an_amp_loss_further_off_and_a_larger_amp_tensor_still_fail():
    ref64 = [torch.tensor(B7_LOSS["float64"], dtype=torch.float64)]
    eager = [torch.tensor(B7_LOSS["eager"])]
    err = abs(B7_LOSS["eager"] - B7_LOSS["float64"])
    assert not zoo._accurate([torch.tensor(B7_LOSS["float64"] + 11 * err)], eager, ref64,
                             AMP_TOL)
    torch.manual_seed(0)
    ref = torch.randn(zoo.FEW_ELEMENTS + 1, dtype=torch.float64)
    noise = torch.randn(zoo.FEW_ELEMENTS + 1, dtype=torch.float64)
    eager_t = (ref + noise).float()
    assert not zoo._accurate([(ref + 5 * noise).float()], [eager_t], [ref], AMP_TOL)
    assert zoo._accurate([(ref + 2.5 * noise).float()], [eager_t], [ref], AMP_TOL)
