"""Issue #20's segmentation and video models: torchvision's published parameter counts,
small forwards, weights enums and errors; one compiled model per family matches eager."""

from __future__ import annotations

import pytest
import torch

import ember.core
from ember.vision import models
from ember.vision.models import segmentation, video

pytestmark = pytest.mark.usefixtures("one_thread")

# torchvision's published counts (weights meta "num_params"; segmentation with aux heads)
PUBLISHED_SEGMENTATION = {
    "fcn_resnet50": 35_322_218, "fcn_resnet101": 54_314_346,
    "deeplabv3_resnet50": 42_004_074, "deeplabv3_resnet101": 60_996_202,
    "deeplabv3_mobilenet_v3_large": 11_029_328, "lraspp_mobilenet_v3_large": 3_221_538,
}


def n_params(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("name", sorted(PUBLISHED_SEGMENTATION))
def test_segmentation_parameter_count_equals_published(name):
    kw = {} if name.startswith("lraspp") else {"aux_loss": True}
    with torch.device("meta"):
        m = models.get_model(name, **kw)
    assert n_params(m) == PUBLISHED_SEGMENTATION[name]
    assert models.get_model_weights(name).DEFAULT.meta["num_params"] == n_params(m)


def test_segmentation_builders_are_listed_by_module():
    assert models.list_models(module=segmentation) == sorted(PUBLISHED_SEGMENTATION)
    assert "resnet50" not in models.list_models(module=segmentation)
    assert segmentation.FCN_ResNet50_Weights.DEFAULT.meta["categories"][0] == "__background__"


@pytest.mark.parametrize("name", ["lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large"])
def test_segmentation_forward_small_input(name):
    torch.manual_seed(0)
    m = models.get_model(name, num_classes=4).eval()
    x = torch.rand(2, 3, 40, 56)
    with torch.no_grad():
        out = m(x)
        single = m(x[1:])
    assert list(out) == ["out"] and out["out"].shape == (2, 4, 40, 56)
    torch.testing.assert_close(out["out"][1:], single["out"], rtol=1e-4, atol=1e-5)


def test_segmentation_aux_head_and_errors():
    torch.manual_seed(0)
    m = segmentation.fcn_resnet50(num_classes=3, aux_loss=True).eval()
    with torch.no_grad():
        out = m(torch.rand(1, 3, 32, 32))
    assert list(out) == ["out", "aux"] and out["aux"].shape == (1, 3, 32, 32)
    with pytest.raises(ValueError, match=r"\[N, 3, H, W\]"):
        m(torch.rand(3, 32, 32))
    with pytest.raises(NotImplementedError, match="auxiliary"):
        segmentation.lraspp_mobilenet_v3_large(aux_loss=True)
    with pytest.raises(FileNotFoundError, match="deeplabv3_resnet50_coco-cd0a2569.pth"):
        segmentation.deeplabv3_resnet50(weights="DEFAULT", weights_dir="/nonexistent")
    with pytest.raises(FileNotFoundError, match="resnet50-11ad3fa6.pth"):
        segmentation.deeplabv3_resnet50(weights_backbone="DEFAULT", weights_dir="/nonexistent")
    with pytest.raises(TypeError, match="ResNet50_Weights"):
        segmentation.fcn_resnet50(weights_backbone=models.ResNet18_Weights.DEFAULT)


def test_segmentation_checkpoint_file_round_trip(tmp_path):
    torch.manual_seed(0)
    a = segmentation.lraspp_mobilenet_v3_large(num_classes=21).eval()
    file = segmentation.LRASPP_MobileNet_V3_Large_Weights.DEFAULT.file_name
    torch.save(a.state_dict(), tmp_path / file)
    b = segmentation.lraspp_mobilenet_v3_large(weights="DEFAULT", weights_dir=tmp_path).eval()
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(a(x)["out"], b(x)["out"])


@pytest.mark.slow
def test_compiled_segmentation_matches_eager():
    torch.manual_seed(0)
    m = segmentation.lraspp_mobilenet_v3_large(num_classes=4).eval()
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ember.core.compile(m)(x)["out"], m(x)["out"],
                                   rtol=1e-4, atol=1e-5)


PUBLISHED_VIDEO = {"r3d_18": 33_371_472, "mc3_18": 11_695_440, "r2plus1d_18": 31_505_325,
                   "s3d": 8_320_048}


@pytest.mark.parametrize("name", sorted(PUBLISHED_VIDEO))
def test_video_parameter_count_equals_published(name):
    with torch.device("meta"):
        m = models.get_model(name)
    assert n_params(m) == PUBLISHED_VIDEO[name]
    weights = models.get_model_weights(name).DEFAULT
    assert weights.meta["num_params"] == PUBLISHED_VIDEO[name]
    assert len(weights.meta["categories"]) == 400


def test_video_builders_listed_and_small_forward():
    assert models.list_models(module=video) == sorted(PUBLISHED_VIDEO)
    torch.manual_seed(0)
    m = video.r2plus1d_18(num_classes=5).eval()
    x = torch.rand(2, 3, 4, 32, 32)
    with torch.no_grad():
        out = m(x)
        single = m(x[1:])
    assert out.shape == (2, 5)
    torch.testing.assert_close(out[1:], single, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"\[N, 3, T, H, W\]"):
        m(torch.rand(2, 3, 32, 32))
    with pytest.raises(ValueError, match="14 frames"), torch.device("meta"):
        video.s3d()(torch.empty(1, 3, 8, 224, 224))


def test_video_preset_shapes():
    t = video.S3D_Weights.DEFAULT.transforms()
    clip = torch.randint(0, 256, (6, 3, 300, 280), dtype=torch.uint8)
    out = t(clip)
    assert out.shape == (3, 6, 224, 224) and out.dtype == torch.float32
    with pytest.raises(ValueError, match="T, C, H, W"):
        t(torch.rand(3, 32, 32))


@pytest.mark.slow
def test_compiled_video_matches_eager():
    torch.manual_seed(0)
    m = video.mc3_18(num_classes=4).eval()
    x = torch.rand(1, 3, 4, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ember.core.compile(m)(x), m(x), rtol=1e-4, atol=1e-5)
