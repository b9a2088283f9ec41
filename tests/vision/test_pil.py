"""PIL images through functionals and transforms, and the type conversions (issue #19, 1).

Output sizes and modes are those torchvision 0.29 gives for the same calls; pixel values are
those of our tensor path on the same pixels (docs/vision.md: PIL goes through the tensor
kernels), except resize, which is Pillow's own as in torchvision."""

import numpy as np
import PIL.Image
import pytest
import torch

from ember.vision import transforms as T
from ember.vision import tv_tensors as tv
from ember.vision.transforms import functional as F


def _pil(mode="RGB", h=37, w=53, seed=0):
    c = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    a = np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)
    return PIL.Image.fromarray(a[..., 0] if c == 1 else a, mode)


def _arr(im):
    return torch.from_numpy(np.array(im)).reshape(im.height, im.width, -1).permute(2, 0, 1)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "LA"])
@pytest.mark.parametrize("make, size", [
    (lambda: T.Resize(20), (28, 20)),
    (lambda: T.Resize((15, 40)), (40, 15)),
    (lambda: T.CenterCrop(60), (60, 60)),
    (lambda: T.Pad([1, 2, 3, 4], padding_mode="edge"), (57, 43)),
    (lambda: T.RandomRotation((30, 30), expand=True), (65, 59)),
    (lambda: T.RandomResizedCrop(24), (24, 24)),
])
def test_pil_in_pil_out_with_torchvision_sizes(mode, make, size):
    im = _pil(mode)
    out = make()(im)
    assert isinstance(out, PIL.Image.Image) and out.mode == mode and out.size == size


@pytest.mark.parametrize("make", [
    lambda: T.CenterCrop(60), lambda: T.Pad(3), lambda: T.RandomHorizontalFlip(1.0),
    lambda: T.RandomRotation((30, 30)),
    lambda: T.GaussianBlur(3), lambda: T.ColorJitter(0.5, 0.5, 0.5, 0.1),
    lambda: T.RandomPerspective(p=1.0), lambda: T.RandomErasing(1.0),
])
def test_pil_pixels_are_the_tensor_path(make):
    im = _pil("RGB")
    t = make()
    torch.manual_seed(3)
    out = t(im)
    torch.manual_seed(3)
    ref = t(_arr(im))
    assert torch.equal(_arr(out), ref)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "LA"])
@pytest.mark.parametrize("interp", ["NEAREST", "BILINEAR", "BICUBIC", "BOX", "LANCZOS"])
def test_pil_resize_is_pillows(mode, interp):
    # RGBA and LA: Pillow resamples with premultiplied alpha (its own pass order too)
    im = _pil(mode)
    a = np.asarray(im).copy()
    if mode in ("RGBA", "LA"):
        a[..., -1] = np.random.default_rng(1).choice([0, 40, 128, 255], a.shape[:2])
        im = PIL.Image.fromarray(a, mode)
    m = getattr(T.InterpolationMode, interp)
    want = im.resize((200, 13), getattr(PIL.Image.Resampling, interp))
    assert np.array_equal(np.asarray(F.resize(im, [13, 200], m)), np.asarray(want))
    assert np.array_equal(np.asarray(T.Resize([13, 200], m)(im)), np.asarray(want))
    torch.manual_seed(0)
    out = T.RandomResizedCrop(24, interpolation=m)(im)
    torch.manual_seed(0)
    p = T.RandomResizedCrop(24).make_params([_arr(im)])
    top, left, h, w = p["top"], p["left"], p["height"], p["width"]
    want = im.crop((left, top, left + w, top + h)).resize(
        (24, 24), getattr(PIL.Image.Resampling, interp))
    assert out.mode == mode and np.array_equal(np.asarray(out), np.asarray(want))


def test_pil_resize_antialias_false_warns():
    with pytest.warns(UserWarning, match="antialias"):
        F.resize(_pil(), 20, antialias=False)


def test_grayscale_changes_the_mode_and_functionals_take_pil():
    im = _pil("L")
    assert T.Grayscale(3)(im).mode == "RGB"
    assert T.Grayscale()(_pil("RGB")).mode == "L"
    assert F.resize(_pil(), 20).size == (28, 20)
    assert F.get_size(_pil()) == [37, 53]
    crops = F.five_crop(_pil(), 10)
    assert len(crops) == 5 and all(c.size == (10, 10) for c in crops)
    assert [c.size for c in T.FiveCrop(10)(_pil())] == [(10, 10)] * 5
    with pytest.raises(TypeError, match="no kernel"):
        F.normalize(_pil(), [0.5], [0.5])


def test_boxes_follow_a_pil_image():
    boxes = tv.BoundingBoxes([[5, 5, 20, 20]], format="XYXY", canvas_size=(37, 53))
    out = T.Resize(20)({"image": _pil(), "boxes": boxes})
    assert out["image"].size == (28, 20)
    assert out["boxes"].canvas_size == (20, 28)
    assert out["boxes"].tolist() == [[2, 2, 10, 10]]  # integer boxes truncate, as torchvision


def test_transforms_without_pil_support():
    im = _pil()
    assert T.ToDtype(torch.float32, scale=True)(im) is im  # passes through, as torchvision
    with pytest.raises(TypeError, match="PIL"):
        T.Normalize([0.5], [0.5])(im)
    with pytest.raises(ValueError, match="PIL"):
        T.MixUp(num_classes=3)(im, torch.tensor([1]))
    with pytest.raises(ValueError, match="mode 'P'"):
        T.Resize(10)(im.convert("P"))
    out = T.Compose([T.Resize(20), T.PILToTensor(), T.ToDtype(torch.float32, scale=True)])(im)
    assert isinstance(out, torch.Tensor) and out.shape == (3, 20, 28)


def test_pil_to_tensor_and_back():
    im = _pil("RGBA")
    t = F.pil_to_tensor(im)
    assert t.shape == (4, 37, 53) and t.dtype == torch.uint8
    assert np.array_equal(np.array(F.to_pil_image(t)), np.array(im))
    wide = PIL.Image.fromarray(np.arange(20, dtype=np.uint16).reshape(4, 5) * 3000)
    t16 = F.pil_to_tensor(wide)
    assert t16.dtype == torch.uint16 and int(t16.int().max()) == 57000
    assert F.to_pil_image(torch.zeros(3, 4, 5)).mode == "RGB"  # float [0, 1] -> uint8
    assert F.to_pil_image(torch.full((1, 4, 5), 0.5)).getpixel((0, 0)) == 127  # truncated
    assert F.to_pil_image(np.zeros((4, 5, 2), np.uint8)).mode == "LA"
    assert F.to_pil_image(torch.zeros(1, 4, 5), mode="F").mode == "F"
    with pytest.raises(ValueError, match="channels"):
        F.to_pil_image(torch.zeros(5, 4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="mode"):
        F.to_pil_image(torch.zeros(3, 4, 4, dtype=torch.uint8), mode="RGBA")
    with pytest.raises(TypeError, match="PIL image"):
        F.pil_to_tensor(torch.zeros(3, 4, 4))


def test_conversion_transforms():
    im = _pil()
    img = T.ToImage()(im)
    assert type(img) is tv.Image and img.shape == (3, 37, 53)
    assert T.ToImage()(np.zeros((4, 5), np.uint8)).shape == (1, 4, 5)
    # a plain tensor is the image only when the sample has no other image, and only the first
    out = T.ToImage()({"a": torch.zeros(3, 2, 2), "b": torch.zeros(3, 2, 2)})
    assert type(out["a"]) is tv.Image and type(out["b"]) is torch.Tensor
    out = T.ToImage()({"pil": im, "t": torch.zeros(3, 2, 2)})
    assert type(out["pil"]) is tv.Image and type(out["t"]) is torch.Tensor
    assert type(T.PILToTensor()(im)) is torch.Tensor
    assert T.ToPILImage()(img).size == (53, 37)
    assert type(T.ToPureTensor()(tv.Mask(torch.zeros(4, 4)))) is torch.Tensor
