"""Feature helpers with torchaudio's names: spectral centroid, sliding-window cepstral mean
(and variance) normalisation, and the Levenshtein edit distance.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ember.audio.functional.spectral import spectrogram

__all__ = ["edit_distance", "sliding_window_cmn", "spectral_centroid"]


def spectral_centroid(waveform: Tensor, sample_rate: int, pad: int, window: Tensor, n_fft: int,
                      hop_length: int, win_length: int) -> Tensor:
    """Magnitude-weighted mean frequency (Hz) of each STFT frame: ``[..., frames]``."""
    mag = spectrogram(waveform, pad, window, n_fft, hop_length, win_length, 1.0, False)
    freqs = torch.linspace(0, sample_rate // 2, 1 + n_fft // 2, device=mag.device,
                           dtype=mag.dtype).unsqueeze(-1)
    return (freqs * mag).sum(-2) / mag.sum(-2)


def _cmn_windows(num_frames: int, cmn_window: int, min_cmn_window: int,
                 center: bool) -> tuple[list[int], list[int]]:
    """Kaldi's window ``[start, end)`` of frames whose statistics normalise frame ``t``."""
    starts, ends = [], []
    for t in range(num_frames):
        if center:
            start = t - cmn_window // 2
            end = start + cmn_window
        else:
            start, end = t - cmn_window, t + 1
        if start < 0:
            end, start = end - start, 0
        if not center and end > t:
            end = max(t + 1, min_cmn_window)
        if end > num_frames:
            start, end = max(start - (end - num_frames), 0), num_frames
        starts.append(start)
        ends.append(end)
    return starts, ends


def sliding_window_cmn(specgram: Tensor, cmn_window: int = 600, min_cmn_window: int = 100,
                       center: bool = False, norm_vars: bool = False) -> Tensor:
    """Subtract from each frame of ``[..., frames, feats]`` the mean over a sliding window of
    frames (Kaldi's apply-cmvn-sliding); ``norm_vars`` also divides by the window's std."""
    if specgram.ndim < 2:
        raise ValueError(f"specgram must be (..., frames, feats), got {tuple(specgram.shape)}")
    num_frames = specgram.shape[-2]
    starts, ends = _cmn_windows(num_frames, cmn_window, min_cmn_window, center)
    device = specgram.device
    start = torch.tensor(starts, device=device)
    end = torch.tensor(ends, device=device)
    count = (end - start).to(torch.float64).unsqueeze(-1)
    # window sums as differences of a float64 running sum (exact enough for any length)
    wide = specgram.to(torch.float64)
    zero = torch.zeros_like(wide[..., :1, :])
    csum = torch.cat([zero, wide.cumsum(-2)], -2)
    mean = (csum.index_select(-2, end) - csum.index_select(-2, start)) / count
    out = wide - mean
    if norm_vars:
        csq = torch.cat([zero, wide.square().cumsum(-2)], -2)
        var = (csq.index_select(-2, end) - csq.index_select(-2, start)) / count - mean.square()
        out = torch.where(count == 1, torch.zeros_like(out), out * var.rsqrt())
    return out.to(specgram.dtype)


def edit_distance(seq1: Sequence, seq2: Sequence) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions from seq1 to
    seq2 (compared element by element, e.g. words of a transcript)."""
    prev = list(range(len(seq2) + 1))
    for i, a in enumerate(seq1, 1):
        cur = [i] + [0] * len(seq2)
        for j, b in enumerate(seq2, 1):
            cur[j] = prev[j - 1] if a == b else 1 + min(prev[j - 1], prev[j], cur[j - 1])
        prev = cur
    return prev[-1]
