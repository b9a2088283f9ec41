"""ember.vision.models weights enums against torchvision 0.29 (issue #20): for every
classification builder, the enum's class name, entry names, DEFAULT, file names (URL
basenames), the transforms preset's crop/resize/interpolation/mean/std (and its output on a
tensor image), and meta (num_params, min_size, categories).

Runs in `.venv-peers`; elsewhere the importorskip below skips the module.
"""

from __future__ import annotations

import pytest

torchvision = pytest.importorskip("torchvision")

import torch  # noqa: E402
import torchvision.models as tvm  # noqa: E402

from ember.vision import models as em  # noqa: E402

NAMES = tvm.list_models(module=tvm)


def test_same_builders_have_enums():
    assert len(NAMES) == 80
    tasks = {n for p in ("segmentation", "video", "detection") if hasattr(em, p)
             for n in em.list_models(module=getattr(em, p))}   # their own peer tests
    assert sorted(set(em._weights.MODEL_WEIGHTS) - tasks) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_weights_enum_matches(name):
    theirs = tvm.get_model_weights(name)
    ours = em.get_model_weights(name)
    assert ours is em.get_model_weights(getattr(em, name))
    assert ours.__name__ == theirs.__name__
    assert getattr(em, theirs.__name__) is ours
    assert list(ours.__members__) == list(theirs.__members__)   # DEFAULT included, in order
    assert ours.DEFAULT.name == theirs.DEFAULT.name
    for t in theirs:
        o = ours[t.name]
        assert em.get_weight(f"{theirs.__name__}.{t.name}") is o
        assert o.url == t.url
        assert o.file_name == t.url.rsplit("/", 1)[1]
        tt, ot = t.transforms(), o.transforms()
        assert ot.crop_size == list(tt.crop_size)
        assert ot.resize_size == list(tt.resize_size)
        assert ot.interpolation.value == tt.interpolation.value
        assert ot.mean == pytest.approx(list(tt.mean))
        assert ot.std == pytest.approx(list(tt.std))
        assert ot.antialias == tt.antialias
        assert o.meta["num_params"] == t.meta["num_params"]
        assert tuple(o.meta["min_size"]) == tuple(t.meta["min_size"])
        assert o.meta["categories"] == t.meta["categories"]


@pytest.mark.parametrize("name", ["resnet50", "efficientnet_b3", "efficientnet_v2_l",
                                  "swin_v2_t", "vit_b_16", "inception_v3"])
def test_transforms_output_matches(name):
    g = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (3, 180, 240), dtype=torch.uint8, generator=g)
    for t in tvm.get_model_weights(name):
        expected = t.transforms()(img)
        got = em.get_weight(f"{type(t).__name__}.{t.name}").transforms()(img)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_transforms_pil_matches():
    from PIL import Image
    g = torch.Generator().manual_seed(1)
    arr = torch.randint(0, 256, (170, 230, 3), dtype=torch.uint8, generator=g).numpy()
    img = Image.fromarray(arr)
    for name in ("resnet50", "swin_t"):
        t = tvm.get_model_weights(name).DEFAULT
        expected = t.transforms()(img)
        got = em.get_model_weights(name).DEFAULT.transforms()(img)
        torch.testing.assert_close(torch.as_tensor(got), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["squeezenet1_1", "googlenet"])
def test_enum_loads_torchvision_file(tmp_path, monkeypatch, name):
    """torchvision's state_dict (googlenet: with its auxiliary heads, as the real file),
    saved under the entry's file name, loads through the enum as torchvision's pretrained
    builder would (googlenet: transform_input on, aux heads dropped)."""
    torch.manual_seed(0)
    tv = tvm.get_model(name, weights=None, **({"init_weights": True} if name == "googlenet"
                                              else {})).eval()
    weights = em.get_model_weights(name).DEFAULT
    torch.save(tv.state_dict(), tmp_path / weights.file_name)
    monkeypatch.setenv("EMBER_WEIGHTS_DIR", str(tmp_path))
    ours = em.get_model(name, weights="DEFAULT").eval()
    if name == "googlenet":
        assert ours.transform_input and not ours.aux_logits
        tv.transform_input = True
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), tv(x), rtol=1e-5, atol=1e-5)
