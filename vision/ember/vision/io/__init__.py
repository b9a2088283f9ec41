"""Tensor-native image I/O with torchvision.io's names and semantics."""

from ember.vision.io._limits import (
    DecodeError,
    DecodeLimitError,
    DecodeLimits,
    get_decode_limits,
    set_decode_limits,
)
from ember.vision.io.file import read_file, write_file
from ember.vision.io.image import (
    ImageReadMode,
    decode_gif,
    decode_image,
    decode_jpeg,
    decode_png,
    decode_webp,
    encode_jpeg,
    encode_png,
    read_image,
    write_jpeg,
    write_png,
)
from ember.vision.video import VideoReader, read_video, read_video_timestamps, write_video

__all__ = [
    "ImageReadMode", "decode_gif", "decode_image", "decode_jpeg", "decode_png", "decode_webp",
    "encode_jpeg", "encode_png", "read_file", "read_image", "write_file", "write_jpeg",
    "write_png", "DecodeError", "DecodeLimitError", "DecodeLimits", "get_decode_limits",
    "set_decode_limits", "VideoReader", "read_video", "read_video_timestamps", "write_video",
]
