"""Hybrid Demucs (Défossez, 2021): music source separation in the time and frequency domains.

Layer lists, names and the STFT framing follow torchaudio.models.HDemucs, so its checkpoints
load strictly and separate identically.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.audio.models._hdemucs_layers import _HDecLayer, _HEncLayer, _ScaledEmbedding

__all__ = ["HDemucs", "hdemucs_high", "hdemucs_low", "hdemucs_medium"]


def _rescale_convs(module: nn.Module) -> None:
    """Initial weights of every (transposed) conv scaled towards a standard deviation of 0.1."""
    kinds = (nn.Conv1d, nn.ConvTranspose1d, nn.Conv2d, nn.ConvTranspose2d)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, kinds):
                scale = (sub.weight.std() / 0.1) ** 0.5
                sub.weight.div_(scale)
                if sub.bias is not None:
                    sub.bias.div_(scale)


def _stft(x: Tensor, n_fft: int, hop_length: int) -> Tensor:
    """Normalised, centred STFT over the last axis: ``(..., n_fft // 2 + 1, frames)``."""
    z = torch.stft(x.reshape(-1, x.shape[-1]), n_fft, hop_length,
                   window=torch.hann_window(n_fft).to(x), win_length=n_fft, normalized=True,
                   center=True, return_complex=True, pad_mode="reflect")
    return z.view(*x.shape[:-1], *z.shape[-2:])


def _istft(z: Tensor, hop_length: int, length: int) -> Tensor:
    """Inverse of :func:`_stft` to ``length`` samples."""
    n_fft = 2 * z.shape[-2] - 2
    x = torch.istft(z.reshape(-1, *z.shape[-2:]), n_fft, hop_length,
                    window=torch.hann_window(n_fft).to(z.real), win_length=n_fft,
                    normalized=True, length=length, center=True)
    return x.view(*z.shape[:-2], x.shape[-1])


class HDemucs(nn.Module):
    """Mixture ``(B, audio_channels, T)`` -> sources ``(B, len(sources), audio_channels, T)``."""

    def __init__(
        self,
        sources: list[str],
        audio_channels: int = 2,
        channels: int = 48,
        growth: int = 2,
        nfft: int = 4096,
        depth: int = 6,
        freq_emb: float = 0.2,
        emb_scale: int = 10,
        emb_smooth: bool = True,
        kernel_size: int = 8,
        time_stride: int = 2,
        stride: int = 4,
        context: int = 1,
        context_enc: int = 0,
        norm_starts: int = 4,
        norm_groups: int = 4,
        dconv_depth: int = 2,
        dconv_comp: int = 4,
        dconv_attn: int = 4,
        dconv_lstm: int = 4,
        dconv_init: float = 1e-4,
    ) -> None:
        super().__init__()
        if not sources:
            raise ValueError("sources must name at least one source")
        if nfft % 4:
            raise ValueError(f"nfft must be a multiple of 4, got {nfft}")
        self.depth, self.nfft, self.audio_channels = depth, nfft, audio_channels
        self.sources, self.kernel_size, self.context = sources, kernel_size, context
        self.stride, self.channels, self.hop_length = stride, channels, nfft // 4
        self.freq_emb = None
        self.freq_encoder, self.freq_decoder = nn.ModuleList(), nn.ModuleList()
        self.time_encoder, self.time_decoder = nn.ModuleList(), nn.ModuleList()
        chin, chout = audio_channels, channels
        chin_z, chout_z = 2 * audio_channels, channels     # the frequency branch: real + imag
        freqs = nfft // 2
        for index in range(depth):
            freq = freqs > 1
            ker, stri, pad, last_freq = kernel_size, stride, True, False
            if not freq:   # frequencies used up: plain 1-d convs over time
                ker, stri = 2 * time_stride, time_stride
            if freq and freqs <= kernel_size:                # last frequency layer eats them all
                ker, pad, last_freq = freqs, False, True
            kw = dict(kernel_size=ker, stride=stri, freq=freq, pad=pad,
                      norm_type="group_norm" if index >= norm_starts else "none",
                      norm_groups=norm_groups,
                      dconv_kw=dict(lstm=index >= dconv_lstm, attn=index >= dconv_attn,
                                    depth=dconv_depth, compress=dconv_comp, init=dconv_init))
            kwt = dict(kw, freq=False, kernel_size=kernel_size, stride=stride, pad=True)
            if last_freq:
                chout_z = max(chout, chout_z)
                chout = chout_z
            self.freq_encoder.append(_HEncLayer(chin_z, chout_z, context=context_enc, **kw))
            if freq:
                if last_freq and nfft == 2048:
                    kwt.update(stride=2, kernel_size=4)
                self.time_encoder.append(
                    _HEncLayer(chin, chout, context=context_enc, empty=last_freq, **kwt))
            if index == 0:
                chin = audio_channels * len(sources)
                chin_z = 2 * chin
            self.freq_decoder.insert(
                0, _HDecLayer(chout_z, chin_z, last=index == 0, context=context, **kw))
            if freq:
                self.time_decoder.insert(0, _HDecLayer(chout, chin, empty=last_freq,
                                                       last=index == 0, context=context, **kwt))
            chin, chin_z = chout, chout_z
            chout, chout_z = int(growth * chout), int(growth * chout_z)
            if freq:
                freqs = 1 if freqs <= kernel_size else freqs // stride
            if index == 0 and freq_emb:
                self.freq_emb = _ScaledEmbedding(freqs, chin_z, smooth=emb_smooth,
                                                 scale=emb_scale)
                self.freq_emb_scale = freq_emb
        _rescale_convs(self)

    def _spec(self, x: Tensor) -> Tensor:
        """STFT frames aligned with the time branch: ``ceil(T / hop)`` frames, nfft/2 bins."""
        hl, length = self.hop_length, x.shape[-1]
        frames = math.ceil(length / hl)
        pad = hl // 2 * 3
        right = pad + frames * hl - length
        if length <= max(pad, right):   # reflect padding needs a longer signal
            x = F.pad(x, (0, max(pad, right) - length + 1))
        z = _stft(F.pad(x, (pad, right), mode="reflect"), self.nfft, hl)[..., :-1, :]
        if z.shape[-1] != frames + 4:
            raise ValueError(f"input of {length} frames is too short for nfft={self.nfft}")
        return z[..., 2: 2 + frames]

    def _ispec(self, z: Tensor, length: int) -> Tensor:
        hl = self.hop_length
        z = F.pad(F.pad(z, [0, 0, 0, 1]), [2, 2])
        pad = hl // 2 * 3
        x = _istft(z, hl, hl * math.ceil(length / hl) + 2 * pad)
        return x[..., pad: pad + length]

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim != 3 or input.shape[1] != self.audio_channels:
            raise ValueError(f"input must be (batch, audio_channels={self.audio_channels}, "
                             f"frames), got {tuple(input.shape)}")
        length = input.shape[-1]
        z = self._spec(input)
        b, c, fq, t = z.shape
        x = torch.view_as_real(z).permute(0, 1, 4, 2, 3).reshape(b, 2 * c, fq, t)
        mean, std = x.mean(dim=(1, 2, 3), keepdim=True), x.std(dim=(1, 2, 3), keepdim=True)
        x = (x - mean) / (1e-5 + std)
        meant, stdt = input.mean(dim=(1, 2), keepdim=True), input.std(dim=(1, 2), keepdim=True)
        xt = (input - meant) / (1e-5 + stdt)

        saved, saved_t, lengths, lengths_t = [], [], [], []
        for idx, encode in enumerate(self.freq_encoder):
            lengths.append(x.shape[-1])
            inject = None
            if idx < len(self.time_encoder):
                lengths_t.append(xt.shape[-1])
                tenc = self.time_encoder[idx]
                xt = tenc(xt)
                if tenc.empty:
                    inject = xt       # the branches merge: time features join the freq layer
                else:
                    saved_t.append(xt)
            x = encode(x, inject)
            if idx == 0 and self.freq_emb is not None:
                emb = self.freq_emb(torch.arange(x.shape[-2], device=x.device)).t()
                x = x + self.freq_emb_scale * emb[None, :, :, None].expand_as(x)
            saved.append(x)

        x = torch.zeros_like(x)
        xt = torch.zeros_like(x)
        offset = self.depth - len(self.time_decoder)
        for idx, decode in enumerate(self.freq_decoder):
            x, pre = decode(x, saved.pop(-1), lengths.pop(-1))
            if idx >= offset:
                tdec = self.time_decoder[idx - offset]
                if tdec.empty:       # the branches split again
                    xt, _ = tdec(pre[:, :, 0], None, lengths_t.pop(-1))
                else:
                    xt, _ = tdec(xt, saved_t.pop(-1), lengths_t.pop(-1))

        n_src = len(self.sources)
        x = x.view(b, n_src, -1, fq, t) * std[:, None] + mean[:, None]
        x = x.view(b, n_src, -1, 2, fq, t).permute(0, 1, 2, 4, 5, 3)
        x = self._ispec(torch.view_as_complex(x.contiguous()), length)
        xt = xt.view(b, n_src, -1, length) * stdt[:, None] + meant[:, None]
        return xt + x


def hdemucs_low(sources: list[str]) -> HDemucs:
    """HDemucs with nfft 1024 and depth 5 (torchaudio's low configuration)."""
    return HDemucs(sources=sources, nfft=1024, depth=5)


def hdemucs_medium(sources: list[str]) -> HDemucs:
    """HDemucs with nfft 2048 and depth 6."""
    return HDemucs(sources=sources, nfft=2048, depth=6)


def hdemucs_high(sources: list[str]) -> HDemucs:
    """HDemucs with nfft 4096 and depth 6 (torchaudio's pretrained music separation model)."""
    return HDemucs(sources=sources, nfft=4096, depth=6)
