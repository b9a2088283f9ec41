"""Size queries (get_dimensions, get_num_channels, get_num_frames) and is_pure_tensor."""

from __future__ import annotations

from typing import Any

import PIL.Image
import torch

from ember.vision import tv_tensors
from ember.vision.transforms.functional._registry import dispatcher, register_raw

_PIL_CHANNELS = {"1": 1, "L": 1, "P": 1, "I": 1, "I;16": 1, "F": 1, "LA": 2, "RGB": 3,
                 "YCbCr": 3, "LAB": 3, "HSV": 3, "RGBA": 4, "CMYK": 4, "RGBX": 4}


def is_pure_tensor(inpt: Any) -> bool:
    """A ``torch.Tensor`` that is not a typed sample (Image, Video, Mask, BoundingBoxes)."""
    return isinstance(inpt, torch.Tensor) and not isinstance(inpt, tv_tensors.TVTensor)


def _chw(x: torch.Tensor) -> list[int]:
    if x.ndim < 2:
        raise TypeError(f"an image must have at least 2 dimensions, got shape {tuple(x.shape)}")
    return [1, *x.shape[-2:]] if x.ndim == 2 else list(x.shape[-3:])


def get_num_frames_video(video: torch.Tensor) -> int:
    if video.ndim < 4:
        raise TypeError(f"a video must have shape [..., T, C, H, W], got {tuple(video.shape)}")
    return int(video.shape[-4])


def _pil_channels(pic: PIL.Image.Image) -> int:
    if pic.mode not in _PIL_CHANNELS:
        raise ValueError(f"PIL mode {pic.mode!r} has no known channel count")
    return _PIL_CHANNELS[pic.mode]


@dispatcher
def get_dimensions(inpt):
    """``[channels, height, width]`` of an image or video (PIL images too)."""


@dispatcher
def get_num_channels(inpt):
    """The channel count of an image or video (PIL images too)."""


@dispatcher
def get_num_frames(inpt):
    """The frame count (dim -4) of a video."""


get_image_num_channels = get_num_channels

for _cls in (torch.Tensor, tv_tensors.Image, tv_tensors.Video):
    register_raw(get_dimensions, _cls, lambda x: _chw(tv_tensors.unwrap(x)))
    register_raw(get_num_channels, _cls, lambda x: _chw(tv_tensors.unwrap(x))[0])
for _cls in (torch.Tensor, tv_tensors.Video):
    register_raw(get_num_frames, _cls, lambda x: get_num_frames_video(tv_tensors.unwrap(x)))
register_raw(get_dimensions, PIL.Image.Image,
             lambda pic: [_pil_channels(pic), pic.height, pic.width])
register_raw(get_num_channels, PIL.Image.Image, _pil_channels)
del _cls
