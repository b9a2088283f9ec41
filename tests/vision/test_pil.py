"""PIL images through functionals and transforms, and the type conversions (issue #19, 1).

Output sizes and modes are those torchvision 0.29 gives for the same calls; pixel values are
those of our tensor path on the same pixels (docs/vision.md: PIL goes through the tensor
kernels), except resize, rotate, affine and perspective, which are Pillow's own as in
torchvision."""

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
    lambda: T.GaussianBlur(3), lambda: T.ColorJitter(0.5, 0.5, 0.5, 0.1),
    lambda: T.RandomErasing(1.0),
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


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "LA"])
def test_pil_warps_are_pillows(mode):
    """rotate / affine / perspective of PIL images are Pillow's own calls (its premultiplied
    alpha for RGBA and LA), functional and transform, fill given per band as Pillow takes it."""
    im = _pil(mode, seed=2)
    bands = len(mode)
    bil = PIL.Image.Resampling.BILINEAR
    fill = (7,) * bands if bands > 1 else 7
    got = F.rotate(im, 23.5, T.InterpolationMode.BILINEAR, expand=True, fill=7)
    assert np.array_equal(np.asarray(got), np.asarray(im.rotate(23.5, bil, True, fillcolor=fill)))
    got = F.rotate(im, 30, center=[3, 10], fill=[200.9])
    want = im.rotate(30, PIL.Image.Resampling.NEAREST, center=(3, 10),
                     fillcolor=(200,) * bands if bands > 1 else 200)
    assert np.array_equal(np.asarray(got), np.asarray(want))
    # affine: a pure translation by (3, -2) reads the input at (x - 3, y + 2)
    got = F.affine(im, 0.0, [3, -2], 1.0, [0.0, 0.0], T.InterpolationMode.BICUBIC)
    want = im.transform(im.size, PIL.Image.Transform.AFFINE, (1, 0, -3, 0, 1, 2),
                        PIL.Image.Resampling.BICUBIC, fillcolor=(0,) * bands if bands > 1 else 0)
    assert np.array_equal(np.asarray(got), np.asarray(want))
    # perspective with the 8 output-to-input coefficients given
    coeffs = [1.05, 0.02, -1.5, 0.01, 0.97, 2.0, 1e-4, -2e-4]
    got = F.perspective(im, None, None, fill=7, coefficients=coeffs)
    want = im.transform(im.size, PIL.Image.Transform.PERSPECTIVE, coeffs, bil, fillcolor=fill)
    assert np.array_equal(np.asarray(got), np.asarray(want))
    # a transform's PIL image and the functional agree; the sample's mask gets the same size
    torch.manual_seed(0)
    out = T.RandomRotation((-40, 40), expand=True, center=[5, 9])(
        {"image": im, "mask": tv.Mask(torch.zeros(37, 53, dtype=torch.uint8))})
    torch.manual_seed(0)
    angle = float(torch.empty(1).uniform_(-40, 40))
    want = im.rotate(angle, PIL.Image.Resampling.NEAREST, True, (5, 9),
                     fillcolor=(0,) * bands if bands > 1 else 0)
    assert np.array_equal(np.asarray(out["image"]), np.asarray(want))
    assert tuple(out["mask"].shape) == (want.height, want.width)


def test_pil_warp_fill_and_modes_errors():
    im = _pil("RGB")
    with pytest.raises(ValueError, match="fill"):
        F.rotate(im, 10.0, fill=[1, 2])
    with pytest.raises(ValueError, match="mode"):
        F.affine(im.convert("P"), 5.0, [0, 0], 1.0, [0.0, 0.0])
    with pytest.raises(ValueError):   # Pillow's: no LANCZOS warps, as torchvision
        F.perspective(im, [[0, 0], [52, 0], [52, 36], [0, 36]],
                      [[2, 1], [50, 0], [51, 35], [0, 34]], T.InterpolationMode.LANCZOS)


@pytest.mark.parametrize("hw, angle, center", [((100, 5), 90.0, None), ((37, 53), 30.0, [3, 10]),
                                               ((37, 53), -31.0, None), ((31, 43), 12, [0, 0])])
def test_rotate_expand_canvas_is_pillows(hw, angle, center):
    """rotate(expand=True) of tensors, masks and boxes gets Pillow's canvas (torchvision's
    tensor kernel's too), so a PIL image and the rest of its sample stay the same size; a
    quarter turn about the middle is an exact transpose."""
    h, w = hw
    im = PIL.Image.new("L", (w, h))
    want = im.rotate(angle, expand=True, center=center).size[::-1]
    x = torch.arange(h * w, dtype=torch.float32).reshape(1, h, w)
    out = F.rotate(x, angle, expand=True, center=center)
    assert tuple(out.shape[-2:]) == want
    boxes = tv.BoundingBoxes([[1.0, 1.0, 3.0, 4.0]], format="XYXY", canvas_size=(h, w))
    assert tuple(F.rotate(boxes, angle, expand=True, center=center).canvas_size) == want
    if angle == 90.0:
        assert torch.equal(out, torch.rot90(x, 1, (-2, -1)))
