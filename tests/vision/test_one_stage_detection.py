"""Issue #20's one-stage detectors (FCOS, RetinaNet v1/v2, SSD, SSDLite): torchvision's
published parameter counts, small training and evaluation runs, weights enums, errors; a
compiled FCOS matches eager (slow)."""

from __future__ import annotations

import contextlib

import pytest
import torch

import ember.core
from ember.vision import models
from ember.vision.models import detection

pytestmark = pytest.mark.usefixtures("one_thread")

# torchvision's published counts (COCO weights meta "num_params": pretrained layout, so the
# ResNet body has frozen BatchNorm, whose affine terms are buffers)
PUBLISHED = {"fcos_resnet50_fpn": 32_269_600, "retinanet_resnet50_fpn": 34_014_999,
             "retinanet_resnet50_fpn_v2": 38_198_935, "ssd300_vgg16": 35_641_826,
             "ssdlite320_mobilenet_v3_large": 3_440_060}
RESNET_BODY = {"fcos_resnet50_fpn", "retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2"}
ONE_STAGE = sorted(PUBLISHED)


@contextlib.contextmanager
def no_init():
    """torch.nn.init's initialisers as no-ops (counting needs no values)."""
    names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(torch.nn.init, n) for n in names}
    for n in names:
        setattr(torch.nn.init, n, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.nn.init, n, f)


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def quick_build(name, **kwargs):
    """Built without the initialisers (seconds of kaiming_normal_ on a loaded 2-core
    machine), then filled with small seeded random values."""
    with no_init():
        m = models.get_model(name, **kwargs)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in m.parameters():
            t.normal_(0, 0.01 if t.ndim > 1 else 0.1, generator=g)
    return m


@pytest.mark.parametrize("name", ONE_STAGE)
def test_parameter_count_equals_published(name):
    with torch.device("meta"), no_init():
        if name in RESNET_BODY:   # a "pretrained" backbone: frozen BatchNorm, as published
            m = models.get_model(name, weights_backbone=models.resnet50().state_dict())
        else:
            m = models.get_model(name)
    assert n_params(m) == PUBLISHED[name]
    enum = models.get_model_weights(name)
    assert enum.DEFAULT.meta["num_params"] == PUBLISHED[name]
    assert len(enum.DEFAULT.meta["categories"]) == 91


def test_builders_registered_exported_and_old_path_kept():
    assert set(ONE_STAGE) <= set(models.list_models(module=detection))
    assert all(callable(getattr(detection, n)) and n in detection.__all__ for n in ONE_STAGE)
    from ember.vision.models import retinanet as old
    assert old.retinanet_resnet50_fpn is detection.retinanet_resnet50_fpn
    assert models.RetinaNet is detection.RetinaNet
    assert detection.FCOS_ResNet50_FPN_Weights.DEFAULT.file_name == \
        "fcos_resnet50_fpn_coco-99b0c9b7.pth"


def _images_and_targets():
    g = torch.Generator().manual_seed(1)
    images = [torch.rand(3, 80, 100, generator=g), torch.rand(3, 70, 90, generator=g)]
    targets = [{"boxes": torch.tensor([[10.0, 12.0, 50.0, 60.0]]), "labels": torch.tensor([1])},
               {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long)}]
    return images, targets


@pytest.mark.parametrize("name,losses", [
    ("fcos_resnet50_fpn", {"classification", "bbox_regression", "bbox_ctrness"}),
    ("ssdlite320_mobilenet_v3_large", {"bbox_regression", "classification"}),
    pytest.param("retinanet_resnet50_fpn_v2", {"classification", "bbox_regression"},
                 marks=pytest.mark.slow),
    pytest.param("ssd300_vgg16", {"bbox_regression", "classification"},
                 marks=pytest.mark.slow)])
def test_train_and_eval_small(name, losses):
    sizes = {} if name.startswith("ssd") else {"min_size": 64, "max_size": 96}
    m = quick_build(name, num_classes=4, score_thresh=0.0, detections_per_img=15,
                    topk_candidates=40, **sizes)
    images, targets = _images_and_targets()
    out = m.train()(images, targets)
    assert set(out) == losses and all(torch.isfinite(v) for v in out.values())
    sum(out.values()).backward()
    assert all(p.grad is not None for p in m.head.classification_head.parameters())
    with torch.no_grad():
        dets = m.eval()(images)
    for d, img in zip(dets, images):
        k = d["boxes"].shape[0]   # NMS may drop a few of the untrained heads' boxes
        assert 0 < k <= 15 and d["boxes"].shape == (k, 4)
        assert d["scores"].shape == d["labels"].shape == (k,)
        assert (d["boxes"][:, 2] <= img.shape[-1] + 1e-3).all()
        assert (d["labels"] < 4).all()


def test_bad_inputs_raise_clear_errors():
    m = quick_build("fcos_resnet50_fpn", num_classes=3, min_size=64, max_size=64)
    images, targets = _images_and_targets()
    with pytest.raises(ValueError, match="targets should not be none"):
        m.train()(images)
    with pytest.raises(ValueError, match=r"shape \[N, 4\]"):
        m(images, [{"boxes": torch.zeros(4), "labels": torch.zeros(1, dtype=torch.long)}] * 2)
    with pytest.raises(ValueError, match="positive height and width"):
        m(images, [{"boxes": torch.tensor([[5.0, 5.0, 5.0, 9.0]]),
                    "labels": torch.tensor([1])}] * 2)
    with pytest.raises(ValueError, match="3-D"):
        m.eval()([torch.rand(1, 3, 32, 32)])
    with pytest.raises(ValueError, match="num_classes"):
        detection.retinanet_resnet50_fpn(num_classes=0.5)
    with pytest.raises(FileNotFoundError, match="retinanet_resnet50_fpn_coco-eeacb38b.pth"):
        detection.retinanet_resnet50_fpn(weights="DEFAULT", weights_dir="/nonexistent")


def test_old_retinanet_checkpoint_layout_loads():
    """Version-1 RetinaNet heads kept the tower as (conv, relu) pairs: conv.{2i} keys."""
    m = quick_build("retinanet_resnet50_fpn", num_classes=3)
    state = m.state_dict()
    old = type(state)((k.replace(".conv.1.0.", ".conv.2.") if ".conv.1.0." in k else k,
                       v.clone()) for k, v in state.items())
    old._metadata = state._metadata
    for key in ("head.classification_head", "head.regression_head"):
        old._metadata[key] = {"version": 1}
    expected = m.head.regression_head.conv[1][0].weight.clone()
    with torch.no_grad():
        m.head.regression_head.conv[1][0].weight.zero_()
    m.load_state_dict(old)
    assert torch.equal(m.head.regression_head.conv[1][0].weight, expected)


@pytest.mark.slow
def test_compiled_fcos_matches_eager():
    torch.manual_seed(0)
    m = detection.fcos_resnet50_fpn(num_classes=3, min_size=64, max_size=64,
                                    score_thresh=0.0, detections_per_img=10).eval()
    images, _ = _images_and_targets()
    with torch.no_grad():
        ref = m(images)
        out = ember.core.compile(m)(images)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a["boxes"], b["boxes"], rtol=1e-4, atol=1e-4)
        assert torch.equal(a["labels"], b["labels"])


def test_default_boxes_and_ssdlite_backbone_choices():
    from ember.vision.models.detection.anchor_utils import DefaultBoxGenerator
    from ember.vision.models.detection.image_list import ImageList

    gen = DefaultBoxGenerator([[2], [2, 3]], min_ratio=0.2, max_ratio=0.9)
    assert gen.num_anchors_per_location() == [4, 6]
    assert gen.scales == pytest.approx([0.2, 0.9, 1.0])
    feats = [torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 2, 2)]
    boxes = gen(ImageList(torch.zeros(2, 3, 64, 64), [(64, 64)] * 2), feats)
    assert len(boxes) == 2 and boxes[0].shape == (4 * 4 * 4 + 2 * 2 * 6, 4)
    # first box: a 0.2-scale square centred on the first cell (8, 8) of a 64-pixel image
    torch.testing.assert_close(boxes[0][0], torch.tensor([8 - 6.4, 8 - 6.4, 8 + 6.4, 8 + 6.4]))
    with pytest.raises(ValueError, match="same length"):
        DefaultBoxGenerator([[2]], steps=[8, 16])
    with torch.device("meta"), no_init():
        full = detection.ssdlite320_mobilenet_v3_large(
            weights_backbone=models.mobilenet_v3_large().state_dict())
        reduced = detection.ssdlite320_mobilenet_v3_large()
    assert full.backbone.out_channels == [672, 960, 512, 256, 256, 128]
    assert reduced.backbone.out_channels == [672, 480, 512, 256, 256, 128]
