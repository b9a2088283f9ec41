"""The shared segmentation wrapper and the checkpoint-aware builder steps."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ember.vision.models._categories import VOC_CATEGORIES
from ember.vision.models._presets import SemanticSegmentation
from ember.vision.models._utils import read_state
from ember.vision.models._weights import URL_BASE, Weights


class _SimpleSegmentationModel(nn.Module):
    """Backbone features -> classifier (and an optional auxiliary classifier), each upsampled
    bilinearly to the input size; returns ``{"out": ..., "aux": ...}``."""

    def __init__(self, backbone: nn.Module, classifier: nn.Module,
                 aux_classifier: nn.Module | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.classifier = classifier
        self.aux_classifier = aux_classifier

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"{type(self).__name__} expects images [N, 3, H, W], "
                             f"got {tuple(x.shape)}")
        size = x.shape[-2:]
        features = self.backbone(x)
        result = {"out": F.interpolate(self.classifier(features["out"]), size=size,
                                       mode="bilinear", align_corners=False)}
        if self.aux_classifier is not None:
            result["aux"] = F.interpolate(self.aux_classifier(features["aux"]), size=size,
                                          mode="bilinear", align_corners=False)
        return result


def voc_weights(file: str, num_params: int) -> Weights:
    """A COCO-trained, VOC-labelled segmentation entry (torchvision's file name and meta)."""
    return Weights(URL_BASE + file, partial(SemanticSegmentation, resize_size=520),
                   {"categories": list(VOC_CATEGORIES), "min_size": (1, 1),
                    "num_params": num_params})


def checkpoint_and_aux(weights, aux_loss: bool | None):
    """The state_dict of ``weights`` (or None) and the ``aux_loss`` to build with: a
    checkpoint's auxiliary head is built when ``aux_loss`` is not given (torchvision's
    pretrained models have one)."""
    if weights is None:
        return None, bool(aux_loss)
    state = read_state(weights)
    has_aux = any(k.startswith("aux_classifier.") for k in state)
    if aux_loss is None:
        return state, has_aux
    if not aux_loss:   # asked for no auxiliary head: its weights are not needed
        state = {k: v for k, v in state.items() if not k.startswith("aux_classifier.")}
    return state, bool(aux_loss)


def finish(model: nn.Module, state: dict | None) -> nn.Module:
    """Load ``state`` strictly (when given) and return the model."""
    if state is not None:
        model.load_state_dict(state)
    return model
