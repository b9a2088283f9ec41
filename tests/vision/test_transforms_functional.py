"""ember.vision.transforms.functional: kernels, registry, Pillow parity, torchvision formulas."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from PIL import ImageEnhance, ImageOps

from ember.vision import tv_tensors as tv
from ember.vision.transforms import functional as F


def smooth_image(h=48, w=64, seed=0, channels=3):
    """A uint8 image with natural-image-like gradients (noise upsampled)."""
    g = torch.Generator().manual_seed(seed)
    small = torch.rand(1, channels, max(h // 6, 2), max(w // 6, 2), generator=g) * 255
    big = torch.nn.functional.interpolate(small, size=(h, w), mode="bicubic", align_corners=False)
    return big.clamp(0, 255).round().to(torch.uint8)[0]


def to_pil(img: torch.Tensor) -> PILImage.Image:
    arr = img.permute(1, 2, 0).numpy().copy()
    return PILImage.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr)


def from_pil(p: PILImage.Image) -> torch.Tensor:
    arr = np.array(p)
    if arr.ndim == 2:
        arr = arr[..., None]
    return torch.from_numpy(arr).permute(2, 0, 1)


def max_diff(a, b) -> int:
    return int((a.int() - b.int()).abs().max())


def max_diff_inside(a, b, warp, src_hw=(30, 40)) -> int:
    """max_diff over the pixels whose bilinear source lies wholly inside the image: at the
    border torchvision (whose rules we follow) and Pillow treat the outside differently."""
    ones = torch.ones((1,) + tuple(src_hw))
    inside = (warp(ones) > 1 - 1e-5).expand_as(a)
    assert inside.float().mean() > 0.4  # the comparison covers most of the image
    return int((a.int() - b.int()).abs()[inside].max())


# ----------------------------------------------------------------------------- tv_tensors

def test_tv_tensor_ops_return_plain_and_clone_keeps_type():
    img = tv.Image(torch.zeros(3, 4, 5))
    assert type(img + 1) is torch.Tensor
    assert type(img.clone()) is tv.Image
    boxes = tv.BoundingBoxes([[0, 0, 2, 2]], format="xywh", canvas_size=(4, 5))
    c = boxes.to(torch.float64)
    assert type(c) is tv.BoundingBoxes and c.format is tv.BoundingBoxFormat.XYWH
    assert c.canvas_size == (4, 5)


def test_tv_tensor_pickle_roundtrip():
    import pickle

    boxes = tv.BoundingBoxes([[0, 0, 2, 2]], format="CXCYWH", canvas_size=(4, 5))
    back = pickle.loads(pickle.dumps(boxes))
    assert type(back) is tv.BoundingBoxes and back.format is tv.BoundingBoxFormat.CXCYWH
    assert back.canvas_size == (4, 5) and torch.equal(back, boxes)


@pytest.mark.parametrize("make, match", [
    (lambda: tv.BoundingBoxes([[1, 2, 3]], format="XYXY", canvas_size=(2, 2)), "N, 4"),
    (lambda: tv.BoundingBoxes([[1, 2, 3, 4]], format="XYZ", canvas_size=(2, 2)), "format"),
    (lambda: tv.BoundingBoxes([[1, 2, 3, 4]], format="XYXY", canvas_size=(2,)), "canvas_size"),
    (lambda: tv.Video(torch.zeros(3, 4, 4)), "Video"),
    (lambda: tv.Image(torch.zeros(4)), "Image"),
])
def test_tv_tensor_bad_args(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# ----------------------------------------------------------------------------- registry

def test_register_kernel_for_user_type_and_unknown_type():
    class Heatmap(tv.TVTensor):
        pass

    calls = []

    @F.register_kernel(F.horizontal_flip, Heatmap)
    def _(inpt):
        calls.append(1)
        return tv.wrap(inpt.as_subclass(torch.Tensor).flip(-1), like=inpt)

    hm = torch.arange(6.0).reshape(2, 3).as_subclass(Heatmap)
    out = F.horizontal_flip(hm)
    assert calls and type(out) is Heatmap
    assert torch.equal(out, torch.tensor([[2., 1, 0], [5, 4, 3]]))
    with pytest.raises(TypeError, match="no kernel"):
        F.horizontal_flip("not a tensor")
    with pytest.raises(ValueError, match="functional"):
        F.register_kernel(print, Heatmap)


# ----------------------------------------------------------------------------- kernel contract

KERNEL_CASES = {
    "hflip": lambda x: F.horizontal_flip(x),
    "vflip": lambda x: F.vertical_flip(x),
    "resize": lambda x: F.resize(x, [10, 13]),
    "resize_bicubic": lambda x: F.resize(x, [30, 21], interpolation="bicubic"),
    "resize_nearest": lambda x: F.resize(x, 9, interpolation="nearest"),
    "crop": lambda x: F.crop(x, 2, 3, 10, 12),
    "crop_outside": lambda x: F.crop(x, -2, 20, 10, 12),
    "center_crop": lambda x: F.center_crop(x, [8, 9]),
    "resized_crop": lambda x: F.resized_crop(x, 1, 2, 15, 17, [8, 8]),
    "pad_constant": lambda x: F.pad(x, [1, 2, 3, 4], fill=7),
    "pad_reflect": lambda x: F.pad(x, 2, padding_mode="reflect"),
    "pad_symmetric": lambda x: F.pad(x, [2, 3], padding_mode="symmetric"),
    "pad_edge": lambda x: F.pad(x, 3, padding_mode="edge"),
    "rotate": lambda x: F.rotate(x, 33.0, interpolation="bilinear"),
    "rotate_expand": lambda x: F.rotate(x, 33.0, expand=True),
    "affine": lambda x: F.affine(x, 12.0, [2, -1], 1.1, [5.0, 3.0], interpolation="bilinear"),
    "perspective": lambda x: F.perspective(x, [[0, 0], [19, 0], [19, 15], [0, 15]],
                                           [[1, 2], [18, 0], [17, 14], [2, 13]]),
    "grayscale": lambda x: F.rgb_to_grayscale(x, 3),
    "brightness": lambda x: F.adjust_brightness(x, 1.3),
    "contrast": lambda x: F.adjust_contrast(x, 0.6),
    "saturation": lambda x: F.adjust_saturation(x, 1.7),
    "hue": lambda x: F.adjust_hue(x, 0.2),
    "sharpness": lambda x: F.adjust_sharpness(x, 2.0),
    "gamma": lambda x: F.adjust_gamma(x, 0.7),
    "posterize": lambda x: F.posterize(x, 3),
    "solarize": lambda x: F.solarize(x, 100 if not x.is_floating_point() else 0.4),
    "invert": lambda x: F.invert(x),
    "autocontrast": lambda x: F.autocontrast(x),
    "equalize": lambda x: F.equalize(x),
    "blur": lambda x: F.gaussian_blur(x, [3, 5], [0.8, 1.2]),
    "erase": lambda x: F.erase(x, 2, 3, 4, 5, 0),
}


@pytest.mark.parametrize("name", sorted(KERNEL_CASES))
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_kernel_contract(name, dtype):
    """No in-place change, dtype kept, batched == per sample, empty batch, leading dims."""
    fn = KERNEL_CASES[name]
    base = torch.stack([smooth_image(16, 20, seed=s) for s in range(3)])
    x = base if dtype == torch.uint8 else base.to(dtype) / 255
    before = x.clone()
    out = fn(x)
    assert torch.equal(x, before), "input modified in place"
    assert out.dtype == dtype and out.device == x.device
    singles = torch.stack([fn(x[i]) for i in range(3)])
    assert torch.allclose(out.float(), singles.float(), atol=1e-5)
    lead = fn(x.reshape(1, 3, 3, 16, 20))
    assert lead.shape[:2] == (1, 3) and torch.allclose(lead[0].float(), out.float(), atol=1e-5)
    empty = fn(x[:0])
    assert empty.shape[0] == 0 and empty.shape[1:] == out.shape[1:]
    typed = fn(tv.Image(x))
    assert type(typed) is tv.Image and torch.equal(typed.as_subclass(torch.Tensor), out)
    video = fn(tv.Video(x.unsqueeze(0)))
    assert type(video) is tv.Video and torch.allclose(video[0].float(), out.float(), atol=1e-5)


def test_flips_and_crops_keep_uint8_exact():
    x = smooth_image(12, 14)
    assert torch.equal(F.horizontal_flip(x), x.flip(-1))
    assert torch.equal(F.crop(x, 1, 2, 5, 6), x[:, 1:6, 2:8])
    out = F.crop(x, -1, -1, 4, 4)
    assert out[:, 0].eq(0).all() and torch.equal(out[:, 1:, 1:], x[:, :3, :3])


# ----------------------------------------------------------------------------- Pillow parity

@pytest.mark.parametrize("size", [(20, 27), (31, 45), (90, 70), (48, 64)])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_resize_matches_pillow(size, mode):
    x = smooth_image(48, 64, seed=3)
    pil_mode = {"bilinear": PILImage.BILINEAR, "bicubic": PILImage.BICUBIC}[mode]
    ref = from_pil(to_pil(x).resize(size[::-1], pil_mode))
    assert max_diff(F.resize(x, list(size), interpolation=mode), ref) <= 1


def test_resize_shorter_edge_and_max_size():
    x = torch.zeros(3, 40, 60, dtype=torch.uint8)
    assert F.resize(x, 20).shape[-2:] == (20, 30)
    assert F.resize(x, 20, max_size=25).shape[-2:] == (16, 25)
    assert F.resize(x, None, max_size=30).shape[-2:] == (20, 30)


@pytest.mark.parametrize("box", [(0, 0, 48, 64), (5, 7, 30, 41), (10, 3, 12, 50)])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_resized_crop_matches_pillow_scalar_and_per_sample(box, mode):
    top, left, h, w = box
    x = smooth_image(48, 64, seed=4)
    pil_mode = {"bilinear": PILImage.BILINEAR, "bicubic": PILImage.BICUBIC}[mode]
    ref = from_pil(to_pil(x).crop((left, top, left + w, top + h)).resize((24, 24), pil_mode))
    assert max_diff(F.resized_crop(x, top, left, h, w, [24, 24], mode), ref) <= 1
    batch = x.expand(2, -1, -1, -1)
    t = lambda v: torch.tensor([v, v])
    per = F.resized_crop(batch, t(top), t(left), t(h), t(w), [24, 24], mode)
    assert max_diff(per[1], ref) <= 1
    # the vectorised (device-generic) path used off the CPU
    dense = F._geometry._resized_crop_dense(batch, t(top), t(left), t(h), t(w), 24, 24,
                                            F.InterpolationMode(mode), True)
    assert max_diff(dense[0], ref) <= 1


@pytest.mark.parametrize("angle", [30.0, -45.0, 13.7, 90.0])
@pytest.mark.parametrize("expand", [False, True])
def test_rotate_bilinear_matches_pillow(angle, expand):
    x = smooth_image(30, 40, seed=5)
    ref = from_pil(to_pil(x).rotate(angle, resample=PILImage.BILINEAR, expand=expand))
    out = F.rotate(x, angle, interpolation="bilinear", expand=expand)
    assert out.shape == ref.shape
    assert max_diff_inside(out, ref, lambda t: F.rotate(t, angle, interpolation="bilinear",
                                                         expand=expand)) <= 1


def test_rotate_nearest_matches_pillow_but_for_ties():
    """NEAREST: source points exactly on a pixel edge may round the other way (documented)."""
    x = smooth_image(30, 40, seed=6)
    ref = from_pil(to_pil(x).rotate(30.0, resample=PILImage.NEAREST))
    out = F.rotate(x, 30.0)
    assert ((out.int() - ref.int()).abs() > 1).float().mean() < 0.01


def test_affine_translate_rotate_matches_pillow():
    x = smooth_image(30, 40, seed=7)
    # Pillow's rotate(translate=...) is a rotation about the centre followed by a translation
    ref = from_pil(to_pil(x).rotate(20.0, resample=PILImage.BILINEAR, translate=(3, -2)))
    out = F.affine(x, -20.0, [3, -2], 1.0, [0.0, 0.0], interpolation="bilinear")
    assert max_diff_inside(out, ref, lambda t: F.affine(t, -20.0, [3, -2], 1.0, [0.0, 0.0],
                                                         interpolation="bilinear")) <= 1


def test_affine_scale_rotate_translate_matches_pillow_transform():
    """Forward map built here from the definition: translate(c + t) . scale . rotate . (-c)."""
    import math

    x = smooth_image(30, 40, seed=13)
    angle, (tx, ty), s = 15.0, (2, -3), 1.2
    cx, cy = 20.0, 15.0
    th = math.radians(angle)
    rot = np.array([[s * math.cos(th), -s * math.sin(th), 0], [s * math.sin(th),
                    s * math.cos(th), 0], [0, 0, 1]])
    shift = lambda a, b: np.array([[1, 0, a], [0, 1, b], [0, 0, 1]], dtype=float)
    inv = np.linalg.inv(shift(cx + tx, cy + ty) @ rot @ shift(-cx, -cy))
    ref = from_pil(to_pil(x).transform((40, 30), PILImage.AFFINE, inv[:2].flatten().tolist(),
                                       PILImage.BILINEAR))
    out = F.affine(x, angle, [tx, ty], s, [0.0, 0.0], interpolation="bilinear")
    assert max_diff_inside(out, ref, lambda t: F.affine(t, angle, [tx, ty], s, [0.0, 0.0],
                                                         interpolation="bilinear")) <= 1


def test_perspective_matches_pillow():
    x = smooth_image(30, 40, seed=8)
    start = [[0, 0], [39, 0], [39, 29], [0, 29]]
    end = [[3, 2], [36, 1], [38, 27], [1, 28]]
    m = F._geometry.perspective_matrix(start, end)[0]
    assert torch.allclose((torch.tensor([39.0, 29.0, 1.0], dtype=torch.float64) @ m.T)[:2]
                          / (torch.tensor([39.0, 29.0, 1.0], dtype=torch.float64) @ m.T)[2],
                          torch.tensor([38.0, 27.0], dtype=torch.float64))
    inv = torch.linalg.inv(m)
    inv = inv / inv[2, 2]
    ref = from_pil(to_pil(x).transform((40, 30), PILImage.PERSPECTIVE, inv.flatten()[:8].tolist(),
                                       PILImage.BILINEAR))
    out = F.perspective(x, start, end)
    assert max_diff_inside(out, ref, lambda t: F.perspective(t, start, end)) <= 1


# ----------------------------------------------------------------------------- color formulas

def test_grayscale_matches_pillow_within_one():
    x = smooth_image(20, 24, seed=9)
    ref = from_pil(to_pil(x).convert("L"))
    assert max_diff(F.rgb_to_grayscale(x), ref) <= 1


@pytest.mark.parametrize("name, pil_fn", [
    ("equalize", ImageOps.equalize), ("invert", ImageOps.invert),
    ("posterize", lambda p: ImageOps.posterize(p, 3)),
    ("solarize", lambda p: ImageOps.solarize(p, 100)),
])
def test_point_ops_match_pillow(name, pil_fn):
    x = smooth_image(20, 24, seed=10)
    out = KERNEL_CASES[name](x)
    assert max_diff(out, from_pil(pil_fn(to_pil(x)))) == 0


def test_autocontrast_and_sharpness_match_pillow_within_one():
    x = (smooth_image(20, 24, seed=11).float() * 0.5 + 40).to(torch.uint8)
    assert max_diff(F.autocontrast(x), from_pil(ImageOps.autocontrast(to_pil(x)))) <= 1
    ref = from_pil(ImageEnhance.Sharpness(to_pil(x)).enhance(2.0))
    assert max_diff(F.adjust_sharpness(x, 2.0), ref) <= 1


def test_brightness_saturation_contrast_formulas():
    x = smooth_image(8, 10, seed=12)
    xf = x.float()
    assert torch.equal(F.adjust_brightness(x, 1.5), (xf * 1.5).clamp(0, 255).to(torch.uint8))
    gray = (xf[0] * 0.2989 + xf[1] * 0.587 + xf[2] * 0.114).to(torch.uint8).float()
    sat = (xf * 0.3 + gray * 0.7).clamp(0, 255).to(torch.uint8)
    assert torch.equal(F.adjust_saturation(x, 0.3), sat)
    con = (xf * 1.4 + gray.mean() * (1 - 1.4)).clamp(0, 255).to(torch.uint8)
    assert max_diff(F.adjust_contrast(x, 1.4), con) <= 1


def test_hue_matches_colorsys():
    x = torch.rand(3, 5, 6, generator=torch.Generator().manual_seed(0))
    out = F.adjust_hue(x, 0.25)
    for i in range(5):
        for j in range(6):
            h, s, v = colorsys.rgb_to_hsv(*x[:, i, j].tolist())
            ref = colorsys.hsv_to_rgb((h + 0.25) % 1.0, s, v)
            assert torch.allclose(out[:, i, j], torch.tensor(ref), atol=1e-5)


def test_per_sample_color_factors_equal_single_calls():
    x = torch.stack([smooth_image(10, 12, seed=s) for s in range(3)])
    factors = torch.tensor([0.5, 1.0, 1.7])
    for fn in (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation):
        per = fn(x, factors)
        for i in range(3):
            assert torch.equal(per[i], fn(x[i], float(factors[i])))
    hue = F.adjust_hue(x, torch.tensor([-0.3, 0.0, 0.4]))
    assert torch.equal(hue[2], F.adjust_hue(x[2], 0.4))
    blur = F.gaussian_blur(x, 5, torch.tensor([0.5, 1.0, 2.0]))
    assert torch.equal(blur[1], F.gaussian_blur(x[1], 5, [1.0, 1.0]))


def test_gaussian_blur_impulse_is_the_gaussian():
    x = torch.zeros(1, 9, 9)
    x[0, 4, 4] = 1.0
    out = F.gaussian_blur(x, 5, 1.0)
    k = torch.exp(-0.5 * torch.arange(-2.0, 3.0) ** 2)
    k = k / k.sum()
    assert torch.allclose(out[0, 2:7, 2:7], k[:, None] * k[None, :], atol=1e-6)


def test_normalize_and_to_dtype():
    x = torch.tensor([[[0, 128, 255]]], dtype=torch.uint8)
    f = F.to_dtype(x, torch.float32, scale=True)
    assert torch.allclose(f, x.float() / 255)
    assert torch.equal(F.to_dtype(f, torch.uint8, scale=True), x)
    assert torch.allclose(F.normalize(f, [0.5], [0.25]), (f - 0.5) / 0.25)
    with pytest.raises(TypeError, match="float"):
        F.normalize(x, [0.5], [0.5])
    with pytest.raises(ValueError, match="std"):
        F.normalize(f, [0.5], [0.0])


# ----------------------------------------------------------------------------- boxes

def test_box_format_roundtrip():
    xyxy = torch.tensor([[1.0, 2.0, 5.0, 10.0]])
    b = tv.BoundingBoxes(xyxy, format="XYXY", canvas_size=(20, 20))
    cx = F.convert_bounding_box_format(b, new_format="CXCYWH")
    assert torch.equal(cx.as_subclass(torch.Tensor), torch.tensor([[3.0, 6.0, 4.0, 8.0]]))
    wh = F.convert_bounding_box_format(cx, new_format=tv.BoundingBoxFormat.XYWH)
    assert torch.equal(wh.as_subclass(torch.Tensor), torch.tensor([[1.0, 2.0, 4.0, 8.0]]))
    assert torch.equal(F.convert_bounding_box_format(xyxy, "XYXY", "XYWH"),
                       torch.tensor([[1.0, 2.0, 4.0, 8.0]]))
    with pytest.raises(ValueError, match="old_format"):
        F.convert_bounding_box_format(xyxy, new_format="XYWH")
    clamped = F.clamp_bounding_boxes(tv.BoundingBoxes([[-3, 2, 25, 30]], format="XYXY",
                                                      canvas_size=(20, 22)))
    assert clamped.tolist() == [[0, 2, 22, 20]]


def _rect_sample(h=40, w=50, box=(8, 6, 30, 24), batch=None):
    x1, y1, x2, y2 = box
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    img[:, y1:y2, x1:x2] = 255
    mask = torch.zeros(h, w, dtype=torch.uint8)
    mask[y1:y2, x1:x2] = 1
    boxes = torch.tensor([[x1, y1, x2, y2]], dtype=torch.float32)
    if batch:
        img, mask, boxes = (t.expand(batch, *t.shape).clone() for t in (img, mask, boxes))
    return (tv.Image(img), tv.Mask(mask),
            tv.BoundingBoxes(boxes, format="XYXY", canvas_size=(h, w)))


def mask_bbox(mask: torch.Tensor) -> list[int]:
    ys, xs = torch.nonzero(mask, as_tuple=True)
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


GEOMETRY_CASES = {
    "hflip": (lambda s: F.horizontal_flip(s), 0),
    "vflip": (lambda s: F.vertical_flip(s), 0),
    "resize": (lambda s: F.resize(s, [60, 35]), 1),
    "crop": (lambda s: F.crop(s, 4, 5, 30, 30), 0),
    "center_crop": (lambda s: F.center_crop(s, [20, 26]), 0),
    "resized_crop": (lambda s: F.resized_crop(s, 3, 4, 30, 40, [45, 45]), 1),
    "pad": (lambda s: F.pad(s, [3, 4, 5, 6]), 0),
    "rotate90": (lambda s: F.rotate(s, 90.0), 0),
    "rotate_expand": (lambda s: F.rotate(s, 90.0, expand=True), 0),
    "rotate30": (lambda s: F.rotate(s, 30.0), 1),
    "affine": (lambda s: F.affine(s, 10.0, [3, 2], 0.9, [0.0, 0.0]), 1),
    "perspective": (lambda s: F.perspective(s, [[0, 0], [49, 0], [49, 39], [0, 39]],
                                            [[3, 2], [46, 0], [48, 37], [1, 38]]), 1),
}


@pytest.mark.parametrize("name", sorted(GEOMETRY_CASES))
def test_boxes_and_masks_follow_the_image(name):
    fn, tol = GEOMETRY_CASES[name]
    img, mask, boxes = _rect_sample()
    out_img, out_mask, out_boxes = fn(img), fn(mask), fn(boxes)
    assert type(out_mask) is tv.Mask and type(out_boxes) is tv.BoundingBoxes
    assert out_boxes.canvas_size == tuple(out_img.shape[-2:]) == tuple(out_mask.shape[-2:])
    got = out_boxes[0].tolist()
    assert np.allclose(mask_bbox(out_mask), got, atol=tol + 0.5), (mask_bbox(out_mask), got)
    assert np.allclose(mask_bbox(out_img[0] > 127), got, atol=tol + 0.5)


def test_per_sample_geometry_boxes_follow_each_image():
    img, mask, boxes = _rect_sample(batch=3)
    top, left = torch.tensor([0, 4, 9]), torch.tensor([2, 0, 7])
    h, w = torch.tensor([30, 25, 31]), torch.tensor([40, 33, 43])
    outs = [F.resized_crop(t, top, left, h, w, [32, 32]) for t in (img, mask, boxes)]
    angles = torch.tensor([0.0, 30.0, -60.0])
    rots = [F.rotate(t, angles) for t in (img, mask, boxes)]
    for oi, om, ob in (outs, rots):
        for i in range(3):
            assert np.allclose(mask_bbox(om[i]), ob[i, 0].tolist(), atol=1.5)
            assert np.allclose(mask_bbox(oi[i, 0] > 127), ob[i, 0].tolist(), atol=1.5)
    for i in range(3):
        single = F.rotate(img[i], float(angles[i]))
        assert torch.equal(rots[0][i], single)
        assert torch.equal(outs[0][i], F.resized_crop(img[i], int(top[i]), int(left[i]), int(h[i]),
                                                      int(w[i]), [32, 32]))


def test_crop_per_sample_gathers_and_pads():
    x = torch.arange(2 * 1 * 5 * 6, dtype=torch.uint8).reshape(2, 1, 5, 6)
    out = F.crop(x, torch.tensor([0, 3]), torch.tensor([1, 4]), 3, 3)
    assert torch.equal(out[0], x[0, :, 0:3, 1:4])
    assert torch.equal(out[1, :, :2, :2], x[1, :, 3:5, 4:6]) and out[1, :, 2:].eq(0).all()
    assert out.dtype == torch.uint8


@pytest.mark.parametrize("call, exc, match", [
    (lambda x: F.resize(x, [0, 3]), ValueError, "size"),
    (lambda x: F.resize(x, 10, interpolation="lanczos9"), ValueError, "interpolation"),
    (lambda x: F.pad(x, [1, 2, 3]), ValueError, "padding"),
    (lambda x: F.pad(x, 1, padding_mode="wrap"), ValueError, "padding_mode"),
    (lambda x: F.adjust_hue(x, 0.7), ValueError, "hue_factor"),
    (lambda x: F.adjust_brightness(x, -1), ValueError, "brightness_factor"),
    (lambda x: F.gaussian_blur(x, 4), ValueError, "kernel_size"),
    (lambda x: F.posterize(x, 9), ValueError, "bits"),
    (lambda x: F.five_crop(x, 100), ValueError, "size"),
    (lambda x: F.rotate(x, torch.tensor([1.0, 2.0]), expand=True), ValueError, "expand"),
    (lambda x: F.adjust_brightness(x, torch.tensor([1.0, 2.0, 3.0])), ValueError, "per-sample"),
])
def test_bad_arguments(call, exc, match):
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(exc, match=match):
        call(x)


def test_per_sample_resized_crop_is_one_op_with_cpu_and_portable_kernels():
    """Compiled graphs call the per-sample resized crop as an extern op; its CPU kernel
    (torch's Pillow-style uint8 resize per window) and portable kernel (dense separable
    weights, any device) agree within one level."""
    from ember.core import kernels

    assert kernels.registered()["ember_vision::resized_crop"] == ["cpu", "portable"]
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(4, 3, 30, 40, generator=g) * 255).to(torch.uint8)
    params = [torch.tensor(v) for v in ([0, 5, 2, 10], [3, 0, 9, 20], [30, 12, 20, 17],
                                         [37, 25, 31, 20])]
    op = kernels.get("ember_vision::resized_crop")
    cpu = op(x, *params, 16, 18, "bilinear", True)
    portable = op.kernels["portable"](x, *params, 16, 18, "bilinear", True)
    assert cpu.shape == portable.shape == (4, 3, 16, 18) and cpu.dtype == torch.uint8
    assert (cpu.int() - portable.int()).abs().max() <= 1
    for i in range(4):
        t, left, h, w = (int(p[i]) for p in params)
        one = F.resized_crop(x[i], t, left, h, w, [16, 18])
        assert torch.equal(cpu[i], one)


def test_hue_shift_traced_form_equals_the_eager_kernel():
    """Under tracing adjust_hue uses a pure-expression form the compiler can fuse; it must
    compute what the eager in-place kernel computes (ties and grey pixels included)."""
    from ember.vision.transforms.functional._color import _shift_hue, _shift_hue_traced

    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 3, 9, 11, generator=g)
    x[0, :, :2] = 0.5  # grey: delta = 0
    x[1, 1] = x[1, 0]  # red/green ties
    x[2, 2] = x[2, 1]
    factor = torch.tensor([0.3, -0.45, 0.1, 0.0])
    torch.testing.assert_close(_shift_hue_traced(x, factor), _shift_hue(x, factor),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(_shift_hue_traced(x, 0.2), _shift_hue(x, 0.2), atol=1e-5, rtol=0)
