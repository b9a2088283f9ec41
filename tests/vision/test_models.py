"""ember.vision.models: published parameter counts, forward shapes, local weights, RetinaNet."""

from __future__ import annotations

import pytest
import torch

from ember.vision import models
from ember.vision.models.retinanet import BoxCoder, cell_anchors, match_anchors

PUBLISHED = {
    "resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032,
    "mobilenet_v3_small": 2_542_856, "mobilenet_v3_large": 5_483_032,
    "vit_b_16": 86_567_656,
    # BatchNorm backbone without pretrained weights, as torchvision builds it (34,014,999 with
    # the frozen BatchNorm of the COCO weights: tests/vision/test_one_stage_detection.py)
    "retinanet_resnet50_fpn": 34_068_119,
}


def n_params(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_equal_the_published_architectures(name):
    assert n_params(models.get_model(name)) == PUBLISHED[name]


def test_list_and_unknown_models():
    assert set(PUBLISHED) <= set(models.list_models())
    with pytest.raises(ValueError, match="unknown model"):
        models.get_model("resnet9000")


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v3_small",
                                  "mobilenet_v3_large"])
def test_classifier_forward_small_input(name):
    torch.manual_seed(0)
    m = models.get_model(name, num_classes=7).eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        out = m(x)
        single = m(x[1:])
    assert out.shape == (2, 7) and torch.isfinite(out).all()
    assert torch.allclose(out[1:], single, atol=1e-4)
    with pytest.raises(ValueError, match="images"):
        m(torch.rand(3, 64, 64))


def test_vit_forward_at_224_and_attention_matches_torch():
    torch.manual_seed(0)
    m = models.vit_b_16(num_classes=5).eval()
    with torch.no_grad():
        assert m(torch.rand(1, 3, 224, 224)).shape == (1, 5)
    with pytest.raises(ValueError, match="224"):
        m(torch.rand(1, 3, 64, 64))
    from ember.vision.models.vision_transformer import SelfAttention

    ours = SelfAttention(32, 4).eval()
    ref = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    ref.load_state_dict(ours.state_dict())
    x = torch.rand(2, 9, 32)
    with torch.no_grad():
        assert torch.allclose(ours(x), ref(x, x, x, need_weights=False)[0], atol=1e-5)


def test_weights_load_from_a_local_file_only(tmp_path):
    torch.manual_seed(0)
    a = models.resnet18(num_classes=3).eval()
    path = tmp_path / "r18.pt"
    torch.save(a.state_dict(), path)
    b = models.get_model("resnet18", num_classes=3, weights=str(path)).eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(a(x), b(x))
    with pytest.raises(ValueError, match="nothing is downloaded"):
        models.resnet18(weights="https://example.com/r18.pth")
    with pytest.raises(RuntimeError):
        models.resnet34(weights=str(path))  # wrong architecture


def test_anchor_box_coder_and_matching():
    base = cell_anchors((32,), (0.5, 1.0, 2.0))
    assert base[1].tolist() == [-16, -16, 16, 16]
    assert base[0, 2] - base[0, 0] > base[0, 3] - base[0, 1]  # ratio h/w 0.5 is wide
    anchors = torch.tensor([[0.0, 0, 10, 10], [20, 20, 40, 40], [0, 0, 9, 11]])
    gt = torch.tensor([[1.0, 1, 11, 11], [22, 18, 41, 44]])
    coder = BoxCoder()
    deltas = coder.encode(gt[[0, 1, 0]], anchors)
    assert torch.allclose(coder.decode(deltas, anchors), gt[[0, 1, 0]], atol=1e-4)
    m = match_anchors(gt, anchors)
    assert m.tolist()[:2] == [0, 1]


def test_retinanet_train_and_eval_small():
    torch.manual_seed(0)
    m = models.retinanet_resnet50_fpn(num_classes=4, min_size=96, max_size=128,
                                      score_thresh=0.0, detections_per_img=20, topk_candidates=50)
    images = [torch.rand(3, 80, 100), torch.rand(3, 70, 90)]
    targets = [{"boxes": torch.tensor([[10.0, 12.0, 50.0, 60.0]]), "labels": torch.tensor([1])},
               {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long)}]
    m.train()
    losses = m(images, targets)
    assert set(losses) == {"classification", "bbox_regression"}
    total = sum(losses.values())
    assert torch.isfinite(total)
    total.backward()
    assert m.head.classification_head.cls_logits.weight.grad is not None
    assert m.backbone.body.conv1.weight.grad is not None  # no pretrained weights: all train
    m.eval()
    with torch.no_grad():
        dets = m(images)
    for d, img in zip(dets, images):
        assert d["boxes"].shape[0] == d["scores"].shape[0] <= 20
        assert (d["boxes"][:, 2] <= img.shape[-1] + 1e-3).all()
        assert (d["boxes"][:, 3] <= img.shape[-2] + 1e-3).all()
    with pytest.raises(ValueError, match="targets"):
        m.train()(images)
