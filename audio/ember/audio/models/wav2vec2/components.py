"""Wav2Vec2 building blocks with torchaudio's module names, so its state_dicts load as is.

Feature extractor (strided 1-d convolutions), feature projection, convolutional positional
embedding (weight norm over the kernel axis), and the transformer encoder (pre or post
layer norm). Self-attention runs on Ember's ``scaled_dot_product_attention``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:
    from ember.core.nn.functional import scaled_dot_product_attention as _sdpa
except ImportError:  # ember-core built without the attention module
    from torch.nn.functional import scaled_dot_product_attention as _sdpa

__all__ = ["ConvLayerBlock", "ConvolutionalPositionalEmbedding", "Encoder", "EncoderLayer",
           "FeatureExtractor", "FeatureProjection", "FeedForward", "LayerNorm", "SelfAttention",
           "Transformer", "padding_mask"]

# torchaudio hides padded keys with this additive bias rather than -inf
_MASK_BIAS = -10000.0


def padding_mask(lengths: Tensor, max_length: int) -> Tensor:
    """True where a frame is padding: ``(batch, max_length)``."""
    return torch.arange(max_length, device=lengths.device)[None, :] >= lengths[:, None]


class LayerNorm(nn.LayerNorm):
    """LayerNorm over the channel axis of ``(batch, channel, time)``."""

    def forward(self, input: Tensor) -> Tensor:
        out = F.layer_norm(input.transpose(-2, -1), self.normalized_shape, self.weight,
                           self.bias, self.eps)
        return out.transpose(-2, -1)


class ConvLayerBlock(nn.Module):
    """Conv1d -> optional norm -> GELU; also maps valid lengths through the convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 bias: bool, layer_norm: nn.Module | None) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride
        self.layer_norm = layer_norm
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, bias=bias)

    def forward(self, x: Tensor, length: Tensor | None) -> tuple[Tensor, Tensor | None]:
        x = self.conv(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = F.gelu(x)
        if length is not None:
            length = torch.div(length - self.kernel_size, self.stride, rounding_mode="floor") + 1
            length = length.clamp(min=0)
        return x, length


class FeatureExtractor(nn.Module):
    """Waveforms ``(batch, time)`` -> frames ``(batch, frame, channel)`` and frame lengths."""

    def __init__(self, conv_layers: nn.ModuleList) -> None:
        super().__init__()
        self.conv_layers = conv_layers

    def forward(self, x: Tensor, length: Tensor | None) -> tuple[Tensor, Tensor | None]:
        if x.ndim != 2:
            raise ValueError(f"waveforms must be 2-D (batch, time), got shape {tuple(x.shape)}")
        if length is not None and (length.ndim != 1 or length.shape[0] != x.shape[0]):
            raise ValueError(f"lengths must be 1-D with one entry per waveform "
                             f"({x.shape[0]}), got shape {tuple(length.shape)}")
        x = x.unsqueeze(1)
        for layer in self.conv_layers:
            x, length = layer(x, length)
        return x.transpose(1, 2), length


class FeatureProjection(nn.Module):
    """LayerNorm -> Linear -> Dropout from the extractor's channels to the model width."""

    def __init__(self, in_features: int, out_features: int, dropout: float) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(in_features)
        self.projection = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.projection(self.layer_norm(x)))


class ConvolutionalPositionalEmbedding(nn.Module):
    """Grouped 'same' convolution over time with weight norm (dim=2), then GELU."""

    def __init__(self, embed_dim: int, kernel_size: int, groups: int) -> None:
        super().__init__()
        if embed_dim % groups:
            raise ValueError(f"encoder_pos_conv_groups ({groups}) must divide the embedding "
                             f"size ({embed_dim})")
        self.embed_dim, self.kernel_size = embed_dim, kernel_size
        conv = nn.Conv1d(embed_dim, embed_dim, kernel_size, padding=kernel_size // 2,
                         groups=groups)
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        # an even kernel with padding k // 2 yields one frame too many
        self.num_remove = 1 if kernel_size % 2 == 0 else 0

    def forward(self, x: Tensor) -> Tensor:  # (B, T, D)
        y = self.conv(x.transpose(-2, -1))
        if self.num_remove:
            y = y[..., :-self.num_remove]
        return F.gelu(y).transpose(-2, -1)


class SelfAttention(nn.Module):
    """Multi-head self-attention with separate q/k/v projections, over SDPA."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None,
                position_bias: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``x`` ``(B, T, D)``; ``key_padding_mask`` ``(B, T)`` True at padding."""
        if x.ndim != 3 or x.shape[2] != self.embed_dim:
            raise ValueError(f"expected (batch, time, {self.embed_dim}), got {tuple(x.shape)}")
        batch, length, _ = x.shape
        shape = (batch, length, self.num_heads, self.head_dim)
        q, k, v = (proj(x).view(shape).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        mask = None
        if key_padding_mask is not None:
            bias = x.new_zeros(key_padding_mask.shape).masked_fill(key_padding_mask, _MASK_BIAS)
            mask = bias[:, None, None, :]
        out = _sdpa(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        out = out.transpose(1, 2).reshape(batch, length, self.embed_dim)
        return self.out_proj(out), None


class FeedForward(nn.Module):
    """Linear -> GELU -> Dropout -> Linear -> Dropout."""

    def __init__(self, io_features: int, intermediate_features: int,
                 intermediate_dropout: float, output_dropout: float) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(io_features, intermediate_features)
        self.intermediate_dropout = nn.Dropout(intermediate_dropout)
        self.output_dense = nn.Linear(intermediate_features, io_features)
        self.output_dropout = nn.Dropout(output_dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = self.intermediate_dropout(F.gelu(self.intermediate_dense(x)))
        return self.output_dropout(self.output_dense(x))


class EncoderLayer(nn.Module):
    """Attention and feed-forward residual blocks, layer norm before (pre) or after (post)."""

    def __init__(self, attention: nn.Module, dropout: float, layer_norm_first: bool,
                 feed_forward: nn.Module) -> None:
        super().__init__()
        self.attention = attention
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(attention.embed_dim)
        self.layer_norm_first = layer_norm_first
        self.feed_forward = feed_forward
        self.final_layer_norm = nn.LayerNorm(attention.embed_dim)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None,
                position_bias: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        residual = x
        if self.layer_norm_first:
            x = self.layer_norm(x)
        x, position_bias = self.attention(x, key_padding_mask, position_bias)
        x = residual + self.dropout(x)
        if self.layer_norm_first:
            return x + self.feed_forward(self.final_layer_norm(x)), position_bias
        x = self.layer_norm(x)
        return self.final_layer_norm(x + self.feed_forward(x)), position_bias


class Transformer(nn.Module):
    """Positional embedding, then the layers (with LayerDrop while training)."""

    def __init__(self, pos_conv_embed: nn.Module, dropout: float, layers: nn.ModuleList,
                 layer_norm_first: bool, layer_drop: float) -> None:
        super().__init__()
        self.pos_conv_embed = pos_conv_embed
        self.layer_norm = nn.LayerNorm(pos_conv_embed.embed_dim)
        # True here means the norm comes before the layers (the layers are post-norm)
        self.layer_norm_first = layer_norm_first
        self.layer_drop = layer_drop
        self.dropout = nn.Dropout(dropout)
        self.layers = layers

    def _preprocess(self, x: Tensor) -> Tensor:
        x = x + self.pos_conv_embed(x)
        if self.layer_norm_first:
            x = self.layer_norm(x)
        return self.dropout(x)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        x = self._preprocess(x)
        position_bias = None
        for layer in self.layers:
            # one draw per layer while training, as torchaudio does, so seeds replay alike
            if self.training and torch.rand(1).item() <= self.layer_drop:
                continue
            x, position_bias = layer(x, key_padding_mask, position_bias)
        if not self.layer_norm_first:
            x = self.layer_norm(x)
        return x

    def get_intermediate_outputs(self, x: Tensor, key_padding_mask: Tensor | None = None,
                                 num_layers: int | None = None) -> list[Tensor]:
        """Outputs of the first ``num_layers`` layers (all by default), no LayerDrop."""
        if num_layers is not None and not 0 < num_layers <= len(self.layers):
            raise ValueError(f"num_layers must be in [1, {len(self.layers)}], got {num_layers}")
        outputs: list[Tensor] = []
        position_bias = None
        x = self._preprocess(x)
        for layer in self.layers[:num_layers]:
            x, position_bias = layer(x, key_padding_mask, position_bias)
            outputs.append(x)
        return outputs


class Encoder(nn.Module):
    """Feature projection + transformer; padded frames are zeroed and hidden from attention."""

    def __init__(self, feature_projection: nn.Module, transformer: nn.Module) -> None:
        super().__init__()
        self.feature_projection = feature_projection
        self.transformer = transformer

    def _preprocess(self, features: Tensor,
                    lengths: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        x = self.feature_projection(features)
        mask = None
        if lengths is not None:
            mask = padding_mask(lengths, x.shape[1])
            x = x.masked_fill(mask[:, :, None], 0.0)
        return x, mask

    def forward(self, features: Tensor, lengths: Tensor | None = None) -> Tensor:
        x, mask = self._preprocess(features, lengths)
        return self.transformer(x, mask)

    def extract_features(self, features: Tensor, lengths: Tensor | None = None,
                         num_layers: int | None = None) -> list[Tensor]:
        x, mask = self._preprocess(features, lengths)
        return self.transformer.get_intermediate_outputs(x, mask, num_layers)


def _get_feature_extractor(norm_mode: str, shapes: list[tuple[int, int, int]],
                           bias: bool) -> FeatureExtractor:
    """Conv blocks from ``(out_channels, kernel, stride)`` triples."""
    if norm_mode not in ("group_norm", "layer_norm"):
        raise ValueError(f"extractor_mode must be 'group_norm' or 'layer_norm', got "
                         f"{norm_mode!r}")
    if not shapes:
        raise ValueError("extractor_conv_layer_config must have at least one layer")
    blocks, in_channels = [], 1
    for i, (out_channels, kernel_size, stride) in enumerate(shapes):
        norm = None
        if norm_mode == "group_norm" and i == 0:
            norm = nn.GroupNorm(out_channels, out_channels, affine=True)
        elif norm_mode == "layer_norm":
            norm = LayerNorm(out_channels, elementwise_affine=True)
        blocks.append(ConvLayerBlock(in_channels, out_channels, kernel_size, stride, bias, norm))
        in_channels = out_channels
    return FeatureExtractor(nn.ModuleList(blocks))


def _get_encoder(in_features: int, embed_dim: int, dropout_input: float, pos_conv_kernel: int,
                 pos_conv_groups: int, num_layers: int, attention_dropout: float,
                 ff_interm_features: int, ff_interm_dropout: float, dropout: float,
                 layer_norm_first: bool, layer_drop: float, make_attention) -> Encoder:
    """An Encoder whose i-th layer's attention is ``make_attention(i)``."""
    layers = nn.ModuleList()
    for i in range(num_layers):
        feed_forward = FeedForward(embed_dim, ff_interm_features, ff_interm_dropout, dropout)
        layers.append(EncoderLayer(make_attention(i), dropout, layer_norm_first, feed_forward))
    pos_conv = ConvolutionalPositionalEmbedding(embed_dim, pos_conv_kernel, pos_conv_groups)
    transformer = Transformer(pos_conv, dropout, layers, not layer_norm_first, layer_drop)
    return Encoder(FeatureProjection(in_features, embed_dim, dropout_input), transformer)
