"""The detection weights enums' shared pieces: torchvision's ``ObjectDetection`` preset and
a helper that makes a ``*_Weights`` enum and registers it with the model registry."""

from __future__ import annotations

import torch
from torch import nn

from ember.vision.models._weights import (
    MODEL_WEIGHTS,
    URL_BASE,
    WEIGHTS_ENUMS,
    Weights,
    WeightsEnum,
)

__all__ = ["ObjectDetection", "detection_weights"]


class ObjectDetection(nn.Module):
    """The detectors' preset: a PIL image or a uint8 / float tensor -> float in [0, 1]."""

    def forward(self, img):
        from ember.vision.transforms import functional as F
        if not isinstance(img, torch.Tensor):
            img = F.pil_to_tensor(img)
        return F.convert_image_dtype(img, torch.float)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def describe(self) -> str:
        return ("Accepts PIL images and (B, C, H, W) or (C, H, W) tensors, rescaled to "
                "[0.0, 1.0].")


def detection_weights(model: str, enum_name: str, entries: dict[str, tuple[str, dict]],
                      default: str) -> type[WeightsEnum]:
    """An enum ``enum_name`` with ``entries`` (name -> (torchvision file name, meta)) and
    ``DEFAULT`` = ``entries[default]``, registered for builder ``model`` so ``weights=``,
    ``get_weight`` and ``get_model_weights`` know it. Files load from local disk only."""
    if default not in entries:
        raise ValueError(f"default {default!r} is not one of {sorted(entries)}")
    values = {name: Weights(URL_BASE + file, ObjectDetection, {"min_size": (1, 1), **meta})
              for name, (file, meta) in entries.items()}
    members = [*values.items(), ("DEFAULT", values[default])]
    enum_cls = WeightsEnum(enum_name, members, module=__name__)
    WEIGHTS_ENUMS[enum_name] = MODEL_WEIGHTS[model] = enum_cls
    return enum_cls
