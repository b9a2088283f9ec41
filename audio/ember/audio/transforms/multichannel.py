"""Multichannel transforms: PSD matrices and MVDR beamformers (torchaudio's module names)."""

from __future__ import annotations

from torch import Tensor, nn

from ember.audio.functional import beamforming as FB

__all__ = ["PSD", "RTFMVDR", "SoudenMVDR"]


class PSD(nn.Module):
    """PSD matrices ``[..., freq, channel, channel]`` of a complex ``[..., channel, freq, time]``
    spectrogram, weighted by a time-frequency mask (per channel and averaged if multi_mask)."""

    def __init__(self, multi_mask: bool = False, normalize: bool = True, eps: float = 1e-15):
        super().__init__()
        self.multi_mask, self.normalize, self.eps = multi_mask, normalize, eps

    def forward(self, specgram: Tensor, mask: Tensor | None = None):
        if mask is not None and self.multi_mask:
            mask = mask.mean(dim=-3)
        return FB.psd(specgram, mask, self.normalize, self.eps)


class RTFMVDR(nn.Module):
    """MVDR beamforming from a relative transfer function and the noise PSD."""

    def forward(self, specgram: Tensor, rtf: Tensor, psd_n: Tensor,
                reference_channel: int | Tensor, diagonal_loading: bool = True,
                diag_eps: float = 1e-7, eps: float = 1e-8) -> Tensor:
        weights = FB.mvdr_weights_rtf(rtf, psd_n, reference_channel, diagonal_loading,
                                      diag_eps, eps)
        return FB.apply_beamforming(weights, specgram)


class SoudenMVDR(nn.Module):
    """MVDR beamforming by Souden's solution from the speech and noise PSDs."""

    def forward(self, specgram: Tensor, psd_s: Tensor, psd_n: Tensor,
                reference_channel: int | Tensor, diagonal_loading: bool = True,
                diag_eps: float = 1e-7, eps: float = 1e-8) -> Tensor:
        weights = FB.mvdr_weights_souden(psd_s, psd_n, reference_channel, diagonal_loading,
                                         diag_eps, eps)
        return FB.apply_beamforming(weights, specgram)
