"""Modulated delay-line effects with torchaudio's names and SoX's semantics: ``phaser`` and
``flanger``. Both are feedback recursions through a delay whose length follows a low-frequency
oscillator (LFO); they are solved here without a Python step per sample wherever the
recursion allows it (see each function). Inputs are not modified in place.
"""

from __future__ import annotations

import bisect
import math

import torch
from torch import Tensor

__all__ = ["flanger", "phaser"]


def _lfo_table(triangle: bool, size: int, low: float, high: float, phase: float,
               device: torch.device) -> Tensor:
    """One period (``size`` points, float64) of SoX's sine or triangle LFO between ``low`` and
    ``high``, started ``phase`` radians in; the arithmetic order follows torchaudio's table."""
    offset = int(phase / math.pi / 2 * size + 0.5)
    point = (torch.arange(size, device=device, dtype=torch.int64) + offset) % size
    p = point.to(torch.float64)
    if triangle:
        ramp = p * 2 / size
        quarter = torch.div(4 * point, size, rounding_mode="floor")
        table = torch.where(quarter == 0, ramp + 0.5,
                            torch.where(quarter == 3, ramp - 1.5, 1.5 - ramp))
    else:
        table = (torch.sin(p / size * 2 * math.pi) + 1) / 2
    return table * (high - low) + low


def _round_half_away(table: Tensor) -> Tensor:
    """SoX's float -> int rounding of a table: half away from zero."""
    return torch.where(table < 0, table - 0.5, table + 0.5).to(torch.int64)


def phaser(waveform: Tensor, sample_rate: int, gain_in: float = 0.4, gain_out: float = 0.74,
           delay_ms: float = 3.0, decay: float = 0.4, mod_speed: float = 0.5,
           sinusoidal: bool = True) -> Tensor:
    """SoX ``phaser`` on ``[..., time]``: the input plus ``decay`` times its own output one
    LFO-modulated delay (1 sample to ``delay_ms``) earlier; output scaled and clipped to [-1, 1].

    The recursion ``y[i] = gain_in x[i] + decay y[i - d(i)]`` follows one chain of earlier
    samples per output, so it is summed by pointer doubling: log2(time) vectorised steps.
    """
    if not isinstance(waveform, Tensor) or waveform.ndim < 1:
        raise ValueError("waveform must be a tensor of shape (..., time)")
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    delay_len = int(delay_ms * 0.001 * sample_rate + 0.5)
    if delay_len < 1:
        raise ValueError(f"delay_ms must give a delay of at least one sample, got {delay_ms} ms "
                         f"at {sample_rate} Hz")
    if mod_speed <= 0:
        raise ValueError(f"mod_speed must be positive, got {mod_speed}")
    if waveform.numel() == 0:
        return waveform.clone()
    shape, device = waveform.shape, waveform.device
    rows = waveform.reshape(-1, shape[-1])
    time = rows.shape[-1]
    mod_len = int(sample_rate / mod_speed + 0.5)
    mod = _round_half_away(_lfo_table(not sinusoidal, mod_len, 1.0, float(delay_len),
                                      math.pi / 2, device))
    # SoX's ring buffer: step i reads slot (i + mod) mod L, last written by step i - d(i)
    steps = torch.arange(time, device=device)
    lag = 1 + torch.remainder(-mod[steps % mod_len], delay_len)
    parent = steps - lag                           # < 0: the buffer's initial zeros
    value = rows * gain_in
    weight = float(decay)
    while weight != 0.0:
        live = parent >= 0
        if not bool(live.any()):
            break
        safe = parent.clamp(min=0)
        value = value + torch.where(live, value[:, safe] * weight, 0.0)
        parent = torch.where(live, parent[safe], -1)
        weight = weight * weight
    return (value * gain_out).clamp(-1, 1).reshape(shape)


def flanger(waveform: Tensor, sample_rate: int, delay: float = 0.0, depth: float = 2.0,
            regen: float = 0.0, width: float = 71.0, speed: float = 0.5, phase: float = 25.0,
            modulation: str = "sinusoidal", interpolation: str = "linear") -> Tensor:
    """SoX ``flanger`` on ``[..., channel, time]`` (at most 4 channels): the input mixed with a
    copy delayed by ``delay`` + an LFO sweep of ``depth`` ms, fed back by ``regen`` percent.

    Without feedback every output is one vectorised gather; with it, each output depends on
    outputs at least the current delay + 1 samples earlier, so blocks that long run at once.
    """
    if modulation not in ("sinusoidal", "triangular"):
        raise ValueError(f"modulation must be 'sinusoidal' or 'triangular', got {modulation!r}")
    if interpolation not in ("linear", "quadratic"):
        raise ValueError(f"interpolation must be 'linear' or 'quadratic', "
                         f"got {interpolation!r}")
    if not isinstance(waveform, Tensor) or waveform.ndim < 2:
        raise ValueError("waveform must be a tensor of shape (..., channel, time)")
    if waveform.shape[-2] > 4:
        raise ValueError(f"waveform may have at most 4 channels (dim -2), "
                         f"got {waveform.shape[-2]}")
    if speed <= 0 or int(sample_rate / speed) < 1:
        raise ValueError(f"speed must be positive and below sample_rate, got {speed}")
    if waveform.numel() == 0:
        return waveform.clone()
    shape, device = waveform.shape, waveform.device
    x = waveform.reshape(-1, shape[-2], shape[-1])
    channels, time = x.shape[-2], x.shape[-1]

    feedback = regen / 100
    delay_gain = width / 100
    in_gain = 1.0 / (1 + delay_gain)
    delay_gain = delay_gain / (1 + delay_gain) * (1 - abs(feedback))
    buf_len = int((delay / 1000 + depth / 1000) * sample_rate + 0.5) + 2
    lfo_len = int(sample_rate / speed)
    table_min = math.floor(delay / 1000 * sample_rate + 0.5)
    lfo = _lfo_table(modulation == "triangular", lfo_len, float(table_min),
                     float(buf_len - 2), 3 * math.pi / 2, device).to(torch.float32)

    # per channel and step: the LFO's delay in samples, split into whole and fraction
    offset = (torch.arange(channels, device=device) * lfo_len * (phase / 100) + 0.5).long()
    steps = torch.arange(time, device=device)
    sweep = lfo[(steps[None] % lfo_len + offset[:, None]) % lfo_len]      # (channel, time)
    frac = torch.frac(sweep)
    whole = torch.floor(sweep).long()
    # the ring buffer moves back one slot a step: tap k holds the write of step i - (k mod L);
    # +1 addresses a padded copy whose slot 0 is the buffer's initial zero
    taps = 3 if interpolation == "quadratic" else 2
    rows = torch.arange(channels, device=device)[:, None]
    source = [(steps - torch.remainder(whole + t, buf_len)).clamp(min=-1) + 1
              for t in range(taps)]

    def mix(written: Tensor, lo: int, hi: int) -> Tensor:
        """The interpolated delay-line output of steps [lo, hi) from the writes so far."""
        got = [written[:, rows, s[:, lo:hi]] for s in source]
        f = frac[:, lo:hi]
        if interpolation == "linear":
            return got[0] + (got[1] - got[0]) * f
        d1, d2 = got[1] - got[0], got[2] - got[0]
        a, b = d2 * 0.5 - d1, d1 * 2 - d2 * 0.5
        return got[0] + (a * f + b) * f

    padded = torch.nn.functional.pad(x, (1, 0))
    if feedback == 0:
        delayed = mix(padded, 0, time)
    else:
        # writes are x[i] + feedback * delayed[i - 1]; delayed[i] reads writes up to step
        # i - whole[i] (a later tap, at the wrap, only ever gets weight 0), so a block of
        # steps whose reads all lie at or before its first step depends only on earlier
        # blocks: long blocks while the sweep is long, single steps only near delay 0.
        # (Indexing, unlike gather, saves no input for autograd: the buffer may be written
        # after it is read.)
        reach = torch.cummax(steps - whole.min(0).values, 0).values.tolist()
        written = padded
        parts = []
        lo = 0
        while lo < time:
            hi = bisect.bisect_right(reach, lo, lo + 1)
            part = mix(written, lo, hi)
            parts.append(part)
            end = min(time, hi + 1)
            if lo + 1 < end:
                written[..., lo + 2:end + 1] = (x[..., lo + 1:end]
                                                + part[..., :end - lo - 1] * feedback)
            lo = hi
        delayed = torch.cat(parts, -1)
    out = x * in_gain + delayed * delay_gain
    return out.clamp(-1, 1).reshape(shape)
