"""Multichannel transforms: PSD matrices and MVDR beamformers (torchaudio's module names)."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from ember.audio.functional import beamforming as FB

__all__ = ["MVDR", "PSD", "RTFMVDR", "SoudenMVDR"]


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


_SOLUTIONS = ("ref_channel", "stv_evd", "stv_power")


def _mvdr_weights(psd_s: Tensor, psd_n: Tensor, ref: Tensor, solution: str, diag_loading: bool,
                  diag_eps: float, eps: float = 1e-8) -> Tensor:
    """Beamforming weights ``(..., freq, channel)`` by Souden's formula or a steering vector."""
    if solution == "ref_channel":
        return FB.mvdr_weights_souden(psd_s, psd_n, ref, diag_loading, diag_eps, eps)
    if solution == "stv_evd":
        stv = FB.rtf_evd(psd_s)
    else:
        stv = FB.rtf_power(psd_s, psd_n, ref, diagonal_loading=diag_loading, diag_eps=diag_eps)
    return FB.mvdr_weights_rtf(stv, psd_n, ref, diag_loading, diag_eps, eps)


class MVDR(nn.Module):
    """Mask-based MVDR beamformer (torchaudio's legacy module), computed in complex128; with
    ``online`` the PSDs are running mask-weighted averages kept in buffers across calls."""

    def __init__(self, ref_channel: int = 0, solution: str = "ref_channel",
                 multi_mask: bool = False, diag_loading: bool = True, diag_eps: float = 1e-7,
                 online: bool = False):
        super().__init__()
        if solution not in _SOLUTIONS:
            raise ValueError(f"solution must be one of {list(_SOLUTIONS)}, got {solution!r}")
        self.ref_channel, self.solution, self.multi_mask = ref_channel, solution, multi_mask
        self.diag_loading, self.diag_eps, self.online = diag_loading, diag_eps, online
        self.psd = PSD(multi_mask)
        for name in ("psd_s", "psd_n", "mask_sum_s", "mask_sum_n"):
            self.register_buffer(name, torch.zeros(1))

    def _online_weights(self, psd_s: Tensor, psd_n: Tensor, mask_s: Tensor, mask_n: Tensor,
                        ref: Tensor) -> Tensor:
        """Fold this call's PSDs into the running averages, then compute the weights."""
        if self.multi_mask:
            mask_s, mask_n = mask_s.mean(dim=-3), mask_n.mean(dim=-3)
        sum_s, sum_n = mask_s.sum(dim=-1), mask_n.sum(dim=-1)
        if self.psd_s.ndim != 1:
            total_s, total_n = self.mask_sum_s + sum_s, self.mask_sum_n + sum_n
            psd_s = (self.psd_s * (self.mask_sum_s / total_s)[..., None, None]
                     + psd_s * (1 / total_s)[..., None, None])
            psd_n = (self.psd_n * (self.mask_sum_n / total_n)[..., None, None]
                     + psd_n * (1 / total_n)[..., None, None])
            sum_s, sum_n = total_s, total_n
        self.psd_s, self.psd_n, self.mask_sum_s, self.mask_sum_n = psd_s, psd_n, sum_s, sum_n
        return _mvdr_weights(psd_s, psd_n, ref, self.solution, self.diag_loading, self.diag_eps)

    def forward(self, specgram: Tensor, mask_s: Tensor, mask_n: Tensor | None = None) -> Tensor:
        """Enhanced ``(..., freq, time)`` spectrum of complex ``(..., channel, freq, time)``."""
        if specgram.ndim < 3:
            raise ValueError("specgram must be a (..., channel, freq, time) tensor, got "
                             f"{tuple(specgram.shape)}")
        if not specgram.is_complex():
            raise ValueError(f"specgram must be complex (cfloat or cdouble), got {specgram.dtype}")
        dtype = specgram.dtype
        if dtype == torch.cfloat:
            specgram = specgram.cdouble()
        if mask_n is None:
            warnings.warn("mask_n is not given: using 1 - mask_s", stacklevel=2)
            mask_n = 1 - mask_s
        psd_s, psd_n = self.psd(specgram, mask_s), self.psd(specgram, mask_n)
        ref = torch.zeros(specgram.shape[:-2], dtype=torch.cdouble, device=specgram.device)
        ref[..., self.ref_channel] = 1
        if self.online:
            weights = self._online_weights(psd_s, psd_n, mask_s, mask_n, ref)
        else:
            weights = _mvdr_weights(psd_s, psd_n, ref, self.solution, self.diag_loading,
                                    self.diag_eps)
        return FB.apply_beamforming(weights, specgram).to(dtype)
