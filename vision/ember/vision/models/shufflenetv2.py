"""ShuffleNet V2 x0.5/x1.0/x1.5/x2.0 (Ma et al.), torchvision's layout and state_dict names."""

from __future__ import annotations

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave the channels of ``groups`` equal groups."""
    n, c, h, w = x.size()
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


def _bn_relu_1x1(cin, cout):
    return [nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


def _depthwise(c, stride):
    return [nn.Conv2d(c, c, 3, stride, 1, bias=False, groups=c), nn.BatchNorm2d(c)]


class InvertedResidual(nn.Module):
    """Stride 1: split the channels, transform one half; stride 2: transform the input in two
    branches. Concatenate and shuffle."""

    def __init__(self, inp: int, oup: int, stride: int) -> None:
        super().__init__()
        if not 1 <= stride <= 3:
            raise ValueError("illegal stride value")
        self.stride = stride
        half = oup // 2
        if stride == 1 and inp != half << 1:
            raise ValueError(f"Invalid combination of stride {stride}, inp {inp} and oup {oup} "
                             "values. If stride == 1 then inp should be equal to oup // 2 << 1.")
        self.branch1 = nn.Sequential(*(_depthwise(inp, stride) + _bn_relu_1x1(inp, half))
                                     if stride > 1 else [])
        self.branch2 = nn.Sequential(*_bn_relu_1x1(inp if stride > 1 else half, half),
                                     *_depthwise(half, stride), *_bn_relu_1x1(half, half))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            keep, x = x.chunk(2, dim=1)
            out = torch.cat((keep, self.branch2(x)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """Stem conv + max pool, three shuffle stages, 1x1 conv, global mean, linear."""

    def __init__(self, stages_repeats: list[int], stages_out_channels: list[int],
                 num_classes: int = 1000, inverted_residual=InvertedResidual) -> None:
        super().__init__()
        if len(stages_repeats) != 3:
            raise ValueError("expected stages_repeats as list of 3 positive ints")
        if len(stages_out_channels) != 5:
            raise ValueError("expected stages_out_channels as list of 5 positive ints")
        self._stage_out_channels = stages_out_channels
        width = stages_out_channels[0]
        self.conv1 = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False),
                                   nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        for i, (n, out) in enumerate(zip(stages_repeats, stages_out_channels[1:4]), 2):
            blocks = [inverted_residual(width, out, 2)]
            blocks += [inverted_residual(out, out, 1) for _ in range(n - 1)]
            setattr(self, f"stage{i}", nn.Sequential(*blocks))
            width = out
        self.conv5 = nn.Sequential(*_bn_relu_1x1(width, stages_out_channels[-1]))
        self.fc = nn.Linear(stages_out_channels[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))


def _shufflenet(widths, weights, **kwargs) -> ShuffleNetV2:
    return load_weights(ShuffleNetV2([4, 8, 4], widths, **kwargs), weights)


@register_model()
def shufflenet_v2_x0_5(*, weights=None, progress: bool = True, **kwargs) -> ShuffleNetV2:
    """ShuffleNet V2 x0.5 (1,366,792 parameters); ``progress`` is unused (nothing downloads)."""
    return _shufflenet([24, 48, 96, 192, 1024], weights, **kwargs)


@register_model()
def shufflenet_v2_x1_0(*, weights=None, progress: bool = True, **kwargs) -> ShuffleNetV2:
    """ShuffleNet V2 x1.0 (2,278,604 parameters); ``progress`` is unused (nothing downloads)."""
    return _shufflenet([24, 116, 232, 464, 1024], weights, **kwargs)


@register_model()
def shufflenet_v2_x1_5(*, weights=None, progress: bool = True, **kwargs) -> ShuffleNetV2:
    """ShuffleNet V2 x1.5 (3,503,624 parameters); ``progress`` is unused (nothing downloads)."""
    return _shufflenet([24, 176, 352, 704, 1024], weights, **kwargs)


@register_model()
def shufflenet_v2_x2_0(*, weights=None, progress: bool = True, **kwargs) -> ShuffleNetV2:
    """ShuffleNet V2 x2.0 (7,393,996 parameters); ``progress`` is unused (nothing downloads)."""
    return _shufflenet([24, 244, 488, 976, 2048], weights, **kwargs)
