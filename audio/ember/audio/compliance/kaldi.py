"""Kaldi-compatible features with torchaudio.compliance.kaldi's names, defaults and outputs:
``spectrogram``, ``fbank`` and ``mfcc`` (compute-spectrogram-feats, compute-fbank-feats,
compute-mfcc-feats) and the mel/VTLN helpers they use.

Input is ``(channels, samples)``; one channel is analysed and the result is
``(frames, features)``. Frames are Kaldi's (25 ms every 10 ms by default, ``snip_edges``
or reflected ends), with dither, DC removal, pre-emphasis and the Povey window. The mel
filterbank, DCT and lifter are computed in float32 as Kaldi's BaseFloat (and torchaudio)
do, then cast to the input's dtype.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "fbank",
    "get_mel_banks",
    "inverse_mel_scale",
    "inverse_mel_scale_scalar",
    "mel_scale",
    "mel_scale_scalar",
    "mfcc",
    "spectrogram",
    "vtln_warp_freq",
    "vtln_warp_mel_freq",
]

# std::numeric_limits<float>::epsilon(): Kaldi's floor on energies before a log
EPSILON = torch.tensor(torch.finfo(torch.float32).eps)
MILLISECONDS_TO_SECONDS = 0.001

HAMMING = "hamming"
HANNING = "hanning"
POVEY = "povey"
RECTANGULAR = "rectangular"
BLACKMAN = "blackman"
WINDOWS = [HAMMING, HANNING, POVEY, RECTANGULAR, BLACKMAN]


def _epsilon(device: torch.device, dtype: torch.dtype) -> Tensor:
    return EPSILON.to(device=device, dtype=dtype)


def _next_power_of_2(x: int) -> int:
    """The smallest power of 2 not below ``x`` (1 for 0)."""
    return 1 if x == 0 else 2 ** (x - 1).bit_length()


def _frames(waveform: Tensor, size: int, shift: int, snip_edges: bool) -> Tensor:
    """Kaldi's frames ``(m, size)`` of a 1-D signal: only whole frames (``snip_edges``), or
    ``(n + shift // 2) // shift`` frames over the signal mirrored at both ends."""
    n = waveform.shape[0]
    if snip_edges:
        if n < size:
            return waveform.new_empty((0, size))
        return waveform.unfold(0, size, shift)
    count = (n + shift // 2) // shift
    pad = size // 2 - shift // 2
    mirrored = waveform.flip(0)
    if pad > 0:   # Kaldi mirrors including the edge sample: [2, 1, 0, 0, 1, 2]
        padded = torch.cat((mirrored[-pad:], waveform, mirrored))
    else:
        padded = torch.cat((waveform[-pad:], mirrored))
    return padded.unfold(0, size, shift)[:count]


def _window(window_type: str, size: int, blackman_coeff: float, device: torch.device,
            dtype: torch.dtype) -> Tensor:
    """Kaldi's symmetric analysis windows; ``povey`` is Hann to the power 0.85."""
    if window_type == HANNING:
        return torch.hann_window(size, periodic=False, device=device, dtype=dtype)
    if window_type == HAMMING:
        return torch.hamming_window(size, periodic=False, alpha=0.54, beta=0.46, device=device,
                                    dtype=dtype)
    if window_type == POVEY:
        return torch.hann_window(size, periodic=False, device=device, dtype=dtype).pow(0.85)
    if window_type == RECTANGULAR:
        return torch.ones(size, device=device, dtype=dtype)
    if window_type == BLACKMAN:
        step = 2 * math.pi / (size - 1)
        n = torch.arange(size, device=device, dtype=dtype)
        return (blackman_coeff - 0.5 * torch.cos(step * n)
                + (0.5 - blackman_coeff) * torch.cos(2 * step * n)).to(dtype)
    raise ValueError(f"window_type must be one of {WINDOWS}, got {window_type!r}")


def _log_energy(frames: Tensor, energy_floor: float) -> Tensor:
    """log(sum of squares) of each frame, floored at float eps and at ``log(energy_floor)``."""
    energy = torch.max(frames.pow(2).sum(1), _epsilon(frames.device, frames.dtype)).log()
    if energy_floor == 0.0:
        return energy
    return torch.max(energy, torch.tensor(math.log(energy_floor), device=frames.device,
                                          dtype=frames.dtype))


def _select_channel(waveform: Tensor, channel: int, sample_frequency: float, frame_shift: float,
                    frame_length: float, round_to_power_of_two: bool,
                    preemphasis_coefficient: float) -> tuple[Tensor, int, int, int]:
    """The analysed channel and the frame shift, frame size and FFT size in samples."""
    if not isinstance(waveform, Tensor) or waveform.ndim != 2:
        raise ValueError(f"waveform must be a (channels, samples) tensor, got "
                         f"{tuple(getattr(waveform, 'shape', ()))}")
    if not waveform.is_floating_point():
        raise TypeError(f"waveform must be floating point, got {waveform.dtype}")
    channel = max(channel, 0)
    if channel >= waveform.shape[0]:
        raise ValueError(f"channel {channel} does not exist in a waveform of "
                         f"{waveform.shape[0]} channel(s)")
    if sample_frequency <= 0:
        raise ValueError(f"sample_frequency must be positive, got {sample_frequency}")
    samples = waveform[channel]
    shift = int(sample_frequency * frame_shift * MILLISECONDS_TO_SECONDS)
    size = int(sample_frequency * frame_length * MILLISECONDS_TO_SECONDS)
    padded = _next_power_of_2(size) if round_to_power_of_two else size
    if not 2 <= size <= samples.shape[0]:
        raise ValueError(f"frame_length={frame_length} ms gives a window of {size} samples; "
                         f"it must be in [2, {samples.shape[0]}] (the signal's length)")
    if shift <= 0:
        raise ValueError(f"frame_shift={frame_shift} ms gives a shift of {shift} samples; "
                         f"it must be at least one")
    if padded % 2:
        raise ValueError(f"the FFT size {padded} must be even: use round_to_power_of_two or "
                         f"change frame_length")
    if not 0.0 <= preemphasis_coefficient <= 1.0:
        raise ValueError(f"preemphasis_coefficient must be in [0, 1], "
                         f"got {preemphasis_coefficient}")
    return samples, shift, size, padded


def _windowed_frames(samples: Tensor, padded: int, size: int, shift: int, window_type: str,
                     blackman_coeff: float, snip_edges: bool, raw_energy: bool,
                     energy_floor: float, dither: float, remove_dc_offset: bool,
                     preemphasis_coefficient: float) -> tuple[Tensor, Tensor]:
    """Frames after dither, DC removal, pre-emphasis and the window, zero-padded to the FFT
    size ``(m, padded)``, and each frame's log energy (before or after those steps)."""
    frames = _frames(samples, size, shift, snip_edges)
    if dither != 0.0:
        frames = frames + torch.randn(frames.shape, device=frames.device,
                                      dtype=frames.dtype) * dither
    if remove_dc_offset:
        frames = frames - frames.mean(dim=1, keepdim=True)
    if raw_energy:
        energy = _log_energy(frames, energy_floor)
    if preemphasis_coefficient != 0.0:
        previous = torch.cat((frames[:, :1], frames[:, :-1]), 1)   # x[max(0, j - 1)]
        frames = frames - preemphasis_coefficient * previous
    frames = frames * _window(window_type, size, blackman_coeff, frames.device,
                              frames.dtype).unsqueeze(0)
    if padded != size:
        frames = torch.nn.functional.pad(frames, (0, padded - size))
    if not raw_energy:
        energy = _log_energy(frames, energy_floor)
    return frames, energy


def _subtract_column_mean(features: Tensor, subtract_mean: bool) -> Tensor:
    return features - features.mean(dim=0, keepdim=True) if subtract_mean else features


def spectrogram(waveform: Tensor, blackman_coeff: float = 0.42, channel: int = -1,
                dither: float = 0.0, energy_floor: float = 1.0, frame_length: float = 25.0,
                frame_shift: float = 10.0, min_duration: float = 0.0,
                preemphasis_coefficient: float = 0.97, raw_energy: bool = True,
                remove_dc_offset: bool = True, round_to_power_of_two: bool = True,
                sample_frequency: float = 16000.0, snip_edges: bool = True,
                subtract_mean: bool = False, window_type: str = POVEY) -> Tensor:
    """Kaldi's log power spectrogram ``(frames, fft_size // 2 + 1)``; column 0 holds each
    frame's log energy (compute-spectrogram-feats)."""
    samples, shift, size, padded = _select_channel(
        waveform, channel, sample_frequency, frame_shift, frame_length, round_to_power_of_two,
        preemphasis_coefficient)
    if samples.shape[0] < min_duration * sample_frequency:
        return torch.empty(0)   # too short (torchaudio's float32, CPU empty tensor)
    frames, energy = _windowed_frames(samples, padded, size, shift, window_type, blackman_coeff,
                                      snip_edges, raw_energy, energy_floor, dither,
                                      remove_dc_offset, preemphasis_coefficient)
    power = torch.fft.rfft(frames).abs().pow(2.0)
    power = torch.max(power, _epsilon(power.device, power.dtype)).log()
    power = torch.cat((energy.unsqueeze(1), power[:, 1:]), 1)
    return _subtract_column_mean(power, subtract_mean)


def inverse_mel_scale_scalar(mel_freq: float) -> float:
    """Mel -> Hz on Kaldi's scale: ``700 (exp(mel / 1127) - 1)``."""
    return 700.0 * (math.exp(mel_freq / 1127.0) - 1.0)


def inverse_mel_scale(mel_freq: Tensor) -> Tensor:
    """Mel -> Hz on Kaldi's scale, elementwise."""
    return 700.0 * ((mel_freq / 1127.0).exp() - 1.0)


def mel_scale_scalar(freq: float) -> float:
    """Hz -> mel on Kaldi's scale: ``1127 ln(1 + f / 700)``."""
    return 1127.0 * math.log(1.0 + freq / 700.0)


def mel_scale(freq: Tensor) -> Tensor:
    """Hz -> mel on Kaldi's scale, elementwise."""
    return 1127.0 * (1.0 + freq / 700.0).log()


def vtln_warp_freq(vtln_low_cutoff: float, vtln_high_cutoff: float, low_freq: float,
                   high_freq: float, vtln_warp_factor: float, freq: Tensor) -> Tensor:
    """Kaldi's VTLN warp: ``f / vtln_warp_factor`` between two inflection points, linear to
    ``low_freq`` and ``high_freq`` outside them (which stay fixed), identity beyond those."""
    if not vtln_low_cutoff > low_freq:
        raise ValueError(f"vtln_low_cutoff={vtln_low_cutoff} must be above "
                         f"low_freq={low_freq}")
    if not vtln_high_cutoff < high_freq:
        raise ValueError(f"vtln_high_cutoff={vtln_high_cutoff} must be below "
                         f"high_freq={high_freq}")
    lower = vtln_low_cutoff * max(1.0, vtln_warp_factor)
    upper = vtln_high_cutoff * min(1.0, vtln_warp_factor)
    scale = 1.0 / vtln_warp_factor
    if not (lower > low_freq and upper < high_freq):
        raise ValueError(f"vtln_warp_factor={vtln_warp_factor} moves the inflection points "
                         f"({lower}, {upper}) outside ({low_freq}, {high_freq})")
    scale_left = (scale * lower - low_freq) / (lower - low_freq)
    scale_right = (high_freq - scale * upper) / (high_freq - upper)
    outside = torch.lt(freq, low_freq) | torch.gt(freq, high_freq)
    return torch.where(outside, freq, torch.where(
        torch.lt(freq, lower), low_freq + scale_left * (freq - low_freq), torch.where(
            torch.lt(freq, upper), scale * freq, high_freq + scale_right * (freq - high_freq))))


def vtln_warp_mel_freq(vtln_low_cutoff: float, vtln_high_cutoff: float, low_freq,
                       high_freq: float, vtln_warp_factor: float, mel_freq: Tensor) -> Tensor:
    """:func:`vtln_warp_freq` applied to mel frequencies (mel -> Hz -> warp -> mel)."""
    return mel_scale(vtln_warp_freq(vtln_low_cutoff, vtln_high_cutoff, low_freq, high_freq,
                                    vtln_warp_factor, inverse_mel_scale(mel_freq)))


def get_mel_banks(num_bins: int, window_length_padded: int, sample_freq: float,
                  low_freq: float, high_freq: float, vtln_low: float, vtln_high: float,
                  vtln_warp_factor: float) -> tuple[Tensor, Tensor]:
    """Kaldi's triangular mel filters ``(num_bins, window_length_padded // 2)`` (float32, the
    Nyquist bin left out) and their centre frequencies ``(num_bins, 1)`` in Hz."""
    if num_bins <= 3:
        raise ValueError(f"num_mel_bins must be at least 4, got {num_bins}")
    if window_length_padded % 2:
        raise ValueError(f"window_length_padded must be even, got {window_length_padded}")
    nyquist = 0.5 * sample_freq
    if high_freq <= 0.0:
        high_freq += nyquist
    if not (0.0 <= low_freq < nyquist and 0.0 < high_freq <= nyquist and low_freq < high_freq):
        raise ValueError(f"low_freq={low_freq} and high_freq={high_freq} must satisfy "
                         f"0 <= low_freq < high_freq <= nyquist={nyquist}")
    if vtln_high < 0.0:
        vtln_high += nyquist
    if vtln_warp_factor != 1.0 and not (low_freq < vtln_low < high_freq
                                        and 0.0 < vtln_high < high_freq
                                        and vtln_low < vtln_high):
        raise ValueError(f"vtln_low={vtln_low} and vtln_high={vtln_high} must satisfy "
                         f"low_freq={low_freq} < vtln_low < vtln_high < high_freq={high_freq}")
    mel_low, mel_high = mel_scale_scalar(low_freq), mel_scale_scalar(high_freq)
    # divided by num_bins + 1: the outer filters spread half a step beyond the range
    delta = (mel_high - mel_low) / (num_bins + 1)
    index = torch.arange(num_bins).unsqueeze(1)                       # float32 from here on
    left = mel_low + index * delta
    center = mel_low + (index + 1.0) * delta
    right = mel_low + (index + 2.0) * delta
    if vtln_warp_factor != 1.0:
        left, center, right = (vtln_warp_mel_freq(vtln_low, vtln_high, low_freq, high_freq,
                                                  vtln_warp_factor, m)
                               for m in (left, center, right))
    center_freqs = inverse_mel_scale(center)
    mel = mel_scale(sample_freq / window_length_padded
                    * torch.arange(window_length_padded / 2)).unsqueeze(0)
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    if vtln_warp_factor == 1.0:
        return torch.max(torch.zeros(1), torch.min(up, down)), center_freqs
    # warping can reorder left, center and right: take each slope only on its own side
    rising = torch.gt(mel, left) & torch.le(mel, center)
    falling = torch.gt(mel, center) & torch.lt(mel, right)
    banks = torch.where(rising, up, torch.where(falling, down, torch.zeros_like(up)))
    return banks, center_freqs


def fbank(waveform: Tensor, blackman_coeff: float = 0.42, channel: int = -1,
          dither: float = 0.0, energy_floor: float = 1.0, frame_length: float = 25.0,
          frame_shift: float = 10.0, high_freq: float = 0.0, htk_compat: bool = False,
          low_freq: float = 20.0, min_duration: float = 0.0, num_mel_bins: int = 23,
          preemphasis_coefficient: float = 0.97, raw_energy: bool = True,
          remove_dc_offset: bool = True, round_to_power_of_two: bool = True,
          sample_frequency: float = 16000.0, snip_edges: bool = True,
          subtract_mean: bool = False, use_energy: bool = False, use_log_fbank: bool = True,
          use_power: bool = True, vtln_high: float = -500.0, vtln_low: float = 100.0,
          vtln_warp: float = 1.0, window_type: str = POVEY) -> Tensor:
    """Kaldi's (log) mel filterbank energies ``(frames, num_mel_bins + use_energy)``; the log
    energy comes first, or last with ``htk_compat`` (compute-fbank-feats)."""
    device, dtype = waveform.device, waveform.dtype
    samples, shift, size, padded = _select_channel(
        waveform, channel, sample_frequency, frame_shift, frame_length, round_to_power_of_two,
        preemphasis_coefficient)
    if samples.shape[0] < min_duration * sample_frequency:
        return torch.empty(0, device=device, dtype=dtype)
    frames, energy = _windowed_frames(samples, padded, size, shift, window_type, blackman_coeff,
                                      snip_edges, raw_energy, energy_floor, dither,
                                      remove_dc_offset, preemphasis_coefficient)
    spectrum = torch.fft.rfft(frames).abs()
    if use_power:
        spectrum = spectrum.pow(2.0)
    banks, _ = get_mel_banks(num_mel_bins, padded, sample_frequency, low_freq, high_freq,
                             vtln_low, vtln_high, vtln_warp)
    banks = torch.nn.functional.pad(banks.to(device=device, dtype=dtype), (0, 1))
    mel = torch.mm(spectrum, banks.T)
    if use_log_fbank:
        mel = torch.max(mel, _epsilon(device, dtype)).log()
    if use_energy:
        pair = (mel, energy.unsqueeze(1)) if htk_compat else (energy.unsqueeze(1), mel)
        mel = torch.cat(pair, dim=1)
    return _subtract_column_mean(mel, subtract_mean)


def _dct_matrix(num_ceps: int, num_mel_bins: int) -> Tensor:
    """Kaldi's DCT ``(num_mel_bins, num_ceps)``: orthonormal DCT-II columns in float32, the
    first scaled ``sqrt(1 / num_mel_bins)``."""
    n = torch.arange(float(num_mel_bins))
    k = torch.arange(float(num_ceps)).unsqueeze(1)
    dct = torch.cos(math.pi / float(num_mel_bins) * (n + 0.5) * k) * math.sqrt(
        2.0 / float(num_mel_bins))
    dct[0] = math.sqrt(1 / float(num_mel_bins))
    return dct.t()


def _lifter(num_ceps: int, cepstral_lifter: float) -> Tensor:
    """Kaldi's sine lifter ``1 + L/2 sin(pi i / L)`` (C0 is left unchanged)."""
    i = torch.arange(num_ceps)
    return 1.0 + 0.5 * cepstral_lifter * torch.sin(math.pi * i / cepstral_lifter)


def mfcc(waveform: Tensor, blackman_coeff: float = 0.42, cepstral_lifter: float = 22.0,
         channel: int = -1, dither: float = 0.0, energy_floor: float = 1.0,
         frame_length: float = 25.0, frame_shift: float = 10.0, high_freq: float = 0.0,
         htk_compat: bool = False, low_freq: float = 20.0, num_ceps: int = 13,
         min_duration: float = 0.0, num_mel_bins: int = 23,
         preemphasis_coefficient: float = 0.97, raw_energy: bool = True,
         remove_dc_offset: bool = True, round_to_power_of_two: bool = True,
         sample_frequency: float = 16000.0, snip_edges: bool = True,
         subtract_mean: bool = False, use_energy: bool = False, vtln_high: float = -500.0,
         vtln_low: float = 100.0, vtln_warp: float = 1.0, window_type: str = POVEY) -> Tensor:
    """Kaldi's MFCCs ``(frames, num_ceps)``: DCT of the log mel energies, liftered; with
    ``use_energy`` C0 is replaced by the log energy; ``htk_compat`` moves C0 last
    (compute-mfcc-feats)."""
    if num_ceps > num_mel_bins:
        raise ValueError(f"num_ceps={num_ceps} cannot exceed num_mel_bins={num_mel_bins}")
    device, dtype = waveform.device, waveform.dtype
    feature = fbank(waveform, blackman_coeff, channel, dither, energy_floor, frame_length,
                    frame_shift, high_freq, htk_compat, low_freq, min_duration, num_mel_bins,
                    preemphasis_coefficient, raw_energy, remove_dc_offset,
                    round_to_power_of_two, sample_frequency, snip_edges, subtract_mean=False,
                    use_energy=use_energy, use_log_fbank=True, use_power=True,
                    vtln_high=vtln_high, vtln_low=vtln_low, vtln_warp=vtln_warp,
                    window_type=window_type)
    if use_energy:
        energy = feature[:, num_mel_bins if htk_compat else 0]
        first = int(not htk_compat)
        feature = feature[:, first:first + num_mel_bins]
    feature = feature.matmul(_dct_matrix(num_ceps, num_mel_bins).to(dtype=dtype,
                                                                    device=device))
    if cepstral_lifter != 0.0:
        feature = feature * _lifter(num_ceps, cepstral_lifter).unsqueeze(0).to(
            dtype=dtype, device=device)
    if use_energy:
        feature = torch.cat((energy.unsqueeze(1), feature[:, 1:]), 1)
    if htk_compat:
        c0 = feature[:, :1]
        if not use_energy:
            c0 = c0 * math.sqrt(2)   # undo the DCT's C0 scale, as HTK defines C0
        feature = torch.cat((feature[:, 1:], c0), 1)
    return _subtract_column_mean(feature, subtract_mean)
