"""DenseNet-121/161/169/201 (Huang et al., DenseNet-BC), torchvision's layout and
state_dict names; the original checkpoints' ``norm.1``-style keys load too."""

from __future__ import annotations

import re
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import checkpoint

from ember.vision.models._registry import load_weights, register_model
from ember.vision.models._utils import read_state


class _DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv to ``bn_size * growth`` on the concatenated inputs, then
    BN-ReLU-3x3 conv to ``growth`` new channels."""

    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int,
                 drop_rate: float, memory_efficient: bool = False) -> None:
        super().__init__()
        inner = bn_size * growth_rate
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, inner, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(inner)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(inner, growth_rate, 3, padding=1, bias=False)
        self.drop_rate = float(drop_rate)
        self.memory_efficient = memory_efficient

    def _bottleneck(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.conv1(self.relu1(self.norm1(torch.cat(inputs, 1))))

    def forward(self, inputs) -> torch.Tensor:
        inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        if self.memory_efficient and any(t.requires_grad for t in inputs):
            # recompute the concatenation in backward instead of keeping it
            out = checkpoint.checkpoint(self._bottleneck, *inputs, use_reentrant=False)
        else:
            out = self._bottleneck(*inputs)
        out = self.conv2(self.relu2(self.norm2(out)))
        if self.drop_rate > 0:
            out = F.dropout(out, p=self.drop_rate, training=self.training)
        return out


class _DenseBlock(nn.ModuleDict):
    """``denselayer1..N``, each fed every earlier output; returns all concatenated."""

    _version = 2

    def __init__(self, num_layers: int, num_input_features: int, bn_size: int,
                 growth_rate: int, drop_rate: float, memory_efficient: bool = False) -> None:
        super().__init__()
        for i in range(num_layers):
            self.add_module(f"denselayer{i + 1}", _DenseLayer(
                num_input_features + i * growth_rate, growth_rate, bn_size, drop_rate,
                memory_efficient))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [x]
        for layer in self.values():
            feats.append(layer(feats))
        return torch.cat(feats, 1)


class _Transition(nn.Sequential):
    """BN-ReLU-1x1 conv (halving the channels) and a 2x2 average pool."""

    def __init__(self, num_input_features: int, num_output_features: int) -> None:
        super().__init__(OrderedDict(
            norm=nn.BatchNorm2d(num_input_features), relu=nn.ReLU(inplace=True),
            conv=nn.Conv2d(num_input_features, num_output_features, 1, bias=False),
            pool=nn.AvgPool2d(2, 2)))


class DenseNet(nn.Module):
    """Stem, dense blocks joined by transitions, final BN, ReLU, pooling, linear."""

    def __init__(self, growth_rate: int = 32, block_config=(6, 12, 24, 16),
                 num_init_features: int = 64, bn_size: int = 4, drop_rate: float = 0,
                 num_classes: int = 1000, memory_efficient: bool = False) -> None:
        super().__init__()
        self.features = nn.Sequential(OrderedDict(
            conv0=nn.Conv2d(3, num_init_features, 7, 2, 3, bias=False),
            norm0=nn.BatchNorm2d(num_init_features), relu0=nn.ReLU(inplace=True),
            pool0=nn.MaxPool2d(3, 2, 1)))
        width = num_init_features
        for i, n in enumerate(block_config, 1):
            self.features.add_module(f"denseblock{i}", _DenseBlock(
                n, width, bn_size, growth_rate, drop_rate, memory_efficient))
            width += n * growth_rate
            if i < len(block_config):
                self.features.add_module(f"transition{i}", _Transition(width, width // 2))
                width //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(width))
        self.classifier = nn.Linear(width, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.adaptive_avg_pool2d(F.relu(self.features(x), inplace=True), 1)
        return self.classifier(torch.flatten(out, 1))


_LEGACY_KEY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$")


def _renamed(weights):
    """The original DenseNet checkpoints name ``norm1`` as ``norm.1``: rename on load."""
    if weights is None:
        return None
    return OrderedDict((_LEGACY_KEY.sub(r"\1\2", k), v) for k, v in read_state(weights).items())


def _densenet(growth, blocks, init, weights, **kwargs) -> DenseNet:
    return load_weights(DenseNet(growth, blocks, init, **kwargs), _renamed(weights))


@register_model()
def densenet121(*, weights=None, progress: bool = True, **kwargs) -> DenseNet:
    """DenseNet-121 (7,978,856 parameters); ``progress`` is unused (nothing downloads)."""
    return _densenet(32, (6, 12, 24, 16), 64, weights, **kwargs)


@register_model()
def densenet161(*, weights=None, progress: bool = True, **kwargs) -> DenseNet:
    """DenseNet-161 (28,681,000 parameters); ``progress`` is unused (nothing downloads)."""
    return _densenet(48, (6, 12, 36, 24), 96, weights, **kwargs)


@register_model()
def densenet169(*, weights=None, progress: bool = True, **kwargs) -> DenseNet:
    """DenseNet-169 (14,149,480 parameters); ``progress`` is unused (nothing downloads)."""
    return _densenet(32, (6, 12, 32, 32), 64, weights, **kwargs)


@register_model()
def densenet201(*, weights=None, progress: bool = True, **kwargs) -> DenseNet:
    """DenseNet-201 (20,013,928 parameters); ``progress`` is unused (nothing downloads)."""
    return _densenet(32, (6, 12, 48, 32), 64, weights, **kwargs)
