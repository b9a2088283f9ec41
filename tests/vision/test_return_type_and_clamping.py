"""tv_tensors.set_return_type and SetClampingMode (torchvision's behaviour; compared with it
in tests/peers)."""

import pytest
import torch

import ember.vision.transforms as T
import ember.vision.transforms.functional as F
from ember.vision import tv_tensors as tv


def test_set_return_type_scopes_and_restores():
    img = tv.Image(torch.zeros(3, 4, 5))
    assert type(img + 1) is torch.Tensor
    with tv.set_return_type("TVTensor"):
        assert type(img * 2) is tv.Image
        a, b = img.unbind(0)[:2]
        assert type(a) is tv.Image
        with tv.set_return_type("Tensor"):
            assert type(img + 1) is torch.Tensor
        assert type(img + 1) is tv.Image
    assert type(img + 1) is torch.Tensor
    with pytest.raises(ValueError, match="return_type"):
        tv.set_return_type("Mask")


def test_transforms_still_work_under_tvtensor_return_type():
    img = tv.Image(torch.randint(0, 256, (3, 20, 30), dtype=torch.uint8))
    boxes = tv.BoundingBoxes([[2, 3, 12, 15]], format="XYXY", canvas_size=(20, 30))
    with tv.set_return_type("TVTensor"):
        out_img, out_boxes = T.Resize((10, 15))(img, boxes)
    assert type(out_img) is tv.Image and out_img.shape == (3, 10, 15)
    assert out_boxes.canvas_size == (10, 15)


@pytest.mark.parametrize("mode", ["soft", "hard", None])
def test_set_clamping_mode_changes_only_the_mode(mode):
    boxes = tv.BoundingBoxes([[-5.0, 2.0, 40.0, 15.0]], format="XYXY", canvas_size=(20, 30))
    img = torch.zeros(3, 20, 30)
    out_img, out = T.SetClampingMode(mode)(img, boxes)
    assert out_img is img
    assert out.clamping_mode == mode and boxes.clamping_mode == "soft"
    assert torch.equal(out.as_subclass(torch.Tensor), boxes.as_subclass(torch.Tensor))
    clamped = F.clamp_bounding_boxes(out)
    expect = [[-5.0, 2.0, 40.0, 15.0]] if mode is None else [[0.0, 2.0, 30.0, 15.0]]
    assert clamped.tolist() == expect
    with pytest.raises(ValueError, match="clamping_mode"):
        T.SetClampingMode("auto")
