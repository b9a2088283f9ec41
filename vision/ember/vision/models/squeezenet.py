"""SqueezeNet 1.0 and 1.1 (Iandola et al.), torchvision's layout and state_dict names."""

from __future__ import annotations

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model


class Fire(nn.Module):
    """1x1 squeeze, then 1x1 and 3x3 expands side by side, concatenated on channels."""

    def __init__(self, inplanes: int, squeeze_planes: int, expand1x1_planes: int,
                 expand3x3_planes: int) -> None:
        super().__init__()
        self.inplanes = inplanes
        self.squeeze = nn.Conv2d(inplanes, squeeze_planes, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze_planes, expand1x1_planes, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze_planes, expand3x3_planes, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(s)),
                          self.expand3x3_activation(self.expand3x3(s))], 1)


# stem (out, kernel), then "M" (3x3/2 ceil max pool) or a Fire's squeeze width (its expands
# are 4x that each, its input the previous output)
_VERSIONS = {
    "1_0": ((96, 7), ["M", 16, 16, 32, "M", 32, 48, 48, 64, "M", 64]),
    "1_1": ((64, 3), ["M", 16, 16, "M", 32, 32, "M", 48, 48, 64, 64]),
}


class SqueezeNet(nn.Module):
    """Stem conv, Fire modules between max pools, a 1x1 conv classifier averaged."""

    def __init__(self, version: str = "1_0", num_classes: int = 1000,
                 dropout: float = 0.5) -> None:
        super().__init__()
        if version not in _VERSIONS:
            raise ValueError(f"Unsupported SqueezeNet version {version}: 1_0 or 1_1 expected")
        self.num_classes = num_classes
        (stem, k), plan = _VERSIONS[version]
        layers: list[nn.Module] = [nn.Conv2d(3, stem, k, stride=2), nn.ReLU(inplace=True)]
        width = stem
        for item in plan:
            if item == "M":
                layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            else:
                layers.append(Fire(width, item, 4 * item, 4 * item))
                width = 8 * item
        self.features = nn.Sequential(*layers)
        final_conv = nn.Conv2d(512, num_classes, 1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), final_conv, nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final_conv:
                    nn.init.normal_(m.weight, 0.0, 0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


@register_model()
def squeezenet1_0(*, weights=None, progress: bool = True, **kwargs) -> SqueezeNet:
    """SqueezeNet 1.0 (1,248,424 parameters); ``progress`` is unused (nothing downloads)."""
    return load_weights(SqueezeNet("1_0", **kwargs), weights)


@register_model()
def squeezenet1_1(*, weights=None, progress: bool = True, **kwargs) -> SqueezeNet:
    """SqueezeNet 1.1 (1,235,496 parameters); ``progress`` is unused (nothing downloads)."""
    return load_weights(SqueezeNet("1_1", **kwargs), weights)
