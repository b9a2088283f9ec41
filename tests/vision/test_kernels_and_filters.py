"""Per-type kernels (resize_image, resize_mask, resize_bounding_boxes, ...), BOX / HAMMING /
LANCZOS resizing and foreign InterpolationMode enums (issue #19). Compared with torchvision
in tests/peers; here: each kernel equals its functional on the matching tv_tensor."""

import enum
import inspect

import numpy as np
import PIL.Image
import pytest
import torch

import ember.vision.transforms as T
import ember.vision.transforms.functional as F
from ember.vision import tv_tensors

KERNEL_NAMES = [n for n in F.__all__
                if n.endswith(("_image", "_video", "_mask", "_bounding_boxes"))
                and n not in ("to_image", "to_pil_image", "sanitize_bounding_boxes",
                              "clamp_bounding_boxes")]


def test_kernels_are_exported_with_a_first_parameter_named_for_their_type():
    assert len(KERNEL_NAMES) == 96
    first = {"image": {"image", "inpt"}, "video": {"video"}, "mask": {"mask"},
             "boxes": {"bounding_boxes", "bounding_box"}}
    for name in KERNEL_NAMES:
        kind = name.rsplit("_", 1)[-1]
        param = next(iter(inspect.signature(getattr(F, name)).parameters))
        assert param in first[kind], (name, param)


def _img(shape=(3, 19, 27), seed=0):
    return torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.uint8)


@pytest.mark.parametrize("name,args", [
    ("resize", ([9, 31],)), ("crop", (2, 3, 10, 11)), ("rotate", (17.0,)),
    ("pad", ([1, 2, 3, 4],)), ("resized_crop", (1, 2, 12, 13, [8, 8])),
    ("affine", (9.0, [2, -1], 1.2, [3.0, 0.0])), ("horizontal_flip", ()),
    ("center_crop", ([7, 9],)), ("adjust_hue", (0.2,)), ("posterize", (3,)),
])
def test_image_video_and_mask_kernels_equal_the_functional(name, args):
    img = _img()
    out = getattr(F, f"{name}_image")(img, *args)
    assert type(out) is torch.Tensor
    torch.testing.assert_close(out, F.__dict__[name](img, *args), rtol=0, atol=0)
    video = _img((2, 3, 19, 27), seed=1)
    torch.testing.assert_close(getattr(F, f"{name}_video")(video, *args),
                               F.__dict__[name](video, *args), rtol=0, atol=0)
    if hasattr(F, f"{name}_mask"):
        mask = (_img((1, 19, 27), seed=2) > 128).to(torch.uint8)
        expect = tv_tensors.unwrap(F.__dict__[name](tv_tensors.Mask(mask), *args))
        torch.testing.assert_close(getattr(F, f"{name}_mask")(mask, *args), expect,
                                   rtol=0, atol=0)


def test_box_kernels_return_what_torchvision_returns():
    boxes = torch.tensor([[1.0, 2.0, 10.0, 12.0], [5.0, 5.0, 20.0, 15.0]])
    fmt, canvas = tv_tensors.BoundingBoxFormat.XYXY, (19, 27)
    typed = tv_tensors.BoundingBoxes(boxes, format=fmt, canvas_size=canvas)
    out, size = F.resize_bounding_boxes(boxes, canvas, [38, 54])
    assert size == (38, 54)
    torch.testing.assert_close(out, boxes * 2)
    flipped = F.horizontal_flip_bounding_boxes(boxes, fmt, canvas)
    assert type(flipped) is torch.Tensor
    torch.testing.assert_close(flipped, tv_tensors.unwrap(F.horizontal_flip(typed)))
    out, size = F.crop_bounding_boxes(boxes, fmt, 1, 2, 10, 12)
    assert size == (10, 12)
    torch.testing.assert_close(out, tv_tensors.unwrap(F.crop(typed, 1, 2, 10, 12)))
    assert F.get_size_bounding_boxes(typed) == [19, 27]


def test_perspective_coefficients_match_the_point_pairs():
    start = [[0, 0], [18, 0], [18, 14], [0, 14]]
    end = [[2, 1], [17, 3], [16, 13], [1, 12]]
    from ember.vision.transforms.functional._geometry import perspective_matrix

    inv = torch.linalg.inv(perspective_matrix(start, end)[0])
    coefficients = (inv / inv[2, 2]).flatten()[:8].tolist()
    img = _img()
    torch.testing.assert_close(F.perspective(img, None, None, coefficients=coefficients),
                               F.perspective(img, start, end), rtol=0, atol=1)
    with pytest.raises(ValueError, match="coefficients"):
        F.perspective(img, start, end, coefficients=coefficients)


class OtherMode(enum.Enum):   # another library's enum with torchvision's values
    BILINEAR = "bilinear"
    LANCZOS = "lanczos"


def test_interpolation_modes_accept_foreign_enums_and_pillow_codes():
    assert {m.name for m in F.InterpolationMode} >= {"BOX", "HAMMING", "LANCZOS"}
    img = _img()
    torch.testing.assert_close(F.resize(img, [9, 13], OtherMode.BILINEAR),
                               F.resize(img, [9, 13]), rtol=0, atol=0)
    assert T.Resize(9, OtherMode.LANCZOS).interpolation == F.InterpolationMode.LANCZOS
    torch.testing.assert_close(F.resize(img, [9, 13], 1),
                               F.resize(img, [9, 13], F.InterpolationMode.LANCZOS))


@pytest.mark.parametrize("mode", ["BOX", "HAMMING"])
def test_box_and_hamming_are_for_pil_images(mode):
    with pytest.raises(ValueError, match="PIL images only"):
        F.resize(_img(), [9, 13], F.InterpolationMode[mode])
    pil = PIL.Image.fromarray(np.full((19, 27, 3), 77, np.uint8))
    out = F.resize(pil, [9, 13], F.InterpolationMode[mode])
    assert out.size == (13, 9) and out.mode == "RGB"
    assert (np.array(out) == 77).all()   # filters normalised: a flat image stays flat


def test_lanczos_needs_antialias_and_matches_torch():
    img = _img()
    with pytest.raises(ValueError, match="antialias"):
        F.resize(img, [9, 13], F.InterpolationMode.LANCZOS, antialias=False)
    x = img.float()[None] / 255
    expect = torch.nn.functional.interpolate(x, size=(9, 13), mode="lanczos", antialias=True)
    torch.testing.assert_close(F.resize(img.float() / 255, [9, 13],
                                        F.InterpolationMode.LANCZOS), expect[0])
