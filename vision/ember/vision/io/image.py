"""Image decode/encode with torchvision.io's API, on Pillow.

Decoded images are contiguous ``[C, H, W]`` tensors (uint8; uint16 for 16-bit PNGs), pixel
for pixel what Pillow gives in the same mode. Lists decode on worker threads
(``ember.core.parallel``): Pillow releases the GIL while decoding, so a batch uses every core.
"""

from __future__ import annotations

import enum
import io
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch
from PIL import GifImagePlugin, Image, ImageOps, JpegImagePlugin, PngImagePlugin, WebPImagePlugin

from ember.core import parallel
from ember.vision.io._limits import (
    DecodeError,
    DecodeLimitError,
    get_decode_limits,
    gif_frames,
    jpeg_scans,
)
from ember.vision.io.file import check_bytes, read_file, write_file


class ImageReadMode(enum.Enum):
    """Channels to decode into (torchvision.io.ImageReadMode)."""

    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


_PIL_MODE = {
    ImageReadMode.GRAY: "L",
    ImageReadMode.GRAY_ALPHA: "LA",
    ImageReadMode.RGB: "RGB",
    ImageReadMode.RGB_ALPHA: "RGBA",
}

# What UNCHANGED turns a Pillow mode into when the mode has no tensor layout of its own.
_UNCHANGED_CONVERSION = {"1": "L", "CMYK": "RGB", "YCbCr": "RGB", "LAB": "RGB", "HSV": "RGB",
                         "PA": "RGBA", "RGBX": "RGB", "RGBa": "RGBA", "La": "LA", "F": "I"}

_BANDS = {"RGB": "RGB", "RGBA": "RGBA"}  # modes whose bands Pillow packs one plane at a time

# (format name, magic test, plugin class). The class is built directly so that the
# decompression-bomb limit is enforced here, as an error, rather than as Pillow's warning.
_FORMATS: list[tuple[str, Callable[[bytes], bool], type]] = [
    ("JPEG", lambda h: h[:3] == b"\xff\xd8\xff", JpegImagePlugin.JpegImageFile),
    ("PNG", lambda h: h[:8] == b"\x89PNG\r\n\x1a\n", PngImagePlugin.PngImageFile),
    ("GIF", lambda h: h[:6] in (b"GIF87a", b"GIF89a"), GifImagePlugin.GifImageFile),
    ("WebP", lambda h: h[:4] == b"RIFF" and h[8:12] == b"WEBP", WebPImagePlugin.WebPImageFile),
]
# Recognised, but not decoded: named in the error message.
_UNSUPPORTED = [
    ("BMP", lambda h: h[:2] == b"BM"),
    ("TIFF", lambda h: h[:4] in (b"II*\x00", b"MM\x00*")),
    ("AVIF/HEIC", lambda h: h[4:8] == b"ftyp"),
]


def sniff_format(header: bytes) -> str | None:
    """The image format named by the magic bytes (``"JPEG"``, ``"PNG"``, ...), or None."""
    for name, test, *_ in _FORMATS + _UNSUPPORTED:
        if test(header):
            return name
    return None


def _read_mode(mode: ImageReadMode | str) -> ImageReadMode:
    if isinstance(mode, ImageReadMode):
        return mode
    if isinstance(mode, str):
        aliases = {"RGBA": "RGB_ALPHA", "L": "GRAY", "LA": "GRAY_ALPHA", "GRAYA": "GRAY_ALPHA"}
        key = aliases.get(mode.upper(), mode.upper())
        if key in ImageReadMode.__members__:
            return ImageReadMode[key]
    raise ValueError(f"mode must be an ImageReadMode or one of {list(ImageReadMode.__members__)}, "
                     f"got {mode!r}")


def _device(device: str | torch.device) -> torch.device:
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must name a torch device, got {device!r}") from exc


def _open(data: torch.Tensor, op: str, expected: str | None) -> tuple[Image.Image, str]:
    """Open encoded bytes with the plugin for their format and check the decode limits from
    the headers, before any pixel is decoded; errors name what was wrong."""
    buffer = data.numpy()
    header = buffer[:16].tobytes()
    fmt = sniff_format(header)
    if expected is not None and fmt != expected:
        found = f"{fmt} data" if fmt else "data that is not a recognised image format"
        raise DecodeError(f"{op}: input is {found}, not {expected}; decode_image detects the "
                          f"format")
    plugin = next((cls for name, _, cls in _FORMATS if name == fmt), None)
    if plugin is None:
        supported = ", ".join(name for name, *_ in _FORMATS)
        what = f"{fmt} images are not supported" if fmt else (
            f"unrecognised image format (first bytes {header[:8]!r})")
        raise DecodeError(f"{op}: {what}; supported formats: {supported}")
    limits = get_decode_limits()
    if fmt == "JPEG" and limits.max_jpeg_scans is not None:
        scans = jpeg_scans(buffer)
        if scans > limits.max_jpeg_scans:
            raise DecodeLimitError(
                f"{op}: JPEG with {scans} scans exceeds the limit of {limits.max_jpeg_scans} "
                f"scans (each scan of a progressive JPEG decodes over the whole image); "
                f"raise it with ember.vision.io.set_decode_limits(max_jpeg_scans=...)")
    if fmt == "GIF":  # Pillow decodes the first frame while opening: check before that
        _check_pixels(op, fmt, *gif_frames(buffer), limits.max_pixels)
    try:
        im = plugin(io.BytesIO(buffer))
    except Exception as exc:  # every Pillow failure on bad bytes is ours to name
        raise DecodeError(f"{op}: corrupt {fmt} data: {type(exc).__name__}: {exc}") from exc
    _check_pixels(op, fmt, im.width, im.height, 1, limits.max_pixels)
    return im, fmt


def _check_pixels(op: str, fmt: str, width: int, height: int, frames: int,
                  limit: int | None) -> None:
    frames = max(frames, 1)
    if limit is not None and width * height * frames > limit:
        count = f" x {frames} frames" if frames > 1 else ""
        raise DecodeLimitError(
            f"{op}: {fmt} image of {width}x{height} pixels{count} exceeds the decode limit "
            f"of {limit} pixels; raise it with ember.vision.io.set_decode_limits(max_pixels=...)")


def _load(im: Image.Image, op: str, fmt: str) -> None:
    try:
        im.load()
    except Exception as exc:  # Pillow raises OSError, SyntaxError, IndexError ...
        raise DecodeError(f"{op}: corrupt or truncated {fmt} data: "
                          f"{type(exc).__name__}: {exc}") from exc


def _png16_color(im: Image.Image, data: torch.Tensor, op: str) -> torch.Tensor | None:
    """16-bit RGB(A) or grey + alpha PNG as uint16, or None for other images.

    Pillow holds such images as 8 bits (the high bytes). Decoding the same stream once more
    with the little-endian unpacker yields the low bytes, so both halves come from Pillow.
    """
    tile = im.tile[0] if len(im.tile) == 1 else None
    rawmode = tile.args if tile is not None else None
    if rawmode == "LA;16B" and im.mode == "RGBA":
        # 16-bit grey + alpha is 4 bytes a pixel, as 8-bit RGBA: unpacking the stream as
        # RGBA yields (L high, L low, A high, A low) for every pixel
        raw = PngImagePlugin.PngImageFile(io.BytesIO(data.numpy()))
        raw.tile = [tile._replace(args="RGBA")]
        _load(raw, op, "PNG")
        b = np.asarray(raw).astype(np.uint16)
        value = np.stack([b[..., 0] << 8 | b[..., 1], b[..., 2] << 8 | b[..., 3]])
        return torch.from_numpy(np.ascontiguousarray(value))
    if not (isinstance(rawmode, str) and rawmode in ("RGB;16B", "RGBA;16B")):
        return None
    low = PngImagePlugin.PngImageFile(io.BytesIO(data.numpy()))
    low.tile = [tile._replace(args=rawmode.replace("16B", "16L"))]
    _load(im, op, "PNG")
    _load(low, op, "PNG")
    high = np.asarray(im).astype(np.uint16) << 8
    value = high | np.asarray(low)
    return torch.from_numpy(np.ascontiguousarray(value.transpose(2, 0, 1)))


def _to_tensor(im: Image.Image) -> torch.Tensor:
    """A loaded Pillow image as a contiguous [C, H, W] tensor, one copy per plane."""
    w, h = im.size
    if im.mode.startswith("I;16"):
        dtype = ">u2" if im.mode.endswith("B") else "<u2"
        plane = np.frombuffer(im.tobytes(), dtype=dtype).astype(np.uint16).reshape(1, h, w)
        return torch.from_numpy(plane)
    if im.mode == "I":  # 16-bit PNGs Pillow widens to int32; their values fit uint16
        return torch.from_numpy(np.asarray(im).astype(np.uint16).reshape(1, h, w))
    bands = _BANDS.get(im.mode)
    if bands is None:
        arr = np.asarray(im).reshape(h, w, -1)
        out = torch.empty((arr.shape[2], h, w), dtype=torch.uint8)
        out.numpy()[...] = arr.transpose(2, 0, 1)
        return out
    out = torch.empty((len(bands), h, w), dtype=torch.uint8)
    planes = out.numpy().reshape(len(bands), -1)
    for i, band in enumerate(bands):
        planes[i] = np.frombuffer(_plane_bytes(im, band), dtype=np.uint8)
    return out


def _plane_bytes(im: Image.Image, band: str) -> bytes:
    """One band of a loaded image, packed by Pillow's raw encoder in a single call.

    ``Image.tobytes`` encodes in 64 KiB chunks and joins them, one more copy of the plane;
    the public path is kept for any Pillow whose encoder does not finish in one call.
    """
    w, h = im.size
    try:
        encoder = Image._getencoder(im.mode, "raw", band)
        encoder.setimage(im.im, (0, 0, w, h))
        _, status, data = encoder.encode(w * h + w)
        if status > 0 and len(data) == w * h:
            return data
    except (AttributeError, TypeError, ValueError, OSError):
        pass
    return im.tobytes("raw", band)


def _convert(im: Image.Image, mode: ImageReadMode) -> Image.Image:
    if mode is ImageReadMode.UNCHANGED:
        if im.mode == "P":
            has_alpha = "transparency" in im.info or im.palette.mode == "RGBA"
            return im.convert("RGBA" if has_alpha else "RGB")
        target = _UNCHANGED_CONVERSION.get(im.mode)
        return im.convert(target) if target else im
    target = _PIL_MODE[mode]
    return im if im.mode == target else im.convert(target)


def _decode_one(data: torch.Tensor, mode: ImageReadMode, apply_exif_orientation: bool,
                op: str, expected: str | None, size: tuple[int, int] | None = None
                ) -> torch.Tensor:
    data = check_bytes(data)
    try:
        return _decode_checked(data, mode, apply_exif_orientation, op, expected, size)
    except (DecodeError, MemoryError):
        raise
    except Exception as exc:  # anything a third-party decoder lets escape
        raise DecodeError(f"{op}: corrupt data: {type(exc).__name__}: {exc}") from exc


def _decode_checked(data: torch.Tensor, mode: ImageReadMode, apply_exif_orientation: bool,
                    op: str, expected: str | None, size: tuple[int, int] | None
                    ) -> torch.Tensor:
    im, fmt = _open(data, op, expected)
    if fmt == "GIF":
        return _gif_frames(im, mode, op)
    if fmt == "JPEG" and (size is not None or mode is ImageReadMode.GRAY):
        # GRAY: libjpeg's own grey output (the luma plane, as torchvision returns);
        # size: DCT scaling to the smallest 1/2^k size >= (w, h)
        gray = mode is ImageReadMode.GRAY and im.mode in ("RGB", "YCbCr", "L")
        im.draft("L" if gray else None, (size[1], size[0]) if size is not None else im.size)
    if fmt == "PNG" and not apply_exif_orientation:
        wide = _png16_color(im, data, op)
        if wide is not None:
            return _convert16(wide, mode)
    # Pillow reads CMYK JPEGs with Adobe polarity (rawmode CMYK;I, samples inverted);
    # torchvision returns the stored samples, so UNCHANGED undoes that inversion
    inverted_cmyk = (fmt == "JPEG" and im.mode == "CMYK" and len(im.tile) >= 1
                     and im.tile[0].args is not None and "CMYK;I" in str(im.tile[0].args))
    _load(im, op, fmt)
    if apply_exif_orientation:
        im = ImageOps.exif_transpose(im)
    if mode is ImageReadMode.UNCHANGED:
        if im.mode == "CMYK":
            # torchvision: the 4 samples as libjpeg returns them (stored, not un-inverted)
            cmyk = _to_tensor(im)
            return torch.bitwise_not(cmyk) if inverted_cmyk else cmyk
        if fmt == "PNG" and im.mode == "P":
            return _to_tensor(im)  # torchvision: the 1-channel index map, palette not applied
    if fmt == "PNG" and im.mode in ("I;16", "I;16B", "I;16L", "I"):
        return _convert16(_to_tensor(im), mode)  # 16-bit grey keeps its 16 bits in every mode
    if (fmt == "PNG" and mode in (ImageReadMode.GRAY, ImageReadMode.GRAY_ALPHA)
            and im.mode in ("RGB", "RGBA", "P", "PA")):
        return _gray8(_to_tensor(_convert(im, ImageReadMode.RGB_ALPHA)), mode)
    return _to_tensor(_convert(im, mode))


def _gray8(rgba: torch.Tensor, mode: ImageReadMode) -> torch.Tensor:
    """libpng's RGB -> grey of 8-bit samples (the weights of ``_gray16``, truncated), which
    torchvision's PNG decoder returns; Pillow's "L" conversion rounds other weights."""
    r, g, b = rgba[:3].to(torch.int32).unbind(0)
    gray = ((9794 * r + 19234 * g + 3740 * b) >> 15).to(torch.uint8).unsqueeze(0)
    return gray if mode is ImageReadMode.GRAY else torch.cat([gray, rgba[3:4]])


def _gray16(rgb: torch.Tensor) -> torch.Tensor:
    """libpng's RGB -> grey of 16-bit samples, as torchvision's decoder asks for it
    (weights 0.2989 and 0.587 as 15-bit fixed point, blue the rest, rounded)."""
    r, g, b = rgb.to(torch.int64).unbind(0)
    return ((9794 * r + 19234 * g + 3740 * b + 16384) >> 15).to(torch.uint16).unsqueeze(0)


def _convert16(img: torch.Tensor, mode: ImageReadMode) -> torch.Tensor:
    """A uint16 [C, H, W] PNG (C = 1 to 4) in ``mode``; an added alpha is opaque."""
    if mode is ImageReadMode.UNCHANGED:
        return img
    c = img.shape[0]
    if mode in (ImageReadMode.GRAY, ImageReadMode.GRAY_ALPHA):
        colour = img[:1] if c <= 2 else _gray16(img[:3])
    else:
        colour = img[:3] if c >= 3 else img[:1].expand(3, -1, -1)
    if mode in (ImageReadMode.GRAY, ImageReadMode.RGB):
        return colour.contiguous()
    alpha = img[c - 1:] if c in (2, 4) else torch.full_like(img[:1], 65535)
    return torch.cat([colour, alpha])


def _gif_frames(im: Image.Image, mode: ImageReadMode, op: str) -> torch.Tensor:
    if mode is ImageReadMode.UNCHANGED:
        mode = ImageReadMode.RGB
    frames = []
    for index in range(getattr(im, "n_frames", 1)):
        try:
            im.seek(index)
        except Exception as exc:  # OSError, EOFError, IndexError ...
            raise DecodeError(f"{op}: corrupt GIF data at frame {index}: "
                              f"{type(exc).__name__}: {exc}") from exc
        _load(im, op, "GIF")
        frames.append(_to_tensor(_convert(im, mode)))
    return frames[0] if len(frames) == 1 else torch.stack(frames)


def _map_batch(fn: Callable, items: Sequence, op: str) -> list:
    """``fn`` over ``items`` on a thread per core; an error names the index of the bad item
    (the lowest such index when several fail)."""
    if len(items) <= 1:
        return [_indexed(fn, item, i, op) for i, item in enumerate(items)]
    results: list = [None] * len(items)
    errors: list[BaseException | None] = [None] * len(items)

    def unit(i: int) -> None:
        try:
            results[i] = _indexed(fn, items[i], i, op)
        except BaseException as exc:  # every item runs; the first bad one is raised below
            errors[i] = exc

    parallel.run(unit, len(items), workers=min(parallel.cores(), len(items)))
    for exc in errors:
        if exc is not None:
            raise exc
    return results


def _indexed(fn: Callable, item, index: int, op: str):
    try:
        return fn(item)
    except DecodeError as exc:
        raise exc.located(index=index) from exc
    except (ValueError, TypeError, RuntimeError) as exc:
        raise type(exc)(f"{op}: item {index} of the batch: {exc}") from exc


def _to_device(img: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cpu":
        return img
    if device.type == "cuda":
        return img.pin_memory().to(device, non_blocking=True)
    return img.to(device)


def _check_size(size: object) -> tuple[int, int] | None:
    if size is None:
        return None
    if isinstance(size, int):
        size = (size, size)
    if (not isinstance(size, (tuple, list)) or len(size) != 2
            or not all(isinstance(s, int) and s > 0 for s in size)):
        raise ValueError(f"size must be None, a positive int or (height, width), got {size!r}")
    return int(size[0]), int(size[1])


def _decoder(op: str, expected: str | None):
    """Build a public decode function for one format (``None``: sniffed)."""

    def decode(input, mode: ImageReadMode | str = ImageReadMode.UNCHANGED,
               apply_exif_orientation: bool = False, device: str | torch.device = "cpu"):
        read_mode, dev = _read_mode(mode), _device(device)

        def one(data):
            if isinstance(data, (str, os.PathLike)):
                return _read_and_decode(data, read_mode, apply_exif_orientation, op, expected,
                                        dev)
            return _to_device(_decode_one(data, read_mode, apply_exif_orientation, op, expected),
                              dev)

        if isinstance(input, (list, tuple)):
            return _map_batch(one, input, op)
        return one(input)

    decode.__name__ = op
    return decode


decode_png = _decoder("decode_png", "PNG")
decode_png.__doc__ = """Decode PNG bytes to [C, H, W] (uint16 for 16-bit images)."""
decode_webp = _decoder("decode_webp", "WebP")
decode_webp.__doc__ = """Decode WebP bytes to [C, H, W] uint8."""
decode_image = _decoder("decode_image", None)
decode_image.__doc__ = """Decode JPEG, PNG, GIF or WebP bytes (or a file, given its path), the
format read from the magic bytes; a list decodes in parallel and returns a list."""


def _read_and_decode(path: str | os.PathLike, mode: ImageReadMode, apply_exif_orientation: bool,
                     op: str, expected: str | None, device: torch.device) -> torch.Tensor:
    """Decode the file at ``path``; a decode error names the file."""
    path = os.fspath(path)
    data = read_file(path)
    try:
        img = _decode_one(data, mode, apply_exif_orientation, op, expected)
    except DecodeError as exc:
        raise exc.located(source=path) from exc
    return _to_device(img, device)


def decode_jpeg(input: torch.Tensor | Sequence[torch.Tensor],
                mode: ImageReadMode | str = ImageReadMode.UNCHANGED,
                device: str | torch.device = "cpu", apply_exif_orientation: bool = False,
                size: int | tuple[int, int] | None = None):
    """Decode JPEG bytes to uint8 [C, H, W]; a list decodes in parallel and returns a list.

    ``size=(h, w)`` decodes straight to a reduced size by DCT scaling: the smallest of the
    1/1, 1/2, 1/4, 1/8 scaled images that is at least ``(h, w)`` (no resize afterwards).
    ``device="cuda"`` decodes on the CPU and copies through pinned memory, non-blocking.
    """
    read_mode, dev, want = _read_mode(mode), _device(device), _check_size(size)

    def one(data):
        img = _decode_one(data, read_mode, apply_exif_orientation, "decode_jpeg", "JPEG", want)
        return _to_device(img, dev)

    if isinstance(input, (list, tuple)):
        return _map_batch(one, input, "decode_jpeg")
    return one(input)


def decode_gif(input: torch.Tensor) -> torch.Tensor:
    """Decode GIF bytes to RGB uint8: [C, H, W] for one frame, [N, C, H, W] for animations."""
    return _decode_one(input, ImageReadMode.RGB, False, "decode_gif", "GIF")


def read_image(path: str | os.PathLike, mode: ImageReadMode | str = ImageReadMode.UNCHANGED,
               apply_exif_orientation: bool = False) -> torch.Tensor:
    """Read and decode an image file (JPEG, PNG, GIF, WebP); a decode error names the file."""
    return _read_and_decode(path, _read_mode(mode), apply_exif_orientation, "read_image", None,
                            torch.device("cpu"))


def _check_image(img: object, op: str, channels: tuple[int, ...],
                 dtypes: tuple[torch.dtype, ...] = (torch.uint8,)) -> torch.Tensor:
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"{op}: input must be a [C, H, W] tensor, got {type(img).__name__}")
    if img.dtype not in dtypes:
        raise ValueError(f"{op}: input must have dtype {' or '.join(map(str, dtypes))}, "
                         f"got {img.dtype}")
    if img.dim() != 3 or img.shape[0] not in channels:
        raise ValueError(f"{op}: input must be [C, H, W] with C in {channels}, "
                         f"got shape {tuple(img.shape)}")
    if img.shape[1] == 0 or img.shape[2] == 0:
        raise ValueError(f"{op}: input has an empty side, shape {tuple(img.shape)}")
    return img.detach().cpu()


def _to_pil(img: torch.Tensor) -> Image.Image:
    if img.dtype == torch.uint16:
        return Image.fromarray(img[0].contiguous().numpy().astype("<u2"))  # mode I;16
    hwc = img.permute(1, 2, 0).contiguous().numpy()
    modes = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
    return Image.fromarray(hwc[..., 0] if img.shape[0] == 1 else hwc, modes[img.shape[0]])


def _bytes_tensor(buffer: io.BytesIO) -> torch.Tensor:
    return torch.frombuffer(bytearray(buffer.getbuffer()), dtype=torch.uint8)


def encode_jpeg(input: torch.Tensor | Sequence[torch.Tensor], quality: int = 75):
    """Encode uint8 [C, H, W] (C = 1 or 3) as JPEG bytes; a list encodes in parallel."""
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality must be an int in [1, 100], got {quality!r}")

    def one(img):
        pil = _to_pil(_check_image(img, "encode_jpeg", (1, 3)))
        buffer = io.BytesIO()
        pil.save(buffer, "JPEG", quality=quality)
        return _bytes_tensor(buffer)

    if isinstance(input, (list, tuple)):
        return _map_batch(one, input, "encode_jpeg")
    return one(input)


def encode_png(input: torch.Tensor, compression_level: int = 6) -> torch.Tensor:
    """Encode [C, H, W] (uint8 with C in 1-4, or uint16 with C = 1) as PNG bytes."""
    if (isinstance(compression_level, bool) or not isinstance(compression_level, int)
            or not 0 <= compression_level <= 9):
        raise ValueError(f"compression_level must be an int in [0, 9], got {compression_level!r}")
    img = _check_image(input, "encode_png", (1, 2, 3, 4), (torch.uint8, torch.uint16))
    if img.dtype == torch.uint16 and img.shape[0] != 1:
        raise ValueError(f"encode_png: uint16 images must have 1 channel, got {img.shape[0]}")
    buffer = io.BytesIO()
    _to_pil(img).save(buffer, "PNG", compress_level=compression_level)
    return _bytes_tensor(buffer)


def write_jpeg(input: torch.Tensor, filename: str | os.PathLike, quality: int = 75) -> None:
    """Encode as JPEG and write to ``filename``."""
    write_file(filename, encode_jpeg(input, quality))


def write_png(input: torch.Tensor, filename: str | os.PathLike, compression_level: int = 6) -> None:
    """Encode as PNG and write to ``filename``."""
    write_file(filename, encode_png(input, compression_level))
