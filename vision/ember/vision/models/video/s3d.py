"""S3D (Xie et al.), separable 3D Inception: torchvision's layout, builder and Kinetics-400
weights; clips ``[N, 3, T, H, W]`` of at least 14 frames of 224x224."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.models._weights import add_weights_enum
from ember.vision.models.video._kinetics import kinetics_weights
from ember.vision.ops import Conv3dNormActivation

__all__ = ["S3D", "S3D_Weights", "s3d"]


class TemporalSeparableConv(nn.Sequential):
    """A 1xkxk spatial conv-BN-ReLU, then a kx1x1 temporal one."""

    def __init__(self, in_planes: int, out_planes: int, kernel_size: int, stride: int,
                 padding: int, norm_layer) -> None:
        k, s, p = kernel_size, stride, padding
        super().__init__(
            Conv3dNormActivation(in_planes, out_planes, (1, k, k), (1, s, s), (0, p, p),
                                 bias=False, norm_layer=norm_layer),
            Conv3dNormActivation(out_planes, out_planes, (k, 1, 1), (s, 1, 1), (p, 0, 0),
                                 bias=False, norm_layer=norm_layer))


class SepInceptionBlock3D(nn.Module):
    """Four branches (1x1; 1x1 then separable 3x3; the same wider; max-pool then 1x1),
    concatenated on channels."""

    def __init__(self, in_planes: int, b0_out: int, b1_mid: int, b1_out: int, b2_mid: int,
                 b2_out: int, b3_out: int, norm_layer) -> None:
        super().__init__()
        unit = partial(Conv3dNormActivation, kernel_size=1, stride=1, norm_layer=norm_layer)
        sep = partial(TemporalSeparableConv, kernel_size=3, stride=1, padding=1,
                      norm_layer=norm_layer)
        self.branch0 = unit(in_planes, b0_out)
        self.branch1 = nn.Sequential(unit(in_planes, b1_mid), sep(b1_mid, b1_out))
        self.branch2 = nn.Sequential(unit(in_planes, b2_mid), sep(b2_mid, b2_out))
        self.branch3 = nn.Sequential(nn.MaxPool3d((3, 3, 3), stride=1, padding=1),
                                     unit(in_planes, b3_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((self.branch0(x), self.branch1(x), self.branch2(x), self.branch3(x)), 1)


# SepInceptionBlock3D settings (in, b0, b1 mid/out, b2 mid/out, b3), "M<k>" a max-pool
_BLOCKS = [(192, 64, 96, 128, 16, 32, 32), (256, 128, 128, 192, 32, 96, 64), "M3",
           (480, 192, 96, 208, 16, 48, 64), (512, 160, 112, 224, 24, 64, 64),
           (512, 128, 128, 256, 24, 64, 64), (512, 112, 144, 288, 32, 64, 64),
           (528, 256, 160, 320, 32, 128, 128), "M2", (832, 256, 160, 320, 32, 128, 128),
           (832, 384, 192, 384, 48, 128, 128)]


class S3D(nn.Module):
    """Separable 3D stem and Inception blocks, (2, 7, 7) average pool, 1x1x1 conv classifier
    averaged over the remaining positions."""

    def __init__(self, num_classes: int = 400, dropout: float = 0.2, norm_layer=None) -> None:
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        norm = norm_layer or partial(nn.BatchNorm3d, eps=0.001, momentum=0.001)
        spatial_pool = partial(nn.MaxPool3d, (1, 3, 3), (1, 2, 2), (0, 1, 1))
        layers: list[nn.Module] = [
            TemporalSeparableConv(3, 64, 7, 2, 3, norm), spatial_pool(),
            Conv3dNormActivation(64, 64, kernel_size=1, stride=1, norm_layer=norm),
            TemporalSeparableConv(64, 192, 3, 1, 1, norm), spatial_pool()]
        for b in _BLOCKS:
            if b == "M3":
                layers.append(nn.MaxPool3d((3, 3, 3), (2, 2, 2), (1, 1, 1)))
            elif b == "M2":
                layers.append(nn.MaxPool3d((2, 2, 2), (2, 2, 2), (0, 0, 0)))
            else:
                layers.append(SepInceptionBlock3D(*b, norm))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AvgPool3d(kernel_size=(2, 7, 7), stride=1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout),
                                        nn.Conv3d(1024, num_classes, 1, 1, bias=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 5 or x.shape[1] != 3:
            raise ValueError(f"S3D expects clips [N, 3, T, H, W], got {tuple(x.shape)}")
        feats = self.features(x)
        if feats.shape[2] < 2 or min(feats.shape[-2:]) < 7:
            raise ValueError("S3D's final (2, 7, 7) pooling needs clips of about 14 frames of "
                             f"224x224 or more, got {tuple(x.shape)}")
        x = self.classifier(self.avgpool(feats))
        return torch.mean(x, dim=(2, 3, 4))


S3D_Weights = add_weights_enum(
    "s3d", "S3D_Weights",
    [("KINETICS400_V1", kinetics_weights("s3d-d76dad2f.pth", 8320048, crop=224,
                                         resize=(256, 256), min_size=224,
                                         min_temporal_size=14))], "KINETICS400_V1")


@register_model()
def s3d(*, weights=None, progress: bool = True, **kwargs) -> S3D:
    """S3D (8,320,048 parameters, 400 classes)."""
    return load_weights(S3D(**kwargs), weights)
