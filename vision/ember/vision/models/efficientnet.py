"""EfficientNet B0-B7 (Tan and Le) and EfficientNetV2 S/M/L (Tan and Le, 2021), torchvision's
layout and state_dict names, built from ember.vision.ops blocks."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.models._utils import divisible
from ember.vision.ops import Conv2dNormActivation, SqueezeExcitation, StochasticDepth


@dataclass
class _MBConvConfig:
    """One stage: expansion, kernel, first stride, widths, repeats and the block class."""

    expand_ratio: float
    kernel: int
    stride: int
    input_channels: int
    out_channels: int
    num_layers: int
    block: type

    @staticmethod
    def adjust_channels(channels: int, width_mult: float, min_value: int | None = None) -> int:
        return divisible(channels * width_mult, 8, min_value)


class MBConvConfig(_MBConvConfig):
    """A stage of MBConv blocks; widths and repeats scaled by ``width_mult``/``depth_mult``."""

    def __init__(self, expand_ratio: float, kernel: int, stride: int, input_channels: int,
                 out_channels: int, num_layers: int, width_mult: float = 1.0,
                 depth_mult: float = 1.0, block=None) -> None:
        super().__init__(expand_ratio, kernel, stride,
                         self.adjust_channels(input_channels, width_mult),
                         self.adjust_channels(out_channels, width_mult),
                         self.adjust_depth(num_layers, depth_mult), block or MBConv)

    @staticmethod
    def adjust_depth(num_layers: int, depth_mult: float) -> int:
        return int(math.ceil(num_layers * depth_mult))


class FusedMBConvConfig(_MBConvConfig):
    """A stage of Fused-MBConv blocks (EfficientNetV2's early stages)."""

    def __init__(self, expand_ratio: float, kernel: int, stride: int, input_channels: int,
                 out_channels: int, num_layers: int, block=None) -> None:
        super().__init__(expand_ratio, kernel, stride, input_channels, out_channels, num_layers,
                         block or FusedMBConv)


class _Residual(nn.Module):
    """``block(x)``, plus ``x`` through stochastic depth when the shape is kept."""

    def __init__(self, cnf: _MBConvConfig, stochastic_depth_prob: float) -> None:
        super().__init__()
        if not 1 <= cnf.stride <= 2:
            raise ValueError("illegal stride value")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = cnf.out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return self.stochastic_depth(out) + x if self.use_res_connect else out


class MBConv(_Residual):
    """1x1 expand (SiLU), kxk depthwise (SiLU), squeeze-excitation, linear 1x1 project."""

    def __init__(self, cnf: MBConvConfig, stochastic_depth_prob: float, norm_layer,
                 se_layer=SqueezeExcitation) -> None:
        super().__init__(cnf, stochastic_depth_prob)
        cna = partial(Conv2dNormActivation, norm_layer=norm_layer, activation_layer=nn.SiLU)
        cin, cout = cnf.input_channels, cnf.out_channels
        wide = cnf.adjust_channels(cin, cnf.expand_ratio)
        layers: list[nn.Module] = [cna(cin, wide, kernel_size=1)] if wide != cin else []
        layers += [cna(wide, wide, kernel_size=cnf.kernel, stride=cnf.stride, groups=wide),
                   se_layer(wide, max(1, cin // 4), activation=partial(nn.SiLU, inplace=True)),
                   cna(wide, cout, kernel_size=1, activation_layer=None)]
        self.block = nn.Sequential(*layers)


class FusedMBConv(_Residual):
    """kxk expand conv (SiLU) then linear 1x1 project; one kxk conv when not expanding."""

    def __init__(self, cnf: FusedMBConvConfig, stochastic_depth_prob: float,
                 norm_layer) -> None:
        super().__init__(cnf, stochastic_depth_prob)
        cna = partial(Conv2dNormActivation, norm_layer=norm_layer, activation_layer=nn.SiLU)
        cin, cout = cnf.input_channels, cnf.out_channels
        wide = cnf.adjust_channels(cin, cnf.expand_ratio)
        if wide != cin:
            layers = [cna(cin, wide, kernel_size=cnf.kernel, stride=cnf.stride),
                      cna(wide, cout, kernel_size=1, activation_layer=None)]
        else:
            layers = [cna(cin, cout, kernel_size=cnf.kernel, stride=cnf.stride)]
        self.block = nn.Sequential(*layers)


class EfficientNet(nn.Module):
    """Stem, MBConv/Fused-MBConv stages (stochastic depth growing linearly with the block
    index), 1x1 head conv, pooling, dropout + linear."""

    def __init__(self, inverted_residual_setting: Sequence[_MBConvConfig], dropout: float,
                 stochastic_depth_prob: float = 0.2, num_classes: int = 1000,
                 norm_layer=None, last_channel: int | None = None) -> None:
        super().__init__()
        setting = inverted_residual_setting
        if not setting:
            raise ValueError("The inverted_residual_setting should not be empty")
        if not (isinstance(setting, Sequence) and all(isinstance(s, _MBConvConfig)
                                                      for s in setting)):
            raise TypeError("The inverted_residual_setting should be List[MBConvConfig]")
        norm_layer = norm_layer or nn.BatchNorm2d
        cna = partial(Conv2dNormActivation, norm_layer=norm_layer, activation_layer=nn.SiLU)
        layers: list[nn.Module] = [cna(3, setting[0].input_channels, kernel_size=3, stride=2)]
        total = sum(c.num_layers for c in setting)
        index = 0
        for cnf in setting:
            stage: list[nn.Module] = []
            for i in range(cnf.num_layers):
                c = copy.copy(cnf)
                if i:
                    c.input_channels, c.stride = c.out_channels, 1
                stage.append(c.block(c, stochastic_depth_prob * float(index) / total,
                                     norm_layer))
                index += 1
            layers.append(nn.Sequential(*stage))
        head_in = setting[-1].out_channels
        head_out = last_channel if last_channel is not None else 4 * head_in
        layers.append(cna(head_in, head_out, kernel_size=1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True),
                                        nn.Linear(head_out, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                bound = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -bound, bound)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# (expand, kernel, stride, in, out, repeats) per stage
_B_STAGES = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
             (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
             (6, 3, 1, 192, 320, 1)]
# (fused, expand, kernel, stride, in, out, repeats) per stage
_V2_STAGES = {
    "s": [(1, 1, 3, 1, 24, 24, 2), (1, 4, 3, 2, 24, 48, 4), (1, 4, 3, 2, 48, 64, 4),
          (0, 4, 3, 2, 64, 128, 6), (0, 6, 3, 1, 128, 160, 9), (0, 6, 3, 2, 160, 256, 15)],
    "m": [(1, 1, 3, 1, 24, 24, 3), (1, 4, 3, 2, 24, 48, 5), (1, 4, 3, 2, 48, 80, 5),
          (0, 4, 3, 2, 80, 160, 7), (0, 6, 3, 1, 160, 176, 14), (0, 6, 3, 2, 176, 304, 18),
          (0, 6, 3, 1, 304, 512, 5)],
    "l": [(1, 1, 3, 1, 32, 32, 4), (1, 4, 3, 2, 32, 64, 7), (1, 4, 3, 2, 64, 96, 7),
          (0, 4, 3, 2, 96, 192, 10), (0, 6, 3, 1, 192, 224, 19), (0, 6, 3, 2, 224, 384, 25),
          (0, 6, 3, 1, 384, 640, 7)],
}
# name: (width_mult, depth_mult, dropout, parameter count); B5-B7 use TF's BatchNorm settings
_B = {"b0": (1.0, 1.0, 0.2, 5_288_548), "b1": (1.0, 1.1, 0.2, 7_794_184),
      "b2": (1.1, 1.2, 0.3, 9_109_994), "b3": (1.2, 1.4, 0.3, 12_233_232),
      "b4": (1.4, 1.8, 0.4, 19_341_616), "b5": (1.6, 2.2, 0.4, 30_389_784),
      "b6": (1.8, 2.6, 0.5, 43_040_704), "b7": (2.0, 3.1, 0.5, 66_347_960)}
_V2 = {"s": (0.2, 21_458_488), "m": (0.3, 54_139_356), "l": (0.4, 118_515_272)}


def _make_b(variant):
    width, depth, dropout, count = _B[variant]
    tf_norm = variant in ("b5", "b6", "b7")

    def builder(*, weights=None, progress: bool = True, **kwargs) -> EfficientNet:
        setting = [MBConvConfig(*s, width_mult=width, depth_mult=depth) for s in _B_STAGES]
        if tf_norm:
            kwargs["norm_layer"] = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        model = EfficientNet(setting, kwargs.pop("dropout", dropout), **kwargs)
        return load_weights(model, weights)

    name = f"efficientnet_{variant}"
    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (f"EfficientNet-{variant.upper()} ({count:,} parameters); ``progress`` "
                       "is unused (nothing downloads).")
    return register_model(name)(builder)


def _make_v2(variant):
    dropout, count = _V2[variant]

    def builder(*, weights=None, progress: bool = True, **kwargs) -> EfficientNet:
        setting = [FusedMBConvConfig(*s) if fused else MBConvConfig(*s)
                   for fused, *s in _V2_STAGES[variant]]
        kwargs["norm_layer"] = partial(nn.BatchNorm2d, eps=1e-03)
        model = EfficientNet(setting, kwargs.pop("dropout", dropout), last_channel=1280,
                             **kwargs)
        return load_weights(model, weights)

    name = f"efficientnet_v2_{variant}"
    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (f"EfficientNetV2-{variant.upper()} ({count:,} parameters); "
                       "``progress`` is unused (nothing downloads).")
    return register_model(name)(builder)


efficientnet_b0 = _make_b("b0")
efficientnet_b1 = _make_b("b1")
efficientnet_b2 = _make_b("b2")
efficientnet_b3 = _make_b("b3")
efficientnet_b4 = _make_b("b4")
efficientnet_b5 = _make_b("b5")
efficientnet_b6 = _make_b("b6")
efficientnet_b7 = _make_b("b7")
efficientnet_v2_s = _make_v2("s")
efficientnet_v2_m = _make_v2("m")
efficientnet_v2_l = _make_v2("l")
