"""VGG-11/13/16/19 with and without BatchNorm (Simonyan and Zisserman), torchvision's
layout and state_dict names."""

from __future__ import annotations

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model

# configurations A, B, D, E of the paper: conv widths, "M" for a 2x2 max pool
_CFGS = {
    "A": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "B": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "D": [64, 64, "M", 128, 128, "M"] + [256] * 3 + ["M"] + ([512] * 3 + ["M"]) * 2,
    "E": [64, 64, "M", 128, 128, "M"] + [256] * 4 + ["M"] + ([512] * 4 + ["M"]) * 2,
}


def make_layers(cfg: list, batch_norm: bool = False) -> nn.Sequential:
    """3x3 convs (+ BatchNorm) + ReLU, and max pools, as one flat Sequential."""
    layers: list[nn.Module] = []
    cin = 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
            continue
        layers.append(nn.Conv2d(cin, v, 3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2d(v))
        layers.append(nn.ReLU(inplace=True))
        cin = v
    return nn.Sequential(*layers)


class VGG(nn.Module):
    """Conv features, pooling to 7x7, three linear layers with ReLU and dropout."""

    def __init__(self, features: nn.Module, num_classes: int = 1000, init_weights: bool = True,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes))
        if not init_weights:
            return
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _vgg(cfg, batch_norm, weights, **kwargs) -> VGG:
    if weights is not None:
        kwargs["init_weights"] = False   # the checkpoint overwrites every parameter
    return load_weights(VGG(make_layers(_CFGS[cfg], batch_norm), **kwargs), weights)


_COUNTS = {  # torchvision's published parameter counts
    "vgg11": 132_863_336, "vgg11_bn": 132_868_840, "vgg13": 133_047_848,
    "vgg13_bn": 133_053_736, "vgg16": 138_357_544, "vgg16_bn": 138_365_992,
    "vgg19": 143_667_240, "vgg19_bn": 143_678_248,
}


def _make_builder(name, cfg, batch_norm):
    def builder(*, weights=None, progress: bool = True, **kwargs) -> VGG:
        return _vgg(cfg, batch_norm, weights, **kwargs)

    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (f"{name} ({_COUNTS[name]:,} parameters); ``progress`` is unused "
                       "(nothing downloads).")
    return register_model(name)(builder)


vgg11 = _make_builder("vgg11", "A", False)
vgg11_bn = _make_builder("vgg11_bn", "A", True)
vgg13 = _make_builder("vgg13", "B", False)
vgg13_bn = _make_builder("vgg13_bn", "B", True)
vgg16 = _make_builder("vgg16", "D", False)
vgg16_bn = _make_builder("vgg16_bn", "D", True)
vgg19 = _make_builder("vgg19", "E", False)
vgg19_bn = _make_builder("vgg19_bn", "E", True)
