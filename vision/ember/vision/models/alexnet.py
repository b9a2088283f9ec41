"""AlexNet (Krizhevsky et al., the one-GPU variant), torchvision's layout and state_dict names."""

from __future__ import annotations

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model


class AlexNet(nn.Module):
    """Five convs with ReLU and three max pools, pooling to 6x6, three linear layers."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        # (in, out, kernel, stride, padding, max pool after)
        convs = [(3, 64, 11, 4, 2, True), (64, 192, 5, 1, 2, True), (192, 384, 3, 1, 1, False),
                 (384, 256, 3, 1, 1, False), (256, 256, 3, 1, 1, True)]
        layers: list[nn.Module] = []
        for cin, cout, k, s, p, pool in convs:
            layers += [nn.Conv2d(cin, cout, k, s, p), nn.ReLU(inplace=True)]
            if pool:
                layers.append(nn.MaxPool2d(3, 2))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
            nn.Dropout(p=dropout), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@register_model()
def alexnet(*, weights=None, progress: bool = True, **kwargs) -> AlexNet:
    """AlexNet (61,100,840 parameters); ``progress`` is unused (nothing downloads)."""
    return load_weights(AlexNet(**kwargs), weights)
