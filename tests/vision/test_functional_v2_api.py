"""The functionals added for torchvision.transforms.v2.functional parity (issue #19 point 7).

References are written independently of the kernels (loops, PIL, plain formulas); the facts
measured with torchvision 0.29.1 (torch 2.14.1, CPU) are recorded beside each test."""

import numpy as np
import PIL.Image
import pytest
import torch
import torch.nn.functional as tF

import ember.vision.transforms.functional as F
from ember.vision import tv_tensors as tv


def _img(shape=(2, 3, 11, 13), dtype=torch.uint8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else x.to(dtype) / 255


def test_aliases_are_the_same_functions():
    assert F.hflip is F.horizontal_flip and F.vflip is F.vertical_flip
    assert F.to_grayscale is F.rgb_to_grayscale and F.elastic_transform is F.elastic
    assert F.get_image_num_channels is F.get_num_channels
    # torchvision's deprecated get_image_size is [W, H] (with a warning); get_size is [H, W]
    with pytest.warns(UserWarning):
        assert F.get_image_size(torch.zeros(3, 5, 7)) == [7, 5]
    with pytest.warns(UserWarning):
        assert F.get_image_size(PIL.Image.new("RGB", (7, 5))) == [7, 5]


def test_size_queries():
    # torchvision: get_dimensions of a 2-d tensor is [1, H, W]; PIL LA -> 2 channels
    assert F.get_dimensions(torch.zeros(5, 7)) == [1, 5, 7]
    assert F.get_dimensions(tv.Video(torch.zeros(4, 3, 5, 7))) == [3, 5, 7]
    assert F.get_num_channels(torch.zeros(2, 4, 5, 7)) == 4
    for mode, c in [("L", 1), ("LA", 2), ("RGB", 3), ("RGBA", 4)]:
        pic = PIL.Image.new(mode, (7, 5))
        assert F.get_dimensions(pic) == [c, 5, 7] and F.get_num_channels(pic) == c
    assert F.get_num_frames(tv.Video(torch.zeros(2, 4, 3, 5, 7))) == 4
    assert F.get_num_frames(torch.zeros(6, 3, 5, 7)) == 6
    with pytest.raises(TypeError):
        F.get_num_frames(tv.Image(torch.zeros(3, 5, 7)))  # torchvision: TypeError too
    with pytest.raises(TypeError):
        F.get_dimensions(torch.zeros(5))
    assert F.is_pure_tensor(torch.zeros(1)) and not F.is_pure_tensor(tv.Image(torch.zeros(1, 1, 1)))


def test_ten_crop_is_five_crops_of_image_and_flip():
    x = torch.arange(2 * 7 * 9).view(2, 1, 7, 9)
    for vflip in (False, True):
        crops = F.ten_crop(x, [3, 4], vertical_flip=vflip)
        assert len(crops) == 10
        flipped = x.flip(-2 if vflip else -1)
        for src, group in ((x, crops[:5]), (flipped, crops[5:])):
            tl, tr, bl, br, c = group
            assert tl.equal(src[..., :3, :4]) and tr.equal(src[..., :3, 5:])
            assert bl.equal(src[..., 4:, :4]) and br.equal(src[..., 4:, 5:])
            assert c.equal(src[..., 2:5, 2:6])  # round((7-3)/2)=2, round((9-4)/2)=round(2.5)=2
    pics = F.ten_crop(PIL.Image.fromarray(x[0, 0].to(torch.uint8).numpy()), 3)
    assert all(isinstance(p, PIL.Image.Image) and p.size == (3, 3) for p in pics)


def test_permute_channels_and_grayscale_to_rgb():
    x = _img()
    assert F.permute_channels(x, [2, 0, 1]).equal(torch.stack([x[:, 2], x[:, 0], x[:, 1]], 1))
    with pytest.raises(ValueError):
        F.permute_channels(x, [0, 1])
    with pytest.raises(ValueError):
        F.permute_channels(x, [0, 0, 1])
    g = x[:, :1]
    assert F.grayscale_to_rgb(g).equal(torch.cat([g, g, g], 1))
    assert F.grayscale_to_rgb(x) is x
    pic = PIL.Image.fromarray(x[0].permute(1, 2, 0).numpy())
    assert np.array(F.permute_channels(pic, [2, 1, 0])).tolist() == \
        np.array(pic)[..., ::-1].tolist()


def test_uniform_temporal_subsample():
    # torchvision (linspace(0, T-1, n).long()): T=7, n=4 -> [0, 2, 4, 6]; T=10, n=4 ->
    # [0, 3, 6, 9]; T=3, n=5 -> [0, 0, 1, 1, 2]
    v = torch.arange(10).view(10, 1, 1, 1)
    for t, n, want in [(7, 4, [0, 2, 4, 6]), (10, 4, [0, 3, 6, 9]), (3, 5, [0, 0, 1, 1, 2])]:
        assert F.uniform_temporal_subsample(v[:t], n).flatten().tolist() == want
    with pytest.raises(ValueError):
        F.uniform_temporal_subsample(v, 0)


def _gaussian_noise_reference(x, mean, sigma, clip, seed):
    g = torch.manual_seed(seed)
    z = torch.randn(x.shape, generator=g)
    if x.is_floating_point():
        out = x + mean + z * sigma
        return out.clamp(0, 1) if clip else out
    noise = [int(v) for v in (mean * 255 + z.flatten() * sigma * 255).tolist()]  # trunc
    out = torch.tensor([a + b for a, b in zip(x.flatten().tolist(), noise)]).view(x.shape)
    return (out.clamp(0, 255) if clip else out % 256).to(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("clip", [True, False])
def test_gaussian_noise(dtype, clip):
    # torchvision draws randn_like(image, float32) once; same seed -> same result (measured:
    # bit-equal for uint8 with clip on and off, and for float32)
    x = _img((2, 3, 5, 6), dtype)
    torch.manual_seed(3)
    out = F.gaussian_noise(x, mean=0.1, sigma=0.3, clip=clip)
    ref = _gaussian_noise_reference(x, 0.1, 0.3, clip, 3)
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
    with pytest.raises(ValueError):
        F.gaussian_noise(x, sigma=-1)
    with pytest.raises(ValueError):
        F.gaussian_noise(x.to(torch.int32))
    m = tv.Mask(torch.ones(5, 6))
    assert F.gaussian_noise(m) is m


def test_jpeg_round_trip_through_pillow():
    # torchvision (libjpeg-turbo) gave the same bytes for quality 5, 50, 95 on 11x13 RGB/gray
    x = _img((2, 3, 11, 13))
    out = F.jpeg(x, 50)
    for i in range(2):
        import io as pyio
        buf = pyio.BytesIO()
        PIL.Image.fromarray(x[i].permute(1, 2, 0).numpy()).save(buf, "JPEG", quality=50)
        ref = np.array(PIL.Image.open(buf))
        diff = np.abs(out[i].permute(1, 2, 0).numpy().astype(int) - ref.astype(int))
        assert diff.max() <= 1  # encoder/decoder defaults of Pillow vs ours may round apart
    assert F.jpeg(x[:, :1], 10).shape == (2, 1, 11, 13)
    with pytest.raises(ValueError):
        F.jpeg(x, 0)
    with pytest.raises(TypeError):
        F.jpeg(x.float(), 50)


def _bilinear_reference(img, sx, sy):
    """Sample [C, H, W] float at pixel coordinates (sx, sy) [h, w], zero outside."""
    c, h, w = img.shape
    out = torch.zeros(c, *sx.shape, dtype=torch.float64)
    for i in range(sx.shape[0]):
        for j in range(sx.shape[1]):
            x, y = float(sx[i, j]), float(sy[i, j])
            x0, y0 = int(np.floor(x)), int(np.floor(y))
            for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
                for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
                    if 0 <= yy < h and 0 <= xx < w:
                        out[:, i, j] += wy * wx * img[:, yy, xx].double()
    return out


def test_elastic_bilinear_against_a_loop_reference():
    x = _img((1, 2, 6, 7), torch.float32)[0]
    d = torch.randn(1, 6, 7, 2, generator=torch.Generator().manual_seed(1)) * 0.2
    out = F.elastic(x, d)
    ys, xs = torch.meshgrid(torch.arange(6.0), torch.arange(7.0), indexing="ij")
    # a displacement is in normalised units: 2/W per pixel in x, 2/H in y
    sx = xs + d[0, ..., 0].double() * 7 / 2
    sy = ys + d[0, ..., 1].double() * 6 / 2
    torch.testing.assert_close(out.double(), _bilinear_reference(x, sx, sy), atol=1e-5, rtol=0)
    # zero displacement is the identity (up to float rounding of the grid)
    torch.testing.assert_close(F.elastic(x, torch.zeros(1, 6, 7, 2)), x, atol=1e-5, rtol=0)


def test_elastic_fill_masks_and_uint8():
    x = _img((3, 5, 6))
    far = torch.full((1, 5, 6, 2), 5.0)  # every sample lands outside
    assert F.elastic(x, far, fill=[1, 2, 3]).equal(
        torch.tensor([1, 2, 3], dtype=torch.uint8).view(3, 1, 1).expand(3, 5, 6))
    assert F.elastic(x, far, interpolation="nearest", fill=9).eq(9).all()
    m = tv.Mask(torch.randint(0, 4, (5, 6)))
    out = F.elastic(m, torch.zeros(1, 5, 6, 2))
    assert isinstance(out, tv.Mask) and out.equal(m)  # nearest, identity grid
    # uint8 bicubic overshoot is clamped (torchvision casts and wraps: up to 255 apart)
    spike = torch.zeros(1, 5, 6, dtype=torch.uint8)
    spike[0, 2, 2] = 255
    d = torch.zeros(1, 5, 6, 2)
    d[..., 0] = 0.1
    out = F.elastic(spike, d, interpolation="bicubic")
    ref = tF.grid_sample(spike[None].float(), F._augment.identity_grid(5, 6, torch.float32, "cpu")
                         + d, mode="bicubic", align_corners=False)[0]
    assert out.equal(ref.round().clamp(0, 255).to(torch.uint8))
    with pytest.raises(ValueError):
        F.elastic(x, torch.zeros(1, 4, 6, 2))
    with pytest.raises(TypeError):
        F.elastic(x, [[0.0]])


def test_elastic_boxes():
    # torchvision 0.29.1 on this displacement (measured): float XYXY [[1.5, 2.2, 8.1, 9.9]] and
    # int boxes in every format agree exactly with ours; here an independent check: a
    # constant displacement moves the corners by -d in pixels, then clamps
    d = torch.zeros(1, 11, 13, 2)
    d[..., 0], d[..., 1] = 2 / 13, -4 / 11  # +1 px in x, -2 px in y of the sampling grid
    b = tv.BoundingBoxes([[2.0, 3.0, 6.0, 8.0], [0.0, 0.0, 13.0, 11.0]], format="XYXY",
                         canvas_size=(11, 13))
    out = F.elastic(b, d)
    torch.testing.assert_close(tv.unwrap(out), torch.tensor([[1.0, 5.0, 5.0, 10.0],
                                                             [0.0, 2.0, 11.0, 11.0]]))
    xywh = tv.BoundingBoxes([[2, 3, 4, 5]], format="XYWH", canvas_size=(11, 13))
    # integer boxes truncate: x2 = 6 - 1 comes out as 4.9999995 in float32 -> 4 (torchvision
    # 0.29.1 gives [[1, 5, 3, 5]] too)
    assert tv.unwrap(F.elastic(xywh, d)).tolist() == [[1, 5, 3, 5]]


def test_sanitize_bounding_boxes():
    boxes = torch.tensor([[0, 0, 5, 5], [2, 2, 2.5, 9], [1, 1, 14, 4], [-1, 0, 3, 3],
                          [3, 3, 4, 4.5]])
    out, keep = F.sanitize_bounding_boxes(boxes, "XYXY", (10, 12))
    assert keep.tolist() == [True, False, False, False, True] and out.equal(boxes[keep])
    typed = tv.BoundingBoxes(boxes, format="XYXY", canvas_size=(10, 12))
    out, keep = F.sanitize_bounding_boxes(typed, min_size=2)
    assert keep.tolist() == [True, False, False, False, False] and isinstance(out, tv.BoundingBoxes)
    with pytest.raises(ValueError):
        F.sanitize_bounding_boxes(boxes)
    with pytest.raises(ValueError):
        F.sanitize_bounding_boxes(typed, format="XYXY")


def test_to_tensor_and_convert_image_dtype():
    # torchvision's to_tensor: uint8 / 255 -> float32, mode "1" -> 0/1 float, "I" -> int32,
    # "I;16" -> int16 (wrapping values over 32767; ours keeps uint16), arrays HWC -> CHW
    pic = PIL.Image.fromarray(np.arange(6, dtype=np.uint8).reshape(2, 3))
    assert F.to_tensor(pic).equal(torch.arange(6.0).view(1, 2, 3) / 255)
    assert F.to_tensor(PIL.Image.new("1", (3, 2), 1)).equal(torch.ones(1, 2, 3))
    assert F.to_tensor(np.zeros((2, 3, 1), np.int16)).dtype == torch.int16
    arr = np.random.default_rng(0).random((4, 5, 3))
    assert F.to_tensor(arr).equal(torch.from_numpy(arr).permute(2, 0, 1))
    with pytest.raises(TypeError):
        F.to_tensor(torch.zeros(3, 2, 2))
    with pytest.raises(ValueError):
        F.to_tensor(np.zeros((1, 2, 2, 2)))
    x = _img((3, 2, 2))
    torch.testing.assert_close(F.convert_image_dtype(x), x.float() / 255)
