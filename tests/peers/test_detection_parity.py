"""ember.vision.models.detection's two-stage detectors against the real torchvision 0.29:
every builder has torchvision's parameter count, state_dict keys and shapes; state_dicts load
strictly both ways; with the same weights the eval detections (boxes, labels, scores, masks,
keypoints) agree to 1e-5, and with the same targets and seeds the training losses do.

Runs in `.venv-peers` (`make test-peers`); elsewhere the importorskip below skips the module.
Small images and few proposals keep one builder's check to a few seconds on one thread.
"""

from __future__ import annotations

import pytest

torchvision = pytest.importorskip("torchvision")

import torch  # noqa: E402
import torchvision.models.detection as tvd  # noqa: E402

from ember.vision.models import detection as emd  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

BUILDERS = ["fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2",
            "fasterrcnn_mobilenet_v3_large_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn",
            "maskrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn_v2", "keypointrcnn_resnet50_fpn"]

# small inputs, few proposals and detections; score threshold 0 so random weights detect
SMALL = dict(min_size=112, max_size=144, box_score_thresh=0.0, box_detections_per_img=6,
             rpn_pre_nms_top_n_test=150, rpn_post_nms_top_n_test=30,
             rpn_pre_nms_top_n_train=150, rpn_post_nms_top_n_train=30,
             box_batch_size_per_image=16, rpn_batch_size_per_image=64)


def _pair(name: str, **kw):
    torch.manual_seed(0)
    theirs = getattr(tvd, name)(weights=None, weights_backbone=None, **kw)
    ours = getattr(emd, name)(weights=None, weights_backbone=None, **kw)
    return theirs, ours


def _images():
    g = torch.Generator().manual_seed(1)
    return [torch.rand(3, 120, 150, generator=g), torch.rand(3, 140, 110, generator=g)]


def _targets(name: str):
    boxes = torch.tensor([[10.0, 20.0, 80.0, 90.0], [30.0, 25.0, 130.0, 110.0]])
    first = {"boxes": boxes, "labels": torch.tensor([1, 1])}
    empty = {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64)}
    if name.startswith("mask"):
        masks = torch.zeros(2, 120, 150, dtype=torch.uint8)
        masks[0, 20:90, 10:80] = 1
        masks[1, 40:100, 40:120] = 1
        first["masks"] = masks
        empty["masks"] = torch.zeros(0, 140, 110, dtype=torch.uint8)
    if name.startswith("keypoint"):
        g = torch.Generator().manual_seed(2)
        kps = torch.rand(2, 17, 3, generator=g) * 50 + 30
        kps[..., 2] = 1
        kps[0, :4, 2] = 0   # some invisible keypoints
        first["keypoints"] = kps
        empty["keypoints"] = torch.zeros(0, 17, 3)
    return [first, empty]


def _close(actual, expected, what):
    assert actual.shape == expected.shape, what
    assert actual.dtype == expected.dtype, what
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=what)


@pytest.mark.parametrize("name", BUILDERS)
def test_builder_matches_torchvision(name):
    kw = {**SMALL, "box_detections_per_img": 3} if name.startswith("keypoint") else SMALL
    theirs, ours = _pair(name, **kw)
    assert sum(p.numel() for p in ours.parameters()) == \
        sum(p.numel() for p in theirs.parameters())
    sd_theirs, sd_ours = theirs.state_dict(), ours.state_dict()
    assert list(sd_ours) == list(sd_theirs)
    assert all(sd_ours[k].shape == v.shape for k, v in sd_theirs.items())
    theirs.load_state_dict(sd_ours, strict=True)   # ours (random) loads into theirs ...
    ours.load_state_dict(theirs.state_dict(), strict=True)   # ... and back

    images = _images()
    theirs.eval()
    ours.eval()
    with torch.no_grad():
        expected, actual = theirs(images), ours(images)
    for i, (e, a) in enumerate(zip(expected, actual)):
        assert sorted(a) == sorted(e)
        assert e["boxes"].shape[0] > 0   # the comparison is not vacuous
        for key in e:
            _close(a[key], e[key], f"{name} image {i} {key}")

    theirs.train()
    ours.train()
    targets = _targets(name)
    torch.manual_seed(3)
    expected = theirs(images, targets)
    torch.manual_seed(3)
    actual = ours(images, targets)
    assert sorted(actual) == sorted(expected)
    for key in expected:
        assert torch.isfinite(actual[key])
        _close(actual[key], expected[key], f"{name} {key}")


def test_pretrained_backbone_configuration_matches_torchvision():
    """Given backbone weights (a local state_dict here; torchvision would download), the body
    uses FrozenBatchNorm2d and freezes the first stages exactly as torchvision's does."""
    from torchvision.ops import FrozenBatchNorm2d
    torch.manual_seed(0)
    resnet = torchvision.models.resnet50(norm_layer=FrozenBatchNorm2d)
    for layers in (0, 3):
        ours = emd.fasterrcnn_resnet50_fpn(weights_backbone=resnet.state_dict(),
                                          trainable_backbone_layers=layers)
        body = tvd.backbone_utils._resnet_fpn_extractor(
            torchvision.models.resnet50(norm_layer=FrozenBatchNorm2d), layers)
        theirs = tvd.FasterRCNN(body, num_classes=91)
        assert {n: p.requires_grad for n, p in ours.named_parameters()} == \
            {n: p.requires_grad for n, p in theirs.named_parameters()}
        assert list(ours.state_dict()) == list(theirs.state_dict())
        theirs.load_state_dict(ours.state_dict(), strict=True)
    torch.testing.assert_close(ours.backbone.body.conv1.weight, resnet.conv1.weight)
