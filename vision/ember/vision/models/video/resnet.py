"""Video ResNets (Tran et al.): R3D-18, MC3-18 and R(2+1)D-18, torchvision's layout, builders
and Kinetics-400 weights; inputs are clips ``[N, 3, T, H, W]``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.models._weights import add_weights_enum
from ember.vision.models.video._kinetics import kinetics_weights

__all__ = ["VideoResNet", "R3D_18_Weights", "MC3_18_Weights", "R2Plus1D_18_Weights", "r3d_18",
           "mc3_18", "r2plus1d_18"]


class Conv3DSimple(nn.Conv3d):
    """Full 3x3x3 convolution."""

    def __init__(self, in_planes: int, out_planes: int, midplanes: int | None = None,
                 stride: int = 1, padding: int = 1) -> None:
        super().__init__(in_planes, out_planes, (3, 3, 3), stride, padding, bias=False)

    @staticmethod
    def get_downsample_stride(stride: int) -> tuple[int, int, int]:
        return stride, stride, stride


class Conv2Plus1D(nn.Sequential):
    """A 1x3x3 spatial conv to ``midplanes``, BN, ReLU, then a 3x1x1 temporal conv."""

    def __init__(self, in_planes: int, out_planes: int, midplanes: int, stride: int = 1,
                 padding: int = 1) -> None:
        super().__init__(
            nn.Conv3d(in_planes, midplanes, (1, 3, 3), (1, stride, stride), (0, padding, padding),
                      bias=False),
            nn.BatchNorm3d(midplanes), nn.ReLU(inplace=True),
            nn.Conv3d(midplanes, out_planes, (3, 1, 1), (stride, 1, 1), (padding, 0, 0),
                      bias=False))

    @staticmethod
    def get_downsample_stride(stride: int) -> tuple[int, int, int]:
        return stride, stride, stride


class Conv3DNoTemporal(nn.Conv3d):
    """A 1x3x3 convolution (no temporal extent, no temporal stride)."""

    def __init__(self, in_planes: int, out_planes: int, midplanes: int | None = None,
                 stride: int = 1, padding: int = 1) -> None:
        super().__init__(in_planes, out_planes, (1, 3, 3), (1, stride, stride),
                         (0, padding, padding), bias=False)

    @staticmethod
    def get_downsample_stride(stride: int) -> tuple[int, int, int]:
        return 1, stride, stride


def _midplanes(inplanes: int, planes: int) -> int:
    """R(2+1)D's middle width: the parameter count of a full 3x3x3 conv."""
    return (inplanes * planes * 27) // (inplanes * 9 + 3 * planes)


class BasicBlock(nn.Module):
    """Two convolutions (the layer's conv type) with BN and a residual connection."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, conv_builder, stride: int = 1,
                 downsample: nn.Module | None = None) -> None:
        super().__init__()
        mid = _midplanes(inplanes, planes)
        self.conv1 = nn.Sequential(conv_builder(inplanes, planes, mid, stride),
                                   nn.BatchNorm3d(planes), nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(conv_builder(planes, planes, mid), nn.BatchNorm3d(planes))
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv2(self.conv1(x)) + idt)


class Bottleneck(nn.Module):
    """1x1x1 reduce, the layer's conv, 1x1x1 expand (x4), residual."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, conv_builder, stride: int = 1,
                 downsample: nn.Module | None = None) -> None:
        super().__init__()
        mid = _midplanes(inplanes, planes)
        self.conv1 = nn.Sequential(nn.Conv3d(inplanes, planes, 1, bias=False),
                                   nn.BatchNorm3d(planes), nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(conv_builder(planes, planes, mid, stride),
                                   nn.BatchNorm3d(planes), nn.ReLU(inplace=True))
        self.conv3 = nn.Sequential(nn.Conv3d(planes, planes * 4, 1, bias=False),
                                   nn.BatchNorm3d(planes * 4))
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv3(self.conv2(self.conv1(x))) + idt)


class BasicStem(nn.Sequential):
    """3x7x7 conv (spatial stride 2), BN, ReLU."""

    def __init__(self) -> None:
        super().__init__(nn.Conv3d(3, 64, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False),
                         nn.BatchNorm3d(64), nn.ReLU(inplace=True))


class R2Plus1dStem(nn.Sequential):
    """The stem factorised: 1x7x7 conv to 45 channels, BN, ReLU, 3x1x1 conv, BN, ReLU."""

    def __init__(self) -> None:
        super().__init__(nn.Conv3d(3, 45, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False),
                         nn.BatchNorm3d(45), nn.ReLU(inplace=True),
                         nn.Conv3d(45, 64, (3, 1, 1), (1, 1, 1), (1, 0, 0), bias=False),
                         nn.BatchNorm3d(64), nn.ReLU(inplace=True))


class VideoResNet(nn.Module):
    """Stem, four residual stages (one conv type each), global pooling, linear classifier."""

    def __init__(self, block, conv_makers: Sequence, layers: list[int], stem,
                 num_classes: int = 400, zero_init_residual: bool = False) -> None:
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        self.inplanes = 64
        self.stem = stem()
        self.layer1 = self._make_layer(block, conv_makers[0], 64, layers[0], 1)
        self.layer2 = self._make_layer(block, conv_makers[1], 128, layers[1], 2)
        self.layer3 = self._make_layer(block, conv_makers[2], 256, layers[2], 2)
        self.layer4 = self._make_layer(block, conv_makers[3], 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm3d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.zeros_(m.conv3[1].weight)

    def _make_layer(self, block, conv_builder, planes: int, blocks: int,
                    stride: int = 1) -> nn.Sequential:
        down = None
        out = planes * block.expansion
        if stride != 1 or self.inplanes != out:
            down = nn.Sequential(nn.Conv3d(self.inplanes, out, 1,
                                           conv_builder.get_downsample_stride(stride),
                                           bias=False), nn.BatchNorm3d(out))
        mods = [block(self.inplanes, planes, conv_builder, stride, down)]
        self.inplanes = out
        mods += [block(out, planes, conv_builder) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 5 or x.shape[1] != 3:
            raise ValueError(f"VideoResNet expects clips [N, 3, T, H, W], got {tuple(x.shape)}")
        x = self.stem(x)
        for layer in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = layer(x)
        return self.fc(self.avgpool(x).flatten(1))


R3D_18_Weights = add_weights_enum(
    "r3d_18", "R3D_18_Weights",
    [("KINETICS400_V1", kinetics_weights("r3d_18-b3b3357e.pth", 33371472))], "KINETICS400_V1")
MC3_18_Weights = add_weights_enum(
    "mc3_18", "MC3_18_Weights",
    [("KINETICS400_V1", kinetics_weights("mc3_18-a90a0ba3.pth", 11695440))], "KINETICS400_V1")
R2Plus1D_18_Weights = add_weights_enum(
    "r2plus1d_18", "R2Plus1D_18_Weights",
    [("KINETICS400_V1", kinetics_weights("r2plus1d_18-91a641e6.pth", 31505325))],
    "KINETICS400_V1")


@register_model()
def r3d_18(*, weights=None, progress: bool = True, **kwargs) -> VideoResNet:
    """R3D-18: 3x3x3 convolutions throughout (33,371,472 parameters, 400 classes)."""
    return load_weights(VideoResNet(BasicBlock, [Conv3DSimple] * 4, [2, 2, 2, 2], BasicStem,
                                    **kwargs), weights)


@register_model()
def mc3_18(*, weights=None, progress: bool = True, **kwargs) -> VideoResNet:
    """MC3-18: 3D convolutions in the first stage, 2D (1x3x3) after (11,695,440 parameters)."""
    return load_weights(VideoResNet(BasicBlock, [Conv3DSimple] + [Conv3DNoTemporal] * 3,
                                    [2, 2, 2, 2], BasicStem, **kwargs), weights)


@register_model()
def r2plus1d_18(*, weights=None, progress: bool = True, **kwargs) -> VideoResNet:
    """R(2+1)D-18: every 3D conv factorised into spatial and temporal (31,505,325 parameters)."""
    return load_weights(VideoResNet(BasicBlock, [Conv2Plus1D] * 4, [2, 2, 2, 2], R2Plus1dStem,
                                    **kwargs), weights)
