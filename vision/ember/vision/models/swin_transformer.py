"""Swin Transformer V1 and V2 tiny/small/base (Liu et al.), torchvision's layout and
state_dict names, from ember.vision.ops blocks; channels-last ``[B, H, W, C]`` inside."""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.vision.models._registry import load_weights, register_model
from ember.vision.ops import MLP, Permute, StochasticDepth


def _merge_2x2(x: Tensor) -> Tensor:
    """``[..., H, W, C]`` -> ``[..., ceil(H/2), ceil(W/2), 4C]``: each 2x2 patch's pixels
    concatenated in (0,0), (1,0), (0,1), (1,1) order, odd sizes zero-padded."""
    h, w = x.shape[-3], x.shape[-2]
    x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
    return torch.cat([x[..., i::2, j::2, :] for j in (0, 1) for i in (0, 1)], -1)


class PatchMerging(nn.Module):
    """2x2 patch merge, LayerNorm over 4C, linear to 2C (V1)."""

    def __init__(self, dim: int, norm_layer=nn.LayerNorm) -> None:
        super().__init__()
        self.dim = dim
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = norm_layer(4 * dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.reduction(self.norm(_merge_2x2(x)))


class PatchMergingV2(nn.Module):
    """2x2 patch merge, linear to 2C, then LayerNorm (V2)."""

    def __init__(self, dim: int, norm_layer=nn.LayerNorm) -> None:
        super().__init__()
        self.dim = dim
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = norm_layer(2 * dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.reduction(_merge_2x2(x)))


def _relative_index(wh: int, ww: int) -> Tensor:
    """``[wh*ww * wh*ww]``: for each (query, key) pair in a window, the row of the
    ``(2wh-1)(2ww-1)`` relative-offset table."""
    ys, xs = torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    dy = ys[:, None] - ys[None, :] + wh - 1
    dx = xs[:, None] - xs[None, :] + ww - 1
    return (dy * (2 * ww - 1) + dx).flatten()


def _shift_mask(pad_h: int, pad_w: int, window, shift, like: Tensor) -> Tensor:
    """``[nW, L, L]`` additive mask: -100 between tokens that the cyclic shift brought from
    different regions of the image into one window, else 0."""
    def region(n, ws, s):
        idx = torch.arange(n, device=like.device)
        if s == 0:
            return torch.zeros_like(idx)
        return (idx >= n - ws).long() + (idx >= n - s).long()

    ids = region(pad_h, window[0], shift[0])[:, None] * 3 + region(pad_w, window[1], shift[1])
    ids = ids.view(pad_h // window[0], window[0], pad_w // window[1], window[1])
    ids = ids.permute(0, 2, 1, 3).reshape(-1, window[0] * window[1])
    same = ids[:, None, :] == ids[:, :, None]
    return torch.where(same, 0.0, -100.0).to(like.dtype)


def shifted_window_attention(input: Tensor, qkv_weight: Tensor, proj_weight: Tensor,
                             relative_position_bias: Tensor, window_size: list[int],
                             num_heads: int, shift_size: list[int],
                             attention_dropout: float = 0.0, dropout: float = 0.0,
                             qkv_bias: Tensor | None = None, proj_bias: Tensor | None = None,
                             logit_scale: Tensor | None = None, training: bool = True) -> Tensor:
    """Window self-attention on ``[B, H, W, C]`` with a relative position bias, cyclically
    shifted (masked across the wrap); scaled cosine attention given ``logit_scale`` (V2)."""
    b, h, w, c = input.shape
    wh, ww = window_size
    x = F.pad(input, (0, 0, 0, (ww - w % ww) % ww, 0, (wh - h % wh) % wh))
    ph, pw = x.shape[1], x.shape[2]
    # a window covering a whole (padded) side has nothing to shift along it
    shift = [0 if wh >= ph else shift_size[0], 0 if ww >= pw else shift_size[1]]
    shifted = sum(shift) > 0
    if shifted:
        x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
    nwin = (ph // wh) * (pw // ww)
    x = x.view(b, ph // wh, wh, pw // ww, ww, c).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(b * nwin, wh * ww, c)
    n, length = x.shape[0], x.shape[1]
    if logit_scale is not None and qkv_bias is not None:
        # V2 has no key bias: the middle third of the qkv bias is ignored
        keep = torch.ones_like(qkv_bias)
        keep[c:2 * c] = 0
        qkv_bias = qkv_bias * keep
    q, k, v = F.linear(x, qkv_weight, qkv_bias).view(n, length, 3, num_heads, c // num_heads) \
        .permute(2, 0, 3, 1, 4)
    if logit_scale is not None:
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(logit_scale, max=math.log(100.0)).exp()
    else:
        attn = (q * (c // num_heads) ** -0.5) @ k.transpose(-2, -1)
    attn = attn + relative_position_bias
    if shifted:
        mask = _shift_mask(ph, pw, window_size, shift, x)
        attn = attn.view(b, nwin, num_heads, length, length) + mask[None, :, None]
        attn = attn.view(n, num_heads, length, length)
    attn = F.dropout(F.softmax(attn, dim=-1), p=attention_dropout, training=training)
    x = (attn @ v).transpose(1, 2).reshape(n, length, c)
    x = F.dropout(F.linear(x, proj_weight, proj_bias), p=dropout, training=training)
    x = x.view(b, ph // wh, pw // ww, wh, ww, c).permute(0, 1, 3, 2, 4, 5).reshape(b, ph, pw, c)
    if shifted:
        x = torch.roll(x, shifts=(shift[0], shift[1]), dims=(1, 2))
    return x[:, :h, :w, :].contiguous()


class ShiftedWindowAttention(nn.Module):
    """:func:`shifted_window_attention` with a learned ``(2wh-1)(2ww-1) x heads`` bias table."""

    def __init__(self, dim: int, window_size: list[int], shift_size: list[int], num_heads: int,
                 qkv_bias: bool = True, proj_bias: bool = True, attention_dropout: float = 0.0,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if len(window_size) != 2 or len(shift_size) != 2:
            raise ValueError("window_size and shift_size must be of length 2")
        self.window_size, self.shift_size, self.num_heads = window_size, shift_size, num_heads
        self.attention_dropout, self.dropout = attention_dropout, dropout
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.define_relative_position_bias_table()
        self.define_relative_position_index()

    def define_relative_position_bias_table(self) -> None:
        wh, ww = self.window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wh - 1) * (2 * ww - 1), self.num_heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def define_relative_position_index(self) -> None:
        self.register_buffer("relative_position_index", _relative_index(*self.window_size))

    def _gather(self, table: Tensor) -> Tensor:
        length = self.window_size[0] * self.window_size[1]
        bias = table[self.relative_position_index].view(length, length, -1)
        return bias.permute(2, 0, 1).contiguous().unsqueeze(0)

    def get_relative_position_bias(self) -> Tensor:
        return self._gather(self.relative_position_bias_table)

    def _logit_scale(self):
        return None

    def forward(self, x: Tensor) -> Tensor:
        return shifted_window_attention(
            x, self.qkv.weight, self.proj.weight, self.get_relative_position_bias(),
            self.window_size, self.num_heads, shift_size=self.shift_size,
            attention_dropout=self.attention_dropout, dropout=self.dropout,
            qkv_bias=self.qkv.bias, proj_bias=self.proj.bias, logit_scale=self._logit_scale(),
            training=self.training)


class ShiftedWindowAttentionV2(ShiftedWindowAttention):
    """V2: cosine attention with a learned per-head scale; the bias comes from a small MLP
    over log-spaced relative coordinates (``16 * sigmoid``)."""

    def __init__(self, dim: int, window_size: list[int], shift_size: list[int], num_heads: int,
                 qkv_bias: bool = True, proj_bias: bool = True, attention_dropout: float = 0.0,
                 dropout: float = 0.0) -> None:
        super().__init__(dim, window_size, shift_size, num_heads, qkv_bias=qkv_bias,
                         proj_bias=proj_bias, attention_dropout=attention_dropout,
                         dropout=dropout)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((num_heads, 1, 1))))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True),
                                     nn.Linear(512, num_heads, bias=False))
        if qkv_bias:
            with torch.no_grad():
                self.qkv.bias[dim:2 * dim].zero_()

    def define_relative_position_bias_table(self) -> None:
        wh, ww = self.window_size
        dy = torch.arange(-(wh - 1), wh, dtype=torch.float32) / (wh - 1)
        dx = torch.arange(-(ww - 1), ww, dtype=torch.float32) / (ww - 1)
        table = torch.stack(torch.meshgrid([dy, dx], indexing="ij"), -1).unsqueeze(0) * 8
        table = torch.sign(table) * torch.log2(torch.abs(table) + 1.0) / 3.0
        self.register_buffer("relative_coords_table", table)

    def get_relative_position_bias(self) -> Tensor:
        table = self.cpb_mlp(self.relative_coords_table).view(-1, self.num_heads)
        return 16 * torch.sigmoid(self._gather(table))

    def _logit_scale(self):
        return self.logit_scale


class SwinTransformerBlock(nn.Module):
    """Pre-norm: ``x + sd(attn(norm1(x)))``, then ``x + sd(mlp(norm2(x)))``."""

    def __init__(self, dim: int, num_heads: int, window_size: list[int], shift_size: list[int],
                 mlp_ratio: float = 4.0, dropout: float = 0.0, attention_dropout: float = 0.0,
                 stochastic_depth_prob: float = 0.0, norm_layer=nn.LayerNorm,
                 attn_layer=ShiftedWindowAttention) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = attn_layer(dim, window_size, shift_size, num_heads,
                               attention_dropout=attention_dropout, dropout=dropout)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.norm2 = norm_layer(dim)
        self.mlp = MLP(dim, [int(dim * mlp_ratio), dim], activation_layer=nn.GELU, inplace=None,
                       dropout=dropout)
        for m in self.mlp.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.normal_(m.bias, std=1e-6)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.stochastic_depth(self.attn(self.norm1(x)))
        return x + self.stochastic_depth(self.mlp(self.norm2(x)))


class SwinTransformerBlockV2(SwinTransformerBlock):
    """Post-norm (V2): ``x + sd(norm1(attn(x)))``, then ``x + sd(norm2(mlp(x)))``."""

    def __init__(self, dim: int, num_heads: int, window_size: list[int], shift_size: list[int],
                 mlp_ratio: float = 4.0, dropout: float = 0.0, attention_dropout: float = 0.0,
                 stochastic_depth_prob: float = 0.0, norm_layer=nn.LayerNorm,
                 attn_layer=ShiftedWindowAttentionV2) -> None:
        super().__init__(dim, num_heads, window_size, shift_size, mlp_ratio=mlp_ratio,
                         dropout=dropout, attention_dropout=attention_dropout,
                         stochastic_depth_prob=stochastic_depth_prob, norm_layer=norm_layer,
                         attn_layer=attn_layer)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.stochastic_depth(self.norm1(self.attn(x)))
        return x + self.stochastic_depth(self.norm2(self.mlp(x)))


class SwinTransformer(nn.Module):
    """Patch embedding (conv + LayerNorm), stages of (shifted) window blocks with patch
    merging between them, LayerNorm, pooling, linear head."""

    def __init__(self, patch_size: list[int], embed_dim: int, depths: list[int],
                 num_heads: list[int], window_size: list[int], mlp_ratio: float = 4.0,
                 dropout: float = 0.0, attention_dropout: float = 0.0,
                 stochastic_depth_prob: float = 0.1, num_classes: int = 1000, norm_layer=None,
                 block=None, downsample_layer=PatchMerging) -> None:
        super().__init__()
        self.num_classes = num_classes
        block = block or SwinTransformerBlock
        norm_layer = norm_layer or partial(nn.LayerNorm, eps=1e-5)
        layers: list[nn.Module] = [nn.Sequential(
            nn.Conv2d(3, embed_dim, kernel_size=tuple(patch_size), stride=tuple(patch_size)),
            Permute([0, 2, 3, 1]), norm_layer(embed_dim))]
        total, index = sum(depths), 0
        for stage, (depth, heads) in enumerate(zip(depths, num_heads)):
            dim = embed_dim * 2 ** stage
            blocks = []
            for i in range(depth):
                blocks.append(block(
                    dim, heads, window_size=window_size,
                    shift_size=[w // 2 if i % 2 else 0 for w in window_size],
                    mlp_ratio=mlp_ratio, dropout=dropout, attention_dropout=attention_dropout,
                    stochastic_depth_prob=stochastic_depth_prob * float(index) / (total - 1),
                    norm_layer=norm_layer))
                index += 1
            layers.append(nn.Sequential(*blocks))
            if stage < len(depths) - 1:
                layers.append(downsample_layer(dim, norm_layer))
        self.features = nn.Sequential(*layers)
        width = embed_dim * 2 ** (len(depths) - 1)
        self.norm = norm_layer(width)
        self.permute = Permute([0, 3, 1, 2])
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.head = nn.Linear(width, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.permute(self.norm(self.features(x)))
        return self.head(self.flatten(self.avgpool(x)))


# name: (embed dim, depths, heads, window, stochastic depth, V2, parameter count)
_VARIANTS = {
    "swin_t": (96, [2, 2, 6, 2], [3, 6, 12, 24], 7, 0.2, False, 28_288_354),
    "swin_s": (96, [2, 2, 18, 2], [3, 6, 12, 24], 7, 0.3, False, 49_606_258),
    "swin_b": (128, [2, 2, 18, 2], [4, 8, 16, 32], 7, 0.5, False, 87_768_224),
    "swin_v2_t": (96, [2, 2, 6, 2], [3, 6, 12, 24], 8, 0.2, True, 28_351_570),
    "swin_v2_s": (96, [2, 2, 18, 2], [3, 6, 12, 24], 8, 0.3, True, 49_737_442),
    "swin_v2_b": (128, [2, 2, 18, 2], [4, 8, 16, 32], 8, 0.5, True, 87_930_848),
}


def _make(name):
    dim, depths, heads, window, sd, v2, count = _VARIANTS[name]

    def builder(*, weights=None, progress: bool = True, **kwargs) -> SwinTransformer:
        extra = {"block": SwinTransformerBlockV2, "downsample_layer": PatchMergingV2} if v2 \
            else {}
        model = SwinTransformer(patch_size=[4, 4], embed_dim=dim, depths=depths,
                                num_heads=heads, window_size=[window, window],
                                stochastic_depth_prob=sd, **extra, **kwargs)
        return load_weights(model, weights)

    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (f"{name} ({count:,} parameters); ``progress`` is unused "
                       "(nothing downloads).")
    return register_model(name)(builder)


swin_t = _make("swin_t")
swin_s = _make("swin_s")
swin_b = _make("swin_b")
swin_v2_t = _make("swin_v2_t")
swin_v2_s = _make("swin_v2_s")
swin_v2_b = _make("swin_v2_b")
