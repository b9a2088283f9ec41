"""ember.vision.models.detection's one-stage detectors against the real torchvision 0.29:
every builder has torchvision's parameter count and state_dict keys and shapes; torchvision's
state_dict loads into ours strictly and ours into theirs; with torchvision's seeded random
weights the evaluation detections and the training loss dicts are equal.

Runs in `.venv-peers`; elsewhere the importorskip below skips the module. Inputs are small
(80x100 and 70x90 images resized to 64-96; the SSD models resize to their fixed 300 / 320).
"""

from __future__ import annotations

import contextlib

import pytest

torchvision = pytest.importorskip("torchvision")

import torch  # noqa: E402
import torchvision.models as tvm  # noqa: E402
import torchvision.models.detection as tvd  # noqa: E402

from ember.vision import models as em  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

# builder -> extra keywords of the forward comparison (None: meta device, structure only)
SIZES = {"min_size": 64, "max_size": 96}
CASES = {"fcos_resnet50_fpn": SIZES, "retinanet_resnet50_fpn": SIZES,
         "retinanet_resnet50_fpn_v2": SIZES, "ssdlite320_mobilenet_v3_large": {},
         "ssd300_vgg16": {}}
# 300x300 VGG-16 (~35 s here on one thread): one image, and slow only; SSDLite runs the same
# SSD class (losses, hard negatives, post-processing) in every run
ONE_IMAGE = SLOW = {"ssd300_vgg16"}


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def check_structure(ours, theirs):
    assert n_params(ours) == n_params(theirs)
    so, st = ours.state_dict(), theirs.state_dict()
    assert list(so) == list(st)
    assert {k: v.shape for k, v in so.items()} == {k: v.shape for k, v in st.items()}


def randomise_norm_stats(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)


@contextlib.contextmanager
def no_init():
    """torch.nn.init's initialisers as no-ops on both sides (seconds per ResNet-50 on this
    machine); :func:`fill` then gives torchvision's model seeded random values."""
    names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(torch.nn.init, n) for n in names}
    for n in names:
        setattr(torch.nn.init, n, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.nn.init, n, f)


def fill(model, seed=0):
    """Seeded random parameters scaled by fan-in, and non-trivial BatchNorm statistics."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, t in model.named_parameters():
            if t.ndim > 1:
                t.normal_(0, (t[0].numel() or 1) ** -0.5, generator=g)
            else:
                t.uniform_(0.5, 1.5, generator=g) if key.endswith("weight") else \
                    t.uniform_(-0.5, 0.5, generator=g)
    randomise_norm_stats(model, seed)


def inputs():
    g = torch.Generator().manual_seed(1)
    images = [torch.rand(3, 80, 100, generator=g), torch.rand(3, 70, 90, generator=g)]
    targets = [{"boxes": torch.tensor([[10.0, 12.0, 50.0, 60.0]]), "labels": torch.tensor([1])},
               {"boxes": torch.tensor([[5.0, 5.0, 30.0, 40.0], [20.0, 10.0, 60.0, 50.0]]),
                "labels": torch.tensor([2, 3])}]
    return images, targets


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in sorted(CASES)])
def test_detector_matches_torchvision(name):
    extra = {"num_classes": 5, "score_thresh": 0.0, "detections_per_img": 20, **CASES[name]}
    with no_init():
        theirs = tvd.__dict__[name](weights_backbone=None, **extra)
        ours = em.get_model(name, **extra)
    check_structure(ours, theirs)
    fill(theirs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    images, targets = inputs()
    if name in ONE_IMAGE:
        images, targets = images[1:], targets[1:]
    with torch.no_grad():
        got, expected = ours.eval()(images), theirs.eval()(images)
    for a, b in zip(got, expected):
        assert list(a) == list(b) and a["boxes"].shape[0] > 0
        torch.testing.assert_close(a["boxes"], b["boxes"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a["scores"], b["scores"], rtol=1e-5, atol=1e-5)
        assert torch.equal(a["labels"], b["labels"])
    ours.train()
    theirs.train()
    torch.manual_seed(2)
    got = ours(images, targets)
    torch.manual_seed(2)
    expected = theirs(images, targets)
    assert list(got) == list(expected)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=1e-5, atol=1e-6)
    theirs.load_state_dict(ours.state_dict(), strict=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_weights_enum_and_default_structure_match(name):
    enum, their_enum = em.get_model_weights(name), tvm.get_model_weights(name)
    assert enum.__name__ == their_enum.__name__
    assert list(enum.__members__) == list(their_enum.__members__)
    for key in their_enum.__members__:
        ours, theirs = enum[key], their_enum[key]
        assert ours.file_name == theirs.url.rsplit("/", 1)[-1]
        for field in ("num_params", "categories", "min_size"):
            assert ours.meta[field] == theirs.meta[field], field
    with torch.device("meta"):
        check_structure(em.get_model(name), tvd.__dict__[name](weights_backbone=None))


def test_builder_signatures_match_torchvision():
    """Same keywords in the same order with the same defaults; ``weights_backbone`` defaults
    to None here (torchvision's default entry would need a download)."""
    import inspect

    for name in CASES:
        ours = inspect.signature(em._registry._MODELS[name]).parameters
        theirs = inspect.signature(tvm.get_model_builder(name)).parameters
        assert list(ours) == list(theirs), name
        for key, p in theirs.items():
            if key != "weights_backbone":
                assert ours[key].default == p.default, (name, key)
        assert ours["weights_backbone"].default is None
