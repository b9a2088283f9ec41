"""Inception v3 (Szegedy et al., 2016), torchvision's layout and state_dict names; training
mode returns the auxiliary logits too when ``aux_logits``."""

from __future__ import annotations

from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn

from ember.vision.models._registry import register_model
from ember.vision.models._utils import load_with_aux
from ember.vision.models.googlenet import BasicConv2d, transform_input

InceptionOutputs = namedtuple("InceptionOutputs", ["logits", "aux_logits"])


def _chain(x, *convs):
    for conv in convs:
        x = conv(x)
    return x


class InceptionA(nn.Module):
    """35x35 module: 1x1; 1x1 -> 5x5; 1x1 -> 3x3 -> 3x3; avg pool -> 1x1."""

    def __init__(self, in_channels: int, pool_features: int, conv_block=None) -> None:
        super().__init__()
        cb = conv_block or BasicConv2d
        self.branch1x1 = cb(in_channels, 64, kernel_size=1)
        self.branch5x5_1 = cb(in_channels, 48, kernel_size=1)
        self.branch5x5_2 = cb(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = cb(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = cb(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = cb(96, 96, kernel_size=3, padding=1)
        self.branch_pool = cb(in_channels, pool_features, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([
            self.branch1x1(x), _chain(x, self.branch5x5_1, self.branch5x5_2),
            _chain(x, self.branch3x3dbl_1, self.branch3x3dbl_2, self.branch3x3dbl_3),
            self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))], 1)


class InceptionB(nn.Module):
    """Grid reduction 35 -> 17: strided 3x3; 1x1 -> 3x3 -> strided 3x3; max pool."""

    def __init__(self, in_channels: int, conv_block=None) -> None:
        super().__init__()
        cb = conv_block or BasicConv2d
        self.branch3x3 = cb(in_channels, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = cb(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = cb(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = cb(96, 96, kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([
            self.branch3x3(x),
            _chain(x, self.branch3x3dbl_1, self.branch3x3dbl_2, self.branch3x3dbl_3),
            F.max_pool2d(x, kernel_size=3, stride=2)], 1)


def _row(cb, cin, cout):
    return cb(cin, cout, kernel_size=(1, 7), padding=(0, 3))


def _col(cb, cin, cout):
    return cb(cin, cout, kernel_size=(7, 1), padding=(3, 0))


class InceptionC(nn.Module):
    """17x17 module with factorised 7x7 convolutions (1x7 and 7x1)."""

    def __init__(self, in_channels: int, channels_7x7: int, conv_block=None) -> None:
        super().__init__()
        cb = conv_block or BasicConv2d
        c7 = channels_7x7
        self.branch1x1 = cb(in_channels, 192, kernel_size=1)
        self.branch7x7_1 = cb(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = _row(cb, c7, c7)
        self.branch7x7_3 = _col(cb, c7, 192)
        self.branch7x7dbl_1 = cb(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = _col(cb, c7, c7)
        self.branch7x7dbl_3 = _row(cb, c7, c7)
        self.branch7x7dbl_4 = _col(cb, c7, c7)
        self.branch7x7dbl_5 = _row(cb, c7, 192)
        self.branch_pool = cb(in_channels, 192, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([
            self.branch1x1(x),
            _chain(x, self.branch7x7_1, self.branch7x7_2, self.branch7x7_3),
            _chain(x, self.branch7x7dbl_1, self.branch7x7dbl_2, self.branch7x7dbl_3,
                   self.branch7x7dbl_4, self.branch7x7dbl_5),
            self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))], 1)


class InceptionD(nn.Module):
    """Grid reduction 17 -> 8: 1x1 -> strided 3x3; 1x1 -> 1x7 -> 7x1 -> strided 3x3; max pool."""

    def __init__(self, in_channels: int, conv_block=None) -> None:
        super().__init__()
        cb = conv_block or BasicConv2d
        self.branch3x3_1 = cb(in_channels, 192, kernel_size=1)
        self.branch3x3_2 = cb(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = cb(in_channels, 192, kernel_size=1)
        self.branch7x7x3_2 = _row(cb, 192, 192)
        self.branch7x7x3_3 = _col(cb, 192, 192)
        self.branch7x7x3_4 = cb(192, 192, kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([
            _chain(x, self.branch3x3_1, self.branch3x3_2),
            _chain(x, self.branch7x7x3_1, self.branch7x7x3_2, self.branch7x7x3_3,
                   self.branch7x7x3_4),
            F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionE(nn.Module):
    """8x8 module whose 3x3 branches end in parallel 1x3 and 3x1 convolutions."""

    def __init__(self, in_channels: int, conv_block=None) -> None:
        super().__init__()
        cb = conv_block or BasicConv2d
        self.branch1x1 = cb(in_channels, 320, kernel_size=1)
        self.branch3x3_1 = cb(in_channels, 384, kernel_size=1)
        self.branch3x3_2a = cb(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = cb(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = cb(in_channels, 448, kernel_size=1)
        self.branch3x3dbl_2 = cb(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = cb(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = cb(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = cb(in_channels, 192, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.branch3x3_1(x)
        b = _chain(x, self.branch3x3dbl_1, self.branch3x3dbl_2)
        return torch.cat([
            self.branch1x1(x),
            torch.cat([self.branch3x3_2a(a), self.branch3x3_2b(a)], 1),
            torch.cat([self.branch3x3dbl_3a(b), self.branch3x3dbl_3b(b)], 1),
            self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))], 1)


class InceptionAux(nn.Module):
    """Auxiliary classifier on the 17x17 grid: 5x5/3 avg pool, 1x1, 5x5, pooling, linear."""

    def __init__(self, in_channels: int, num_classes: int, conv_block=None) -> None:
        super().__init__()
        cb = conv_block or BasicConv2d
        self.conv0 = cb(in_channels, 128, kernel_size=1)
        self.conv1 = cb(128, 768, kernel_size=5)
        self.conv1.stddev = 0.01   # read by the init below, as in torchvision
        self.fc = nn.Linear(768, num_classes)
        self.fc.stddev = 0.001

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(self.conv0(F.avg_pool2d(x, kernel_size=5, stride=3)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


class Inception3(nn.Module):
    """Stem convs, Inception A/B/C/D/E modules (``Mixed_*``), optional auxiliary head,
    pooling, dropout, linear. Inputs of at least 75x75."""

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True,
                 transform_input: bool = False, inception_blocks=None,
                 init_weights: bool | None = None, dropout: float = 0.5) -> None:
        super().__init__()
        blocks = inception_blocks or [BasicConv2d, InceptionA, InceptionB, InceptionC,
                                      InceptionD, InceptionE, InceptionAux]
        if len(blocks) != 7:
            raise ValueError(f"length of inception_blocks should be 7 instead of {len(blocks)}")
        conv, a, b, c, d, e, aux = blocks
        self.aux_logits = aux_logits
        self.transform_input = transform_input
        self.Conv2d_1a_3x3 = conv(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = conv(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = conv(32, 64, kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Conv2d_3b_1x1 = conv(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = conv(80, 192, kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Mixed_5b = a(192, pool_features=32)
        self.Mixed_5c = a(256, pool_features=64)
        self.Mixed_5d = a(288, pool_features=64)
        self.Mixed_6a = b(288)
        self.Mixed_6b = c(768, channels_7x7=128)
        self.Mixed_6c = c(768, channels_7x7=160)
        self.Mixed_6d = c(768, channels_7x7=160)
        self.Mixed_6e = c(768, channels_7x7=192)
        self.AuxLogits = aux(768, num_classes) if aux_logits else None
        self.Mixed_7a = d(768)
        self.Mixed_7b = e(1280)
        self.Mixed_7c = e(2048)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(2048, num_classes)
        if init_weights is None or init_weights:
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    std = float(getattr(m, "stddev", 0.1))
                    nn.init.trunc_normal_(m.weight, mean=0.0, std=std, a=-2, b=2)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

    def drop_aux(self) -> None:
        """Remove the auxiliary head (pretrained checkpoints carry an untrained one)."""
        self.aux_logits = False
        self.AuxLogits = None

    def forward(self, x: torch.Tensor):
        if self.transform_input:
            x = transform_input(x)
        x = self.maxpool1(_chain(x, self.Conv2d_1a_3x3, self.Conv2d_2a_3x3, self.Conv2d_2b_3x3))
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)))
        x = _chain(x, self.Mixed_5b, self.Mixed_5c, self.Mixed_5d, self.Mixed_6a, self.Mixed_6b,
                   self.Mixed_6c, self.Mixed_6d, self.Mixed_6e)
        train_aux = self.training and self.aux_logits
        aux = self.AuxLogits(x) if train_aux and self.AuxLogits is not None else None
        x = _chain(x, self.Mixed_7a, self.Mixed_7b, self.Mixed_7c, self.avgpool, self.dropout)
        x = self.fc(torch.flatten(x, 1))
        return InceptionOutputs(x, aux) if train_aux else x


@register_model()
def inception_v3(*, weights=None, progress: bool = True, **kwargs) -> Inception3:
    """Inception v3 (27,161,264 parameters, the auxiliary head included); ``progress`` is
    unused (nothing downloads)."""
    return load_with_aux(Inception3, weights, kwargs, "AuxLogits.", True)
