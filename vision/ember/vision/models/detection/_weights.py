"""The detection weights enums: entries with torchvision's file names, the ObjectDetection
preset and the shared meta, registered through ``_weights.add_weights_enum``."""

from __future__ import annotations

from ember.vision.models._presets import ObjectDetection
from ember.vision.models._weights import URL_BASE, Weights, WeightsEnum, add_weights_enum

__all__ = ["ObjectDetection", "detection_weights"]


def detection_weights(model: str, enum_name: str, entries: dict[str, tuple[str, dict]],
                      default: str) -> type[WeightsEnum]:
    """The enum ``enum_name`` of builder ``model``: ``entries`` map NAME -> (torchvision file
    name, meta); meta gains ``min_size`` (1, 1); ``DEFAULT`` is ``entries[default]``."""
    values = [(name, Weights(URL_BASE + file, ObjectDetection, {"min_size": (1, 1), **meta}))
              for name, (file, meta) in entries.items()]
    return add_weights_enum(model, enum_name, values, default)
