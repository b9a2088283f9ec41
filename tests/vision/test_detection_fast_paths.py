"""The detection pipeline's fast paths give the pixels and crops of the plain ones: uint8
RandomPhotometricDistort in one float copy, RandomIoUCrop's trials in numpy float32."""

import pytest
import torch

import ember.vision.transforms as T
import ember.vision.transforms.functional as F
from ember.vision import tv_tensors
from ember.vision.ops import box_iou

STEPS = {"b": F.adjust_brightness, "c": F.adjust_contrast, "s": F.adjust_saturation,
         "h": F.adjust_hue}


@pytest.mark.parametrize("seed", range(40))
def test_photometric_distort_uint8_equals_the_separate_calls(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (1 if seed % 4 == 0 else 3, 23, 31), generator=g,
                      dtype=torch.uint8)
    t = T.RandomPhotometricDistort(p=0.8)
    torch.manual_seed(seed)
    params = t.make_params([x])
    b, c, s, h = params["factors"]
    order = [("b", b)] + ([("c", c), ("s", s), ("h", h)] if params["contrast_first"]
                          else [("s", s), ("h", h), ("c", c)])
    expect = x
    for name, f in order:
        if f is not None:
            expect = STEPS[name](expect, f)
    if params["permutation"] is not None:
        expect = F.permute_channels(expect, params["permutation"])
    out = t.transform(tv_tensors.Image(x), params)
    assert type(out) is tv_tensors.Image
    assert torch.equal(out.as_subclass(torch.Tensor), expect)


def test_iou_crop_max_iou_is_box_iou():
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(9, 2, generator=g) * 40
    boxes = torch.cat([xy, xy + torch.rand(9, 2, generator=g) * 20 + 1], 1)
    crop = [3, 5, 31, 27]
    got = T.RandomIoUCrop._max_iou(boxes.numpy(), crop)
    expect = box_iou(boxes, torch.tensor([crop], dtype=torch.float32)).max()
    assert float(got) == float(expect)


def test_iou_crop_keeps_the_centred_boxes():
    img = torch.zeros(3, 60, 80, dtype=torch.uint8)
    boxes = tv_tensors.BoundingBoxes([[10, 10, 30, 30], [50, 20, 70, 50]], format="XYXY",
                                     canvas_size=(60, 80))
    torch.manual_seed(3)
    out_img, out_boxes = T.RandomIoUCrop(sampler_options=[0.3])(tv_tensors.Image(img), boxes)
    assert out_boxes.canvas_size == tuple(out_img.shape[-2:])
    kept = (out_boxes[:, 2] > out_boxes[:, 0])
    assert bool(kept.any())
