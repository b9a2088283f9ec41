"""torchvision's weights API in ember.vision.models (issue #20): enums, get_weight /
get_model_weights, DEFAULT, loading an entry from a local directory (never downloading),
the missing-file error, and the ImageClassification preset."""

from __future__ import annotations

import os

import pytest
import torch

from ember.vision import models as M
from ember.vision.models import SqueezeNet1_1_Weights


def test_enums_and_lookups():
    w = M.ResNet18_Weights.IMAGENET1K_V1
    assert M.ResNet18_Weights.DEFAULT is w
    assert w.file_name == "resnet18-f37072fd.pth"
    assert w.url == "https://download.pytorch.org/models/resnet18-f37072fd.pth"
    assert M.get_weight("ResNet18_Weights.IMAGENET1K_V1") is w
    assert M.get_weight("ResNet50_Weights.DEFAULT") is M.ResNet50_Weights.IMAGENET1K_V2
    assert M.get_model_weights("resnet18") is M.ResNet18_Weights
    assert M.get_model_weights(M.resnet18) is M.ResNet18_Weights
    from ember.vision.models.resnet import ResNet18_Weights
    assert ResNet18_Weights is M.ResNet18_Weights
    assert list(M.ViT_H_14_Weights.__members__) == [
        "IMAGENET1K_SWAG_E2E_V1", "IMAGENET1K_SWAG_LINEAR_V1", "DEFAULT"]
    meta = w.meta
    assert meta["num_params"] == 11689512 and meta["min_size"] == (1, 1)
    assert len(meta["categories"]) == 1000 and meta["categories"][0] == "tench"
    assert str(w) == repr(w) == "ResNet18_Weights.IMAGENET1K_V1"
    with pytest.raises(ValueError, match="NOPE"):
        M.get_weight("ResNet18_Weights.NOPE")
    with pytest.raises(ValueError, match="unknown weights"):
        M.get_weight("Nope_Weights.DEFAULT")
    with pytest.raises(ValueError, match="no weights enum"):
        M.get_model_weights("resnet9000")


@pytest.fixture
def weights_dir(tmp_path):
    torch.manual_seed(0)
    state = M.squeezenet1_1().state_dict()
    torch.save(state, tmp_path / "squeezenet1_1-b8a52dc0.pth")
    return tmp_path, state


@pytest.mark.parametrize("spec", [SqueezeNet1_1_Weights.IMAGENET1K_V1, "DEFAULT",
                                  "IMAGENET1K_V1", "SqueezeNet1_1_Weights.DEFAULT"])
def test_load_from_env_dir(weights_dir, monkeypatch, spec):
    d, state = weights_dir
    monkeypatch.setenv("EMBER_WEIGHTS_DIR", str(d))
    model = M.squeezenet1_1(weights=spec)
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert M.get_model("squeezenet1_1", weights=spec).state_dict().keys() == state.keys()


def test_load_from_dir_argument_and_path(weights_dir, monkeypatch):
    d, state = weights_dir
    monkeypatch.delenv("EMBER_WEIGHTS_DIR", raising=False)
    model = M.squeezenet1_1(weights="DEFAULT", weights_dir=d)
    assert torch.equal(model.features[0].weight, state["features.0.weight"])
    model = M.squeezenet1_1(weights=str(d / "squeezenet1_1-b8a52dc0.pth"))   # a local path
    assert torch.equal(model.features[0].weight, state["features.0.weight"])
    sd = SqueezeNet1_1_Weights.DEFAULT.get_state_dict(d)
    assert sd.keys() == state.keys()
    with pytest.raises(ValueError, match="num_classes"):
        M.squeezenet1_1(weights="DEFAULT", weights_dir=d, num_classes=10)
    with pytest.raises(TypeError, match="SqueezeNet1_1_Weights"):
        M.squeezenet1_1(weights=M.ResNet18_Weights.DEFAULT, weights_dir=d)


def test_missing_file_error(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_WEIGHTS_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        M.resnet18(weights=M.ResNet18_Weights.DEFAULT)
    msg = str(info.value)
    assert "resnet18-f37072fd.pth" in msg and str(tmp_path) in msg and "EMBER_WEIGHTS_DIR" in msg
    monkeypatch.delenv("EMBER_WEIGHTS_DIR")
    with pytest.raises(FileNotFoundError, match="EMBER_WEIGHTS_DIR"):
        M.alexnet(weights="DEFAULT")
    with pytest.raises(FileNotFoundError, match=os.path.basename(str(tmp_path))):
        M.alexnet(weights="DEFAULT", weights_dir=tmp_path)


def test_transforms_preset_on_tensor():
    t = M.EfficientNet_B1_Weights.IMAGENET1K_V2.transforms()
    assert t.crop_size == [240] and t.resize_size == [255]
    assert t.interpolation.value == "bilinear"
    img = torch.randint(0, 256, (3, 300, 400), dtype=torch.uint8)
    out = t(img)
    assert out.dtype == torch.float32 and out.shape == (3, 240, 240)
    flat = torch.full((2, 3, 280, 300), 255, dtype=torch.uint8)
    out = M.ResNet50_Weights.DEFAULT.transforms()(flat)
    assert out.shape == (2, 3, 224, 224)
    expected = (1 - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor([0.229, 0.224, 0.225])
    torch.testing.assert_close(out[0, :, 5, 5], expected)
    assert M.Swin_T_Weights.DEFAULT.transforms().interpolation.value == "bicubic"


def test_entry_fixes_builder_arguments(tmp_path):
    """As in torchvision: an entry sets num_classes (and a ViT's image_size) from its meta."""
    from ember.vision.models._weights import resolve
    (tmp_path / "vit_b_16_swag-9ac1b537.pth").touch()
    kwargs: dict = {}
    path = resolve("vit_b_16", "IMAGENET1K_SWAG_E2E_V1", tmp_path, kwargs)
    assert path == str(tmp_path / "vit_b_16_swag-9ac1b537.pth")
    assert kwargs == {"num_classes": 1000, "image_size": 384}
    with pytest.raises(ValueError, match="image_size"):
        resolve("vit_b_16", "IMAGENET1K_SWAG_E2E_V1", tmp_path, {"image_size": 224})
    assert resolve("resnet18", None, None, {}) is None
