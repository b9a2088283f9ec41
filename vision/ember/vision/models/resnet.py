"""ResNet-18..152, ResNeXt and Wide ResNet (He et al., Xie et al., Zagoruyko and Komodakis):
torchvision's layout and state_dict names (ResNet v1.5: the stride sits on the 3x3 conv)."""

from __future__ import annotations

import torch
from torch import nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.models._utils import fixed


def _conv3x3(cin, cout, stride=1, groups=1, dilation=1):
    return nn.Conv2d(cin, cout, 3, stride, dilation, dilation=dilation, groups=groups,
                     bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection."""

    expansion = 1

    def __init__(self, cin, width, stride=1, downsample=None, norm_layer=nn.BatchNorm2d,
                 groups=1, base_width=64, dilation=1):
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
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
    """1x1 reduce, 3x3 (grouped for ResNeXt, carrying the stride), 1x1 expand, residual."""

    expansion = 4

    def __init__(self, cin, planes, stride=1, downsample=None, norm_layer=nn.BatchNorm2d,
                 groups=1, base_width=64, dilation=1):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups   # inner width: ResNeXt / Wide
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = norm_layer(width)
        self.conv2 = _conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
        self.bn3 = norm_layer(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + idt)


class ResNet(nn.Module):
    """Stem, four stages of residual blocks, global pooling, linear classifier."""

    def __init__(self, block, layers, num_classes: int = 1000, norm_layer=None,
                 zero_init_residual: bool = False, groups: int = 1, width_per_group: int = 64,
                 replace_stride_with_dilation=None) -> None:
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        dilate = replace_stride_with_dilation or [False, False, False]
        if len(dilate) != 3:
            raise ValueError("replace_stride_with_dilation should be None or a 3-element "
                             f"tuple, got {replace_stride_with_dilation}")
        self._norm = norm_layer or nn.BatchNorm2d
        self.groups, self.base_width = groups, width_per_group
        self.inplanes, self.dilation = 64, 1
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = self._norm(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._stage(block, 64, layers[0], 1)
        self.layer2 = self._stage(block, 128, layers[1], 2, dilate[0])
        self.layer3 = self._stage(block, 256, layers[2], 2, dilate[1])
        self.layer4 = self._stage(block, 512, layers[3], 2, dilate[2])
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                last = getattr(m, "bn3", None) if isinstance(m, Bottleneck) else \
                    getattr(m, "bn2", None) if isinstance(m, BasicBlock) else None
                if last is not None and getattr(last, "weight", None) is not None:
                    nn.init.zeros_(last.weight)

    def _stage(self, block, planes, blocks, stride, dilate=False):
        first_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        down = None
        out = planes * block.expansion
        if stride != 1 or self.inplanes != out:
            down = nn.Sequential(nn.Conv2d(self.inplanes, out, 1, stride, bias=False),
                                 self._norm(out))
        shape = dict(norm_layer=self._norm, groups=self.groups, base_width=self.base_width)
        mods = [block(self.inplanes, planes, stride, down, dilation=first_dilation, **shape)]
        self.inplanes = out
        mods += [block(out, planes, dilation=self.dilation, **shape) for _ in range(1, blocks)]
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


_BUILDERS = {  # name: (block, blocks per stage, fixed keywords, parameter count at 1000 classes)
    "resnet18": (BasicBlock, [2, 2, 2, 2], {}, 11_689_512),
    "resnet34": (BasicBlock, [3, 4, 6, 3], {}, 21_797_672),
    "resnet50": (Bottleneck, [3, 4, 6, 3], {}, 25_557_032),
    "resnet101": (Bottleneck, [3, 4, 23, 3], {}, 44_549_160),
    "resnet152": (Bottleneck, [3, 8, 36, 3], {}, 60_192_808),
    "resnext50_32x4d": (Bottleneck, [3, 4, 6, 3], {"groups": 32, "width_per_group": 4},
                        25_028_904),
    "resnext101_32x8d": (Bottleneck, [3, 4, 23, 3], {"groups": 32, "width_per_group": 8},
                         88_791_336),
    "resnext101_64x4d": (Bottleneck, [3, 4, 23, 3], {"groups": 64, "width_per_group": 4},
                         83_455_272),
    "wide_resnet50_2": (Bottleneck, [3, 4, 6, 3], {"width_per_group": 128}, 68_883_240),
    "wide_resnet101_2": (Bottleneck, [3, 4, 23, 3], {"width_per_group": 128}, 126_886_696),
}


def _make_builder(name):
    block, layers, settings, count = _BUILDERS[name]

    def builder(*, weights=None, progress: bool = True, **kw) -> ResNet:
        return _resnet(block, layers, weights, **fixed(kw, **settings))

    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = f"{name} ({count:,} parameters); ``progress`` is unused (no downloads)."
    return register_model(name)(builder)


resnet18 = _make_builder("resnet18")
resnet34 = _make_builder("resnet34")
resnet50 = _make_builder("resnet50")
resnet101 = _make_builder("resnet101")
resnet152 = _make_builder("resnet152")
resnext50_32x4d = _make_builder("resnext50_32x4d")
resnext101_32x8d = _make_builder("resnext101_32x8d")
resnext101_64x4d = _make_builder("resnext101_64x4d")
wide_resnet50_2 = _make_builder("wide_resnet50_2")
wide_resnet101_2 = _make_builder("wide_resnet101_2")
