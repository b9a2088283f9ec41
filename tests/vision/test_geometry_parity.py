"""Geometry details where torchvision's behaviour is the reference (issue #19, point 6)."""

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
