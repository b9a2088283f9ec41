"""ember.vision.models.segmentation and .video against the real torchvision 0.29: every
builder has torchvision's parameter count and state_dict keys and shapes; torchvision's
state_dict loads into ours strictly and ours into theirs; eval outputs agree within 1e-5.

Runs in `.venv-peers`; elsewhere the importorskip below skips the module. The ResNet-101
models are compared on the meta device (structure only).
"""

from __future__ import annotations

import pytest

torchvision = pytest.importorskip("torchvision")

import torch  # noqa: E402
import torchvision.models as tvm  # noqa: E402
import torchvision.models.segmentation as tvs  # noqa: E402

from ember.vision import models as em  # noqa: E402
from ember.vision.models import segmentation as ems  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

# segmentation builder -> input side for the forward comparison (None: meta device only)
SEGMENTATION = {"fcn_resnet50": 32, "fcn_resnet101": None, "deeplabv3_resnet50": 32,
                "deeplabv3_resnet101": None, "deeplabv3_mobilenet_v3_large": 48,
                "lraspp_mobilenet_v3_large": 48}


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


def seg_kwargs(name, **kw):
    """Our and torchvision's keywords: no backbone download on their side."""
    if not name.startswith("lraspp"):
        kw.setdefault("aux_loss", True)
    return kw, {**kw, "weights_backbone": None}


@pytest.mark.parametrize("name", sorted(SEGMENTATION))
def test_segmentation_builder_matches_torchvision(name):
    side = SEGMENTATION[name]
    ours_kw, their_kw = seg_kwargs(name, num_classes=5)
    if side is None:
        with torch.device("meta"):
            check_structure(ems.__dict__[name](**ours_kw), tvs.__dict__[name](**their_kw))
        return
    torch.manual_seed(0)
    theirs = tvs.__dict__[name](**their_kw).eval()
    ours = em.get_model(name, **ours_kw).eval()
    check_structure(ours, theirs)
    randomise_norm_stats(theirs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.rand(2, 3, side, side + 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out_t, out_o = theirs(x), ours(x)
    assert list(out_o) == list(out_t)
    for key in out_t:
        assert out_o[key].shape == (2, 5, side, side + 8)
        torch.testing.assert_close(out_o[key], out_t[key], rtol=1e-5, atol=1e-5)
    theirs.load_state_dict(ours.state_dict(), strict=True)


@pytest.mark.parametrize("name", sorted(SEGMENTATION))
def test_segmentation_published_counts_and_defaults(name):
    """torchvision's weights meta counts (auxiliary head on) and its no-weights defaults."""
    enum = em.get_model_weights(name)
    their_enum = tvm.get_model_weights(name)
    assert enum.__name__ == their_enum.__name__
    assert list(enum.__members__) == list(their_enum.__members__)
    for key in enum.__members__:
        ours, theirs = enum[key], their_enum[key]
        assert ours.file_name == theirs.url.rsplit("/", 1)[-1]
        assert ours.meta["num_params"] == theirs.meta["num_params"]
        assert ours.meta["categories"] == theirs.meta["categories"]
    ours_kw, their_kw = seg_kwargs(name)
    with torch.device("meta"):
        assert n_params(em.get_model(name, **ours_kw)) == enum.DEFAULT.meta["num_params"]
        check_structure(em.get_model(name), tvs.__dict__[name](weights_backbone=None))


def test_segmentation_weights_entry_loads_a_local_file_like_torchvision(tmp_path):
    """An entry loads torchvision's file name from weights_dir with 21 classes and the
    auxiliary head, as torchvision's pretrained builder does."""
    torch.manual_seed(0)
    theirs = tvs.lraspp_mobilenet_v3_large(weights_backbone=None).eval()
    randomise_norm_stats(theirs)
    file = em.get_model_weights("lraspp_mobilenet_v3_large").DEFAULT.file_name
    torch.save(theirs.state_dict(), tmp_path / file)
    ours = ems.lraspp_mobilenet_v3_large(weights="DEFAULT", weights_dir=tmp_path).eval()
    x = torch.rand(1, 3, 40, 40)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)["out"], theirs(x)["out"], rtol=1e-5, atol=1e-5)
    fcn = tvs.fcn_resnet50(weights_backbone=None, aux_loss=True)
    path = tmp_path / "fcn.pth"
    torch.save(fcn.state_dict(), path)
    assert ems.fcn_resnet50(weights=str(path)).aux_classifier is not None
    assert ems.fcn_resnet50(weights=str(path), aux_loss=False).aux_classifier is None
    with pytest.raises(ValueError, match="num_classes"):
        ems.fcn_resnet50(weights="DEFAULT", weights_dir=tmp_path, num_classes=3)


def test_segmentation_backbone_weights_load_as_in_torchvision(tmp_path):
    """``weights_backbone=`` loads the classification checkpoint into the dilated backbone."""
    torch.manual_seed(0)
    cls = tvm.mobilenet_v3_large().eval()
    randomise_norm_stats(cls)
    torch.save(cls.state_dict(), tmp_path / em.MobileNet_V3_Large_Weights.DEFAULT.file_name)
    ours = ems.deeplabv3_mobilenet_v3_large(weights_backbone="DEFAULT", weights_dir=tmp_path)
    their_state = cls.features.state_dict()
    for key, value in ours.backbone.state_dict().items():
        torch.testing.assert_close(value, their_state[key], rtol=0, atol=0)


# video builder -> clip shape [N, 3, T, H, W] for the forward comparison (s3d: its minimum)
VIDEO = {"r3d_18": (1, 3, 4, 32, 32), "mc3_18": (1, 3, 4, 32, 32),
         "r2plus1d_18": (1, 3, 4, 32, 32), "s3d": (1, 3, 14, 224, 224)}


@pytest.mark.parametrize("name", sorted(VIDEO))
def test_video_builder_matches_torchvision(name):
    import torchvision.models.video as tvv

    torch.manual_seed(0)
    theirs = tvv.__dict__[name](num_classes=7).eval()
    ours = em.get_model(name, num_classes=7).eval()
    check_structure(ours, theirs)
    randomise_norm_stats(theirs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.rand(*VIDEO[name], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out_t, out_o = theirs(x), ours(x)
    assert out_o.shape == (1, 7)
    torch.testing.assert_close(out_o, out_t, rtol=1e-5, atol=1e-5)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    enum, their_enum = em.get_model_weights(name), tvm.get_model_weights(name)
    assert enum.__name__ == their_enum.__name__
    assert list(enum.__members__) == list(their_enum.__members__)
    ours_w, theirs_w = enum.DEFAULT, their_enum.DEFAULT
    assert ours_w.file_name == theirs_w.url.rsplit("/", 1)[-1]
    for key in ("num_params", "categories", "min_size"):
        assert ours_w.meta[key] == their_enum.DEFAULT.meta[key], key
    with torch.device("meta"):
        assert n_params(em.get_model(name)) == theirs_w.meta["num_params"]


def test_video_preset_matches_torchvision():
    g = torch.Generator().manual_seed(0)
    clip = torch.randint(0, 256, (2, 5, 3, 40, 52), dtype=torch.uint8, generator=g)
    ours = em.video.R3D_18_Weights.DEFAULT.transforms()
    theirs = tvm.get_model_weights("r3d_18").DEFAULT.transforms()
    expected = theirs(clip)
    out = ours(clip)
    assert out.shape == expected.shape == (2, 3, 5, 112, 112)
    # uint8 resampled in float and rounded by both; a rounding tie may land one level apart
    assert (out - expected).abs().max() <= 1.01 / 255 / min(ours.std)
    assert torch.allclose(ours(clip[0]), out[0])


def test_builder_signatures_match_torchvision():
    """Same keywords in the same order with the same defaults; ``weights_backbone`` defaults
    to None here (torchvision's default entry would need a download)."""
    import inspect

    for name in [*SEGMENTATION, *VIDEO]:
        ours = inspect.signature(em._registry._MODELS[name]).parameters
        theirs = inspect.signature(tvm.get_model_builder(name)).parameters
        assert list(ours) == list(theirs), name
        for key, p in theirs.items():
            if key != "weights_backbone":
                assert ours[key].default == p.default, (name, key)
        if "weights_backbone" in ours:
            assert ours["weights_backbone"].default is None
