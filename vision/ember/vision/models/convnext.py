"""ConvNeXt tiny/small/base/large (Liu et al., 2022), torchvision's layout and state_dict
names, built from ember.vision.ops blocks."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.ops import Conv2dNormActivation, Permute, StochasticDepth


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an ``[N, C, H, W]`` tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias,
                         self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    """7x7 depthwise conv, channels-last LayerNorm, 4x MLP with GELU, layer scale,
    stochastic depth, residual."""

    def __init__(self, dim: int, layer_scale: float, stochastic_depth_prob: float,
                 norm_layer=None) -> None:
        super().__init__()
        norm_layer = norm_layer or partial(nn.LayerNorm, eps=1e-6)
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, 7, padding=3, groups=dim), Permute([0, 2, 3, 1]),
            norm_layer(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim),
            Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), float(layer_scale)))
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stochastic_depth(self.layer_scale * self.block(x)) + x


class CNBlockConfig:
    """One stage: its width, the next stage's width (None for the last) and its depth."""

    def __init__(self, input_channels: int, out_channels: int | None, num_layers: int) -> None:
        self.input_channels = input_channels
        self.out_channels = out_channels
        self.num_layers = num_layers

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(input_channels={self.input_channels}, "
                f"out_channels={self.out_channels}, num_layers={self.num_layers})")


class ConvNeXt(nn.Module):
    """4x4 patchify stem, stages of CNBlocks with LayerNorm + 2x2 conv downsampling between
    them, pooling, LayerNorm + linear head."""

    def __init__(self, block_setting: list[CNBlockConfig], stochastic_depth_prob: float = 0.0,
                 layer_scale: float = 1e-6, num_classes: int = 1000, block=None,
                 norm_layer=None, **kwargs) -> None:
        super().__init__()
        if not block_setting:
            raise ValueError("The block_setting should not be empty")
        if not (isinstance(block_setting, Sequence)
                and all(isinstance(s, CNBlockConfig) for s in block_setting)):
            raise TypeError("The block_setting should be List[CNBlockConfig]")
        block = block or CNBlock
        norm_layer = norm_layer or partial(LayerNorm2d, eps=1e-6)
        layers: list[nn.Module] = [Conv2dNormActivation(
            3, block_setting[0].input_channels, kernel_size=4, stride=4, padding=0,
            norm_layer=norm_layer, activation_layer=None, bias=True)]
        total = sum(c.num_layers for c in block_setting)
        index = 0
        for cnf in block_setting:
            stage = []
            for _ in range(cnf.num_layers):
                stage.append(block(cnf.input_channels, layer_scale,
                                   stochastic_depth_prob * index / (total - 1.0)))
                index += 1
            layers.append(nn.Sequential(*stage))
            if cnf.out_channels is not None:
                layers.append(nn.Sequential(
                    norm_layer(cnf.input_channels),
                    nn.Conv2d(cnf.input_channels, cnf.out_channels, 2, stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last = block_setting[-1]
        width = last.out_channels if last.out_channels is not None else last.input_channels
        self.classifier = nn.Sequential(norm_layer(width), nn.Flatten(1),
                                        nn.Linear(width, num_classes))
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)))


# name: (stage widths, depths, default stochastic depth, parameter count)
_VARIANTS = {
    "tiny": ((96, 192, 384, 768), (3, 3, 9, 3), 0.1, 28_589_128),
    "small": ((96, 192, 384, 768), (3, 3, 27, 3), 0.4, 50_223_688),
    "base": ((128, 256, 512, 1024), (3, 3, 27, 3), 0.5, 88_591_464),
    "large": ((192, 384, 768, 1536), (3, 3, 27, 3), 0.5, 197_767_336),
}


def _make(variant):
    widths, depths, sd, count = _VARIANTS[variant]

    def builder(*, weights=None, progress: bool = True, **kwargs) -> ConvNeXt:
        setting = [CNBlockConfig(w, nxt, d)
                   for w, nxt, d in zip(widths, (*widths[1:], None), depths)]
        model = ConvNeXt(setting, stochastic_depth_prob=kwargs.pop("stochastic_depth_prob", sd),
                         **kwargs)
        return load_weights(model, weights)

    name = f"convnext_{variant}"
    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (f"ConvNeXt-{variant.capitalize()} ({count:,} parameters); ``progress`` "
                       "is unused (nothing downloads).")
    return register_model(name)(builder)


convnext_tiny = _make("tiny")
convnext_small = _make("small")
convnext_base = _make("base")
convnext_large = _make("large")
