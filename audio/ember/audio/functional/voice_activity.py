"""Voice activity detection with torchaudio's ``vad`` (SoX's ``vad`` effect): trims the
silence and quiet noise before the first speech of a recording.

Each measurement (``measure_freq`` per second) is a cepstral power of a noise-reduced,
smoothed spectrum. The FFTs of a run of measurements are batched; the smoothing and the
adaptive noise estimate step from one measurement to the next over all channels and bins at
once, and the trigger logic runs on the few resulting numbers per measurement. Like SoX and
torchaudio the detector works in float32 whatever the input's dtype; the output is a slice
of the input.
"""

from __future__ import annotations

import math
import struct

import torch
from torch import Tensor

__all__ = ["vad"]

# measurements analysed per batch of FFTs; speech usually triggers within the first ones
_FIRST_CHUNK, _MAX_CHUNK = 16, 256


def _f32(value: float) -> float:
    """``value`` rounded to float32, as torchaudio's float32 state tensors hold it."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _scaled_hann(length: int, device: torch.device) -> Tensor:
    """SoX's analysis window: ``2 / sqrt(length)`` times a periodic Hann window (float32)."""
    scale = torch.full((length,), 2.0 / math.sqrt(float(length)), device=device)
    return scale * torch.hann_window(length, device=device, dtype=torch.float32)


def vad(waveform: Tensor, sample_rate: int, trigger_level: float = 7.0,
        trigger_time: float = 0.25, search_time: float = 1.0, allowed_gap: float = 0.25,
        pre_trigger_time: float = 0.0, boot_time: float = 0.35, noise_up_time: float = 0.1,
        noise_down_time: float = 0.01, noise_reduction_amount: float = 1.35,
        measure_freq: float = 20.0, measure_duration: float | None = None,
        measure_smooth_time: float = 0.4, hp_filter_freq: float = 50.0,
        lp_filter_freq: float = 6000.0, hp_lifter_freq: float = 150.0,
        lp_lifter_freq: float = 2000.0) -> Tensor:
    """Trim ``(channels, time)`` or ``(time,)`` audio up to its first voice activity (earliest
    over the channels, which are one recording), keeping quieter bursts found up to
    ``search_time`` before the trigger and ``pre_trigger_time`` more. Trim the end by flipping.

    Leading dims beyond one are flattened into channels, as in torchaudio.
    """
    if not isinstance(waveform, Tensor) or waveform.ndim < 1:
        raise ValueError("waveform must be a tensor of shape (channels, time) or (time,)")
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    if measure_freq <= 0:
        raise ValueError(f"measure_freq must be positive, got {measure_freq}")
    device = waveform.device
    duration = 2.0 / measure_freq if measure_duration is None else measure_duration
    measure_len = int(sample_rate * duration + 0.5)
    dft_len = 16
    while dft_len < measure_len:
        dft_len *= 2
    period = int(sample_rate / measure_freq + 0.5)
    if measure_len < 1 or period < 1:
        raise ValueError(f"measure_duration and measure_freq must give windows of at least "
                         f"one sample at {sample_rate} Hz")
    measures_len = math.ceil(search_time * measure_freq)
    if measures_len < 1:
        raise ValueError(f"search_time must cover at least one measurement, got {search_time}")
    gap_len = int(allowed_gap * measure_freq + 0.5)
    fixed_pre_trigger = int(pre_trigger_time * sample_rate + 0.5)
    kept_len = fixed_pre_trigger + measures_len * period + measure_len

    spec_lo = max(int(hp_filter_freq / sample_rate * dft_len + 0.5), 1)
    spec_hi = min(int(lp_filter_freq / sample_rate * dft_len + 0.5), dft_len // 2)
    if spec_hi <= spec_lo:
        raise ValueError(f"hp_filter_freq={hp_filter_freq} must be below "
                         f"lp_filter_freq={lp_filter_freq} (and the Nyquist frequency)")
    ceps_lo = math.ceil(sample_rate * 0.5 / lp_lifter_freq)
    ceps_hi = min(math.floor(sample_rate * 0.5 / hp_lifter_freq), dft_len // 4)
    if ceps_hi <= ceps_lo:
        raise ValueError(f"hp_lifter_freq={hp_lifter_freq} must be well below "
                         f"lp_lifter_freq={lp_lifter_freq}: the cepstral band "
                         f"[{ceps_lo}, {ceps_hi}) is empty")
    spectrum_window = _scaled_hann(measure_len, device)
    cepstrum_window = _scaled_hann(spec_hi - spec_lo, device)
    noise_up = torch.tensor(math.exp(-1.0 / (noise_up_time * measure_freq)), device=device)
    noise_down = torch.tensor(math.exp(-1.0 / (noise_down_time * measure_freq)), device=device)
    smooth_mult = math.exp(-1.0 / (measure_smooth_time * measure_freq))
    trigger_mult = _f32(math.exp(-1.0 / (trigger_time * measure_freq)))
    trigger = _f32(trigger_level)
    boot_max = int(boot_time * measure_freq - 0.5)

    shape = waveform.shape
    rows = waveform.reshape(-1, shape[-1])
    channels, length = rows.shape
    ends = range(measure_len, length, period)          # each measurement's last sample + 1
    spectrum = torch.zeros(channels, spec_hi - spec_lo, device=device)
    noise = torch.zeros_like(spectrum)
    mean_meas = [0.0] * channels
    measures = [[0.0] * measures_len for _ in range(channels)]
    boot = index = 0
    triggered, to_flush, pos = False, 0, 0
    frames = rows.unfold(-1, measure_len, period) if len(ends) else None
    start, chunk = 0, _FIRST_CHUNK
    while start < len(ends) and not triggered:
        stop = min(len(ends), start + chunk)
        chunk = min(2 * chunk, _MAX_CHUNK)
        block, start = range(start, stop), stop
        windowed = (frames[:, block.start:block.stop] * spectrum_window).to(torch.float32)
        mags = torch.fft.rfft(windowed, n=dft_len).abs()[..., spec_lo:spec_hi]
        reduced = []
        for k in range(len(block)):
            mult = boot / (1.0 + boot) if boot >= 0 else smooth_mult
            spectrum = spectrum * mult + mags[:, k] * (1 - mult)
            power = spectrum ** 2
            if boot >= 0:      # the noise estimate starts as the spectrum itself
                noise = power.clone()
            else:
                up = torch.where(power > noise, noise_up, noise_down)
                noise = noise * up + power * (1 - up)
            reduced.append(torch.clamp_min(power - noise_reduction_amount * noise, 0).sqrt())
            if boot >= 0:
                boot = -1 if boot == boot_max else boot + 1
        # the liftered band sits at its bins [spec_lo, spec_hi) of a dft_len / 2 buffer
        lifted = torch.nn.functional.pad(torch.stack(reduced, 1) * cepstrum_window,
                                         (spec_lo, dft_len // 2 - spec_hi))
        ceps = torch.fft.rfft(lifted)[..., ceps_lo:ceps_hi]
        powers = ceps.abs().pow(2).sum(-1).tolist()          # (channels, measurements)
        for k in range(len(block)):
            pos = ends[block[k]]
            for c in range(channels):
                total = powers[c][k]
                level = math.log(total / (ceps_hi - ceps_lo)) if total > 0 else -math.inf
                meas = max(0.0, 21 + level)
                measures[c][index] = _f32(meas)
                mean_meas[c] = _f32(_f32(mean_meas[c] * trigger_mult)
                                    + _f32(meas * (1.0 - trigger_mult)))
                triggered = triggered or mean_meas[c] >= trigger
                if triggered:
                    to_flush = min(max(to_flush, _quiet_span(measures[c], index, trigger,
                                                             gap_len)), measures_len)
            index = (index + 1) % measures_len
            if triggered:
                break
    if not triggered and length >= fixed_pre_trigger:
        return rows[..., :fixed_pre_trigger].reshape(shape[:-1] + (fixed_pre_trigger,))
    flushed = (measures_len - to_flush) * period if triggered else 0
    kept = rows[:, max(pos - kept_len + flushed, 0):]
    return kept.reshape(shape[:-1] + kept.shape[-1:])


def _quiet_span(measures: list[float], index: int, trigger: float, gap_len: int) -> int:
    """SoX's search back from the newest measurement: how many to keep before the trigger
    (bursts at the trigger level no more than ``gap_len`` apart, up to a silent one)."""
    n = len(measures)
    j_trigger = j_zero = n
    j = 0
    k = index
    for j in range(n):
        if measures[k] >= trigger and j <= j_trigger + gap_len:
            j_zero = j_trigger = j
        elif measures[k] == 0 and j_trigger >= j_zero:
            j_zero = j
        k = (k + n - 1) % n
    return min(j, j_zero)
