"""AugMix, SanitizeKeyPoints / sanitize_keypoints, the v2 sample helpers and
is_rotated_bounding_format (issue #19); torchvision comparisons are in tests/peers."""

import PIL.Image
import pytest
import torch

from ember.vision import transforms as T
from ember.vision import tv_tensors as tv
from ember.vision.transforms import functional as F
from ember.vision.transforms import v2


def _img(shape=(3, 23, 31), seed=0, dtype=torch.uint8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else x.to(dtype) / 255


# ---------------------------------------------------------------- AugMix

def _video(x):
    return tv.Video(x.expand(2, 4, -1, -1, -1))


@pytest.mark.parametrize("wrap", [lambda x: x, tv.Image, _video])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_augmix_keeps_type_shape_dtype_and_is_seeded(wrap, dtype):
    x = wrap(_img(dtype=dtype))
    t = T.AugMix()
    torch.manual_seed(0)
    a = t(x)
    torch.manual_seed(0)
    b = t(x)
    assert type(a) is type(x) and a.shape == x.shape and a.dtype == x.dtype
    assert torch.equal(a, b)
    assert v2.AugMix is T.AugMix


def test_augmix_mixes_between_image_and_chains():
    # with identity-like chains the result is the image itself: a chain of one Posterize to
    # 4 bits keeps these multiples of 16, and the weights sum to 1
    x = (_img() // 16) * 16
    t = T.AugMix(severity=1, mixture_width=2, chain_depth=1, all_ops=False)
    t.chain = lambda h, w: [("Posterize", 4.0)]
    out = t(x)
    assert (out.int() - x.int()).abs().max() <= 1   # float mix truncated to uint8


def test_augmix_weights_follow_the_dirichlet_draws():
    x = _img(dtype=torch.float32)
    t = T.AugMix(mixture_width=2, chain_depth=1)
    draws = iter([torch.tensor([[0.25, 0.75]]), torch.tensor([[0.5, 0.5]])])
    t._sample_dirichlet = lambda p: next(draws)
    t.chain = lambda h, w: [("Brightness", 0.5)]
    out = t(x)
    want = 0.25 * x + 0.75 * F.adjust_brightness(x, 1.5)
    assert torch.allclose(out, want, atol=1e-6)


def test_augmix_per_sample_draws_per_image():
    torch.manual_seed(1)
    x = _img((1, 3, 23, 31)).expand(6, -1, -1, -1).contiguous()
    out = T.AugMix(per_sample=True)(x)
    assert out.shape == x.shape
    assert len({tuple(out[i].flatten().tolist()) for i in range(6)}) > 1
    with pytest.raises(ValueError, match="batched"):
        T.AugMix(per_sample=True)(_img())


def test_augmix_pil_in_pil_out():
    pil = PIL.Image.fromarray(_img().permute(1, 2, 0).numpy())
    out = T.AugMix()(pil)
    assert isinstance(out, PIL.Image.Image) and out.size == pil.size and out.mode == "RGB"


def test_augmix_errors():
    for bad in (0, 11):
        with pytest.raises(ValueError, match="severity"):
            T.AugMix(severity=bad)
    for kw in ({"mixture_width": -1}, {"alpha": 0.0}):
        with pytest.raises(ValueError):
            T.AugMix(**kw)
    with pytest.raises(TypeError, match="severity"):
        T.AugMix(severity=2.5)
    x = tv.Image(_img())
    boxes = tv.BoundingBoxes([[1, 1, 5, 5]], format="XYXY", canvas_size=(23, 31))
    points = tv.KeyPoints([[1.0, 1.0]], canvas_size=(23, 31))
    for sample in ((x, boxes), (x, points), (x, tv.Mask(x[0] > 3)), (x, tv.Image(x)),
                   {"label": 1}):
        with pytest.raises(TypeError):
            T.AugMix()(sample)


# ---------------------------------------------------------------- keypoints

def test_sanitize_keypoints_functional():
    pts = torch.tensor([[1.0, 1.0], [-0.5, 3.0], [30.9, 22.9], [31.0, 2.0], [4.0, 23.0]])
    out, valid = F.sanitize_keypoints(tv.KeyPoints(pts, canvas_size=(23, 31)))
    assert valid.tolist() == [True, False, True, False, False]
    assert isinstance(out, tv.KeyPoints) and out.canvas_size == (23, 31)
    assert torch.equal(out.as_subclass(torch.Tensor), pts[valid])
    plain, valid2 = F.sanitize_keypoints(pts, canvas_size=(23, 31))
    assert type(plain) is torch.Tensor and torch.equal(valid, valid2)
    # groups: a polygon is dropped whole when any of its points is off the canvas
    groups = torch.stack([pts[:1].expand(3, 2), pts[:3]])
    out, valid = F.sanitize_keypoints(tv.KeyPoints(groups, canvas_size=(23, 31)))
    assert valid.tolist() == [True, False] and out.shape == (1, 3, 2)
    with pytest.raises(ValueError, match="canvas_size"):
        F.sanitize_keypoints(pts)
    with pytest.raises(ValueError, match="canvas_size"):
        F.sanitize_keypoints(tv.KeyPoints(pts, canvas_size=(5, 5)), canvas_size=(5, 5))
    with pytest.raises(ValueError):
        F.sanitize_keypoints(tv.BoundingBoxes([[0, 0, 1, 1]], format="XYXY", canvas_size=(5, 5)))


@pytest.mark.parametrize("getter", [None, "default", lambda s: (s["labels"], s["ids"])])
def test_sanitize_keypoints_transform(getter):
    pts = tv.KeyPoints([[1.0, 1.0], [-1.0, 3.0], [5.0, 2.0]], canvas_size=(10, 10))
    sample = {"image": tv.Image(_img((3, 10, 10))), "pts": pts, "labels": torch.tensor([7, 8, 9]),
              "ids": torch.tensor([1, 2, 3])}
    out = T.SanitizeKeyPoints(labels_getter=getter)(sample)
    assert isinstance(out["pts"], tv.KeyPoints) and out["pts"].shape == (2, 2)
    assert out["image"] is sample["image"]
    assert out["labels"].tolist() == ([7, 9] if getter is not None else [7, 8, 9])
    assert out["ids"].tolist() == ([1, 3] if callable(getter) else [1, 2, 3])


def test_sanitize_keypoints_transform_errors():
    pts = tv.KeyPoints([[1.0, 1.0]], canvas_size=(10, 10))
    with pytest.raises(ValueError, match="KeyPoints"):
        T.SanitizeKeyPoints()({"labels": torch.tensor([1])})
    with pytest.raises(ValueError, match="labels"):
        T.SanitizeKeyPoints("default")({"pts": pts, "labels": torch.tensor([1, 2])})
    with pytest.raises(ValueError, match="labels"):
        T.SanitizeKeyPoints("default")({"pts": pts})
    with pytest.raises(ValueError, match="tensor"):
        T.SanitizeKeyPoints(lambda s: [1])({"pts": pts})
    with pytest.raises(ValueError, match="labels_getter"):
        T.SanitizeKeyPoints(labels_getter=3)


# ---------------------------------------------------------------- helpers

def test_sample_helpers():
    img = tv.Image(_img())
    boxes = tv.BoundingBoxes([[1, 1, 5, 5]], format="XYXY", canvas_size=(23, 31))
    pts = tv.KeyPoints([[1.0, 1.0]], canvas_size=(23, 31))
    flat = [img, boxes, pts, "x", 3]
    assert T.check_type(img, (tv.Mask, tv.Image)) and not T.check_type(3, (tv.Mask,))
    assert T.check_type("x", (lambda v: isinstance(v, str),))
    assert T.has_any(flat, tv.Video, tv.KeyPoints) and not T.has_any(flat, tv.Video)
    assert T.has_all(flat, tv.Image, tv.BoundingBoxes) and not T.has_all(flat, tv.Image, tv.Mask)
    assert T.get_bounding_boxes(flat) is boxes and T.get_keypoints(flat) is pts
    assert T.query_chw(flat) == (3, 23, 31) and T.query_size(flat) == (23, 31)
    pil = PIL.Image.new("RGB", (31, 23))
    assert T.query_chw([pil]) == (3, 23, 31) and T.query_size([pil, boxes]) == (23, 31)
    for fn in (T.get_bounding_boxes, T.get_keypoints):
        with pytest.raises(ValueError):
            fn([img])
    with pytest.raises(TypeError):
        T.query_size(["x"])
    with pytest.raises(ValueError, match="multiple"):
        T.query_size([img, tv.Image(_img((3, 5, 5)))])


def test_is_rotated_bounding_format():
    assert not any(tv.is_rotated_bounding_format(f) for f in tv.BoundingBoxFormat)
    assert tv.is_rotated_bounding_format("XYWHR") and not tv.is_rotated_bounding_format("XYXY")
    with pytest.raises(ValueError):
        tv.is_rotated_bounding_format(3)


def test_autocontrast_uint8_uses_torchvisions_division():
    # (x - min) / ((max - min) * (1 / 255)) in float32, truncated, as torchvision: the
    # maximum lands on 254.99998 and becomes 254 there too
    x = torch.arange(30, 131, dtype=torch.uint8).reshape(1, 1, -1)
    inv_scale = torch.tensor(100.0).mul(1.0 / 255)
    want = ((x.float() - 30) / inv_scale).clamp(0, 255).to(torch.uint8)
    assert torch.equal(F.autocontrast(x), want) and int(want.max()) == 254


def test_fill_by_input_type():
    x = tv.Image(torch.zeros(3, 4, 5, dtype=torch.uint8))
    m = tv.Mask(torch.zeros(4, 5, dtype=torch.uint8))
    out = T.Pad(1, fill={tv.Image: 9, tv.Mask: 3})({"i": x, "m": m})
    assert int(out["i"][0, 0, 0]) == 9 and int(out["m"][0, 0]) == 3
    out = T.Pad(1, fill={"others": 5})({"i": x, "m": m})
    assert int(out["i"][0, 0, 0]) == 5 and int(out["m"][0, 0]) == 5
    out = T.Pad(1, fill={tv.Mask: 3})(x)   # no entry for the image: None (0)
    assert int(out[0, 0, 0]) == 0
    pil = PIL.Image.new("RGB", (5, 4))
    assert T.Pad(1, fill={PIL.Image.Image: [1, 2, 3]})(pil).getpixel((0, 0)) == (1, 2, 3)
    for bad in ("white", {tv.Image: "x"}):
        with pytest.raises(TypeError, match="fill"):
            T.RandomRotation(10, fill=bad)


def test_error_types_match_torchvisions():
    # colour ops on 4-channel images: ValueError, and torchvision's TypeError
    x4 = torch.zeros(4, 5, 5, dtype=torch.uint8)
    for fn in (lambda: F.adjust_saturation(x4, 0.5), lambda: F.adjust_hue(x4, 0.1)):
        with pytest.raises(TypeError):
            fn()
        with pytest.raises(ValueError):
            fn()
    with pytest.raises(TypeError, match="scale"):
        T.RandomResizedCrop(10, scale=0.5)
    with pytest.raises(ValueError, match="value"):
        T.RandomErasing(p=1.0, value=[1, 2])(tv.Image(torch.zeros(3, 9, 9)))
    # ToDtype with a dict: the exact type, then "others", else ValueError
    img = tv.Image(torch.zeros(3, 5, 5, dtype=torch.uint8))
    with pytest.raises(ValueError, match="no dtype"):
        T.ToDtype({torch.Tensor: torch.float32})(img)
    assert T.ToDtype({torch.Tensor: torch.float32, "others": None})(img).dtype == torch.uint8
    with pytest.raises((TypeError, ValueError)):
        T.ToDtype("float32")


def test_negative_padding_crops():
    x = torch.arange(30, dtype=torch.uint8).reshape(1, 5, 6)
    assert torch.equal(F.pad(x, [-1]), x[:, 1:4, 1:5])
    out = F.pad(x, [2, -1, 1, 0], fill=9)
    assert out.shape == (1, 4, 9) and torch.equal(out[:, :, 2:8], x[:, 1:])
    assert int(out[0, 0, 0]) == 9
    boxes = tv.BoundingBoxes([[1, 1, 4, 4]], format="XYXY", canvas_size=(5, 6))
    out = F.pad(boxes, [-1])
    assert out.tolist() == [[0, 0, 3, 3]] and out.canvas_size == (3, 4)
