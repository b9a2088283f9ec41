"""Wav2Vec2Model, HuBERTPretrainModel and torchaudio 2.9's builders (same names, signatures,
defaults and parameter layouts; random weights: load a local state_dict for trained ones)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ember.audio.models.wav2vec2 import components
from ember.audio.models.wav2vec2.pretrain import LogitGenerator, MaskGenerator
from ember.audio.models.wav2vec2.wavlm_attention import WavLMSelfAttention

__all__ = [
    "HuBERTPretrainModel", "Wav2Vec2Model", "hubert_base", "hubert_large",
    "hubert_pretrain_base", "hubert_pretrain_large", "hubert_pretrain_model",
    "hubert_pretrain_xlarge", "hubert_xlarge", "wav2vec2_base", "wav2vec2_large",
    "wav2vec2_large_lv60k", "wav2vec2_model", "wav2vec2_xlsr_1b", "wav2vec2_xlsr_2b",
    "wav2vec2_xlsr_300m", "wavlm_base", "wavlm_large", "wavlm_model",
]

_DEFAULT_CONV = [(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512, 2, 2)] * 2


class Wav2Vec2Model(nn.Module):
    """Feature extractor -> encoder -> optional ``aux`` head (e.g. a CTC projection)."""

    def __init__(self, feature_extractor: nn.Module, encoder: nn.Module,
                 aux: nn.Module | None = None) -> None:
        super().__init__()
        self.feature_extractor = feature_extractor
        self.encoder = encoder
        self.aux = aux

    def extract_features(self, waveforms: Tensor, lengths: Tensor | None = None,
                         num_layers: int | None = None) -> tuple[list[Tensor], Tensor | None]:
        """Each transformer layer's output ``(batch, frame, dim)`` and the frame lengths."""
        x, lengths = self.feature_extractor(waveforms, lengths)
        return self.encoder.extract_features(x, lengths, num_layers), lengths

    def forward(self, waveforms: Tensor,
                lengths: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Waveforms ``(batch, time)`` and valid lengths -> features and frame lengths."""
        x, lengths = self.feature_extractor(waveforms, lengths)
        x = self.encoder(x, lengths)
        if self.aux is not None:
            x = self.aux(x)
        return x, lengths


class _GradMultiply(torch.autograd.Function):
    """Identity forward; scales the gradient by ``scale`` backward."""

    @staticmethod
    def forward(ctx, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad * ctx.scale, None


class HuBERTPretrainModel(nn.Module):
    """Wav2Vec2Model with HuBERT's frame masking and label logits, for pre-training."""

    def __init__(self, wav2vec2: Wav2Vec2Model, mask_generator: nn.Module,
                 logit_generator: nn.Module, feature_grad_mult: float | None) -> None:
        super().__init__()
        if feature_grad_mult is not None and not 0.0 < feature_grad_mult < 1.0:
            raise ValueError(f"feature_grad_mult must be None or in (0, 1), got "
                             f"{feature_grad_mult}")
        self.wav2vec2 = wav2vec2
        self.mask_generator = mask_generator
        self.logit_generator = logit_generator
        self.feature_grad_mult = feature_grad_mult

    def forward(self, waveforms: Tensor, labels: Tensor,
                audio_lengths: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """-> (logits of masked frames, logits of unmasked frames, feature penalty)."""
        x, lengths = self.wav2vec2.feature_extractor(waveforms, audio_lengths)
        if self.feature_grad_mult is not None:
            x = _GradMultiply.apply(x, self.feature_grad_mult)
        features_pen = x.float().pow(2).mean()
        x, padding = self.wav2vec2.encoder._preprocess(x, lengths)
        x, mask = self.mask_generator(x, padding)
        x = self.wav2vec2.encoder.transformer(x, padding)
        if labels.ndim != 2 or labels.shape[1] != x.shape[1]:
            raise ValueError(f"labels must be (batch, {x.shape[1]}) to match the model's "
                             f"frames, got {tuple(labels.shape)}")
        if mask is None:
            mask = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
        if padding is not None:
            mask_m = ~padding & mask
            mask_u = ~padding & ~mask_m
        else:
            mask_m, mask_u = mask, ~mask
        logit_m, logit_u = self.logit_generator(x, labels, mask_m, mask_u)
        return logit_m, logit_u, features_pen


def _attention(embed_dim: int, num_heads: int, dropout: float):
    return lambda i: components.SelfAttention(embed_dim, num_heads, dropout)


def _aux(encoder_embed_dim: int, aux_num_out: int | None) -> nn.Module | None:
    return None if aux_num_out is None else nn.Linear(encoder_embed_dim, aux_num_out)


def wav2vec2_model(extractor_mode: str,
                   extractor_conv_layer_config: list[tuple[int, int, int]] | None,
                   extractor_conv_bias: bool, encoder_embed_dim: int,
                   encoder_projection_dropout: float, encoder_pos_conv_kernel: int,
                   encoder_pos_conv_groups: int, encoder_num_layers: int, encoder_num_heads: int,
                   encoder_attention_dropout: float, encoder_ff_interm_features: int,
                   encoder_ff_interm_dropout: float, encoder_dropout: float,
                   encoder_layer_norm_first: bool, encoder_layer_drop: float,
                   aux_num_out: int | None) -> Wav2Vec2Model:
    """A Wav2Vec2Model from the full configuration (torchaudio's ``wav2vec2_model``)."""
    conv = _DEFAULT_CONV if extractor_conv_layer_config is None else extractor_conv_layer_config
    extractor = components._get_feature_extractor(extractor_mode, conv, extractor_conv_bias)
    encoder = components._get_encoder(
        conv[-1][0], encoder_embed_dim, encoder_projection_dropout, encoder_pos_conv_kernel,
        encoder_pos_conv_groups, encoder_num_layers, encoder_attention_dropout,
        encoder_ff_interm_features, encoder_ff_interm_dropout, encoder_dropout,
        encoder_layer_norm_first, encoder_layer_drop,
        _attention(encoder_embed_dim, encoder_num_heads, encoder_attention_dropout))
    return Wav2Vec2Model(extractor, encoder, _aux(encoder_embed_dim, aux_num_out))


def wavlm_model(extractor_mode: str,
                extractor_conv_layer_config: list[tuple[int, int, int]] | None,
                extractor_conv_bias: bool, encoder_embed_dim: int,
                encoder_projection_dropout: float, encoder_pos_conv_kernel: int,
                encoder_pos_conv_groups: int, encoder_num_layers: int, encoder_num_heads: int,
                encoder_num_buckets: int, encoder_max_distance: int,
                encoder_attention_dropout: float, encoder_ff_interm_features: int,
                encoder_ff_interm_dropout: float, encoder_dropout: float,
                encoder_layer_norm_first: bool, encoder_layer_drop: float,
                aux_num_out: int | None) -> Wav2Vec2Model:
    """A WavLM Wav2Vec2Model: gated relative position bias, owned by the first layer."""
    conv = _DEFAULT_CONV if extractor_conv_layer_config is None else extractor_conv_layer_config
    extractor = components._get_feature_extractor(extractor_mode, conv, extractor_conv_bias)

    def attention(i: int) -> nn.Module:
        return WavLMSelfAttention(encoder_embed_dim, encoder_num_heads,
                                  dropout=encoder_attention_dropout,
                                  has_relative_attention_bias=i == 0,
                                  num_buckets=encoder_num_buckets,
                                  max_distance=encoder_max_distance)

    encoder = components._get_encoder(
        conv[-1][0], encoder_embed_dim, encoder_projection_dropout, encoder_pos_conv_kernel,
        encoder_pos_conv_groups, encoder_num_layers, encoder_attention_dropout,
        encoder_ff_interm_features, encoder_ff_interm_dropout, encoder_dropout,
        encoder_layer_norm_first, encoder_layer_drop, attention)
    return Wav2Vec2Model(extractor, encoder, _aux(encoder_embed_dim, aux_num_out))


def _size(embed_dim: int, num_layers: int, num_heads: int, ff: int) -> dict:
    return dict(encoder_embed_dim=embed_dim, encoder_num_layers=num_layers,
                encoder_num_heads=num_heads, encoder_ff_interm_features=ff,
                encoder_pos_conv_kernel=128, encoder_pos_conv_groups=16,
                extractor_conv_layer_config=None)


_BASE = _size(768, 12, 12, 3072)
_LARGE = _size(1024, 24, 16, 4096)
_XLARGE = _size(1280, 48, 16, 5120)
_XLSR_2B = _size(1920, 48, 16, 7680)
_POST_NORM = dict(extractor_mode="group_norm", extractor_conv_bias=False,
                  encoder_layer_norm_first=False)
_PRE_NORM = dict(extractor_mode="layer_norm", extractor_conv_bias=False,
                 encoder_layer_norm_first=True)
_PRE_NORM_BIAS = dict(_PRE_NORM, extractor_conv_bias=True)


def _dropouts(projection, attention, ff_interm, dropout, layer_drop) -> dict:
    return dict(encoder_projection_dropout=projection, encoder_attention_dropout=attention,
                encoder_ff_interm_dropout=ff_interm, encoder_dropout=dropout,
                encoder_layer_drop=layer_drop)


def wav2vec2_base(encoder_projection_dropout: float = 0.1, encoder_attention_dropout: float = 0.1,
                  encoder_ff_interm_dropout: float = 0.1, encoder_dropout: float = 0.1,
                  encoder_layer_drop: float = 0.1,
                  aux_num_out: int | None = None) -> Wav2Vec2Model:
    """Wav2Vec2 Base (Baevski et al., 2020): 12 layers, 768 wide, post-norm."""
    return wav2vec2_model(**_BASE, **_POST_NORM, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def wav2vec2_large(encoder_projection_dropout: float = 0.1,
                   encoder_attention_dropout: float = 0.1,
                   encoder_ff_interm_dropout: float = 0.1, encoder_dropout: float = 0.1,
                   encoder_layer_drop: float = 0.1,
                   aux_num_out: int | None = None) -> Wav2Vec2Model:
    """Wav2Vec2 Large: 24 layers, 1024 wide, post-norm."""
    return wav2vec2_model(**_LARGE, **_POST_NORM, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def wav2vec2_large_lv60k(encoder_projection_dropout: float = 0.1,
                         encoder_attention_dropout: float = 0.0,
                         encoder_ff_interm_dropout: float = 0.1, encoder_dropout: float = 0.0,
                         encoder_layer_drop: float = 0.1,
                         aux_num_out: int | None = None) -> Wav2Vec2Model:
    """Wav2Vec2 Large (LV-60k): pre-norm, layer-norm extractor with conv bias."""
    return wav2vec2_model(**_LARGE, **_PRE_NORM_BIAS, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def wav2vec2_xlsr_300m(encoder_projection_dropout: float = 0.0,
                       encoder_attention_dropout: float = 0.0,
                       encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.0,
                       encoder_layer_drop: float = 0.0,
                       aux_num_out: int | None = None) -> Wav2Vec2Model:
    """XLS-R 300M (Babu et al., 2021): the LV-60k architecture."""
    return wav2vec2_model(**_LARGE, **_PRE_NORM_BIAS, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def wav2vec2_xlsr_1b(encoder_projection_dropout: float = 0.1,
                     encoder_attention_dropout: float = 0.0,
                     encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.0,
                     encoder_layer_drop: float = 0.0,
                     aux_num_out: int | None = None) -> Wav2Vec2Model:
    """XLS-R 1B: 48 layers, 1280 wide, pre-norm."""
    return wav2vec2_model(**_XLARGE, **_PRE_NORM_BIAS, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def wav2vec2_xlsr_2b(encoder_projection_dropout: float = 0.1,
                     encoder_attention_dropout: float = 0.0,
                     encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.0,
                     encoder_layer_drop: float = 0.0,
                     aux_num_out: int | None = None) -> Wav2Vec2Model:
    """XLS-R 2B: 48 layers, 1920 wide, pre-norm."""
    return wav2vec2_model(**_XLSR_2B, **_PRE_NORM_BIAS, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def hubert_base(encoder_projection_dropout: float = 0.1, encoder_attention_dropout: float = 0.1,
                encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.1,
                encoder_layer_drop: float = 0.05,
                aux_num_out: int | None = None) -> Wav2Vec2Model:
    """HuBERT Base (Hsu et al., 2021): the Wav2Vec2 Base architecture."""
    return wav2vec2_model(**_BASE, **_POST_NORM, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def hubert_large(encoder_projection_dropout: float = 0.0, encoder_attention_dropout: float = 0.0,
                 encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.0,
                 encoder_layer_drop: float = 0.0,
                 aux_num_out: int | None = None) -> Wav2Vec2Model:
    """HuBERT Large: 24 layers, 1024 wide, pre-norm, no conv bias."""
    return wav2vec2_model(**_LARGE, **_PRE_NORM, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def hubert_xlarge(encoder_projection_dropout: float = 0.0,
                  encoder_attention_dropout: float = 0.0,
                  encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.0,
                  encoder_layer_drop: float = 0.0,
                  aux_num_out: int | None = None) -> Wav2Vec2Model:
    """HuBERT X-Large: 48 layers, 1280 wide, pre-norm, no conv bias."""
    return wav2vec2_model(**_XLARGE, **_PRE_NORM, aux_num_out=aux_num_out, **_dropouts(
        encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
        encoder_dropout, encoder_layer_drop))


def wavlm_base(encoder_projection_dropout: float = 0.1, encoder_attention_dropout: float = 0.1,
               encoder_ff_interm_dropout: float = 0.1, encoder_dropout: float = 0.1,
               encoder_layer_drop: float = 0.1,
               aux_num_out: int | None = None) -> Wav2Vec2Model:
    """WavLM Base (Chen et al., 2022): 320 position buckets up to distance 800."""
    return wavlm_model(**_BASE, **_POST_NORM, encoder_num_buckets=320, encoder_max_distance=800,
                       aux_num_out=aux_num_out, **_dropouts(
                           encoder_projection_dropout, encoder_attention_dropout,
                           encoder_ff_interm_dropout, encoder_dropout, encoder_layer_drop))


def wavlm_large(encoder_projection_dropout: float = 0.1, encoder_attention_dropout: float = 0.1,
                encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.1,
                encoder_layer_drop: float = 0.1,
                aux_num_out: int | None = None) -> Wav2Vec2Model:
    """WavLM Large: 24 layers, 1024 wide, pre-norm."""
    return wavlm_model(**_LARGE, **_PRE_NORM, encoder_num_buckets=320, encoder_max_distance=800,
                       aux_num_out=aux_num_out, **_dropouts(
                           encoder_projection_dropout, encoder_attention_dropout,
                           encoder_ff_interm_dropout, encoder_dropout, encoder_layer_drop))


def _init_pretrain(module: nn.Module) -> None:
    """HuBERT's pre-training initialisation (fairseq's), applied module by module."""
    if isinstance(module, components.ConvLayerBlock):
        nn.init.kaiming_normal_(module.conv.weight)
    elif isinstance(module, components.ConvolutionalPositionalEmbedding):
        std = math.sqrt(4.0 / (module.embed_dim * module.kernel_size))
        nn.init.normal_(module.conv.parametrizations.weight.original1, mean=0.0, std=std)
        nn.init.constant_(module.conv.bias, 0.0)
    elif isinstance(module, components.SelfAttention):
        for proj in (module.k_proj, module.v_proj, module.q_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(module.out_proj.weight)
        nn.init.constant_(module.out_proj.bias, 0.0)
    elif isinstance(module, components.Transformer):
        for sub in module.modules():
            if isinstance(sub, nn.Linear):
                nn.init.normal_(sub.weight, mean=0.0, std=0.02)
                if sub.bias is not None:
                    nn.init.zeros_(sub.bias)


def hubert_pretrain_model(
        extractor_mode: str, extractor_conv_layer_config: list[tuple[int, int, int]] | None,
        extractor_conv_bias: bool, encoder_embed_dim: int, encoder_projection_dropout: float,
        encoder_pos_conv_kernel: int, encoder_pos_conv_groups: int, encoder_num_layers: int,
        encoder_num_heads: int, encoder_attention_dropout: float,
        encoder_ff_interm_features: int, encoder_ff_interm_dropout: float,
        encoder_dropout: float, encoder_layer_norm_first: bool, encoder_layer_drop: float,
        mask_prob: float, mask_selection: str, mask_other: float, mask_length: int,
        no_mask_overlap: bool, mask_min_space: int, mask_channel_prob: float,
        mask_channel_selection: str, mask_channel_other: float, mask_channel_length: int,
        no_mask_channel_overlap: bool, mask_channel_min_space: int, skip_masked: bool,
        skip_nomask: bool, num_classes: int, final_dim: int,
        feature_grad_mult: float | None) -> HuBERTPretrainModel:
    """A HuBERTPretrainModel from the full configuration (torchaudio's signature)."""
    if feature_grad_mult is not None and not 0.0 < feature_grad_mult < 1.0:
        raise ValueError(f"feature_grad_mult must be None or in (0, 1), got {feature_grad_mult}")
    wav2vec2 = wav2vec2_model(
        extractor_mode, extractor_conv_layer_config, extractor_conv_bias, encoder_embed_dim,
        encoder_projection_dropout, encoder_pos_conv_kernel, encoder_pos_conv_groups,
        encoder_num_layers, encoder_num_heads, encoder_attention_dropout,
        encoder_ff_interm_features, encoder_ff_interm_dropout, encoder_dropout,
        encoder_layer_norm_first, encoder_layer_drop, aux_num_out=None)
    masks = MaskGenerator(encoder_embed_dim, mask_prob, mask_selection, mask_other, mask_length,
                          no_mask_overlap, mask_min_space, mask_channel_prob,
                          mask_channel_selection, mask_channel_other, mask_channel_length,
                          no_mask_channel_overlap, mask_channel_min_space)
    logits = LogitGenerator(encoder_embed_dim, num_classes, final_dim, skip_masked, skip_nomask)
    model = HuBERTPretrainModel(wav2vec2, masks, logits, feature_grad_mult)
    model.apply(_init_pretrain)
    return model


def _pretrain(size: dict, norm: dict, final_dim: int, num_classes: int, **kw) -> dict:
    return dict(**size, **norm, mask_selection="static", mask_other=0.0, mask_length=10,
                no_mask_overlap=False, mask_min_space=1, mask_channel_selection="static",
                mask_channel_other=0.0, no_mask_channel_overlap=False, mask_channel_min_space=1,
                skip_masked=False, skip_nomask=False, num_classes=num_classes,
                final_dim=final_dim, **kw)


def hubert_pretrain_base(encoder_projection_dropout: float = 0.1,
                         encoder_attention_dropout: float = 0.1,
                         encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.1,
                         encoder_layer_drop: float = 0.05, mask_prob: float = 0.8,
                         mask_channel_prob: float = 0.0, mask_channel_length: int = 10,
                         feature_grad_mult: float | None = 0.1,
                         num_classes: int = 100) -> HuBERTPretrainModel:
    """HuBERT Base for pre-training: 256-d projection, ``num_classes`` cluster labels."""
    return hubert_pretrain_model(**_pretrain(
        _BASE, _POST_NORM, 256, num_classes, mask_prob=mask_prob,
        mask_channel_prob=mask_channel_prob, mask_channel_length=mask_channel_length,
        feature_grad_mult=feature_grad_mult, **_dropouts(
            encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
            encoder_dropout, encoder_layer_drop)))


def hubert_pretrain_large(encoder_projection_dropout: float = 0.0,
                          encoder_attention_dropout: float = 0.0,
                          encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.0,
                          encoder_layer_drop: float = 0.0, mask_prob: float = 0.8,
                          mask_channel_prob: float = 0.0, mask_channel_length: int = 10,
                          feature_grad_mult: float | None = None) -> HuBERTPretrainModel:
    """HuBERT Large for pre-training: 768-d projection, 500 labels."""
    return hubert_pretrain_model(**_pretrain(
        _LARGE, _PRE_NORM, 768, 500, mask_prob=mask_prob, mask_channel_prob=mask_channel_prob,
        mask_channel_length=mask_channel_length, feature_grad_mult=feature_grad_mult,
        **_dropouts(encoder_projection_dropout, encoder_attention_dropout,
                    encoder_ff_interm_dropout, encoder_dropout, encoder_layer_drop)))


def hubert_pretrain_xlarge(encoder_projection_dropout: float = 0.0,
                           encoder_attention_dropout: float = 0.0,
                           encoder_ff_interm_dropout: float = 0.0, encoder_dropout: float = 0.0,
                           encoder_layer_drop: float = 0.0, mask_prob: float = 0.8,
                           mask_channel_prob: float = 0.0, mask_channel_length: int = 10,
                           feature_grad_mult: float | None = None) -> HuBERTPretrainModel:
    """HuBERT X-Large for pre-training: 1024-d projection, 500 labels."""
    return hubert_pretrain_model(**_pretrain(
        _XLARGE, _PRE_NORM, 1024, 500, mask_prob=mask_prob,
        mask_channel_prob=mask_channel_prob, mask_channel_length=mask_channel_length,
        feature_grad_mult=feature_grad_mult, **_dropouts(
            encoder_projection_dropout, encoder_attention_dropout, encoder_ff_interm_dropout,
            encoder_dropout, encoder_layer_drop)))
