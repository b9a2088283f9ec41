"""Feature transforms: spectral centroid, sliding-window cepstral mean normalisation, loudness."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ember.audio.functional import features as FX
from ember.audio.transforms.spectral import WindowFn, _frame_args

__all__ = ["Loudness", "SlidingWindowCmn", "SpectralCentroid"]


class SpectralCentroid(nn.Module):
    """Magnitude-weighted mean frequency (Hz) of each STFT frame of ``[..., time]``."""

    def __init__(self, sample_rate: int, n_fft: int = 400, win_length: int | None = None,
                 hop_length: int | None = None, pad: int = 0,
                 window_fn: WindowFn = torch.hann_window, wkwargs: dict | None = None) -> None:
        super().__init__()
        self.sample_rate, self.n_fft, self.pad = sample_rate, n_fft, pad
        self.win_length, self.hop_length = _frame_args(n_fft, win_length, hop_length)
        self.register_buffer("window", window_fn(self.win_length, **(wkwargs or {})))

    def forward(self, waveform: Tensor) -> Tensor:
        return FX.spectral_centroid(waveform, self.sample_rate, self.pad, self.window,
                                    self.n_fft, self.hop_length, self.win_length)


class SlidingWindowCmn(nn.Module):
    """Kaldi's sliding-window mean (and variance) normalisation of ``[..., time, feats]``."""

    def __init__(self, cmn_window: int = 600, min_cmn_window: int = 100, center: bool = False,
                 norm_vars: bool = False) -> None:
        super().__init__()
        self.cmn_window, self.min_cmn_window = cmn_window, min_cmn_window
        self.center, self.norm_vars = center, norm_vars

    def forward(self, specgram: Tensor) -> Tensor:
        return FX.sliding_window_cmn(specgram, self.cmn_window, self.min_cmn_window,
                                     self.center, self.norm_vars)


class Loudness(nn.Module):
    """Integrated loudness (LKFS, ITU-R BS.1770-4) of ``[..., channels, time]``."""

    def __init__(self, sample_rate: int):
        super().__init__()
        self.sample_rate = sample_rate

    def forward(self, wavefrom: Tensor):   # torchaudio's parameter name, typo included
        return FX.loudness(wavefrom, self.sample_rate)
