"""Error types for bad encoded data, and the limits that keep hostile files from exhausting
memory or time. Limits are checked from the file's headers, before any pixel is decoded."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields, replace

import numpy as np


class DecodeError(RuntimeError, ValueError):
    """Encoded data that cannot be decoded: corrupt, truncated, of an unsupported format,
    or over a decode limit. A ``RuntimeError`` as torchvision's decoders raise (and a
    ``ValueError``, as ember.vision raised before), so either ``except`` catches it.

    ``source`` is the file the bytes came from (when known) and ``index`` the position of
    the failing item in a batched decode (else None); both are also in the message."""

    def __init__(self, message: str, *, source: str | None = None, index: int | None = None):
        super().__init__(message)
        self.source, self.index = source, index

    def located(self, *, source: str | None = None, index: int | None = None) -> DecodeError:
        """The same error (same class), its message naming the file or the batch index."""
        prefix = f"{source!r}: " if source is not None else f"item {index} of the batch: "
        return type(self)(prefix + str(self), source=source or self.source,
                          index=self.index if index is None else index)


class DecodeLimitError(DecodeError):
    """The data asks for more pixels, JPEG scans or video memory than the decode limits
    allow (see :func:`set_decode_limits`)."""


@dataclass(frozen=True)
class DecodeLimits:
    """Upper bounds for one decode; ``None`` switches a bound off.

    max_pixels: pixels of one decoded image summed over all its frames (GIF animations
        count every frame at the logical screen size). Default: Pillow's own
        ``MAX_IMAGE_PIXELS`` default, 89,478,485 (about 256 MiB of RGB).
    max_jpeg_scans: scans of one JPEG (progressive JPEGs decode every scan over the whole
        image; encoders write at most a few dozen). Default 256.
    max_video_bytes: bytes of the frames ``read_video`` would return. Default 4 GiB;
        ``VideoReader`` streams frame by frame and is not limited.
    """

    max_pixels: int | None = 89_478_485
    max_jpeg_scans: int | None = 256
    max_video_bytes: int | None = 4 << 30


_lock = threading.Lock()
_limits = DecodeLimits()


def get_decode_limits() -> DecodeLimits:
    """The decode limits in force (process-wide)."""
    return _limits


def set_decode_limits(limits: DecodeLimits | None = None, **changes: int | None) -> DecodeLimits:
    """Change the process-wide decode limits; returns the previous ones (pass them back to
    restore). ``set_decode_limits(max_pixels=None)`` turns the pixel limit off;
    ``set_decode_limits(DecodeLimits())`` restores the defaults."""
    global _limits
    names = {f.name for f in fields(DecodeLimits)}
    unknown = set(changes) - names
    if unknown:
        raise TypeError(f"set_decode_limits: unknown limit(s) {sorted(unknown)}; "
                        f"known: {sorted(names)}")
    if limits is not None and not isinstance(limits, DecodeLimits):
        raise TypeError(f"set_decode_limits: limits must be a DecodeLimits, "
                        f"got {type(limits).__name__}")
    for name, value in changes.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value <= 0):
            raise ValueError(f"set_decode_limits: {name} must be a positive int or None, "
                             f"got {value!r}")
    with _lock:
        previous = _limits
        _limits = replace(limits if limits is not None else previous, **changes)
    return previous


# --- header scans: sizes and counts read before decoding ------------------------------------

def gif_frames(buf: np.ndarray) -> tuple[int, int, int]:
    """(canvas width, canvas height, number of image descriptors) of GIF bytes, read by
    walking the block structure; a truncated stream counts the frames that started. The
    canvas is the logical screen, grown to any frame that reaches past it."""
    data = buf.tobytes() if isinstance(buf, np.ndarray) else bytes(buf)
    n = len(data)
    if n < 13:
        return 0, 0, 0
    width, height, flags = data[6] | data[7] << 8, data[8] | data[9] << 8, data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    frames = 0
    while pos < n:
        block = data[pos]
        if block == 0x3B:  # trailer
            break
        if block == 0x21:  # extension: label, then sub-blocks
            pos = _skip_subblocks(data, pos + 2)
        elif block == 0x2C:  # image descriptor, optional local colour table, LZW size, data
            frames += 1
            if pos + 10 > n:
                break
            left, top = data[pos + 1] | data[pos + 2] << 8, data[pos + 3] | data[pos + 4] << 8
            fw, fh = data[pos + 5] | data[pos + 6] << 8, data[pos + 7] | data[pos + 8] << 8
            width, height = max(width, left + fw), max(height, top + fh)
            local = data[pos + 9]
            pos += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0)
            pos = _skip_subblocks(data, pos + 1)
        else:  # garbage: the decoder will stop here too
            break
    return width, height, frames


def _skip_subblocks(data: bytes, pos: int) -> int:
    n = len(data)
    while pos < n:
        size = data[pos]
        pos += 1 + size
        if size == 0:
            break
    return pos


_NO_LENGTH = set(range(0xD0, 0xDA)) | {0x01, 0xFF}  # RSTn, SOI, EOI, TEM, fill


def jpeg_scans(buf: np.ndarray) -> int:
    """Number of start-of-scan markers of JPEG bytes, walking the marker segments (so an
    EXIF thumbnail inside APP1 does not count) and jumping over entropy-coded data."""
    data = np.asarray(buf, dtype=np.uint8)
    n = data.size
    # candidate marker positions inside entropy-coded data: 0xFF not followed by a stuffed
    # zero, a restart marker or another 0xFF (fill)
    ff = np.flatnonzero(data[:-1] == 0xFF)
    nxt = data[ff + 1]
    markers = ff[(nxt != 0) & ((nxt < 0xD0) | (nxt > 0xD7)) & (nxt != 0xFF)]
    raw = data.tobytes()
    pos, scans = 2, 0
    while pos + 1 < n:
        if raw[pos] != 0xFF:
            return scans  # lost sync: corrupt, the decoder reports it
        marker = raw[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker == 0xD9:
            break
        if marker in _NO_LENGTH:
            pos += 2
            continue
        if pos + 4 > n:
            break
        length = raw[pos + 2] << 8 | raw[pos + 3]
        pos += 2 + length
        if marker == 0xDA:
            scans += 1
            k = int(np.searchsorted(markers, pos))
            if k >= markers.size:
                break
            pos = int(markers[k])
    return scans
