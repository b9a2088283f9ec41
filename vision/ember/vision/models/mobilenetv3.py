"""MobileNetV3 small and large (Howard et al.), torchvision's layout and state_dict names."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.ops import SqueezeExcitation


def _divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class ConvNormAct(nn.Sequential):
    """Conv2d (no bias) -> BatchNorm -> activation, as indices 0, 1, 2."""

    def __init__(self, cin, cout, k=3, stride=1, groups=1, act=nn.Hardswish, dilation=1,
                 norm=None):
        norm = norm or partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2 * dilation, dilation=dilation,
                            groups=groups, bias=False), norm(cout)]
        if act is not None:
            layers.append(act(inplace=True))
        super().__init__(*layers)
        self.out_channels = cout


class InvertedResidual(nn.Module):
    """Expand 1x1 -> depthwise kxk -> (SE) -> project 1x1, residual when shapes allow."""

    def __init__(self, cin, k, exp, cout, se, act, stride, dilation=1, norm=None):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        self.out_channels = cout
        self._is_cn = stride > 1   # a stage's first block (segmentation / SSDLite taps)
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(ConvNormAct(cin, exp, 1, act=act, norm=norm))
        layers.append(ConvNormAct(exp, exp, k, 1 if dilation > 1 else stride, groups=exp,
                                  act=act, dilation=dilation, norm=norm))
        if se:
            layers.append(SqueezeExcitation(exp, _divisible(exp // 4),
                                            scale_activation=nn.Hardsigmoid))
        layers.append(ConvNormAct(exp, cout, 1, act=None, norm=norm))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        out = self.block(x)
        return out + x if self.use_res else out


# (in, kernel, expanded, out, squeeze-excite, activation "RE"/"HS", stride) from the paper
_LARGE = [(16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2),
          (24, 3, 72, 24, False, "RE", 1), (24, 5, 72, 40, True, "RE", 2),
          (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
          (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1),
          (80, 3, 184, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
          (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
          (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1),
          (160, 5, 960, 160, True, "HS", 1)]
_SMALL = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2),
          (24, 3, 88, 24, False, "RE", 1), (24, 5, 96, 40, True, "HS", 2),
          (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
          (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1),
          (48, 5, 288, 96, True, "HS", 2), (96, 5, 576, 96, True, "HS", 1),
          (96, 5, 576, 96, True, "HS", 1)]


def _tail(settings, last_channel: int, reduced: bool):
    """torchvision's ``reduced_tail``: the last stage's channels and ``last_channel`` halved."""
    if not reduced:
        return settings, last_channel
    head, tail = settings[:-3], settings[-3:]
    (c, k, e, o, se, a, s), rest = tail[0], tail[1:]
    tail = [(c, k, e, o // 2, se, a, s)] + [(ci // 2, ki, ei // 2, oi // 2, sei, ai, si)
                                            for ci, ki, ei, oi, sei, ai, si in rest]
    return head + tail, _divisible(last_channel // 2)


class MobileNetV3(nn.Module):
    """Stem, inverted-residual stages, a 1x1 head conv, and a two-layer classifier."""

    def __init__(self, settings, last_channel: int, num_classes: int = 1000,
                 dropout: float = 0.2, norm_layer=None, reduced_tail: bool = False,
                 dilated: bool = False) -> None:
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        settings, last_channel = _tail(settings, last_channel, reduced_tail)
        acts = {"RE": nn.ReLU, "HS": nn.Hardswish}
        layers: list[nn.Module] = [ConvNormAct(3, settings[0][0], 3, 2, norm=norm_layer)]
        # dilated: the last stage (3 blocks) keeps stride 16 with dilation 2 (segmentation)
        layers += [InvertedResidual(c, k, e, o, se, acts[a], s,
                                    2 if dilated and i >= len(settings) - 3 else 1, norm_layer)
                   for i, (c, k, e, o, se, a, s) in enumerate(settings)]
        last_in = settings[-1][3]
        layers.append(ConvNormAct(last_in, 6 * last_in, 1, norm=norm_layer))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last_in, last_channel),
                                        nn.Hardswish(inplace=True), nn.Dropout(dropout, True),
                                        nn.Linear(last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"MobileNetV3 expects images [N, 3, H, W], got {tuple(x.shape)}")
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@register_model()
def mobilenet_v3_large(*, weights=None, progress: bool = True, **kw) -> MobileNetV3:
    """MobileNetV3-Large (5,483,032 parameters)."""
    return load_weights(MobileNetV3(_LARGE, 1280, **kw), weights)


@register_model()
def mobilenet_v3_small(*, weights=None, progress: bool = True, **kw) -> MobileNetV3:
    """MobileNetV3-Small (2,542,856 parameters)."""
    return load_weights(MobileNetV3(_SMALL, 1024, **kw), weights)
