"""ViT-B/16, B/32, L/16, L/32 and H/14 (Dosovitskiy et al.), torchvision's layout and
state_dict names.

Attention runs through ``ember.core.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

from ember.core.nn.functional import scaled_dot_product_attention
from ember.vision.models._registry import load_weights, register_model


class SelfAttention(nn.Module):
    """Multi-head self-attention with nn.MultiheadAttention's parameter names."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"hidden_dim ({dim}) must be divisible by num_heads ({heads})")
        self.heads, self.dropout = heads, dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = nn.functional.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = scaled_dot_product_attention(q, k, v,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, heads, dim, mlp_dim, dropout=0.0, attention_dropout=0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = SelfAttention(dim, heads, attention_dropout)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(mlp_dim, dim), nn.Dropout(dropout))
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.normal_(m.bias, std=1e-6)

    def forward(self, x):
        x = x + self.dropout(self.self_attention(self.ln_1(x)))
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    """Position embedding, a stack of blocks, final LayerNorm."""

    def __init__(self, seq_len, layers, heads, dim, mlp_dim, dropout=0.0, attention_dropout=0.0):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_len, dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(heads, dim, mlp_dim, dropout, attention_dropout))
            for i in range(layers)))
        self.ln = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x):
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class VisionTransformer(nn.Module):
    """Patchify with a strided conv, prepend a class token, encode, classify the token."""

    def __init__(self, image_size=224, patch_size=16, num_layers=12, num_heads=12,
                 hidden_dim=768, mlp_dim=3072, dropout=0.0, attention_dropout=0.0,
                 num_classes: int = 1000) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size ({image_size}) must be divisible by patch_size "
                             f"({patch_size})")
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        self.conv_proj = nn.Conv2d(3, hidden_dim, patch_size, patch_size)
        fan_in = 3 * patch_size * patch_size
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)
        seq = (image_size // patch_size) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.encoder = Encoder(seq, num_layers, num_heads, hidden_dim, mlp_dim, dropout,
                               attention_dropout)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(hidden_dim, num_classes)))
        nn.init.zeros_(self.heads.head.weight)
        nn.init.zeros_(self.heads.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1:] != (3, self.image_size, self.image_size):
            raise ValueError(f"VisionTransformer expects images [N, 3, {self.image_size}, "
                             f"{self.image_size}], got {tuple(x.shape)}")
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], 1)
        return self.heads(self.encoder(x)[:, 0])


# name: (patch, layers, heads, hidden, mlp, parameter count at 224x224 and 1000 classes)
_VARIANTS = {
    "vit_b_16": (16, 12, 12, 768, 3072, 86_567_656),
    "vit_b_32": (32, 12, 12, 768, 3072, 88_224_232),
    "vit_l_16": (16, 24, 16, 1024, 4096, 304_326_632),
    "vit_l_32": (32, 24, 16, 1024, 4096, 306_535_400),
    "vit_h_14": (14, 32, 16, 1280, 5120, 632_045_800),
}


def _make(name):
    patch, layers, heads, hidden, mlp, count = _VARIANTS[name]

    def builder(*, weights=None, progress: bool = True, **kwargs) -> VisionTransformer:
        model = VisionTransformer(patch_size=patch, num_layers=layers, num_heads=heads,
                                  hidden_dim=hidden, mlp_dim=mlp, **kwargs)
        return load_weights(model, weights)

    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (f"{name} at 224x224 ({count:,} parameters); ``progress`` is unused "
                       "(nothing downloads).")
    return register_model(name)(builder)


vit_b_16 = _make("vit_b_16")
vit_b_32 = _make("vit_b_32")
vit_l_16 = _make("vit_l_16")
vit_l_32 = _make("vit_l_32")
vit_h_14 = _make("vit_h_14")
