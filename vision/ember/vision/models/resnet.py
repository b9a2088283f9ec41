"""ResNet-18/34/50 (He et al.), torchvision's layout and state_dict names (ResNet v1.5)."""

from __future__ import annotations

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model


def _conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride, 1, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection."""

    expansion = 1

    def __init__(self, cin, width, stride=1, downsample=None, norm_layer=nn.BatchNorm2d):
        super().__init__()
        self.conv1 = _conv3x3(cin, width, stride)
        self.bn1 = norm_layer(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = norm_layer(width)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + idt)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand, with a residual connection."""

    expansion = 4

    def __init__(self, cin, width, stride=1, downsample=None, norm_layer=nn.BatchNorm2d):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = norm_layer(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = norm_layer(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = norm_layer(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + idt)


class ResNet(nn.Module):
    """Stem, four stages of residual blocks, global pooling, linear classifier."""

    def __init__(self, block, layers, num_classes: int = 1000, norm_layer=nn.BatchNorm2d,
                 zero_init_residual: bool = False) -> None:
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        self._norm = norm_layer
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = norm_layer(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._stage(block, 64, layers[0], 1)
        self.layer2 = self._stage(block, 128, layers[1], 2)
        self.layer3 = self._stage(block, 256, layers[2], 2)
        self.layer4 = self._stage(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                last = getattr(m, "bn3", None) if isinstance(m, Bottleneck) else \
                    getattr(m, "bn2", None) if isinstance(m, BasicBlock) else None
                if last is not None:
                    nn.init.zeros_(last.weight)

    def _stage(self, block, width, blocks, stride):
        down = None
        if stride != 1 or self.inplanes != width * block.expansion:
            down = nn.Sequential(nn.Conv2d(self.inplanes, width * block.expansion, 1, stride,
                                           bias=False), self._norm(width * block.expansion))
        mods = [block(self.inplanes, width, stride, down, self._norm)]
        self.inplanes = width * block.expansion
        mods += [block(self.inplanes, width, norm_layer=self._norm) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Outputs of layer1..layer4 (strides 4, 8, 16, 32)."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        feats = []
        for layer in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = layer(x)
            feats.append(x)
        return feats

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"ResNet expects images [N, 3, H, W], got {tuple(x.shape)}")
        x = self.forward_features(x)[-1]
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _resnet(block, layers, weights=None, **kw):
    return load_weights(ResNet(block, layers, **kw), weights)


@register_model()
def resnet18(*, weights=None, **kw) -> ResNet:
    """ResNet-18 (11.7M parameters)."""
    return _resnet(BasicBlock, [2, 2, 2, 2], weights, **kw)


@register_model()
def resnet34(*, weights=None, **kw) -> ResNet:
    """ResNet-34 (21.8M parameters)."""
    return _resnet(BasicBlock, [3, 4, 6, 3], weights, **kw)


@register_model()
def resnet50(*, weights=None, **kw) -> ResNet:
    """ResNet-50 v1.5 (25,557,032 parameters)."""
    return _resnet(Bottleneck, [3, 4, 6, 3], weights, **kw)
