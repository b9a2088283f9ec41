"""ember.vision.models against the real torchvision 0.29: every classification builder
(issue #20) has torchvision's parameter count and state_dict keys and shapes; torchvision's
state_dict loads into ours strictly and ours into theirs, and eval outputs agree.

Runs in `.venv-peers` (`make test-peers`); elsewhere the importorskip below skips the module.
Tolerance: 1e-5 relative (and absolute) on the logits. The largest models are compared on
the meta device (parameters, keys and shapes; no forward) to keep the suite fast.
"""

from __future__ import annotations

import pytest

torchvision = pytest.importorskip("torchvision")

import torch  # noqa: E402
import torchvision.models as tvm  # noqa: E402

from ember.vision import models as em  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

# name -> input side for the forward comparison (None: meta device, structure only)
CASES = {
    "resnet101": 64, "resnet152": 64, "resnext50_32x4d": 64, "resnext101_32x8d": None,
    "resnext101_64x4d": None, "wide_resnet50_2": 64, "wide_resnet101_2": None,
    "mobilenet_v2": 64, "alexnet": 64, "squeezenet1_0": 64, "squeezenet1_1": 64,
    **{f"vgg{d}{bn}": None for d in (11, 13, 16, 19) for bn in ("", "_bn")},
    "vgg11_bn": 32,   # one VGG forward (vgg*: 133-144M parameters, mostly the classifier)
    "densenet121": 32, "densenet161": None, "densenet169": None, "densenet201": None,
    "shufflenet_v2_x0_5": 64, "shufflenet_v2_x1_0": 64, "shufflenet_v2_x1_5": None,
    "shufflenet_v2_x2_0": 64,
    **{f"efficientnet_b{i}": None for i in range(8)}, "efficientnet_b0": 64,
    "efficientnet_b5": 32,   # B5-B7 use BatchNorm eps 1e-3 (seen only in the outputs)
    "efficientnet_v2_s": 32, "efficientnet_v2_m": None, "efficientnet_v2_l": None,
    "convnext_tiny": 32, "convnext_small": None, "convnext_base": None, "convnext_large": None,
    **{f"regnet_{f}_{s}": None for f in "xy" for s in ("400mf", "800mf", "1_6gf", "3_2gf",
                                                          "8gf", "16gf", "32gf")},
    "regnet_y_128gf": None, "regnet_x_400mf": 64, "regnet_y_400mf": 64, "regnet_x_3_2gf": 32,
    "mnasnet0_5": 64, "mnasnet0_75": None, "mnasnet1_0": 64, "mnasnet1_3": None,
    "vit_b_16": None, "vit_b_32": 224, "vit_l_16": None, "vit_l_32": None, "vit_h_14": None,
    "mobilenet_v3_small": 64, "mobilenet_v3_large": None, "resnet18": None, "resnet34": None,
    "resnet50": 64, "googlenet": 64, "inception_v3": 80,
    "swin_t": 64, "swin_s": None, "swin_b": None, "swin_v2_t": 64, "swin_v2_s": None,
    "swin_v2_b": None, "maxvit_t": 224,
}


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def randomise_norm_stats(model, seed=0):
    """Non-trivial BatchNorm statistics and affine terms, so the eval comparison sees them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                if m.weight is not None:
                    m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                    m.bias.copy_(torch.rand(n, generator=g) - 0.5)


def check_structure(ours, theirs):
    assert n_params(ours) == n_params(theirs)
    so, st = ours.state_dict(), theirs.state_dict()
    assert list(so) == list(st)
    assert {k: v.shape for k, v in so.items()} == {k: v.shape for k, v in st.items()}


def regnet_widths_on_cpu(monkeypatch):
    """torchvision computes RegNet widths with torch ops that fail on the meta device."""
    from torchvision.models import regnet

    plain = regnet.BlockParams.from_init_params.__func__

    def on_cpu(cls, *args, **kwargs):
        with torch.device("cpu"):
            return plain(cls, *args, **kwargs)
    monkeypatch.setattr(regnet.BlockParams, "from_init_params", classmethod(on_cpu))


# forward comparisons that repeat a code path compared elsewhere, on large models: slow only
SLOW_FORWARD = {"resnet101", "resnet152", "wide_resnet50_2", "efficientnet_b5"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if n in SLOW_FORWARD else n for n in sorted(CASES)])
def test_builder_matches_torchvision(name, monkeypatch):
    side = CASES[name]
    if side is None:
        regnet_widths_on_cpu(monkeypatch)
        with torch.device("meta"):
            check_structure(em.get_model(name), tvm.get_model(name))
        return
    torch.manual_seed(0)
    theirs = tvm.get_model(name).eval()
    ours = em.get_model(name).eval()
    check_structure(ours, theirs)
    randomise_norm_stats(theirs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    batch = 1 if side >= 224 else 2
    x = torch.rand(batch, 3, side, side, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out_t = theirs(x)
        out_o = ours(x)
    torch.testing.assert_close(out_o, out_t, rtol=1e-5, atol=1e-5)
    theirs.load_state_dict(ours.state_dict(), strict=True)


@pytest.mark.parametrize("name", sorted(SLOW_FORWARD))
def test_structure_of_the_slow_forward_cases(name):
    """The slow cases' keys, shapes and parameter counts, checked in every run (meta)."""
    with torch.device("meta"):
        check_structure(em.get_model(name), tvm.get_model(name))


@pytest.mark.parametrize("name", ["googlenet", pytest.param("inception_v3",
                                                            marks=pytest.mark.slow)])
def test_auxiliary_heads_and_pretrained_loading_match_torchvision(name, tmp_path):
    """Training mode returns torchvision's namedtuple with auxiliary logits; a checkpoint loads
    as torchvision's pretrained ones do (transform_input on, aux heads dropped or kept)."""
    torch.manual_seed(0)
    theirs = tvm.get_model(name, init_weights=False)
    randomise_norm_stats(theirs)
    ours = em.get_model(name)
    ours.load_state_dict(theirs.state_dict())
    side = 299 if name == "inception_v3" else 64   # its auxiliary head needs the 17x17 grid
    x = torch.rand(2, 3, side, side)
    ours.train()
    theirs.train()
    torch.manual_seed(1)
    out_t = theirs(x)
    torch.manual_seed(1)
    out_o = ours(x)
    assert type(out_o).__name__ == type(out_t).__name__ and out_o._fields == out_t._fields
    for a, b in zip(out_o, out_t):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    path = tmp_path / f"{name}.pth"
    torch.save(theirs.state_dict(), path)
    loaded = em.get_model(name, weights=str(path)).eval()
    assert loaded.transform_input
    reference = tvm.get_model(name, transform_input=True, init_weights=False).eval()
    reference.load_state_dict(theirs.state_dict())
    if name == "googlenet":
        assert loaded.aux1 is None and not loaded.aux_logits
    else:
        assert loaded.AuxLogits is not None
    with torch.no_grad():
        crop = x[:, :, :80, :80]   # eval needs no auxiliary grid; inception needs 75+
        torch.testing.assert_close(loaded(crop), reference(crop), rtol=1e-5, atol=1e-5)


def test_mnasnet_version1_checkpoints_load_as_in_torchvision():
    from ember.vision.models.mnasnet import _get_depths, _stem

    torch.manual_seed(0)
    old = em.mnasnet0_5().eval()   # a version-1 model: the stem was not scaled by alpha
    for i, layer in enumerate(_stem(32, 16, _get_depths(0.5)[2])):
        old.layers[i] = layer
    randomise_norm_stats(old)
    state = old.state_dict()
    state._metadata[""]["version"] = 1
    ours, theirs = em.mnasnet0_5().eval(), tvm.mnasnet0_5().eval()
    with pytest.warns(UserWarning, match="previous version"):
        ours.load_state_dict(state)
    with pytest.warns(UserWarning, match="previous version"):
        theirs.load_state_dict(state)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours(x), old(x), rtol=0, atol=0)


def test_builder_signatures_match_torchvision():
    import inspect
    for name in CASES:
        ps = inspect.signature(getattr(em, name)).parameters
        assert list(ps)[:2] == ["weights", "progress"], name
        assert all(ps[p].kind is inspect.Parameter.KEYWORD_ONLY for p in ("weights", "progress"))
        assert ps["progress"].default is True and ps["weights"].default is None
