"""Feature helpers with torchaudio's names: spectral centroid, sliding-window cepstral mean
(and variance) normalisation, ITU-R BS.1770 loudness, NCCF pitch detection and the
Levenshtein edit distance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ember.audio.functional.filtering import highpass_biquad, treble_biquad
from ember.audio.functional.spectral import spectrogram

__all__ = ["detect_pitch_frequency", "edit_distance", "loudness", "sliding_window_cmn",
           "spectral_centroid"]

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


def _nccf(rows: Tensor, sample_rate: int, frame_time: float, freq_low: int) -> Tensor:
    """torchaudio's normalised cross-correlation ``(rows, frames, lags)``: for frame ``f`` and
    lag ``m`` in 1..ceil(sr / freq_low), ``<s, s_m> / (eps + |s|)^2 / (eps + |s_m|)^2`` with
    ``s`` the frame and ``s_m`` the same span ``m`` samples later (zero-padded at the end)."""
    eps = 1e-9
    lags = int(math.ceil(sample_rate / freq_low))
    size = int(math.ceil(sample_rate * frame_time))
    frames = int(math.ceil(rows.shape[-1] / size))
    x = torch.nn.functional.pad(rows, (0, lags + frames * size - rows.shape[-1]))
    head = x[..., :frames * size].unfold(-1, size, size)                # (rows, frames, size)
    spans = x.unfold(-1, size + lags, size)[..., :frames, :]            # frame + every lag
    head_energy = (eps + torch.linalg.vector_norm(head, ord=2, dim=-1)).pow(2)
    # all lags of a few frames at a time: products that stay in cache (measured 2x faster
    # than one pass over every frame), no Python step per lag
    chunk = max(1, (1 << 17) // max(1, rows.shape[0] * lags * size))
    out = []
    for f0 in range(0, frames, chunk):
        shifted = spans[:, f0:f0 + chunk].unfold(-1, size, 1)[..., 1:, :]  # (r, f, lags, n)
        # a contiguous product sums in torchaudio's order (ties between lags of a periodic
        # signal are otherwise decided differently)
        dot = (head[:, f0:f0 + chunk, None, :] * shifted).contiguous().sum(-1)
        energy = (eps + torch.linalg.vector_norm(shifted, ord=2, dim=-1)).pow(2)
        out.append(dot / head_energy[:, f0:f0 + chunk, None] / energy)
    return torch.cat(out, 1)


def detect_pitch_frequency(waveform: Tensor, sample_rate: int, frame_time: float = 10 ** (-2),
                           win_length: int = 30, freq_low: int = 85, freq_high: int = 3400
                           ) -> Tensor:
    """Pitch (Hz, float32) of each frame of ``[..., time]``: the NCCF's best lag (the first
    half's if within 1 % of the best), median-smoothed over ``win_length`` frames.

    As torchaudio: the smoothing pads only on the left, so there are ``win_length - 1 -
    (win_length - 1) // 2`` fewer outputs than frames of ``frame_time`` seconds.
    """
    if not isinstance(waveform, Tensor) or waveform.ndim < 1:
        raise ValueError("waveform must be a tensor of shape (..., time)")
    for name, value in (("sample_rate", sample_rate), ("frame_time", frame_time),
                        ("win_length", win_length), ("freq_low", freq_low),
                        ("freq_high", freq_high)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    lag_min = int(math.ceil(sample_rate / freq_high))
    half = int(math.ceil(sample_rate / freq_low)) // 2
    if lag_min >= half:
        raise ValueError(f"freq_high={freq_high} must be well above freq_low={freq_low}: the "
                         f"shortest lag ({lag_min}) must be below half the longest ({half})")
    shape = waveform.shape
    nccf = _nccf(waveform.reshape(-1, shape[-1]), sample_rate, frame_time, freq_low)
    best, best_lag = torch.max(nccf[..., lag_min:], -1)
    near, near_lag = torch.max(nccf[..., lag_min:half], -1)
    lag = torch.where(near > 0.99 * best, near_lag, best_lag) + lag_min + 1
    # centred median over win_length frames, the first frame repeated on the left
    pad = (win_length - 1) // 2
    frames = lag.shape[-1] + pad
    if frames < win_length:
        raise ValueError(f"waveform is too short for win_length={win_length}: it gives "
                         f"{lag.shape[-1]} frames of {frame_time} s")
    lag = torch.cat([lag[..., :1].expand(-1, pad), lag], -1)
    smoothed = lag.unfold(-1, win_length, 1).median(-1).values
    freq = sample_rate / (1e-9 + smoothed.to(torch.float32))
    return freq.reshape(shape[:-1] + freq.shape[-1:])
