"""Issue #20's classification zoo: every builder has torchvision's published parameter count;
forwards run (real or meta-device) for each code path; small ones compile and match eager."""

from __future__ import annotations

import contextlib

import pytest
import torch

import ember.core
from ember.vision import models

pytestmark = pytest.mark.usefixtures("one_thread")

# torchvision's published parameter counts (weights' meta "num_params", 1000 classes)
PUBLISHED = {
    "resnet101": 44_549_160, "resnet152": 60_192_808, "resnext50_32x4d": 25_028_904,
    "resnext101_32x8d": 88_791_336, "resnext101_64x4d": 83_455_272,
    "wide_resnet50_2": 68_883_240, "wide_resnet101_2": 126_886_696,
    "mobilenet_v2": 3_504_872, "alexnet": 61_100_840,
    "squeezenet1_0": 1_248_424, "squeezenet1_1": 1_235_496,
    "vgg11": 132_863_336, "vgg11_bn": 132_868_840, "vgg13": 133_047_848,
    "vgg13_bn": 133_053_736, "vgg16": 138_357_544, "vgg16_bn": 138_365_992,
    "vgg19": 143_667_240, "vgg19_bn": 143_678_248,
    "densenet121": 7_978_856, "densenet161": 28_681_000, "densenet169": 14_149_480,
    "densenet201": 20_013_928,
    "shufflenet_v2_x0_5": 1_366_792, "shufflenet_v2_x1_0": 2_278_604,
    "shufflenet_v2_x1_5": 3_503_624, "shufflenet_v2_x2_0": 7_393_996,
    "efficientnet_b0": 5_288_548, "efficientnet_b1": 7_794_184, "efficientnet_b2": 9_109_994,
    "efficientnet_b3": 12_233_232, "efficientnet_b4": 19_341_616,
    "efficientnet_b5": 30_389_784, "efficientnet_b6": 43_040_704,
    "efficientnet_b7": 66_347_960, "efficientnet_v2_s": 21_458_488,
    "efficientnet_v2_m": 54_139_356, "efficientnet_v2_l": 118_515_272,
    "convnext_tiny": 28_589_128, "convnext_small": 50_223_688, "convnext_base": 88_591_464,
    "convnext_large": 197_767_336,
    "regnet_x_400mf": 5_495_976, "regnet_x_800mf": 7_259_656, "regnet_x_1_6gf": 9_190_136,
    "regnet_x_3_2gf": 15_296_552, "regnet_x_8gf": 39_572_648, "regnet_x_16gf": 54_278_536,
    "regnet_x_32gf": 107_811_560, "regnet_y_400mf": 4_344_144, "regnet_y_800mf": 6_432_512,
    "regnet_y_1_6gf": 11_202_430, "regnet_y_3_2gf": 19_436_338, "regnet_y_8gf": 39_381_472,
    "regnet_y_16gf": 83_590_140, "regnet_y_32gf": 145_046_770,
    "regnet_y_128gf": 644_812_894,
    "mnasnet0_5": 2_218_512, "mnasnet0_75": 3_170_208, "mnasnet1_0": 4_383_312,
    "mnasnet1_3": 6_282_256,
    "vit_b_32": 88_224_232, "vit_l_16": 304_326_632, "vit_l_32": 306_535_400,
    "vit_h_14": 632_045_800, "inception_v3": 27_161_264,
    "swin_t": 28_288_354, "swin_s": 49_606_258, "swin_b": 87_768_224,
    "swin_v2_t": 28_351_570, "swin_v2_s": 49_737_442, "swin_v2_b": 87_930_848,
    "maxvit_t": 30_919_624,
}

# real forwards at 32x32 for code paths no other test here runs (squeezenet: the compile
# test; densenet: the checkpoint test; resnet: test_models.py); meta-device forwards (shapes
# only, cheap) for the others whose code paths differ
REAL_FORWARD = ["mobilenet_v2", "shufflenet_v2_x0_5", "efficientnet_b0", "convnext_tiny",
                "regnet_y_400mf", "mnasnet0_5", "swin_v2_t"]
META_FORWARD = {"vgg11_bn": 32, "wide_resnet50_2": 32, "resnext50_32x4d": 32, "alexnet": 64,
                "squeezenet1_0": 64, "efficientnet_v2_s": 32, "regnet_x_400mf": 32,
                "vit_b_32": 224, "googlenet": 32, "inception_v3": 80, "swin_t": 64,
                "maxvit_t": 224}


def n_params(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_equals_published(name):
    # no initialisers: counting needs no values, and on the meta device each one runs through
    # Python reference kernels (60% of an EfficientNet-B7 build)
    with torch.device("meta"), no_init():
        assert n_params(models.get_model(name)) == PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(META_FORWARD))
def test_meta_forward_shapes(name):
    side = META_FORWARD[name]
    with torch.device("meta"):
        m = models.get_model(name, num_classes=7).eval()
        assert m(torch.empty(2, 3, side, side)).shape == (2, 7)


_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
          "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_")


@contextlib.contextmanager
def no_init():
    """torch.nn.init's initialisers as no-ops (for counting, or before a quick fill)."""
    saved = {fn: getattr(torch.nn.init, fn) for fn in _INITS}
    for fn in _INITS:
        setattr(torch.nn.init, fn, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for fn, f in saved.items():
            setattr(torch.nn.init, fn, f)


def quick_build(name, **kwargs):
    """Built without the builders' own init (trunc_normal_ over ConvNeXt's 28M weights...
    dominated these tests), then parameters filled with quick scaled random values."""
    with no_init():
        m = models.get_model(name, **kwargs)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for key, t in m.named_parameters():
            if t.ndim > 1:
                t.normal_(0, (t[0].numel() or 1) ** -0.5, generator=g)
            else:
                t.fill_(1 if key.endswith("weight") else 0)
    return m


@pytest.mark.parametrize("name", REAL_FORWARD)
def test_forward_small_input(name):
    m = quick_build(name, num_classes=5).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        out = m(x)
        single = m(x[1:])
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    torch.testing.assert_close(out[1:], single, rtol=1e-4, atol=1e-5)


def test_builders_are_registered_and_exported():
    assert set(PUBLISHED) <= set(models.list_models())
    for name in PUBLISHED:
        assert callable(getattr(models, name)) and name in models.__all__
    with pytest.raises(ValueError, match="groups"):
        models.resnext50_32x4d(groups=8)   # a builder's defining setting cannot change


def test_googlenet_published_count_is_without_auxiliary_heads():
    with torch.device("meta"):
        assert n_params(models.googlenet(aux_logits=False)) == 6_624_904
        assert n_params(models.googlenet()) == 13_004_888   # torchvision's default has them


def test_densenet_loads_original_checkpoint_keys(tmp_path):
    """The original DenseNet files name ``norm1`` ``norm.1``; torchvision renames on load."""
    a = quick_build("densenet121", num_classes=3).eval()
    legacy = {k.replace("norm1.", "norm.1.").replace("conv2.", "conv.2.")
              if "denselayer" in k else k: v for k, v in a.state_dict().items()
              if "denselayer" not in k or not k.endswith("num_batches_tracked")}
    assert any(".norm.1." in k for k in legacy)
    path = tmp_path / "densenet121.pth"
    torch.save(legacy, path)
    b = models.densenet121(num_classes=3, weights=str(path)).eval()
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(a(x), b(x))


@pytest.mark.parametrize("name", ["squeezenet1_1", pytest.param(
    "shufflenet_v2_x0_5", marks=pytest.mark.slow)])   # ~20 s of compile on 2 cores
def test_compiled_matches_eager(name):
    torch.manual_seed(0)
    m = models.get_model(name, num_classes=4).eval()
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ember.core.compile(m)(x), m(x), rtol=1e-4, atol=1e-5)
