"""tv_tensors.KeyPoints: construction, the geometric kernels (torchvision's pixel-index
convention) and transforms moving points with the image; compared with torchvision in
tests/peers."""

import pytest
import torch

import ember.vision.transforms as T
import ember.vision.transforms.functional as F
from ember.vision import tv_tensors as tv


def _kp():
    return tv.KeyPoints([[1.0, 2.0], [10.0, 5.0]], canvas_size=(20, 30))


def test_construction_and_validation():
    kp = tv.KeyPoints([3, 4], canvas_size=(5, 6))
    assert kp.shape == (1, 2) and kp.canvas_size == (5, 6)
    with pytest.raises(ValueError, match=r"\[\.\.\., 2\]"):
        tv.KeyPoints([[1, 2, 3]], canvas_size=(5, 6))
    with pytest.raises(ValueError, match="canvas_size"):
        tv.KeyPoints([[1, 2]], canvas_size=(5,))
    assert type(kp.clone()) is tv.KeyPoints and kp.clone().canvas_size == (5, 6)


def test_flips_use_pixel_indices():
    kp = _kp()
    assert F.horizontal_flip(kp).tolist() == [[28.0, 2.0], [19.0, 5.0]]
    assert F.vertical_flip(kp).tolist() == [[1.0, 17.0], [10.0, 14.0]]
    assert torch.equal(F.horizontal_flip(F.horizontal_flip(kp)), kp)


def test_kernels_return_points_and_canvas():
    pts = torch.tensor([[4.0, 6.0]])
    out, canvas = F.crop_keypoints(pts, 1, 2, 10, 12)
    assert out.tolist() == [[2.0, 5.0]] and canvas == (10, 12)
    out, canvas = F.resize_keypoints(pts, [40, 60], (20, 30))
    assert out.tolist() == [[8.0, 12.0]] and canvas == (40, 60)
    out, canvas = F.pad_keypoints(pts, (20, 30), [1, 2, 3, 4])
    assert out.tolist() == [[5.0, 8.0]] and canvas == (26, 34)
    out, canvas = F.rotate_keypoints(pts, (20, 30), 0.0)
    assert torch.allclose(out, pts) and canvas == (20, 30)
    assert F.clamp_keypoints(torch.tensor([[-1.0, 50.0]]), (20, 30)).tolist() == [[0.0, 19.0]]


@pytest.mark.parametrize("transform", [
    T.RandomHorizontalFlip(1.0), T.Resize((10, 15)), T.RandomRotation(30, expand=True),
    T.Pad(3), T.CenterCrop(10), T.RandomAffine(20, (0.1, 0.1)), T.RandomPerspective(p=1.0),
    T.RandomResizedCrop(8), T.RandomZoomOut(p=1.0), T.ClampKeyPoints()])
def test_transforms_keep_points_on_the_image_canvas(transform):
    img = torch.zeros(3, 20, 30, dtype=torch.uint8)
    out_img, out = transform(img, _kp())
    assert type(out) is tv.KeyPoints
    assert out.canvas_size == tuple(out_img.shape[-2:])


@pytest.mark.parametrize("transform", [
    T.ColorJitter(0.3, 0.3, 0.3, 0.1), T.RandomPhotometricDistort(p=1.0), T.GaussianBlur(3),
    T.ToDtype(torch.float32, scale=True), T.RandomInvert(1.0), T.RandomErasing(1.0)])
def test_non_geometric_transforms_pass_points_through(transform):
    img = torch.randint(0, 256, (3, 20, 30), dtype=torch.uint8)
    kp = _kp()
    out = transform(img, kp)[1]
    assert type(out) is tv.KeyPoints
    assert torch.equal(out.as_subclass(torch.Tensor).to(kp.dtype), kp.as_subclass(torch.Tensor))
