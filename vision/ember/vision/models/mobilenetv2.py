"""MobileNetV2 (Sandler et al.), torchvision's layout and state_dict names."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.models._utils import divisible
from ember.vision.ops import Conv2dNormActivation

# (expansion t, output channels c, repeats n, first stride s) from the paper
_SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
            [6, 160, 3, 2], [6, 320, 1, 1]]


class InvertedResidual(nn.Module):
    """1x1 expand (ReLU6) -> 3x3 depthwise (ReLU6) -> linear 1x1 project, residual when
    the stride is 1 and the width is kept."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int,
                 norm_layer=None) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"stride should be 1 or 2 instead of {stride}")
        norm_layer = norm_layer or nn.BatchNorm2d
        cna = partial(Conv2dNormActivation, norm_layer=norm_layer, activation_layer=nn.ReLU6)
        hidden = int(round(inp * expand_ratio))
        self.stride = stride
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = [cna(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [cna(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, bias=False), norm_layer(oup)]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """Stem conv, inverted-residual stages, 1x1 head conv, pooling, dropout + linear."""

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0,
                 inverted_residual_setting=None, round_nearest: int = 8, block=None,
                 norm_layer=None, dropout: float = 0.2) -> None:
        super().__init__()
        block = block or InvertedResidual
        norm_layer = norm_layer or nn.BatchNorm2d
        setting = _SETTING if inverted_residual_setting is None else inverted_residual_setting
        if len(setting) == 0 or len(setting[0]) != 4:
            raise ValueError("inverted_residual_setting should be non-empty or a 4-element "
                             f"list, got {setting}")
        cna = partial(Conv2dNormActivation, norm_layer=norm_layer, activation_layer=nn.ReLU6)
        width = divisible(32 * width_mult, round_nearest)
        self.last_channel = divisible(1280 * max(1.0, width_mult), round_nearest)
        features: list[nn.Module] = [cna(3, width, stride=2)]
        for t, c, n, s in setting:
            out = divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(block(width, out, s if i == 0 else 1, expand_ratio=t,
                                      norm_layer=norm_layer))
                width = out
        features.append(cna(width, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout),
                                        nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


@register_model()
def mobilenet_v2(*, weights=None, progress: bool = True, **kwargs) -> MobileNetV2:
    """MobileNetV2 (3,504,872 parameters); ``progress`` is unused (nothing downloads)."""
    return load_weights(MobileNetV2(**kwargs), weights)
