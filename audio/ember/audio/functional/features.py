"""Feature helpers with torchaudio's names: spectral centroid, sliding-window cepstral mean
(and variance) normalisation, ITU-R BS.1770 loudness and the Levenshtein edit distance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ember.audio.functional.filtering import highpass_biquad, treble_biquad
from ember.audio.functional.spectral import spectrogram

__all__ = ["edit_distance", "loudness", "sliding_window_cmn", "spectral_centroid"]

# ITU-R BS.1770-4 channel weights (L, R, C, Ls, Rs)
_BS1770_WEIGHTS = (1.0, 1.0, 1.0, 1.41, 1.41)


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


def _gated_mean(energy: Tensor, gate: Tensor) -> Tensor:
    """Mean over the blocks that pass ``gate`` (..., blocks) of ``energy`` (..., ch, blocks)."""
    gate = gate.unsqueeze(-2)
    return (gate * energy).sum(-1) / torch.count_nonzero(gate, dim=-1)


def loudness(waveform: Tensor, sample_rate: int):
    """Integrated loudness in LKFS of ``[..., channels, time]`` (ITU-R BS.1770-4): K-weighting,
    400 ms blocks with 75 % overlap, an absolute gate at -70 LKFS and a relative one 10 LU
    below the ungated level. Up to 5 channels."""
    channels = waveform.shape[-2]
    if channels > 5:
        raise ValueError(f"loudness supports up to 5 channels, got {channels}")
    block = int(round(0.4 * sample_rate))
    step = int(round(block * 0.25))
    # K-weighting: a +4 dB shelf above 1.5 kHz, then a 38 Hz high-pass
    k = treble_biquad(waveform, sample_rate, 4.0, 1500.0, 1 / math.sqrt(2))
    k = highpass_biquad(k, sample_rate, 38.0, 0.5)
    energy = k.square().unfold(-1, block, step).mean(-1)          # (..., ch, blocks)
    weights = torch.tensor(_BS1770_WEIGHTS[:channels], dtype=k.dtype, device=k.device)
    block_lkfs = -0.691 + 10 * torch.log10((weights.unsqueeze(-1) * energy).sum(-2))
    absolute = block_lkfs > -70.0
    ungated = -0.691 + 10 * torch.log10((weights * _gated_mean(energy, absolute)).sum(-1))
    relative = absolute & (block_lkfs > (ungated - 10).unsqueeze(-1))
    return -0.691 + 10 * torch.log10((weights * _gated_mean(energy, relative)).sum(-1))
