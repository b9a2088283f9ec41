"""MaxViT-T (Tu et al.), torchvision's layout and state_dict names, from ember.vision.ops
blocks: each layer is an MBConv, then window (local) and grid (global) attention."""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.ops import Conv2dNormActivation, SqueezeExcitation, StochasticDepth


def _halve(size: tuple[int, int]) -> tuple[int, int]:
    """Output size of a 3x3, stride-2, padding-1 convolution."""
    return ((size[0] - 1) // 2 + 1, (size[1] - 1) // 2 + 1)


def _relative_position_index(height: int, width: int) -> Tensor:
    """``[hw, hw]``: for each (query, key) pair the row of the relative-offset table."""
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    dy = ys[:, None] - ys[None, :] + height - 1
    dx = xs[:, None] - xs[None, :] + width - 1
    return dy * (2 * width - 1) + dx


class MBConv(nn.Module):
    """Pre-norm inverted residual: 1x1 expand, 3x3 depthwise (stride), SE, 1x1 project; the
    shortcut is avg-pooled and projected when the shape changes."""

    def __init__(self, in_channels: int, out_channels: int, expansion_ratio: float,
                 squeeze_ratio: float, stride: int, activation_layer, norm_layer,
                 p_stochastic_dropout: float = 0.0) -> None:
        super().__init__()
        if stride != 1 or in_channels != out_channels:
            proj: list[nn.Module] = [nn.Conv2d(in_channels, out_channels, 1, bias=True)]
            if stride == 2:
                proj.insert(0, nn.AvgPool2d(kernel_size=3, stride=2, padding=1))
            self.proj = nn.Sequential(*proj)
        else:
            self.proj = nn.Identity()
        mid = int(out_channels * expansion_ratio)
        self.stochastic_depth = (StochasticDepth(p_stochastic_dropout, mode="row")
                                 if p_stochastic_dropout else nn.Identity())
        cna = partial(Conv2dNormActivation, activation_layer=activation_layer,
                      norm_layer=norm_layer, inplace=None)
        self.layers = nn.Sequential(OrderedDict(
            pre_norm=norm_layer(in_channels),
            conv_a=cna(in_channels, mid, kernel_size=1, padding=0),
            conv_b=cna(mid, mid, kernel_size=3, stride=stride, padding=1, groups=mid),
            squeeze_excitation=SqueezeExcitation(mid, int(out_channels * squeeze_ratio),
                                                 activation=nn.SiLU),
            conv_c=nn.Conv2d(mid, out_channels, 1, bias=True)))

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x) + self.stochastic_depth(self.layers(x))


class RelativePositionalMultiHeadAttention(nn.Module):
    """Multi-head attention over ``[B, G, P, D]`` (G groups of P tokens) with a learned
    relative position bias; keys are scaled by ``feat_dim ** -0.5``, as in torchvision."""

    def __init__(self, feat_dim: int, head_dim: int, max_seq_len: int) -> None:
        super().__init__()
        if feat_dim % head_dim != 0:
            raise ValueError(f"feat_dim: {feat_dim} must be divisible by head_dim: {head_dim}")
        self.n_heads = feat_dim // head_dim
        self.head_dim = head_dim
        self.size = int(math.sqrt(max_seq_len))
        self.max_seq_len = max_seq_len
        self.to_qkv = nn.Linear(feat_dim, feat_dim * 3)
        self.scale_factor = feat_dim ** -0.5
        self.merge = nn.Linear(feat_dim, feat_dim)
        self.relative_position_bias_table = nn.Parameter(
            torch.empty(((2 * self.size - 1) ** 2, self.n_heads), dtype=torch.float32))
        self.register_buffer("relative_position_index",
                             _relative_position_index(self.size, self.size))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def get_relative_positional_bias(self) -> Tensor:
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        return bias.view(self.max_seq_len, self.max_seq_len, -1).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x: Tensor) -> Tensor:
        b, g, p, d = x.shape
        heads = [t.reshape(b, g, p, self.n_heads, self.head_dim).transpose(2, 3)
                 for t in self.to_qkv(x).chunk(3, dim=-1)]
        q, k, v = heads
        attn = q @ (k * self.scale_factor).transpose(-2, -1)
        attn = F.softmax(attn + self.get_relative_positional_bias(), dim=-1)
        return self.merge((attn @ v).transpose(2, 3).reshape(b, g, p, d))


def _partition(x: Tensor, p: int) -> Tensor:
    """``[B, C, H, W]`` -> ``[B, (H/p)(W/p), p*p, C]``: non-overlapping p x p windows."""
    b, c, h, w = x.shape
    x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, (h // p) * (w // p), p * p, c)


def _departition(x: Tensor, p: int, hp: int, wp: int) -> Tensor:
    """Inverse of :func:`_partition` for an ``hp x wp`` arrangement of windows."""
    b, _, _, c = x.shape
    return x.reshape(b, hp, wp, p, p, c).permute(0, 5, 1, 3, 2, 4).reshape(b, c, hp * p, wp * p)


class PartitionAttentionLayer(nn.Module):
    """Attention + MLP (pre-norm, residual) within ``partition_size``-square windows
    (``"window"``) or across a ``partition_size``-square grid of strided tokens (``"grid"``)."""

    def __init__(self, in_channels: int, head_dim: int, partition_size: int,
                 partition_type: str, grid_size: tuple[int, int], mlp_ratio: int,
                 activation_layer, norm_layer, attention_dropout: float, mlp_dropout: float,
                 p_stochastic_dropout: float) -> None:
        super().__init__()
        if partition_type not in ("grid", "window"):
            raise ValueError("partition_type must be either 'grid' or 'window'")
        self.n_heads = in_channels // head_dim
        self.head_dim = head_dim
        self.n_partitions = grid_size[0] // partition_size
        self.partition_type = partition_type
        self.grid_size = grid_size
        # the window side p: the partition size, or for a grid the number of partitions
        self.p = partition_size if partition_type == "window" else self.n_partitions
        self.g = self.n_partitions if partition_type == "window" else partition_size
        self.attn_layer = nn.Sequential(
            norm_layer(in_channels),
            RelativePositionalMultiHeadAttention(in_channels, head_dim, partition_size ** 2),
            nn.Dropout(attention_dropout))
        self.mlp_layer = nn.Sequential(
            nn.LayerNorm(in_channels), nn.Linear(in_channels, in_channels * mlp_ratio),
            activation_layer(), nn.Linear(in_channels * mlp_ratio, in_channels),
            nn.Dropout(mlp_dropout))
        self.stochastic_dropout = StochasticDepth(p_stochastic_dropout, mode="row")

    def forward(self, x: Tensor) -> Tensor:
        if self.grid_size[0] % self.p or self.grid_size[1] % self.p:
            raise ValueError(f"Grid size must be divisible by partition size. Got grid size of "
                             f"{self.grid_size} and partition size of {self.p}")
        grid = self.partition_type == "grid"
        x = _partition(x, self.p)
        if grid:
            x = x.transpose(-2, -3)
        x = x + self.stochastic_dropout(self.attn_layer(x))
        x = x + self.stochastic_dropout(self.mlp_layer(x))
        if grid:
            x = x.transpose(-2, -3)
        return _departition(x, self.p, self.grid_size[0] // self.p, self.grid_size[1] // self.p)


class MaxVitLayer(nn.Module):
    """MBConv, window attention, grid attention (``layers.MBconv`` / ``window_attention`` /
    ``grid_attention``)."""

    def __init__(self, in_channels: int, out_channels: int, squeeze_ratio: float,
                 expansion_ratio: float, stride: int, norm_layer, activation_layer,
                 head_dim: int, mlp_ratio: int, mlp_dropout: float, attention_dropout: float,
                 p_stochastic_dropout: float, partition_size: int,
                 grid_size: tuple[int, int]) -> None:
        super().__init__()
        attention = partial(
            PartitionAttentionLayer, in_channels=out_channels, head_dim=head_dim,
            partition_size=partition_size, grid_size=grid_size, mlp_ratio=mlp_ratio,
            activation_layer=activation_layer, norm_layer=nn.LayerNorm,
            attention_dropout=attention_dropout, mlp_dropout=mlp_dropout,
            p_stochastic_dropout=p_stochastic_dropout)
        self.layers = nn.Sequential(OrderedDict(
            MBconv=MBConv(in_channels, out_channels, expansion_ratio, squeeze_ratio, stride,
                          activation_layer, norm_layer, p_stochastic_dropout),
            window_attention=attention(partition_type="window"),
            grid_attention=attention(partition_type="grid")))

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


class MaxVitBlock(nn.Module):
    """``n_layers`` MaxViT layers, the first halving the resolution."""

    def __init__(self, in_channels: int, out_channels: int, squeeze_ratio: float,
                 expansion_ratio: float, norm_layer, activation_layer, head_dim: int,
                 mlp_ratio: int, mlp_dropout: float, attention_dropout: float,
                 partition_size: int, input_grid_size: tuple[int, int], n_layers: int,
                 p_stochastic: list[float]) -> None:
        super().__init__()
        if len(p_stochastic) != n_layers:
            raise ValueError(f"p_stochastic must have length n_layers={n_layers}, "
                             f"got p_stochastic={p_stochastic}.")
        self.grid_size = _halve(input_grid_size)
        self.layers = nn.ModuleList(
            MaxVitLayer(out_channels if i else in_channels, out_channels, squeeze_ratio,
                        expansion_ratio, 1 if i else 2, norm_layer, activation_layer, head_dim,
                        mlp_ratio, mlp_dropout, attention_dropout, p, partition_size,
                        self.grid_size)
            for i, p in enumerate(p_stochastic))

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MaxVit(nn.Module):
    """Two-conv stem, four MaxViT blocks, pooling, LayerNorm, tanh MLP head. The input size
    is fixed at construction (every block's grid must divide into partitions)."""

    def __init__(self, input_size: tuple[int, int], stem_channels: int, partition_size: int,
                 block_channels: list[int], block_layers: list[int], head_dim: int,
                 stochastic_depth_prob: float, norm_layer=None, activation_layer=nn.GELU,
                 squeeze_ratio: float = 0.25, expansion_ratio: float = 4, mlp_ratio: int = 4,
                 mlp_dropout: float = 0.0, attention_dropout: float = 0.0,
                 num_classes: int = 1000) -> None:
        super().__init__()
        norm_layer = norm_layer or partial(nn.BatchNorm2d, eps=1e-3, momentum=0.01)
        sizes, size = [], _halve(input_size)
        for _ in block_channels:
            size = _halve(size)
            sizes.append(size)
        for i, s in enumerate(sizes):
            if s[0] % partition_size or s[1] % partition_size:
                raise ValueError(
                    f"Input size {s} of block {i} is not divisible by partition size "
                    f"{partition_size}. Consider changing the partition size or the input size.\n"
                    f"Current configuration yields the following block input sizes: {sizes}.")
        self.stem = nn.Sequential(
            Conv2dNormActivation(3, stem_channels, 3, stride=2, norm_layer=norm_layer,
                                 activation_layer=activation_layer, bias=False, inplace=None),
            Conv2dNormActivation(stem_channels, stem_channels, 3, stride=1, norm_layer=None,
                                 activation_layer=None, bias=True))
        self.partition_size = partition_size
        total = sum(block_layers)
        probs = [stochastic_depth_prob * i / (total - 1) if total > 1 else 0.0
                 for i in range(total)]
        grid = _halve(input_size)
        self.blocks = nn.ModuleList()
        start = 0
        for cin, cout, n in zip([stem_channels, *block_channels[:-1]], block_channels,
                                block_layers):
            self.blocks.append(MaxVitBlock(
                cin, cout, squeeze_ratio, expansion_ratio, norm_layer, activation_layer,
                head_dim, mlp_ratio, mlp_dropout, attention_dropout, partition_size, grid, n,
                probs[start:start + n]))
            grid = self.blocks[-1].grid_size
            start += n
        width = block_channels[-1]
        self.classifier = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(width), nn.Linear(width, width),
            nn.Tanh(), nn.Linear(width, num_classes, bias=False))
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.classifier(x)


@register_model()
def maxvit_t(*, weights=None, progress: bool = True, **kwargs) -> MaxVit:
    """MaxViT-T at 224x224 (30,919,624 parameters); ``progress`` is unused (nothing
    downloads)."""
    model = MaxVit(stem_channels=64, block_channels=[64, 128, 256, 512],
                   block_layers=[2, 2, 5, 2], head_dim=32, stochastic_depth_prob=0.2,
                   partition_size=7, input_size=kwargs.pop("input_size", (224, 224)), **kwargs)
    return load_weights(model, weights)
