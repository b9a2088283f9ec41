"""GoogLeNet (Inception v1, Szegedy et al.) with BatchNorm, torchvision's layout and
state_dict names; training mode returns the auxiliary logits too when ``aux_logits``."""

from __future__ import annotations

from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn

from ember.vision.models._registry import register_model
from ember.vision.models._utils import load_with_aux

GoogLeNetOutputs = namedtuple("GoogLeNetOutputs", ["logits", "aux_logits2", "aux_logits1"])


class BasicConv2d(nn.Module):
    """Conv (no bias), BatchNorm (eps 1e-3), ReLU."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    """Four branches concatenated: 1x1; 1x1 -> 3x3; 1x1 -> 3x3 (torchvision's "5x5");
    3x3 max pool -> 1x1."""

    def __init__(self, in_channels: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int,
                 ch5x5: int, pool_proj: int, conv_block=None) -> None:
        super().__init__()
        cb = conv_block or BasicConv2d
        self.branch1 = cb(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(cb(in_channels, ch3x3red, kernel_size=1),
                                     cb(ch3x3red, ch3x3, kernel_size=3, padding=1))
        self.branch3 = nn.Sequential(cb(in_channels, ch5x5red, kernel_size=1),
                                     cb(ch5x5red, ch5x5, kernel_size=3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True),
                                     cb(in_channels, pool_proj, kernel_size=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class InceptionAux(nn.Module):
    """Auxiliary classifier: pool to 4x4, 1x1 conv to 128, two linear layers."""

    def __init__(self, in_channels: int, num_classes: int, conv_block=None,
                 dropout: float = 0.7) -> None:
        super().__init__()
        self.conv = (conv_block or BasicConv2d)(in_channels, 128, kernel_size=1)
        self.fc1 = nn.Linear(2048, 1024)
        self.fc2 = nn.Linear(1024, num_classes)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.conv(F.adaptive_avg_pool2d(x, (4, 4))), 1)
        return self.fc2(self.dropout(F.relu(self.fc1(x), inplace=True)))


def transform_input(x: torch.Tensor) -> torch.Tensor:
    """ImageNet-normalised input -> the (x - 0.5) / 0.5 scaling the original weights expect."""
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    scale = torch.tensor([s / 0.5 for s in std], dtype=x.dtype, device=x.device)
    shift = torch.tensor([(m - 0.5) / 0.5 for m in mean], dtype=x.dtype, device=x.device)
    return x * scale.view(1, 3, 1, 1) + shift.view(1, 3, 1, 1)


# (name, in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool projection) from the paper
_INCEPTIONS = [("3a", 192, 64, 96, 128, 16, 32, 32), ("3b", 256, 128, 128, 192, 32, 96, 64),
               ("4a", 480, 192, 96, 208, 16, 48, 64), ("4b", 512, 160, 112, 224, 24, 64, 64),
               ("4c", 512, 128, 128, 256, 24, 64, 64), ("4d", 512, 112, 144, 288, 32, 64, 64),
               ("4e", 528, 256, 160, 320, 32, 128, 128), ("5a", 832, 256, 160, 320, 32, 128, 128),
               ("5b", 832, 384, 192, 384, 48, 128, 128)]


class GoogLeNet(nn.Module):
    """Stem convs and pools, nine Inception modules, optional auxiliary heads after 4a and 4d,
    pooling, dropout, linear."""

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True,
                 transform_input: bool = False, init_weights: bool | None = None,
                 blocks=None, dropout: float = 0.2, dropout_aux: float = 0.7) -> None:
        super().__init__()
        blocks = blocks or [BasicConv2d, Inception, InceptionAux]
        if len(blocks) != 3:
            raise ValueError(f"blocks length should be 3 instead of {len(blocks)}")
        conv, inception, aux = blocks
        self.aux_logits = aux_logits
        self.transform_input = transform_input
        self.conv1 = conv(3, 64, kernel_size=7, stride=2, padding=3)
        self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = conv(64, 64, kernel_size=1)
        self.conv3 = conv(64, 192, kernel_size=3, padding=1)
        self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        for name, *widths in _INCEPTIONS:
            setattr(self, f"inception{name}", inception(*widths))
            if name == "3b":
                self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
            elif name == "4e":
                self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)
        self.aux1 = aux(512, num_classes, dropout=dropout_aux) if aux_logits else None
        self.aux2 = aux(528, num_classes, dropout=dropout_aux) if aux_logits else None
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(1024, num_classes)
        if init_weights is None or init_weights:
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.trunc_normal_(m.weight, mean=0.0, std=0.01, a=-2, b=2)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

    def drop_aux(self) -> None:
        """Remove the auxiliary heads (pretrained checkpoints carry untrained ones)."""
        self.aux_logits = False
        self.aux1 = self.aux2 = None

    def forward(self, x: torch.Tensor):
        if self.transform_input:
            x = transform_input(x)
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.inception4a(x)
        train_aux = self.training and self.aux_logits
        aux1 = self.aux1(x) if train_aux and self.aux1 is not None else None
        x = self.inception4d(self.inception4c(self.inception4b(x)))
        aux2 = self.aux2(x) if train_aux and self.aux2 is not None else None
        x = self.maxpool4(self.inception4e(x))
        x = self.inception5b(self.inception5a(x))
        x = self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))
        return GoogLeNetOutputs(x, aux2, aux1) if train_aux else x


@register_model()
def googlenet(*, weights=None, progress: bool = True, **kwargs) -> GoogLeNet:
    """GoogLeNet (6,624,904 parameters without the auxiliary heads, as published; 13,004,888
    with them, the default without weights); ``progress`` is unused (nothing downloads)."""
    return load_with_aux(GoogLeNet, weights, kwargs, "aux1.", False)
