"""16-bit PNG in every read mode, grey decodes and integer to_dtype scaling (issue #19, 3, 6).

References are computed here from the encoded samples: the PNG files are written by hand
(so their 16-bit values are known), and libpng's grey weights (0.2989, 0.587 as 15-bit
fixed point), which torchvision's decoder uses, are applied to them."""

import io
import struct
import zlib

import numpy as np
import PIL.Image
import pytest
import torch

from ember.vision.io import ImageReadMode as M
from ember.vision.io import decode_image, decode_jpeg, decode_png
from ember.vision.transforms import functional as F


def _png(arr: np.ndarray, color_type: int, depth: int = 16) -> torch.Tensor:
    h, w = arr.shape[:2]
    dt = ">u2" if depth == 16 else "u1"
    raw = b"".join(b"\x00" + arr[y].astype(dt).tobytes() for y in range(h))

    def chunk(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I",
                                                                     zlib.crc32(tag + body))

    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0)
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _chw(a):
    return torch.from_numpy(a.astype(np.int64)).reshape(a.shape[0], a.shape[1], -1).permute(2, 0, 1)


def _gray(rgb, depth):
    r, g, b = rgb.unbind(0)
    s = 9794 * r + 19234 * g + 3740 * b
    return ((s + 16384) >> 15 if depth == 16 else s >> 15).unsqueeze(0)


@pytest.mark.parametrize("depth", [16, 8])
@pytest.mark.parametrize("kind, channels, ct", [("grey", 1, 0), ("grey+alpha", 2, 4),
                                                 ("rgb", 3, 2), ("rgba", 4, 6)])
def test_png_every_mode_keeps_the_depth(depth, kind, channels, ct):
    rng = np.random.default_rng(channels + depth)
    top = 1 << depth
    a = rng.integers(0, top, (9, 7, channels)).astype(np.uint16 if depth == 16 else np.uint8)
    data = _png(a[..., 0] if channels == 1 else a, ct, depth)
    src = _chw(a)
    dtype = torch.uint16 if depth == 16 else torch.uint8
    opaque = torch.full((1, 9, 7), top - 1, dtype=torch.int64)
    colour = src[:3] if channels >= 3 else src[:1]
    alpha = src[-1:] if channels in (2, 4) else opaque
    gray = _gray(colour, depth) if channels >= 3 else colour
    rgb = colour if channels >= 3 else colour.expand(3, -1, -1)
    want = {M.UNCHANGED: src, M.GRAY: gray, M.GRAY_ALPHA: torch.cat([gray, alpha]),
            M.RGB: rgb, M.RGB_ALPHA: torch.cat([rgb, alpha])}
    if depth == 8 and channels == 2:
        want.pop(M.GRAY_ALPHA)  # Pillow's own path; the 8-bit grey+alpha decode is unchanged
        want.pop(M.UNCHANGED)
    for mode, ref in want.items():
        out = decode_png(data, mode)
        assert out.dtype == dtype, (mode, out.dtype)
        assert torch.equal(out.to(torch.int64), ref), mode


def test_jpeg_gray_is_the_luma_plane():
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    PIL.Image.fromarray(rng.integers(0, 256, (21, 30, 3), dtype=np.uint8)).save(buf, "JPEG")
    data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    im = PIL.Image.open(io.BytesIO(buf.getvalue()))
    im.draft("YCbCr", im.size)  # the decoder's own Y plane, before any colour conversion
    luma = torch.from_numpy(np.asarray(im)[..., 0].copy())
    assert torch.equal(decode_jpeg(data, M.GRAY)[0], luma)
    assert torch.equal(decode_image(data, M.GRAY)[0], luma)


def test_to_dtype_integer_scaling():
    x = torch.tensor([[[0, 1, 127, 128, 255]]], dtype=torch.uint8)
    assert F.to_dtype(x, torch.uint16, scale=True).to(torch.int32).tolist() == [
        [[0, 256, 32512, 32768, 65280]]]
    y = torch.tensor([[[0, 255, 256, 65535, 32768]]], dtype=torch.uint16)
    assert F.to_dtype(y, torch.uint8, scale=True).tolist() == [[[0, 0, 1, 255, 128]]]
    assert F.to_dtype(y, torch.int32, scale=True).tolist() == [
        [[0, 255 << 15, 256 << 15, 65535 << 15, 32768 << 15]]]
    assert F.to_dtype(x, torch.int16, scale=True).tolist() == [[[0, 128, 16256, 16384, 32640]]]
    f = torch.tensor([[[0.0, 0.5, 1.0]]])
    assert F.to_dtype(f, torch.uint16, scale=True).to(torch.int32).tolist() == [
        [[0, 32768, 65535]]]  # torchvision wraps 1.0 to 0 here: docs/vision.md
    assert torch.allclose(F.to_dtype(y, torch.float32, scale=True), y.float() / 65535)
    with pytest.raises(RuntimeError, match="exactly"):
        F.to_dtype(f, torch.int32, scale=True)
