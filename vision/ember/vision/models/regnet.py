"""RegNetX and RegNetY (Radosavovic et al.), torchvision's layout and state_dict names, built
from ember.vision.ops blocks; stage widths follow the paper's quantised linear rule."""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.models._utils import divisible
from ember.vision.ops import Conv2dNormActivation, SqueezeExcitation


class SimpleStemIN(Conv2dNormActivation):
    """3x3 stride-2 conv, norm, activation."""

    def __init__(self, width_in: int, width_out: int, norm_layer, activation_layer) -> None:
        super().__init__(width_in, width_out, kernel_size=3, stride=2, norm_layer=norm_layer,
                         activation_layer=activation_layer)


class BottleneckTransform(nn.Sequential):
    """``a``: 1x1, ``b``: grouped 3x3 (stride), optional ``se``, ``c``: linear 1x1."""

    def __init__(self, width_in: int, width_out: int, stride: int, norm_layer,
                 activation_layer, group_width: int, bottleneck_multiplier: float,
                 se_ratio: float | None) -> None:
        cna = partial(Conv2dNormActivation, norm_layer=norm_layer,
                      activation_layer=activation_layer)
        inner = int(round(width_out * bottleneck_multiplier))
        layers = OrderedDict(a=cna(width_in, inner, kernel_size=1),
                             b=cna(inner, inner, kernel_size=3, stride=stride,
                                   groups=inner // group_width))
        if se_ratio:
            layers["se"] = SqueezeExcitation(inner, int(round(se_ratio * width_in)),
                                             activation=activation_layer)
        layers["c"] = cna(inner, width_out, kernel_size=1, activation_layer=None)
        super().__init__(layers)


class ResBottleneckBlock(nn.Module):
    """``activation(proj(x) + f(x))``, the projection only when the shape changes."""

    def __init__(self, width_in: int, width_out: int, stride: int, norm_layer,
                 activation_layer, group_width: int = 1, bottleneck_multiplier: float = 1.0,
                 se_ratio: float | None = None) -> None:
        super().__init__()
        self.proj = None
        if width_in != width_out or stride != 1:
            self.proj = Conv2dNormActivation(width_in, width_out, kernel_size=1, stride=stride,
                                             norm_layer=norm_layer, activation_layer=None)
        self.f = BottleneckTransform(width_in, width_out, stride, norm_layer, activation_layer,
                                     group_width, bottleneck_multiplier, se_ratio)
        self.activation = activation_layer(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.proj is None else self.proj(x)
        return self.activation(skip + self.f(x))


class AnyStage(nn.Sequential):
    """``depth`` blocks named ``block{stage}-{i}``, the first one carrying the stride."""

    def __init__(self, width_in: int, width_out: int, stride: int, depth: int,
                 block_constructor, norm_layer, activation_layer, group_width: int,
                 bottleneck_multiplier: float, se_ratio: float | None = None,
                 stage_index: int = 0) -> None:
        super().__init__()
        for i in range(depth):
            self.add_module(f"block{stage_index}-{i}", block_constructor(
                width_out if i else width_in, width_out, 1 if i else stride, norm_layer,
                activation_layer, group_width, bottleneck_multiplier, se_ratio))


class BlockParams:
    """Per-stage depths, widths, group widths, bottleneck ratios, strides and the SE ratio."""

    def __init__(self, depths: list[int], widths: list[int], group_widths: list[int],
                 bottleneck_multipliers: list[float], strides: list[int],
                 se_ratio: float | None = None) -> None:
        self.depths = depths
        self.widths = widths
        self.group_widths = group_widths
        self.bottleneck_multipliers = bottleneck_multipliers
        self.strides = strides
        self.se_ratio = se_ratio

    @classmethod
    def from_init_params(cls, depth: int, w_0: int, w_a: float, w_m: float, group_width: int,
                         bottleneck_multiplier: float = 1.0, se_ratio: float | None = None,
                         **kwargs) -> BlockParams:
        """Block j's width ``w_0 * w_m ** round(log((w_0 + w_a j) / w_0) / log(w_m))``, to 8s;
        equal-width runs are the stages (float32 torch arithmetic, as torchvision's)."""
        if w_a < 0 or w_0 <= 0 or w_m <= 1 or w_0 % 8 != 0:
            raise ValueError("Invalid RegNet settings")
        linear = torch.arange(depth, device="cpu") * w_a + w_0   # on CPU under any default
        steps = torch.round(torch.log(linear / w_0) / math.log(w_m))
        block_widths = (torch.round(torch.divide(w_0 * torch.pow(w_m, steps), 8)) * 8).int()
        block_widths = block_widths.tolist()
        widths, depths = [], []
        for w in block_widths:
            if widths and widths[-1] == w:
                depths[-1] += 1
            else:
                widths.append(w)
                depths.append(1)
        n = len(widths)
        ratios = [bottleneck_multiplier] * n
        widths, groups = cls._adjust_widths_groups_compatibilty(widths, ratios, [group_width] * n)
        return cls(depths=depths, widths=widths, group_widths=groups,
                   bottleneck_multipliers=ratios, strides=[2] * n, se_ratio=se_ratio)

    def _get_expanded_params(self):
        return zip(self.widths, self.strides, self.depths, self.group_widths,
                   self.bottleneck_multipliers)

    @staticmethod
    def _adjust_widths_groups_compatibilty(stage_widths, bottleneck_ratios, group_widths):
        """Bottleneck widths rounded to a multiple of the (capped) group width."""
        inner = [int(w * b) for w, b in zip(stage_widths, bottleneck_ratios)]
        groups = [min(g, w) for g, w in zip(group_widths, inner)]
        inner = [divisible(w, g) for w, g in zip(inner, groups)]
        return [int(w / b) for w, b in zip(inner, bottleneck_ratios)], groups


class RegNet(nn.Module):
    """Stem, four stages of residual bottleneck blocks (``trunk_output``), pooling, linear."""

    def __init__(self, block_params: BlockParams, num_classes: int = 1000, stem_width: int = 32,
                 stem_type=None, block_type=None, norm_layer=None, activation=None) -> None:
        super().__init__()
        stem_type = stem_type or SimpleStemIN
        norm_layer = norm_layer or nn.BatchNorm2d
        block_type = block_type or ResBottleneckBlock
        activation = activation or nn.ReLU
        self.stem = stem_type(3, stem_width, norm_layer, activation)
        width = stem_width
        stages = []
        for i, (out, stride, depth, group, ratio) in enumerate(
                block_params._get_expanded_params(), 1):
            stages.append((f"block{i}", AnyStage(width, out, stride, depth, block_type,
                                                 norm_layer, activation, group, ratio,
                                                 block_params.se_ratio, stage_index=i)))
            width = out
        self.trunk_output = nn.Sequential(OrderedDict(stages))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / fan_out))
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.trunk_output(self.stem(x)))
        return self.fc(x.flatten(start_dim=1))


# name: (depth, w_0, w_a, w_m, group_width, parameter count); RegNetY adds SE with ratio 1/4
_X = {"400mf": (22, 24, 24.48, 2.54, 16, 5_495_976), "800mf": (16, 56, 35.73, 2.28, 16, 7_259_656),
      "1_6gf": (18, 80, 34.01, 2.25, 24, 9_190_136), "3_2gf": (25, 88, 26.31, 2.25, 48, 15_296_552),
      "8gf": (23, 80, 49.56, 2.88, 120, 39_572_648),
      "16gf": (22, 216, 55.59, 2.1, 128, 54_278_536),
      "32gf": (23, 320, 69.86, 2.0, 168, 107_811_560)}
_Y = {"400mf": (16, 48, 27.89, 2.09, 8, 4_344_144), "800mf": (14, 56, 38.84, 2.4, 16, 6_432_512),
      "1_6gf": (27, 48, 20.71, 2.65, 24, 11_202_430),
      "3_2gf": (21, 80, 42.63, 2.66, 24, 19_436_338),
      "8gf": (17, 192, 76.82, 2.19, 56, 39_381_472),
      "16gf": (18, 200, 106.23, 2.48, 112, 83_590_140),
      "32gf": (20, 232, 115.89, 2.53, 232, 145_046_770),
      "128gf": (27, 456, 160.83, 2.52, 264, 644_812_894)}


def _make(family, size):
    depth, w_0, w_a, w_m, group, count = (_X if family == "x" else _Y)[size]
    se = 0.25 if family == "y" else None

    def builder(*, weights=None, progress: bool = True, **kwargs) -> RegNet:
        params = BlockParams.from_init_params(depth=depth, w_0=w_0, w_a=w_a, w_m=w_m,
                                              group_width=group, se_ratio=se, **kwargs)
        norm = kwargs.pop("norm_layer", partial(nn.BatchNorm2d, eps=1e-05, momentum=0.1))
        return load_weights(RegNet(params, norm_layer=norm, **kwargs), weights)

    name = f"regnet_{family}_{size}"
    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (f"RegNet{family.upper()}-{size.upper().replace('_', '.')} ({count:,} "
                       "parameters); ``progress`` is unused (nothing downloads).")
    return register_model(name)(builder)


regnet_y_400mf = _make("y", "400mf")
regnet_y_800mf = _make("y", "800mf")
regnet_y_1_6gf = _make("y", "1_6gf")
regnet_y_3_2gf = _make("y", "3_2gf")
regnet_y_8gf = _make("y", "8gf")
regnet_y_16gf = _make("y", "16gf")
regnet_y_32gf = _make("y", "32gf")
regnet_y_128gf = _make("y", "128gf")
regnet_x_400mf = _make("x", "400mf")
regnet_x_800mf = _make("x", "800mf")
regnet_x_1_6gf = _make("x", "1_6gf")
regnet_x_3_2gf = _make("x", "3_2gf")
regnet_x_8gf = _make("x", "8gf")
regnet_x_16gf = _make("x", "16gf")
regnet_x_32gf = _make("x", "32gf")
