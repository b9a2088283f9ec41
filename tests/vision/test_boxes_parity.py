"""Box utilities with torchvision's signatures and integer arithmetic (issue #19, points 2, 6)."""

import pytest
import torch

from ember.vision import transforms as T
from ember.vision import tv_tensors as tv
from ember.vision.ops import box_convert
from ember.vision.transforms import functional as F


def test_convert_formats_positional_order_is_old_then_new():
    xyxy = torch.tensor([[1.0, 2.0, 6.0, 9.0]])
    # torchvision: convert_bounding_box_format(inpt, old_format, new_format)
    assert F.convert_bounding_box_format(xyxy, "XYXY", "XYWH").tolist() == [[1, 2, 5, 7]]
    assert F.convert_bounding_box_format(xyxy, "XYWH", "XYXY").tolist() == [[1, 2, 7, 11]]
    with pytest.raises(TypeError, match="new_format"):
        F.convert_bounding_box_format(xyxy, "XYXY")
    with pytest.raises(ValueError, match="old_format"):
        F.convert_bounding_box_format(xyxy, new_format="XYWH")
    b = tv.BoundingBoxes(xyxy, format="XYXY", canvas_size=(20, 20))
    with pytest.raises(ValueError, match="old_format"):
        F.convert_bounding_box_format(b, "XYXY", "XYWH")
    out = F.convert_bounding_box_format(b, new_format="CXCYWH")
    assert out.format == tv.BoundingBoxFormat.CXCYWH and out.tolist() == [[3.5, 5.5, 5, 7]]


def test_convert_inplace_writes_the_input():
    x = torch.tensor([[1.0, 2.0, 6.0, 9.0]])
    out = F.convert_bounding_box_format(x, "XYXY", "XYWH", inplace=True)
    assert out is x and x.tolist() == [[1, 2, 5, 7]]


def test_integer_boxes_floor_and_truncate():
    # halving an integer size floors; a centre form goes through float and truncates back
    b = torch.tensor([[1, 2, 6, 9]])
    assert F.convert_bounding_box_format(b, "XYXY", "CXCYWH").tolist() == [[3, 5, 5, 7]]
    c = torch.tensor([[3, 5, 5, 7]])
    assert F.convert_bounding_box_format(c, "CXCYWH", "XYXY").tolist() == [[0, 1, 5, 8]]
    assert F.convert_bounding_box_format(c, "CXCYWH", "XYWH").tolist() == [[0, 1, 5, 7]]
    assert F.convert_bounding_box_format(torch.tensor([[1, 2, 5, 7]]), "XYWH",
                                         "CXCYWH").tolist() == [[3, 5, 5, 7]]
    assert F.convert_bounding_box_format(b, "XYXY", "CXCYWH").dtype == torch.int64


def test_box_convert_promotes_like_torch():
    b = torch.tensor([[1, 2, 6, 9]])
    xywh = box_convert(b, "xyxy", "xywh")
    assert xywh.dtype == torch.int64 and xywh.tolist() == [[1, 2, 5, 7]]
    cx = box_convert(b, "xyxy", "cxcywh")
    assert cx.dtype == torch.float32 and cx.tolist() == [[3.5, 5.5, 5, 7]]
    back = box_convert(torch.tensor([[3, 5, 5, 7]]), "cxcywh", "xyxy")
    assert back.dtype == torch.float32 and back.tolist() == [[0.5, 1.5, 5.5, 8.5]]
    with pytest.raises(ValueError, match="in_fmt"):
        box_convert(b, "xyxy", "yxyx")


def test_clamp_modes():
    raw = torch.tensor([[-3.0, 2.0, 25.0, 30.0]])
    b = tv.BoundingBoxes(raw, format="XYXY", canvas_size=(20, 22))
    assert b.clamping_mode == "soft"
    assert F.clamp_bounding_boxes(b).tolist() == [[0, 2, 22, 20]]
    assert F.clamp_bounding_boxes(b, clamping_mode="hard").tolist() == [[0, 2, 22, 20]]
    assert F.clamp_bounding_boxes(b, clamping_mode=None).tolist() == raw.tolist()
    unclamped = tv.BoundingBoxes(raw, format="XYXY", canvas_size=(20, 22), clamping_mode=None)
    assert F.clamp_bounding_boxes(unclamped).tolist() == raw.tolist()  # 'auto' -> its own
    assert T.ClampBoundingBoxes(clamping_mode=None)(b).tolist() == raw.tolist()
    assert F.clamp_bounding_boxes(raw, format="XYXY", canvas_size=(20, 22),
                                  clamping_mode="soft").tolist() == [[0, 2, 22, 20]]
    with pytest.raises(ValueError, match="clamping_mode"):
        F.clamp_bounding_boxes(raw, format="XYXY", canvas_size=(20, 22))  # 'auto' on a tensor
    with pytest.raises(ValueError, match="clamping_mode"):
        F.clamp_bounding_boxes(b, clamping_mode="loose")
    with pytest.raises(ValueError, match="canvas_size"):
        F.clamp_bounding_boxes(b, canvas_size=(5, 5))
    with pytest.raises(ValueError, match="clamping_mode"):
        tv.BoundingBoxes(raw, format="XYXY", canvas_size=(20, 22), clamping_mode="auto")
    # the mode travels with the boxes through transforms
    flipped = T.RandomHorizontalFlip(p=1.0)(unclamped)
    assert flipped.clamping_mode is None


def test_sanitize_finds_a_label_like_key():
    boxes = tv.BoundingBoxes([[0, 0, 5, 5], [3, 3, 3, 8]], format="XYXY", canvas_size=(10, 10))
    sample = {"boxes": boxes, "label": torch.tensor([1, 2])}
    out = T.SanitizeBoundingBoxes()(sample)
    assert out["label"].tolist() == [1] and out["boxes"].shape == (1, 4)
    sample = {"boxes": boxes, "labels": torch.tensor([1, 2]), "my_label": torch.tensor([7, 8])}
    out = T.SanitizeBoundingBoxes()(sample)  # the exact key 'labels' wins
    assert out["labels"].tolist() == [1] and out["my_label"].tolist() == [7, 8]
    with pytest.raises(ValueError, match="labels_getter"):
        T.SanitizeBoundingBoxes()({"boxes": boxes, "cls": torch.tensor([1, 2])})


def test_pad_clamps_boxes_to_the_padded_canvas():
    # values from torchvision 0.29: the shift is applied in the boxes' own format and
    # dtype, then the boxes are clipped to the padded canvas with their clamping mode
    boxes = torch.tensor([[-4.0, 3.0, 50.0, 12.0], [5.0, 6.0, 9.0, 60.0]])
    b = tv.BoundingBoxes(boxes, format="XYXY", canvas_size=(37, 41))
    out = F.pad(b, [2, 5])
    assert out.canvas_size == (47, 45)
    assert out.tolist() == [[0.0, 8.0, 45.0, 17.0], [7.0, 11.0, 11.0, 47.0]]
    kept = F.pad(tv.BoundingBoxes(boxes, format="XYXY", canvas_size=(37, 41),
                                  clamping_mode=None), [2, 5])
    assert kept.tolist() == [[-2.0, 8.0, 52.0, 17.0], [7.0, 11.0, 11.0, 65.0]]
    xywh = tv.BoundingBoxes(torch.tensor([[30, 1, 20, 7]]), format="XYWH", canvas_size=(10, 40))
    out = F.pad(xywh, [1, 2, 3, 4])
    assert out.dtype == torch.int64 and out.canvas_size == (16, 44)
    assert out.tolist() == [[31, 3, 13, 7]]  # x2 = 51 clipped to 44
    cxcy = tv.BoundingBoxes(torch.tensor([[38, 5, 10, 4]]), format="CXCYWH", canvas_size=(10, 40))
    # shifted to (39, 7, 10, 4) = XYXY (34, 5, 44, 9), clipped to width 41: (34, 5, 41, 9)
    assert F.pad(cxcy, [1, 2, 0, 0]).tolist() == [[37, 7, 7, 4]]
    sample = T.Pad(3)({"boxes": b, "image": tv.Image(torch.zeros(3, 37, 41))})
    assert sample["boxes"].tolist()[0] == [0.0, 6.0, 47.0, 15.0]
    with pytest.raises(ValueError, match="padding_mode"):
        F.pad(b, 2, padding_mode="wrap")
