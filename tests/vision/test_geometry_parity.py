"""Geometry details where torchvision's behaviour is the reference (issue #19, points 4 and 6)."""

import pytest
import torch

from ember.vision import tv_tensors as tv
from ember.vision.transforms import functional as F


def test_center_crop_padding_puts_the_floor_half_before():
    # torchvision pads (excess // 2, (excess + 1) // 2): an excess of 3 puts 1 row before
    for size, crop in ((5, 8), (5, 12), (4, 7), (6, 8)):
        img = torch.ones(1, size, size, dtype=torch.uint8)
        out = F.center_crop(img, crop)
        before = (crop - size) // 2
        rows = out[0, :, crop // 2].nonzero().flatten().tolist()
        assert rows == list(range(before, before + size)), (size, crop)
        mask = F.center_crop(tv.Mask(torch.ones(size, size)), crop)
        assert torch.equal(mask[:, crop // 2] > 0, out[0, :, crop // 2] > 0)
    # smaller windows keep the half-to-even rounding of the excess
    img = torch.arange(7.0).view(1, 1, 7).expand(1, 7, 7)
    assert F.center_crop(img, 4)[0, 0].tolist() == [2.0, 3.0, 4.0, 5.0]  # round(1.5) = 2


def _columns(h=31, w=45):
    img = torch.full((3, h, w), 100, dtype=torch.uint8)
    img[..., ::2] = 101
    return img


@pytest.mark.parametrize("warp", [
    lambda x, **k: F.rotate(x, 17, interpolation="bilinear", **k),
    lambda x, **k: F.affine(x, 10, [3, -2], 1.1, [5, 2], interpolation="bilinear", **k),
    lambda x, **k: F.perspective(x, [[0, 0], [44, 0], [44, 30], [0, 30]],
                                 [[3, 2], [40, 1], [42, 28], [1, 27]], interpolation="bilinear",
                                 **k),
])
def test_uint8_bilinear_warps_round_and_blend_the_border_like_torchvision(warp):
    img = _columns()
    out = warp(img)
    inner = out[:, 10:-10, 12:-12].double()
    # mixes of 100 and 101 round to either (truncation would give 100 everywhere)
    assert abs(inner.mean().item() - 100.5) < 0.2
    assert set(out[:, 10:-10, 12:-12].unique().tolist()) == {100, 101}
    # float path agrees within rounding
    ref = warp(img.float())
    assert (out.float() - ref).abs().max() <= 0.5 + 1e-3
    # past the border samples count as zero: fill=None fades to 0 ...
    faded = out[out < 100]
    assert faded.numel() > 0 and faded.max() > 0
    # ... and a fill is blended in by the share of the pixel that came from inside
    filled = warp(torch.full((1, 31, 45), 100, dtype=torch.uint8), fill=200)
    values = set(filled.unique().tolist())
    assert {100, 200} <= values and any(100 < v < 200 for v in values)


def test_uint8_bicubic_resize_is_torch_native_uint8_kernel():
    g = torch.Generator().manual_seed(0)
    for c, batch in ((1, ()), (3, (2,)), (4, ())):
        img = torch.randint(0, 256, batch + (c, 37, 53), dtype=torch.uint8, generator=g)
        for size, aa in (((20, 31), False), ((61, 90), False), ((20, 31), True)):
            out = F.resize(img, list(size), interpolation="bicubic", antialias=aa)
            x = img.reshape(-1, c, 37, 53)
            ref = torch.nn.functional.interpolate(x, size=size, mode="bicubic",
                                                  align_corners=False, antialias=aa)
            assert torch.equal(out, ref.reshape(batch + (c,) + size)), (c, size, aa)
