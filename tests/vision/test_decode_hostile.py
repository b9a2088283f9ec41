"""Bad and hostile encoded data: our error types only (fuzzed), the batch index and file in
the message, and the decode limits that stop image bombs before they allocate."""

from __future__ import annotations

import io
import struct
import time
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from ember.vision import io as vio
from ember.vision.io import DecodeError, DecodeLimitError, DecodeLimits, ImageReadMode


def _bytes(raw: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buffer = io.BytesIO()
    im.save(buffer, fmt, **kw)
    return buffer.getvalue()


def _picture(h: int = 29, w: int = 41, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    arr = np.stack([x * 6, y * 8, (x + y) * 3], -1) + rng.integers(0, 20, (h, w, 3))
    return np.clip(arr, 0, 255).astype(np.uint8)


def _gif_animation(frames: int = 4) -> bytes:
    ims = [Image.fromarray(_picture(seed=i)).quantize(32) for i in range(frames)]
    return _encode(ims[0], "GIF", save_all=True, append_images=ims[1:], duration=40)


def _gif_bomb(width: int, height: int, frames: int) -> bytes:
    """A GIF whose logical screen is width x height with ``frames`` 1x1 frames: a few bytes
    a frame, but every decoded frame is the whole screen."""
    out = bytearray(b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0))
    out += bytes([0, 0, 0, 255, 255, 255])  # global colour table, 2 entries
    # one pixel of index 0 with a 2-bit minimum code size: codes clear (4), 0, end (5),
    # three bits each, packed least significant bit first
    codes = 4 | 0 << 3 | 5 << 6
    frame = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + bytes([2, 2]) + \
        struct.pack("<H", codes) + b"\x00"
    out += frame * frames + b"\x3b"
    return bytes(out)


def _many_scans(jpeg: bytes, extra: int) -> bytes:
    """A progressive JPEG with its last scan repeated ``extra`` more times."""
    last = jpeg.rfind(b"\xff\xda")
    eoi = jpeg.rfind(b"\xff\xd9")
    return jpeg[:eoi] + jpeg[last:eoi] * extra + b"\xff\xd9"


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


RGB = _picture()
SOURCES = {
    "jpeg": _encode(Image.fromarray(RGB), "JPEG", quality=90),
    "jpeg_progressive": _encode(Image.fromarray(RGB), "JPEG", progressive=True),
    "png": _encode(Image.fromarray(RGB), "PNG"),
    "png_palette": _encode(Image.fromarray(RGB).quantize(16), "PNG"),
    "gif": _gif_animation(),
    "webp": _encode(Image.fromarray(RGB), "WEBP", quality=80),
}


@pytest.fixture
def small_limits():
    """Small pixel limit while fuzzing: a header edit to a huge size is refused, not decoded."""
    previous = vio.set_decode_limits(max_pixels=1 << 20)
    yield
    vio.set_decode_limits(previous)


# --- error types ---------------------------------------------------------------------------

def test_decode_error_is_a_runtime_error_and_a_value_error():
    assert issubclass(DecodeError, RuntimeError) and issubclass(DecodeError, ValueError)
    assert issubclass(DecodeLimitError, DecodeError)


@pytest.mark.parametrize("data, match", [
    (SOURCES["jpeg"][:60], "corrupt.*JPEG"),
    (SOURCES["png"][:50], "PNG"),
    (SOURCES["gif"][:40], "GIF"),
    (_encode(Image.fromarray(RGB), "BMP"), "BMP images are not supported"),
    (bytes(range(50)), "unrecognised image format"),
    (b"", "empty"),
])
def test_bad_bytes_raise_decode_error(data, match):
    with pytest.raises(DecodeError, match=match):
        vio.decode_image(_bytes(data) if data else torch.empty(0, dtype=torch.uint8))


def test_wrong_format_for_the_decoder_is_a_decode_error():
    with pytest.raises(DecodeError, match="input is PNG data, not JPEG"):
        vio.decode_jpeg(_bytes(SOURCES["png"]))


def test_argument_errors_stay_value_and_type_errors():
    with pytest.raises(TypeError):
        vio.decode_image(b"\xff\xd8\xff")
    with pytest.raises(ValueError) as info:
        vio.decode_image(torch.zeros(10))
    assert not isinstance(info.value, DecodeError)


def test_batched_decode_names_the_failing_item():
    good = _bytes(SOURCES["jpeg"])
    with pytest.raises(DecodeError, match="item 2 of the batch") as info:
        vio.decode_jpeg([good, good, _bytes(SOURCES["jpeg"][:80])])
    assert info.value.index == 2
    with pytest.raises(DecodeError, match="item 1 of the batch") as info:
        vio.decode_image([good, _bytes(b"GIF89a" + bytes(7))])
    assert info.value.index == 1


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "broken.png"
    path.write_bytes(SOURCES["png"][:70])
    for fn in (vio.read_image, vio.decode_image):
        with pytest.raises(DecodeError, match="broken.png") as info:
            fn(str(path))
        assert info.value.source == str(path)


def test_decode_image_takes_a_path(tmp_path):
    path = tmp_path / "ok.png"
    path.write_bytes(SOURCES["png"])
    expected = vio.decode_image(_bytes(SOURCES["png"]), ImageReadMode.GRAY)
    assert torch.equal(vio.decode_image(str(path), ImageReadMode.GRAY), expected)
    assert torch.equal(vio.decode_image(path, mode=ImageReadMode.GRAY), expected)
    assert torch.equal(vio.decode_image([str(path)])[0], vio.decode_image(str(path)))


def test_pillow_decompression_bomb_error_is_wrapped(monkeypatch):
    # Pillow checks each GIF frame against its own global limit while seeking and raises
    # PIL.Image.DecompressionBombError: with our limit off, that is what comes out
    previous = vio.set_decode_limits(max_pixels=None)
    try:
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
        with pytest.raises(DecodeError, match="DecompressionBombError"):
            vio.decode_gif(_bytes(SOURCES["gif"]))
    finally:
        vio.set_decode_limits(previous)


def test_truncated_gif_index_error_is_wrapped():
    # cut inside the second frame's image data: Pillow's GIF reader indexes past the end
    data = SOURCES["gif"]
    found = 0
    for cut in range(len(data) // 3, len(data) - 1, 7):
        try:
            vio.decode_gif(_bytes(data[:cut]))
        except DecodeError:
            found += 1
    assert found > 0


# --- fuzzing -------------------------------------------------------------------------------

def _check_outcome(data: bytes, mode: ImageReadMode) -> str:
    try:
        out = vio.decode_image(_bytes(data), mode)
    except DecodeError:
        return "error"
    assert isinstance(out, torch.Tensor)
    assert out.dtype in (torch.uint8, torch.uint16) and out.dim() in (3, 4)
    assert out.shape[-3] in (1, 2, 3, 4) and out.shape[-1] > 0 and out.shape[-2] > 0
    return "ok"


def _flip_bits(data: bytes, rng: np.random.Generator) -> bytes:
    buf = bytearray(data)
    for pos in rng.integers(0, len(buf), rng.integers(1, 9)):
        buf[pos] ^= 1 << int(rng.integers(0, 8))
    return bytes(buf)


def _edit_header(name: str, data: bytes, rng: np.random.Generator) -> bytes:
    """Rewrite a size or length field with a random (often absurd) value."""
    buf = bytearray(data)
    value = int(rng.choice([0, 1, 2, 255, 4096, 65535, int(rng.integers(0, 65536))]))
    if name.startswith("jpeg"):
        sof = max(data.find(b"\xff\xc0"), data.find(b"\xff\xc2"))
        field = int(rng.choice([3, 5, 7, 9]))  # precision/height, height, width, components
        struct.pack_into(">H", buf, sof + field, value)
    elif name.startswith("png"):
        field = int(rng.choice([16, 20, 24]))  # width, height, bit depth + colour type
        struct.pack_into(">I" if field < 24 else ">H", buf, field, value << (8 * (field < 24)))
        body = bytes(buf[12:29])
        struct.pack_into(">I", buf, 29, zlib.crc32(body))  # keep the CRC valid
    elif name == "gif":
        field = int(rng.choice([6, 8, 10]))
        struct.pack_into("<H", buf, field, value)
    else:  # WebP: RIFF size, VP8 chunk size, or the frame's size bytes
        field = int(rng.choice([4, 16, 26, 28]))
        struct.pack_into("<H", buf, field, value)
    return bytes(buf)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_fuzz_decoders_raise_only_decode_error(name, small_limits):
    rng = np.random.default_rng(sum(map(ord, name)))
    data = SOURCES[name]
    outcomes = []
    for i in range(60):
        kind = i % 3
        if kind == 0:
            case = _flip_bits(data, rng)
        elif kind == 1:
            case = data[: int(rng.integers(1, len(data)))]
        else:
            case = _edit_header(name, data, rng)
        mode = list(ImageReadMode)[i % len(ImageReadMode)]
        outcomes.append(_check_outcome(case, mode))
    assert "error" in outcomes  # the fuzzing reached the error paths


# --- decode limits: bombs refused before they allocate -------------------------------------

def test_gif_bomb_counts_every_frame():
    bomb = _gif_bomb(4000, 4000, 300)
    assert len(bomb) < 6000
    start = time.perf_counter()
    with pytest.raises(DecodeLimitError, match=r"4000x4000 pixels x 300 frames"):
        vio.decode_gif(_bytes(bomb))
    assert time.perf_counter() - start < 1.0
    # the same structure, small, decodes to one screen-sized frame per descriptor
    frames = vio.decode_gif(_bytes(_gif_bomb(6, 5, 3)))
    assert frames.shape == (3, 3, 5, 6)


def test_gif_frame_past_the_screen_counts_at_its_extent():
    data = bytearray(_gif_bomb(2, 2, 1))
    struct.pack_into("<HH", data, 13 + 6 + 1, 30000, 30000)  # frame left/top far out
    previous = vio.set_decode_limits(max_pixels=1 << 20)
    try:
        with pytest.raises(DecodeLimitError, match="30001x30001"):
            vio.decode_gif(_bytes(bytes(data)))
    finally:
        vio.set_decode_limits(previous)


def test_pixel_limit_is_configurable():
    data = _bytes(SOURCES["png"])
    previous = vio.set_decode_limits(max_pixels=RGB.shape[0] * RGB.shape[1] - 1)
    try:
        with pytest.raises(DecodeLimitError, match="set_decode_limits"):
            vio.decode_png(data)
        vio.set_decode_limits(max_pixels=RGB.shape[0] * RGB.shape[1])
        assert vio.decode_png(data).shape == (3, *RGB.shape[:2])
    finally:
        assert vio.set_decode_limits(previous).max_pixels == RGB.shape[0] * RGB.shape[1]
    assert vio.get_decode_limits() == previous


def test_set_decode_limits_rejects_bad_values():
    with pytest.raises(ValueError, match="max_pixels"):
        vio.set_decode_limits(max_pixels=0)
    with pytest.raises(TypeError, match="unknown limit"):
        vio.set_decode_limits(max_frames=3)
    with pytest.raises(TypeError, match="DecodeLimits"):
        vio.set_decode_limits({"max_pixels": 3})
    assert vio.get_decode_limits() == DecodeLimits()


def test_jpeg_scan_limit():
    progressive = SOURCES["jpeg_progressive"]
    assert vio.decode_jpeg(_bytes(progressive)).shape == (3, *RGB.shape[:2])
    hostile = _many_scans(progressive, 400)
    start = time.perf_counter()
    with pytest.raises(DecodeLimitError, match=r"JPEG with \d+ scans exceeds the limit of 256"):
        vio.decode_jpeg(_bytes(hostile))
    assert time.perf_counter() - start < 1.0
    previous = vio.set_decode_limits(max_jpeg_scans=5)
    try:
        with pytest.raises(DecodeLimitError, match="limit of 5 scans"):
            vio.decode_image(_bytes(progressive))
        assert vio.decode_jpeg(_bytes(SOURCES["jpeg"])).shape[0] == 3  # baseline: one scan
    finally:
        vio.set_decode_limits(previous)


def test_jpeg_scan_count_skips_thumbnails_and_stuffed_bytes():
    from ember.vision.io._limits import jpeg_scans

    baseline, progressive = SOURCES["jpeg"], SOURCES["jpeg_progressive"]
    assert jpeg_scans(np.frombuffer(baseline, np.uint8)) == 1
    # a thumbnail JPEG inside an APP1 segment is not a scan of the image
    app1 = b"\xff\xe1" + struct.pack(">H", len(baseline) + 2) + baseline
    with_thumb = baseline[:2] + app1 + baseline[2:]
    assert jpeg_scans(np.frombuffer(with_thumb, np.uint8)) == 1
    n = jpeg_scans(np.frombuffer(progressive, np.uint8))
    assert n == progressive.count(b"\xff\xda") and n > 1
    assert jpeg_scans(np.frombuffer(_many_scans(progressive, 10), np.uint8)) == n + 10
