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


@pytest.mark.parametrize("name", sorted(CASES))
def test_builder_matches_torchvision(name):
    side = CASES[name]
    if side is None:
        with torch.device("meta"):
            check_structure(em.get_model(name), tvm.get_model(name))
        return
    torch.manual_seed(0)
    theirs = tvm.get_model(name).eval()
    ours = em.get_model(name).eval()
    check_structure(ours, theirs)
    randomise_norm_stats(theirs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.rand(2, 3, side, side, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out_t = theirs(x)
        out_o = ours(x)
    torch.testing.assert_close(out_o, out_t, rtol=1e-5, atol=1e-5)
    theirs.load_state_dict(ours.state_dict(), strict=True)


def test_builder_signatures_match_torchvision():
    import inspect
    for name in CASES:
        ps = inspect.signature(getattr(em, name)).parameters
        assert list(ps)[:2] == ["weights", "progress"], name
        assert all(ps[p].kind is inspect.Parameter.KEYWORD_ONLY for p in ("weights", "progress"))
        assert ps["progress"].default is True and ps["weights"].default is None
