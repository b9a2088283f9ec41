"""ember.vision.ops: NMS (cpu and portable kernels) against a brute-force reference, box ops."""

from __future__ import annotations

import pytest
import torch

from ember.core import kernels
from ember.vision import ops


def random_boxes(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 100
    wh = torch.rand(n, 2, generator=g) * 40 + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=g)


def reference_nms(boxes, scores, thr):
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
    keep = []
    for i in order:
        ok = True
        for j in keep:
            x1 = max(boxes[i, 0], boxes[j, 0])
            y1 = max(boxes[i, 1], boxes[j, 1])
            x2 = min(boxes[i, 2], boxes[j, 2])
            y2 = min(boxes[i, 3], boxes[j, 3])
            inter = max(0.0, float(x2 - x1)) * max(0.0, float(y2 - y1))
            a = float((boxes[i, 2] - boxes[i, 0]) * (boxes[i, 3] - boxes[i, 1]))
            b = float((boxes[j, 2] - boxes[j, 0]) * (boxes[j, 3] - boxes[j, 1]))
            if inter / (a + b - inter) > thr:
                ok = False
                break
        if ok:
            keep.append(i)
    return keep


@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_nms_matches_reference_on_both_kernels(thr):
    boxes, scores = random_boxes(150, seed=int(thr * 10))
    ref = reference_nms(boxes, scores, thr)
    assert ops.nms(boxes, scores, thr).tolist() == ref
    op = kernels.get("ember_vision::nms")
    assert sorted(op.kernels) == ["cpu", "portable"]
    assert op.kernels["portable"](boxes, scores, thr).tolist() == ref


def test_batched_nms_never_crosses_categories():
    boxes, scores = random_boxes(80, seed=3)
    idxs = torch.arange(80) % 3
    keep = ops.batched_nms(boxes, scores, idxs, 0.4)
    expected = []
    for c in range(3):
        sel = torch.where(idxs == c)[0]
        expected += sel[ops.nms(boxes[sel], scores[sel], 0.4)].tolist()
    assert sorted(keep.tolist()) == sorted(expected)
    assert scores[keep].diff().le(0).all()  # by decreasing score


def test_nms_edge_cases_and_bad_input():
    assert ops.nms(torch.zeros(0, 4), torch.zeros(0), 0.5).shape == (0,)
    assert ops.batched_nms(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0), 0.5).shape == (0,)
    with pytest.raises(ValueError, match="boxes"):
        ops.nms(torch.zeros(3, 5), torch.zeros(3), 0.5)
    with pytest.raises(ValueError, match="scores"):
        ops.nms(torch.zeros(3, 4), torch.zeros(2), 0.5)


def test_box_ops():
    a = torch.tensor([[0.0, 0.0, 10.0, 10.0], [5.0, 5.0, 15.0, 15.0]])
    iou = ops.box_iou(a, a)
    assert torch.allclose(iou, torch.tensor([[1.0, 25 / 175], [25 / 175, 1.0]]))
    assert ops.box_area(a).tolist() == [100.0, 100.0]
    assert ops.box_convert(a, "xyxy", "cxcywh").tolist() == [[5, 5, 10, 10], [10, 10, 10, 10]]
    assert ops.clip_boxes_to_image(a, (12, 8)).tolist() == [[0, 0, 8, 10], [5, 5, 8, 12]]
    assert ops.remove_small_boxes(torch.tensor([[0, 0, 1, 5.0], [0, 0, 3, 3.0]]), 2).tolist() == [1]


def test_sigmoid_focal_loss_formula():
    x = torch.tensor([2.0, -1.0, 0.5])
    t = torch.tensor([1.0, 0.0, 1.0])
    p = torch.sigmoid(x)
    pt = torch.where(t == 1, p, 1 - p)
    at = torch.where(t == 1, 0.25, 0.75)
    ref = -at * (1 - pt) ** 2 * torch.log(pt)
    assert torch.allclose(ops.sigmoid_focal_loss(x, t), ref, atol=1e-6)
    assert torch.allclose(ops.sigmoid_focal_loss(x, t, reduction="sum"), ref.sum(), atol=1e-6)
    with pytest.raises(ValueError, match="reduction"):
        ops.sigmoid_focal_loss(x, t, reduction="avg")


def test_nms_has_a_fake_kernel_for_compilation():
    boxes, scores = random_boxes(20)
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        out = torch.ops.ember_vision.nms(mode.from_tensor(boxes), mode.from_tensor(scores), 0.5)
    assert out.dtype == torch.long and out.ndim == 1
