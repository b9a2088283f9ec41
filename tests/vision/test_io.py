import io
import struct
import zlib

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from ember.vision import io as vio
from ember.vision.io import ImageReadMode

MODES = list(ImageReadMode)


def _pattern(h: int = 37, w: int = 53, channels: int = 3, seed: int = 0,
             noise: int = 12) -> np.ndarray:
    """A smooth gradient plus noise: compresses like a photo, exercises every value range."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    planes = [(x * 255 / w + 40 * c) % 256 + 0 * y for c in range(channels)]
    arr = np.stack(planes, -1) + rng.integers(-noise, noise + 1, (h, w, channels))
    return np.clip(arr, 0, 255).astype(np.uint8)


def _encode(im: Image.Image, fmt: str, **kw) -> torch.Tensor:
    buffer = io.BytesIO()
    im.save(buffer, fmt, **kw)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _pil(data: torch.Tensor) -> Image.Image:
    return Image.open(io.BytesIO(data.numpy().tobytes()))


def _chw(arr: np.ndarray) -> torch.Tensor:
    arr = np.asarray(arr)
    if arr.ndim == 2:
        arr = arr[..., None]
    return torch.from_numpy(np.array(arr.transpose(2, 0, 1)))


def _reference(data: torch.Tensor, mode: ImageReadMode) -> torch.Tensor:
    """Pillow's own decode in the requested mode, except grey from colour, which is
    torchvision's: the decoder's luma plane for JPEG, libpng's weights (0.2989, 0.587 as
    15-bit fixed point, truncated) for PNG."""
    im = _pil(data)
    if mode in (ImageReadMode.GRAY, ImageReadMode.GRAY_ALPHA) and im.mode not in ("L", "LA"):
        if im.format == "JPEG" and mode is ImageReadMode.GRAY and im.mode == "RGB":
            im.draft("YCbCr", im.size)
            return _chw(im)[:1].contiguous()
        if im.format == "PNG":
            rgba = _chw(im.convert("RGBA")).to(torch.int32)
            r, g, b = rgba[:3]
            gray = ((9794 * r + 19234 * g + 3740 * b) >> 15).to(torch.uint8)[None]
            return gray if mode is ImageReadMode.GRAY else torch.cat([gray, rgba[3:4].byte()])
    target = {ImageReadMode.GRAY: "L", ImageReadMode.GRAY_ALPHA: "LA",
              ImageReadMode.RGB: "RGB", ImageReadMode.RGB_ALPHA: "RGBA"}.get(mode)
    if target is None:  # UNCHANGED: Pillow's mode; CMYK as stored, palette PNGs' index map
        if im.mode == "CMYK":  # Pillow inverts every CMYK JPEG (Adobe polarity) on reading
            return 255 - _chw(im)
        if im.mode == "P" and im.format == "PNG":
            return _chw(np.asarray(im))
        if im.mode == "P":
            target = "RGBA" if "transparency" in im.info else "RGB"
        else:
            target = {"1": "L"}.get(im.mode, im.mode)
    return _chw(im.convert(target))


def _sources() -> dict[str, torch.Tensor]:
    rgb = _pattern()
    rgba = np.concatenate([rgb, _pattern(channels=1, seed=1)], -1)
    gray = _pattern(channels=1)[..., 0]
    palette = Image.fromarray(rgb).quantize(16)
    palette_t = palette.copy()
    palette_t.info["transparency"] = 3
    cmyk = Image.fromarray(rgba, "RGBA").convert("CMYK")
    return {
        "jpeg_rgb": _encode(Image.fromarray(rgb), "JPEG", quality=90),
        "jpeg_gray": _encode(Image.fromarray(gray), "JPEG"),
        "jpeg_cmyk": _encode(cmyk, "JPEG"),
        "jpeg_progressive": _encode(Image.fromarray(rgb), "JPEG", progressive=True),
        "png_L": _encode(Image.fromarray(gray), "PNG"),
        "png_LA": _encode(Image.fromarray(rgba[..., [0, 3]], "LA"), "PNG"),
        "png_RGB": _encode(Image.fromarray(rgb), "PNG"),
        "png_RGBA": _encode(Image.fromarray(rgba, "RGBA"), "PNG"),
        "png_P": _encode(palette, "PNG"),
        "png_P_transparent": _encode(palette_t, "PNG", transparency=3),
        "webp": _encode(Image.fromarray(rgb), "WEBP", lossless=True),
        "webp_rgba": _encode(Image.fromarray(rgba, "RGBA"), "WEBP", lossless=True),
    }


SOURCES = _sources()


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_decode_image_equals_pillow(name, mode):
    data = SOURCES[name]
    out = vio.decode_image(data, mode)
    expected = _reference(data, mode)
    assert out.dtype == torch.uint8 and out.is_contiguous()
    assert torch.equal(out, expected), name


def test_format_specific_decoders_agree_with_decode_image():
    for name, fn in [("jpeg_rgb", vio.decode_jpeg), ("png_RGBA", vio.decode_png),
                     ("webp", vio.decode_webp)]:
        assert torch.equal(fn(SOURCES[name]), vio.decode_image(SOURCES[name])), name


def test_unchanged_channel_counts():
    expected = {"jpeg_rgb": 3, "jpeg_gray": 1, "jpeg_cmyk": 4, "png_L": 1, "png_LA": 2,
                "png_RGBA": 4, "png_P": 1, "png_P_transparent": 1, "webp_rgba": 4}
    for name, channels in expected.items():
        assert vio.decode_image(SOURCES[name]).shape[0] == channels, name


def test_unchanged_cmyk_jpeg_is_the_stored_samples():
    # torchvision returns libjpeg's 4 stored samples. Pillow writes CMYK inverted (Adobe
    # polarity) and inverts every CMYK JPEG back on reading, with or without the APP14
    # marker, so the stored samples are 255 - Pillow's, near 255 - the source values.
    cmyk = Image.fromarray(_pattern(channels=4), "CMYK")
    adobe = _encode(cmyk, "JPEG", quality=100)
    raw = adobe.numpy().tobytes()
    at = raw.find(b"\xff\xee")
    end = at + 2 + struct.unpack(">H", raw[at + 2:at + 4])[0]
    plain = torch.frombuffer(bytearray(raw[:at] + raw[end:]), dtype=torch.uint8)
    source = torch.from_numpy(np.asarray(cmyk).transpose(2, 0, 1).astype(np.int16))
    for data in (adobe, plain):
        out = vio.decode_image(data)
        assert out.shape == (4, 37, 53)
        assert torch.equal(out, 255 - _chw(np.asarray(_pil(data))))
        assert (out.to(torch.int16) - (255 - source)).abs().float().mean() < 4
    assert torch.equal(vio.decode_jpeg(adobe), vio.decode_image(adobe))
    assert vio.decode_jpeg(adobe, mode=ImageReadMode.RGB).shape[0] == 3


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_unchanged_palette_png_is_the_index_map(bits):
    colours = 1 << bits
    index = np.random.default_rng(bits).integers(0, colours, (13, 19)).astype(np.uint8)
    im = Image.fromarray(index, "P")
    im.putpalette([i % 256 for i in range(3 * colours)])
    out = vio.decode_png(_encode(im, "PNG", bits=bits))
    assert out.shape == (1, 13, 19) and torch.equal(out[0], torch.from_numpy(index))
    rgb = vio.decode_png(_encode(im, "PNG", bits=bits), ImageReadMode.RGB)
    assert torch.equal(rgb, _chw(np.asarray(im.convert("RGB"))))


def test_mode_accepts_names():
    data = SOURCES["png_RGBA"]
    assert torch.equal(vio.decode_png(data, "RGB"), vio.decode_png(data, ImageReadMode.RGB))
    assert vio.decode_png(data, "rgba").shape[0] == 4
    with pytest.raises(ValueError, match="mode must be"):
        vio.decode_png(data, "CMYK")


def _filter_row(row: np.ndarray, prev: np.ndarray, kind: int, bpp: int) -> np.ndarray:
    """PNG row filter ``kind`` (0 None, 1 Sub, 2 Up, 3 Average, 4 Paeth) applied to raw bytes."""
    x = row.astype(np.int32)
    b = prev.astype(np.int32)
    a = np.concatenate([np.zeros(bpp, np.int32), x[:-bpp]])
    c = np.concatenate([np.zeros(bpp, np.int32), b[:-bpp]])
    if kind == 0:
        pred = np.zeros_like(x)
    elif kind == 1:
        pred = a
    elif kind == 2:
        pred = b
    elif kind == 3:
        pred = (a + b) // 2
    else:
        p = a + b - c
        pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
        pred = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
    return ((x - pred) % 256).astype(np.uint8)


def _png16(values: np.ndarray, color_type: int) -> torch.Tensor:
    """A 16-bit PNG written by hand, rows cycling through all five filter types, so the
    test depends on neither Pillow's encoder nor its choice of filters."""
    h, w = values.shape[:2]
    bpp = 2 * (values.shape[2] if values.ndim == 3 else 1)

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    rows = np.frombuffer(values.astype(">u2").tobytes(), np.uint8).reshape(h, -1)
    prev = np.zeros(rows.shape[1], np.uint8)
    raw = b""
    for i, row in enumerate(rows):
        raw += bytes([i % 5]) + _filter_row(row, prev, i % 5, bpp).tobytes()
        prev = row
    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return torch.frombuffer(bytearray(png), dtype=torch.uint8)


@pytest.mark.parametrize("channels,color_type", [(1, 0), (3, 2), (4, 6)])
def test_png_16bit_comes_back_uint16(channels, color_type):
    rng = np.random.default_rng(channels)
    values = rng.integers(0, 65536, (9, 11, channels)).astype(np.uint16)
    out = vio.decode_png(_png16(values[..., 0] if channels == 1 else values, color_type))
    assert out.dtype == torch.uint16 and out.shape == (channels, 9, 11)
    assert np.array_equal(out.numpy(), values.transpose(2, 0, 1))


def test_png_16bit_high_bytes_match_pillow_8bit_decode():
    values = _pattern(40, 50).astype(np.uint16) * 257 + 3
    data = _png16(values, 2)
    out = vio.decode_png(data)
    assert np.array_equal(out.numpy(), values.transpose(2, 0, 1))
    high = (out.numpy() >> 8).astype(np.uint8)
    assert np.array_equal(high, np.asarray(_pil(data)).transpose(2, 0, 1))


def test_png_16bit_gray_through_pillow_roundtrip():
    values = torch.randint(0, 65536, (1, 13, 17), dtype=torch.int32).to(torch.uint16)
    out = vio.decode_png(vio.encode_png(values))
    assert out.dtype == torch.uint16 and torch.equal(out, values)


def _with_orientation(arr: np.ndarray, fmt: str, orientation: int) -> torch.Tensor:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return _encode(Image.fromarray(arr), fmt, exif=exif)


# Orientation tag -> the numpy operation that displays the stored pixels upright.
_ORIENT = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.transpose(1, 0, 2),
    6: lambda a: np.rot90(a, -1),
    7: lambda a: np.rot90(a, -1)[::-1],
    8: lambda a: np.rot90(a, 1),
}


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation(orientation):
    arr = _pattern(20, 30)
    png = _with_orientation(arr, "PNG", orientation)
    out = vio.decode_png(png, apply_exif_orientation=True)
    assert torch.equal(out, _chw(_ORIENT[orientation](arr)))
    assert torch.equal(vio.decode_png(png), _chw(arr))  # ignored unless asked for
    jpeg = _with_orientation(arr, "JPEG", orientation)
    expected = _chw(ImageOps.exif_transpose(_pil(jpeg)))
    assert torch.equal(vio.decode_jpeg(jpeg, apply_exif_orientation=True), expected)


def test_png_roundtrip_exact():
    for channels in (1, 2, 3, 4):
        img = torch.from_numpy(_pattern(channels=channels).transpose(2, 0, 1).copy())
        for level in (0, 6, 9):
            assert torch.equal(vio.decode_png(vio.encode_png(img, level)), img)


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = ((a.double() - b.double()) ** 2).mean().item()
    return 10 * np.log10(255**2 / mse) if mse else float("inf")


def test_jpeg_roundtrip_psnr():
    img = torch.from_numpy(_pattern(64, 80, noise=2).transpose(2, 0, 1).copy())
    high = vio.decode_jpeg(vio.encode_jpeg(img, quality=95))
    low = vio.decode_jpeg(vio.encode_jpeg(img, quality=20))
    assert _psnr(high, img) > 30
    assert _psnr(low, img) < _psnr(high, img)
    gray = img[:1].contiguous()
    assert _psnr(vio.decode_jpeg(vio.encode_jpeg(gray, 90)), gray) > 30


def test_encode_jpeg_matches_pillow_bytes():
    img = torch.from_numpy(_pattern().transpose(2, 0, 1).copy())
    ours = vio.encode_jpeg(img, quality=80)
    assert torch.equal(ours, _encode(Image.fromarray(_pattern()), "JPEG", quality=80))


def test_batched_equals_unbatched():
    items = [SOURCES[k] for k in ("jpeg_rgb", "jpeg_gray", "jpeg_progressive", "jpeg_cmyk")] * 3
    batch = vio.decode_jpeg(items, mode=ImageReadMode.RGB)
    assert isinstance(batch, list) and len(batch) == len(items)
    for data, out in zip(items, batch):
        assert torch.equal(out, vio.decode_jpeg(data, mode=ImageReadMode.RGB))
    images = [torch.from_numpy(_pattern(seed=s).transpose(2, 0, 1).copy()) for s in range(5)]
    encoded = vio.encode_jpeg(images, quality=85)
    assert [torch.equal(e, vio.encode_jpeg(i, 85)) for e, i in zip(encoded, images)] == [True] * 5
    assert vio.decode_image(list(SOURCES.values()))[1].shape == vio.decode_image(
        list(SOURCES.values())[1]).shape
    assert vio.decode_jpeg([]) == []


def test_gif_animated_frames():
    frames = [Image.fromarray(_pattern(seed=s)).convert("P") for s in range(4)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=40)
    data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    out = vio.decode_gif(data)
    assert out.shape == (4, 3, 37, 53) and out.dtype == torch.uint8
    reference = _pil(data)
    for i in range(4):
        reference.seek(i)
        assert torch.equal(out[i], _chw(reference.convert("RGB")))
    assert torch.equal(vio.decode_image(data), out)
    single = _encode(frames[0], "GIF")
    assert vio.decode_gif(single).shape == (3, 37, 53)


def _photo(h: int = 480, w: int = 640) -> torch.Tensor:
    return _encode(Image.fromarray(_pattern(h, w)), "JPEG", quality=90)


@pytest.mark.parametrize("size,expected", [((120, 160), (120, 160)), ((100, 150), (120, 160)),
                                           ((130, 170), (240, 320)), ((60, 80), (60, 80)),
                                           ((10, 10), (60, 80)), ((480, 640), (480, 640)),
                                           ((300, 10), (480, 640))])
def test_reduced_size_decode(size, expected):
    data = _photo()
    out = vio.decode_jpeg(data, size=size)
    assert tuple(out.shape[1:]) == expected
    assert out.shape[1] >= size[0] and out.shape[2] >= size[1]
    reference = _pil(data)
    reference.draft("RGB", (size[1], size[0]))
    assert torch.equal(out, _chw(reference.convert("RGB")))


def test_reduced_size_decode_is_close_to_a_resize():
    data = _photo()
    small = vio.decode_jpeg(data, size=(120, 160)).double()
    full = vio.decode_jpeg(data).double()
    pooled = torch.nn.functional.avg_pool2d(full[None], 4)[0]
    assert (small - pooled).abs().mean() < 4


def test_file_helpers(tmp_path):
    img = torch.from_numpy(_pattern().transpose(2, 0, 1).copy())
    vio.write_png(img, tmp_path / "a.png")
    assert torch.equal(vio.read_image(tmp_path / "a.png"), img)
    assert torch.equal(vio.read_image(str(tmp_path / "a.png"), ImageReadMode.GRAY),
                       _reference(vio.read_file(tmp_path / "a.png"), ImageReadMode.GRAY))
    vio.write_jpeg(img, tmp_path / "a.jpg", quality=90)
    assert torch.equal(vio.read_file(tmp_path / "a.jpg"), vio.encode_jpeg(img, 90))
    raw = torch.arange(7, dtype=torch.uint8)
    vio.write_file(tmp_path / "raw.bin", raw)
    assert torch.equal(vio.read_file(tmp_path / "raw.bin"), raw)
    with pytest.raises(FileNotFoundError):
        vio.read_file(tmp_path / "missing.png")
    with pytest.raises(ValueError, match="directory"):
        vio.read_file(tmp_path)
    with pytest.raises(ValueError, match="1-D uint8"):
        vio.write_file(tmp_path / "x", torch.zeros(3))


def test_device_argument():
    out = vio.decode_jpeg(SOURCES["jpeg_rgb"], device=torch.device("cpu"))
    assert out.device.type == "cpu"
    with pytest.raises(ValueError, match="device"):
        vio.decode_jpeg(SOURCES["jpeg_rgb"], device="not-a-device")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_decode_to_cuda():
    items = [SOURCES["jpeg_rgb"]] * 3
    out = vio.decode_jpeg(items, device="cuda")
    torch.cuda.synchronize()
    assert all(o.is_cuda for o in out)
    assert torch.equal(out[0].cpu(), vio.decode_jpeg(items[0]))


# --- bad input ----------------------------------------------------------------------------

def test_bad_tensors():
    with pytest.raises(ValueError, match="empty"):
        vio.decode_jpeg(torch.empty(0, dtype=torch.uint8))
    with pytest.raises(ValueError, match="dtype torch.float32"):
        vio.decode_image(torch.zeros(10))
    with pytest.raises(ValueError, match=r"shape \(2, 5\)"):
        vio.decode_png(torch.zeros(2, 5, dtype=torch.uint8))
    with pytest.raises(TypeError, match="bytes"):
        vio.decode_image(b"\xff\xd8\xff")


def test_truncated_and_corrupt_files():
    for name in ("jpeg_rgb", "png_RGB", "webp"):
        data = SOURCES[name]
        with pytest.raises(RuntimeError, match="corrupt"):
            vio.decode_image(data[: data.numel() // 2].clone())
    garbage = torch.cat([torch.tensor([0x89, 0x50, 0x4E, 0x47, 13, 10, 26, 10], dtype=torch.uint8),
                         torch.randint(0, 256, (200,), dtype=torch.uint8)])
    with pytest.raises(RuntimeError, match="corrupt PNG"):
        vio.decode_png(garbage)
    header_only = SOURCES["jpeg_rgb"][:4].clone()
    with pytest.raises(RuntimeError, match="JPEG"):
        vio.decode_jpeg(header_only)


def test_random_bytes_never_crash():
    rng = torch.Generator().manual_seed(0)
    base = SOURCES["jpeg_rgb"]
    for _ in range(30):
        data = base.clone()
        idx = torch.randint(0, data.numel(), (20,), generator=rng)
        data[idx] = torch.randint(0, 256, (20,), dtype=torch.uint8, generator=rng)
        try:
            out = vio.decode_image(data)
        except (RuntimeError, ValueError):
            continue
        assert out.dtype == torch.uint8 and out.dim() == 3


def test_unsupported_and_unknown_formats():
    bmp = _encode(Image.fromarray(_pattern()), "BMP")
    with pytest.raises(ValueError, match="BMP images are not supported"):
        vio.decode_image(bmp)
    with pytest.raises(ValueError, match="unrecognised image format"):
        vio.decode_image(torch.arange(50, dtype=torch.uint8))
    with pytest.raises(ValueError, match="input is PNG data, not JPEG"):
        vio.decode_jpeg(SOURCES["png_RGB"])


def test_decompression_bomb():
    previous = vio.set_decode_limits(max_pixels=1000)
    try:
        with pytest.raises(vio.DecodeLimitError, match="decode limit of 1000 pixels"):
            vio.decode_image(SOURCES["png_RGB"])
    finally:
        vio.set_decode_limits(previous)


def test_batched_error_names_the_index():
    items = [SOURCES["jpeg_rgb"], SOURCES["jpeg_rgb"], SOURCES["jpeg_rgb"][:100].clone()]
    with pytest.raises(RuntimeError, match="item 2 of the batch"):
        vio.decode_jpeg(items)
    with pytest.raises(ValueError, match="item 1 of the batch.*empty"):
        vio.decode_jpeg([SOURCES["jpeg_rgb"], torch.empty(0, dtype=torch.uint8)])
    bad = SOURCES["jpeg_rgb"][:100].clone()
    with pytest.raises(RuntimeError, match="item 1 of the batch"):  # the lowest bad index
        vio.decode_jpeg([SOURCES["jpeg_rgb"], bad] + [SOURCES["jpeg_rgb"], bad] * 8)


def test_bad_encode_arguments():
    img = torch.zeros(3, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="quality"):
        vio.encode_jpeg(img, quality=0)
    with pytest.raises(ValueError, match="compression_level"):
        vio.encode_png(img, compression_level=10)
    with pytest.raises(ValueError, match="C in"):
        vio.encode_jpeg(torch.zeros(4, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="dtype"):
        vio.encode_png(torch.zeros(3, 8, 8))
    with pytest.raises(ValueError, match="1 channel"):
        vio.encode_png(torch.zeros(3, 8, 8, dtype=torch.uint16))
    with pytest.raises(ValueError, match="empty side"):
        vio.encode_png(torch.zeros(3, 0, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="item 1"):
        vio.encode_jpeg([img, torch.zeros(8, 8, dtype=torch.uint8)])
    with pytest.raises(ValueError, match="size must be"):
        vio.decode_jpeg(SOURCES["jpeg_rgb"], size=(0, 5))


def test_plane_packing_falls_back_to_public_tobytes(monkeypatch):
    # If a Pillow's raw encoder does not finish a plane in one call, the public path runs.
    from PIL import ImageFile

    expected = vio.decode_png(SOURCES["png_RGBA"])
    real = Image._getencoder
    calls = []

    class Unfinished:
        def __init__(self, encoder):
            self.encoder = encoder

        def __getattr__(self, name):
            return getattr(self.encoder, name)

        def encode(self, bufsize):
            if bufsize != max(ImageFile.MAXBLOCK, 53 * 4):  # not Image.tobytes' own call
                calls.append(bufsize)
                return 0, 0, b""
            return self.encoder.encode(bufsize)

    monkeypatch.setattr(Image, "_getencoder", lambda *a: Unfinished(real(*a)))
    assert torch.equal(vio.decode_png(SOURCES["png_RGBA"]), expected)
    assert len(calls) == 4  # one try per band


def _decode_in_child(data, queue):
    queue.put(len(vio.decode_jpeg([data, data, data])))


def test_batched_decode_works_in_a_forked_child_after_the_parent_used_the_pool():
    """A fork inherits the thread pool object but not its threads; the child must not hang."""
    import multiprocessing as mp

    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, "JPEG")
    data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    assert len(vio.decode_jpeg([data, data, data])) == 3  # the parent's pool is running
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_decode_in_child, args=(data, queue))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("decode_jpeg hung in a forked child")
    assert child.exitcode == 0 and queue.get(timeout=5) == 3
