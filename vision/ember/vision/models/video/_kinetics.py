"""Kinetics-400 weights entries of the video classification builders."""

from __future__ import annotations

from functools import partial

from ember.vision.models._categories import KINETICS400_CATEGORIES
from ember.vision.models._presets import VideoClassification
from ember.vision.models._weights import URL_BASE, Weights


def kinetics_weights(file: str, num_params: int, crop: int = 112, resize=(128, 171),
                     min_size: int = 1, **meta) -> Weights:
    """An entry with torchvision's file name, VideoClassification preset and meta."""
    return Weights(URL_BASE + file,
                   partial(VideoClassification, crop_size=(crop, crop), resize_size=resize),
                   {"categories": list(KINETICS400_CATEGORIES), "min_size": (min_size, min_size),
                    "num_params": num_params, **meta})
