"""Audio file I/O over libsndfile (soundfile): ``load``, ``save``, ``info`` with torchaudio's API.

Partial reads equal the same slice of a full read. They seek in the file and decode only the
requested frames where the decoder seeks sample-exactly; libsndfile's MP3 decoder does not
(after a seek, or between two reads, a VBR file came out up to 0.55 off its one-read
decode), so an MP3 is decoded from its start in one read and sliced. Every libsndfile failure
is re-raised as a ``RuntimeError`` that names the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import soundfile as sf
import torch

__all__ = ["AudioMetaData", "info", "load", "save"]

Source = str | os.PathLike | BinaryIO


@dataclass(frozen=True)
class AudioMetaData:
    """What ``info`` reports about an audio file (torchaudio's field names)."""

    sample_rate: int
    num_frames: int
    num_channels: int
    bits_per_sample: int
    encoding: str


# libsndfile subtype -> (torchaudio encoding name, bits per sample; 0 when not meaningful)
_SUBTYPE_INFO: dict[str, tuple[str, int]] = {
    "PCM_S8": ("PCM_S", 8),
    "PCM_U8": ("PCM_U", 8),
    "PCM_16": ("PCM_S", 16),
    "PCM_24": ("PCM_S", 24),
    "PCM_32": ("PCM_S", 32),
    "FLOAT": ("PCM_F", 32),
    "DOUBLE": ("PCM_F", 64),
    "ULAW": ("ULAW", 8),
    "ALAW": ("ALAW", 8),
    "VORBIS": ("VORBIS", 0),
    "OPUS": ("OPUS", 0),
    "MPEG_LAYER_III": ("MP3", 0),
}

# libsndfile subtype -> numpy dtype read for normalize=False (PCM only; others read float32)
_RAW_READ_DTYPE: dict[str, str] = {
    "PCM_S8": "int16",
    "PCM_U8": "int16",
    "PCM_16": "int16",
    "PCM_24": "int32",
    "PCM_32": "int32",
}

# file extension -> libsndfile major format, where the two differ
_EXTENSION_FORMAT = {"oga": "OGG", "opus": "OGG", "aif": "AIFF", "aifc": "AIFF", "snd": "AU"}

_SAVE_DTYPES = {
    torch.uint8: "PCM_U8",
    torch.int16: "PCM_16",
    torch.int32: "PCM_32",
    torch.float32: "FLOAT",
    torch.float64: "DOUBLE",
}


def _name(src: Source) -> str:
    if isinstance(src, (str, os.PathLike)):
        return os.fspath(src)
    return str(getattr(src, "name", f"<{type(src).__name__} object>"))


def _open(src: Source, format: str | None) -> sf.SoundFile:
    if not isinstance(src, (str, os.PathLike)) and not hasattr(src, "read"):
        raise TypeError(f"path_or_fileobj must be a path or a binary file object, got {type(src)}")
    if format is not None:
        _major_format(format)  # validated only: libsndfile detects the container from the header
    try:
        return sf.SoundFile(src, "r")
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as err:
        raise RuntimeError(f"failed to open audio file {_name(src)!r}: {err}") from err


def _major_format(name: str) -> str:
    key = name.lower().lstrip(".")
    fmt = _EXTENSION_FORMAT.get(key, key.upper())
    if fmt not in sf.available_formats():
        raise ValueError(f"format {name!r} is not supported by libsndfile; "
                         f"expected one of {sorted(sf.available_formats())}")
    return fmt


def info(path_or_fileobj: Source, format: str | None = None) -> AudioMetaData:
    """Sample rate, length, channels, bit depth and encoding of a file, without decoding it."""
    with _open(path_or_fileobj, format) as f:
        encoding, bits = _SUBTYPE_INFO.get(f.subtype, ("UNKNOWN", 0))
        if f.format == "FLAC":
            encoding = "FLAC"
        return AudioMetaData(f.samplerate, f.frames, f.channels, bits, encoding)


def load(
    path_or_fileobj: Source,
    frame_offset: int = 0,
    num_frames: int = -1,
    normalize: bool = True,
    channels_first: bool = True,
    format: str | None = None,
) -> tuple[torch.Tensor, int]:
    """Decode ``num_frames`` frames starting at ``frame_offset`` -> (waveform, sample_rate).

    ``normalize=True`` gives float32 in [-1, 1]; ``normalize=False`` gives the integer
    samples for PCM files (int16 for 16-bit, int32 for 24/32-bit with 24-bit left-justified
    as torchaudio does, int8/uint8 for 8-bit) and float32 otherwise.
    """
    if not isinstance(frame_offset, int) or frame_offset < 0:
        raise ValueError(f"frame_offset must be a non-negative int, got {frame_offset!r}")
    if not isinstance(num_frames, int) or num_frames < -1:
        raise ValueError(f"num_frames must be -1 (all) or a non-negative int, got {num_frames!r}")
    name = _name(path_or_fileobj)
    with _open(path_or_fileobj, format) as f:
        subtype = None if normalize else f.subtype
        dtype = "float32" if normalize else _RAW_READ_DTYPE.get(subtype, "float32")
        try:
            if frame_offset:
                if f.frames and frame_offset >= f.frames:
                    data = np.zeros((0, f.channels), dtype=dtype)
                    return _to_tensor(data, subtype, normalize, channels_first), f.samplerate
                if f.format in _ONE_READ_ONLY:
                    upto = -1 if num_frames == -1 else frame_offset + num_frames
                    data = _read(f, upto, dtype, 0, path_or_fileobj)[frame_offset:]
                    return _to_tensor(data, subtype, normalize, channels_first), f.samplerate
                f.seek(frame_offset)
            data = _read(f, num_frames, dtype, frame_offset, path_or_fileobj)
        except (sf.LibsndfileError, RuntimeError) as err:
            raise RuntimeError(f"failed to decode audio file {name!r}: {err}") from err
        return _to_tensor(data, subtype, normalize, channels_first), f.samplerate


# Major formats that decode exactly only from the start in one read: partial reads slice it.
_ONE_READ_ONLY = {"MP3"}


# A header may claim any length. A claim beyond this many samples per byte of file (Opus at
# its lowest bitrate needs ~130) is not trusted with one up-front allocation.
_MAX_SAMPLES_PER_BYTE = 1024
_SLACK_SAMPLES = 1 << 20  # always trusted: small files
_UNKNOWN_SIZE_LIMIT = 1 << 28  # samples, when the source's size is unknown
_BLOCK_FRAMES = 1 << 16


def _byte_size(src: Source) -> int | None:
    if isinstance(src, (str, os.PathLike)):
        try:
            return os.path.getsize(src)
        except OSError:
            return None
    getbuffer = getattr(src, "getbuffer", None)
    return getbuffer().nbytes if getbuffer is not None else None


def _read(f: sf.SoundFile, num_frames: int, dtype: str, offset: int,
          src: Source) -> np.ndarray:
    """Read ``num_frames`` (-1: to the end) in one call, or block by block when the
    header's length claim is implausible for the file's size (corrupt headers)."""
    claimed = max(f.frames - offset, 0)
    wanted = claimed if num_frames == -1 else min(num_frames, claimed)
    if wanted * f.channels <= _SLACK_SAMPLES:  # small claims are trusted without a stat
        return f.read(num_frames, dtype=dtype, always_2d=True)
    size = _byte_size(src)
    limit = _UNKNOWN_SIZE_LIMIT if size is None else _MAX_SAMPLES_PER_BYTE * size + _SLACK_SAMPLES
    if wanted * f.channels <= limit:
        return f.read(num_frames, dtype=dtype, always_2d=True)
    blocks, total = [], 0
    while total < wanted:
        block = f.read(min(_BLOCK_FRAMES, wanted - total), dtype=dtype, always_2d=True)
        if len(block) == 0:
            break
        blocks.append(block)
        total += len(block)
    return np.concatenate(blocks) if blocks else np.zeros((0, f.channels), dtype=dtype)


def _to_tensor(data: np.ndarray, subtype: str | None, normalize: bool,
               channels_first: bool) -> torch.Tensor:
    if not normalize and subtype == "PCM_S8":
        data = (data >> 8).astype(np.int8)
    elif not normalize and subtype == "PCM_U8":
        data = ((data >> 8) + 128).astype(np.uint8)
    return torch.from_numpy(data.T if channels_first else data)  # one tensor, not two


def _subtype(fmt: str, encoding: str | None, bits: int | None, dtype: torch.dtype) -> str | None:
    """libsndfile subtype for (format, encoding, bits_per_sample, dtype), torchaudio's rules."""
    enc = encoding.upper() if encoding else None
    if fmt == "FLAC":
        if enc not in (None, "FLAC", "PCM_S"):
            raise ValueError(f"encoding {encoding!r} is not supported for FLAC (use 'FLAC')")
        if bits is None:
            return "PCM_16"
        if bits not in (8, 16, 24):
            raise ValueError(f"bits_per_sample for FLAC must be 8, 16 or 24, got {bits}")
        return "PCM_S8" if bits == 8 else f"PCM_{bits}"
    if fmt == "MP3":
        if enc not in (None, "MP3"):
            raise ValueError(f"encoding for MP3 must be 'MP3', got {encoding!r}")
        return "MPEG_LAYER_III"
    if fmt == "OGG":
        if enc not in (None, "VORBIS", "OPUS"):
            raise ValueError(f"encoding for OGG must be 'VORBIS' or 'OPUS', got {encoding!r}")
        return enc or "VORBIS"
    if enc is None:
        if bits is None:
            if dtype not in _SAVE_DTYPES:
                raise ValueError(f"src dtype {dtype} cannot be saved; expected one of "
                                 f"{list(_SAVE_DTYPES)}")
            return _SAVE_DTYPES[dtype]
        if bits not in (8, 16, 24, 32):
            raise ValueError(f"bits_per_sample must be 8, 16, 24 or 32, got {bits}")
        return "PCM_U8" if bits == 8 else f"PCM_{bits}"
    rules = {
        "PCM_S": {None: "PCM_32", 16: "PCM_16", 24: "PCM_24", 32: "PCM_32"},
        "PCM_U": {None: "PCM_U8", 8: "PCM_U8"},
        "PCM_F": {None: "FLOAT", 32: "FLOAT", 64: "DOUBLE"},
        "ULAW": {None: "ULAW", 8: "ULAW"},
        "ALAW": {None: "ALAW", 8: "ALAW"},
    }
    if enc not in rules:
        raise ValueError(f"encoding must be one of {sorted(rules)}, got {encoding!r}")
    if bits not in rules[enc]:
        allowed = [b for b in rules[enc] if b is not None]
        raise ValueError(f"bits_per_sample={bits} is not valid for encoding {enc!r}; "
                         f"expected one of {allowed}")
    return rules[enc][bits]


def _to_numpy(src: torch.Tensor) -> np.ndarray:
    src = src.detach().cpu()
    if src.dtype == torch.uint8:
        src = (src.to(torch.int16) - 128) << 8
    elif src.dtype == torch.int8:
        src = src.to(torch.int16) << 8
    elif src.dtype in (torch.float16, torch.bfloat16):
        src = src.float()
    elif src.dtype not in (torch.int16, torch.int32, torch.float32, torch.float64):
        raise TypeError(f"src dtype {src.dtype} is not supported; expected float or int8/16/32")
    return np.ascontiguousarray(src.numpy())


def save(
    path_or_fileobj: Source,
    src: torch.Tensor,
    sample_rate: int,
    channels_first: bool = True,
    format: str | None = None,
    encoding: str | None = None,
    bits_per_sample: int | None = None,
) -> None:
    """Write a 2-D waveform ``[channels, time]`` (or ``[time, channels]``) to an audio file.

    ``encoding``/``bits_per_sample`` pick the sample format as in torchaudio ("PCM_S" 16/24/32,
    "PCM_U" 8, "PCM_F" 32/64, "ULAW", "ALAW"); by default it follows ``src.dtype``.
    """
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"src must be a torch.Tensor, got {type(src)}")
    if src.ndim != 2:
        raise ValueError(f"src must be 2-D (channels, time), got shape {tuple(src.shape)}")
    if not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive int, got {sample_rate!r}")
    if format is None:
        if not isinstance(path_or_fileobj, (str, os.PathLike)):
            raise ValueError("format is required when saving to a file object")
        ext = os.path.splitext(os.fspath(path_or_fileobj))[1]
        if not ext:
            raise ValueError(f"cannot infer format from {_name(path_or_fileobj)!r}; pass format=")
        format = ext
    fmt = _major_format(format)
    ext_subtype = "OPUS" if format.lower().lstrip(".") == "opus" and encoding is None else None
    subtype = ext_subtype or _subtype(fmt, encoding, bits_per_sample, src.dtype)
    data = _to_numpy(src.t() if channels_first else src)
    try:
        sf.write(path_or_fileobj, data, sample_rate, subtype=subtype, format=fmt)
    except (sf.LibsndfileError, RuntimeError, ValueError, TypeError) as err:
        raise RuntimeError(f"failed to write audio file {_name(path_or_fileobj)!r} "
                           f"(format {fmt}, subtype {subtype}): {err}") from err
