"""MNASNet 0.5/0.75/1.0/1.3 (Tan et al., the B1 variant), torchvision's layout and
state_dict names, with its version-1 checkpoint handling."""

from __future__ import annotations

import warnings
from functools import partial

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model

_BN_MOMENTUM = 1 - 0.9997   # TensorFlow's 0.9997 decay


class _InvertedResidual(nn.Module):
    """1x1 expand, kxk depthwise, linear 1x1 project (BN after each), residual when the
    shape is kept."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int,
                 expansion_factor: int, bn_momentum: float = 0.1) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"stride should be 1 or 2 instead of {stride}")
        if kernel_size not in (3, 5):
            raise ValueError(f"kernel_size should be 3 or 5 instead of {kernel_size}")
        mid = in_ch * expansion_factor
        self.apply_residual = in_ch == out_ch and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(in_ch, mid, 1, bias=False), nn.BatchNorm2d(mid, momentum=bn_momentum),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, kernel_size, stride, kernel_size // 2, groups=mid, bias=False),
            nn.BatchNorm2d(mid, momentum=bn_momentum), nn.ReLU(inplace=True),
            nn.Conv2d(mid, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch, momentum=bn_momentum))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x) + x if self.apply_residual else self.layers(x)


def _stack(in_ch, out_ch, kernel_size, stride, exp_factor, repeats, bn_momentum):
    if repeats < 1:
        raise ValueError(f"repeats should be >= 1, instead got {repeats}")
    return nn.Sequential(*(
        _InvertedResidual(out_ch if i else in_ch, out_ch, kernel_size, 1 if i else stride,
                          exp_factor, bn_momentum=bn_momentum) for i in range(repeats)))


def _round_to_multiple_of(val: float, divisor: int, round_up_bias: float = 0.9) -> int:
    """Nearest multiple of ``divisor``, rounding up when rounding down loses over 10%."""
    if not 0.0 < round_up_bias < 1.0:
        raise ValueError("round_up_bias should be greater than 0.0 and smaller than 1.0 "
                         f"instead of {round_up_bias}")
    new = max(divisor, int(val + divisor / 2) // divisor * divisor)
    return new if new >= round_up_bias * val else new + divisor


def _get_depths(alpha: float) -> list[int]:
    """Stem and stage widths scaled by ``alpha``."""
    return [_round_to_multiple_of(d * alpha, 8) for d in (32, 16, 24, 40, 80, 96, 192, 320)]


# stages: (kernel, stride, expansion, repeats), widths from _get_depths[2:]
_STAGES = [(3, 2, 3, 3), (5, 2, 3, 3), (5, 2, 6, 3), (3, 1, 6, 2), (5, 2, 6, 4), (3, 1, 6, 1)]


def _stem(d0, d1, first_stage_out):
    """Conv-BN-ReLU, depthwise-BN-ReLU, linear 1x1-BN, and the first stage."""
    bn = partial(nn.BatchNorm2d, momentum=_BN_MOMENTUM)
    return [nn.Conv2d(3, d0, 3, padding=1, stride=2, bias=False), bn(d0), nn.ReLU(inplace=True),
            nn.Conv2d(d0, d0, 3, padding=1, groups=d0, bias=False), bn(d0),
            nn.ReLU(inplace=True), nn.Conv2d(d0, d1, 1, bias=False), bn(d1),
            _stack(d1, first_stage_out, *_STAGES[0], _BN_MOMENTUM)]


class MNASNet(nn.Module):
    """Stem, inverted-residual stages, 1x1 conv to 1280, global mean, dropout + linear."""

    _version = 2   # version 1 checkpoints (an unscaled stem) load through the stem swap below

    def __init__(self, alpha: float, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        if alpha <= 0.0:
            raise ValueError(f"alpha should be greater than 0.0 instead of {alpha}")
        self.alpha = alpha
        self.num_classes = num_classes
        d = _get_depths(alpha)
        layers = _stem(d[0], d[1], d[2])
        layers += [_stack(d[i + 2], d[i + 3], *s, _BN_MOMENTUM)
                   for i, s in enumerate(_STAGES[1:])]
        layers += [nn.Conv2d(d[7], 1280, 1, bias=False),
                   nn.BatchNorm2d(1280, momentum=_BN_MOMENTUM), nn.ReLU(inplace=True)]
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True),
                                        nn.Linear(1280, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.kaiming_uniform_(m.weight, mode="fan_out", nonlinearity="sigmoid")
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.layers(x).mean([2, 3]))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        version = local_metadata.get("version", None)
        if version not in (None, 1, 2):
            raise ValueError(f"version should be set to 1 or 2 instead of {version}")
        if version == 1 and self.alpha != 1.0:
            # version 1 kept the stem at 32/16 channels whatever alpha was
            for i, layer in enumerate(_stem(32, 16, _get_depths(self.alpha)[2])):
                self.layers[i] = layer
            self._version = 1
            warnings.warn("A new version of MNASNet model has been implemented. Your checkpoint "
                          "was saved using the previous version. This checkpoint will load and "
                          "work as before, but you may want to upgrade by training a newer "
                          "model or transfer learning from an updated ImageNet checkpoint.",
                          UserWarning, stacklevel=2)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)


def _mnasnet(alpha, weights, **kwargs) -> MNASNet:
    return load_weights(MNASNet(alpha, **kwargs), weights)


@register_model()
def mnasnet0_5(*, weights=None, progress: bool = True, **kwargs) -> MNASNet:
    """MNASNet 0.5 (2,218,512 parameters); ``progress`` is unused (nothing downloads)."""
    return _mnasnet(0.5, weights, **kwargs)


@register_model()
def mnasnet0_75(*, weights=None, progress: bool = True, **kwargs) -> MNASNet:
    """MNASNet 0.75 (3,170,208 parameters); ``progress`` is unused (nothing downloads)."""
    return _mnasnet(0.75, weights, **kwargs)


@register_model()
def mnasnet1_0(*, weights=None, progress: bool = True, **kwargs) -> MNASNet:
    """MNASNet 1.0 (4,383,312 parameters); ``progress`` is unused (nothing downloads)."""
    return _mnasnet(1.0, weights, **kwargs)


@register_model()
def mnasnet1_3(*, weights=None, progress: bool = True, **kwargs) -> MNASNet:
    """MNASNet 1.3 (6,282,256 parameters); ``progress`` is unused (nothing downloads)."""
    return _mnasnet(1.3, weights, **kwargs)
