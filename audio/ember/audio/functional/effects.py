"""SoX-style effects with torchaudio's names: contrast, DC shift, overdrive, CD de-emphasis,
RIAA equalisation, dither, speed change, pitch shift and zero-phase filtering. Inputs are
``[..., time]``; nothing is modified in place.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ember.audio.functional.filtering import biquad, lfilter
from ember.audio.functional.resampling import resample
from ember.audio.functional.spectral import phase_vocoder

__all__ = ["contrast", "dcshift", "deemph_biquad", "dither", "filtfilt", "overdrive",
           "pitch_shift", "riaa_biquad", "speed"]


def contrast(waveform: Tensor, enhancement_amount: float = 75.0) -> Tensor:
    """Louder-sounding audio, like compression: ``sin(pi/2 x + c sin(2 pi x))``, c = amount/750."""
    if not 0 <= enhancement_amount <= 100:
        raise ValueError(f"enhancement_amount must be in [0, 100], got {enhancement_amount}")
    quarter = waveform * (math.pi / 2)
    return torch.sin(quarter + enhancement_amount / 750.0 * torch.sin(quarter * 4))


def dcshift(waveform: Tensor, shift: float, limiter_gain: float | None = None) -> Tensor:
    """Add ``shift`` (in [-2, 2]) and clip to [-1, 1]; with ``limiter_gain``, peaks beyond the
    limiter threshold are compressed instead of clipped (SoX ``dcshift``)."""
    shifted = (waveform + shift).clamp(-1, 1)
    if limiter_gain is None or shift == 0:
        return shifted
    threshold = 1.0 - (abs(shift) - limiter_gain)
    slope = limiter_gain / (1 - threshold)
    if shift > 0:
        peak = waveform > threshold
        limited = ((waveform - threshold) * slope + threshold + shift).clamp(max=threshold)
    else:
        peak = waveform < -threshold
        limited = ((waveform + threshold) * slope - threshold + shift).clamp(min=-threshold)
    return torch.where(peak, limited, shifted)


def overdrive(waveform: Tensor, gain: float = 20, colour: float = 20) -> Tensor:
    """SoX ``overdrive``: a soft-clipping cubic of ``gain`` dB, ``colour`` adding even harmonics,
    then a DC-blocking first-order filter (pole 0.995); output clipped to [-1, 1]."""
    x = waveform * math.exp(gain * math.log(10) / 20.0) + colour / 200
    cubic = x - x.pow(3) / 3
    shaped = torch.where(x < -1, torch.full_like(x, -2.0 / 3.0),
                         torch.where(x > 1, torch.full_like(x, 2.0 / 3.0), cubic))
    a = torch.tensor([1.0, -0.995], dtype=waveform.dtype, device=waveform.device)
    b = torch.tensor([1.0, -1.0], dtype=waveform.dtype, device=waveform.device)
    blocked = lfilter(shaped, a, b, clamp=False)
    return (waveform * 0.5 + blocked * 0.75).clamp(-1, 1)


def _draw(high: int) -> int:
    return int(torch.randint(high, [1]).item())


def dither(waveform: Tensor, density_function: str = "TPDF", noise_shaping: bool = False
           ) -> Tensor:
    """Quantise to 16 bits with torchaudio's dither: ``"TPDF"`` adds a triangular ramp over
    time, ``"RPDF"`` one random sample minus 0.5, ``"GPDF"`` a sum of seven random samples;
    ``noise_shaping`` adds each sample's quantisation error to the next sample.

    Random positions come from torch's global generator in torchaudio's order, so one seed
    gives torchaudio's result.
    """
    if density_function not in ("TPDF", "RPDF", "GPDF"):
        raise ValueError(f"density_function must be 'TPDF', 'RPDF' or 'GPDF', "
                         f"got {density_function!r}")
    shape = waveform.shape
    rows = waveform.reshape(-1, shape[-1])
    last_row, last_time = rows.shape[0] - 1, rows.shape[1] - 1
    row = _draw(last_row) if last_row > 0 else 0
    time = _draw(last_time) if last_time > 0 else 0
    scaled = rows * (2 ** 15 - 2)
    if density_function == "RPDF":
        scaled = scaled + (rows[row, time] - 0.5)
    elif density_function == "GPDF":
        if last_row < 1:
            raise ValueError("density_function='GPDF' needs at least two channels (rows)")
        # torchaudio accumulates into the starting sample itself, so a draw that lands on it
        # again reads the running sum
        total = rows[row, time]
        for _ in range(6):
            r, t = _draw(last_row), _draw(last_time)
            total = total + (total if (r, t) == (row, time) else rows[r, t])
        scaled = scaled + total
    else:
        ramp = torch.bartlett_window(last_time + 1, dtype=scaled.dtype, device=scaled.device)
        scaled = scaled + ramp
    dithered = torch.round(scaled) / 2 ** 15
    if noise_shaping:
        error = dithered - rows
        dithered = dithered + torch.nn.functional.pad(error[:, :-1], (1, 0))
    return dithered.reshape(shape)


def filtfilt(waveform: Tensor, a_coeffs: Tensor, b_coeffs: Tensor, clamp: bool = True
             ) -> Tensor:
    """Zero-phase IIR filtering: ``lfilter`` forward (unclamped), then backward in time
    (clamped to [-1, 1] if ``clamp``); coefficients as in ``lfilter`` with batching."""
    forward = lfilter(waveform, a_coeffs, b_coeffs, clamp=False, batching=True)
    return lfilter(forward.flip(-1), a_coeffs, b_coeffs, clamp=clamp, batching=True).flip(-1)


def deemph_biquad(waveform: Tensor, sample_rate: int) -> Tensor:
    """ISO 908 CD de-emphasis: a high-shelf cut for 44.1 kHz or 48 kHz audio (SoX ``deemph``)."""
    shelves = {44100: (5283.0, 0.4845, -9.477), 48000: (5356.0, 0.479, -9.62)}
    if sample_rate not in shelves:
        raise ValueError(f"sample_rate must be 44100 (CD) or 48000 (DAT), got {sample_rate}")
    freq, slope, gain_db = shelves[sample_rate]
    w0 = 2 * math.pi * freq / sample_rate
    amp = 10 ** (gain_db / 40.0)
    alpha = math.sin(w0) / 2 * math.sqrt((amp + 1 / amp) * (1 / slope - 1) + 2)
    cos_w0, root = math.cos(w0), 2 * math.sqrt(amp) * alpha
    return biquad(waveform,
                  amp * ((amp + 1) + (amp - 1) * cos_w0 + root),
                  -2 * amp * ((amp - 1) + (amp + 1) * cos_w0),
                  amp * ((amp + 1) + (amp - 1) * cos_w0 - root),
                  (amp + 1) - (amp - 1) * cos_w0 + root,
                  2 * ((amp - 1) - (amp + 1) * cos_w0),
                  (amp + 1) - (amp - 1) * cos_w0 - root)


# SoX's RIAA zeros and poles per sample rate
_RIAA = {
    44100: ((-0.2014898, 0.9233820), (0.7083149, 0.9924091)),
    48000: ((-0.1766069, 0.9321590), (0.7396325, 0.9931330)),
    88200: ((-0.1168735, 0.9648312), (0.8590646, 0.9964002)),
    96000: ((-0.1141486, 0.9676817), (0.8699137, 0.9966946)),
}


def riaa_biquad(waveform: Tensor, sample_rate: int) -> Tensor:
    """RIAA vinyl playback equalisation, 0 dB at 1 kHz (SoX ``riaa``)."""
    if sample_rate not in _RIAA:
        raise ValueError(f"sample_rate must be one of {sorted(_RIAA)}, got {sample_rate}")
    (z0, z1), (p0, p1) = _RIAA[sample_rate]
    b = [1.0, -(z0 + z1), z0 * z1]
    a = [1.0, -(p0 + p1), p0 * p1]
    at_1k = complex(math.cos(2 * math.pi * 1000 / sample_rate),
                    -math.sin(2 * math.pi * 1000 / sample_rate))
    gain = abs(sum(c * at_1k ** k for k, c in enumerate(a))) / abs(
        sum(c * at_1k ** k for k, c in enumerate(b)))
    return biquad(waveform, b[0] * gain, b[1] * gain, b[2] * gain, *a)


def speed(waveform: Tensor, orig_freq: int, factor: float,
          lengths: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Play ``factor`` times faster (pitch moves with it) by resampling ``orig_freq * factor``
    to ``orig_freq``; returns the waveform and the scaled ``lengths``."""
    source, target = int(factor * orig_freq), int(orig_freq)
    if source <= 0:
        raise ValueError(f"factor * orig_freq must be at least 1, got {factor} * {orig_freq}")
    g = math.gcd(source, target)
    source, target = source // g, target // g
    out_lengths = None
    if lengths is not None:
        out_lengths = torch.ceil(lengths * target / source).to(lengths.dtype)
    return resample(waveform, source, target), out_lengths


def pitch_shift(waveform: Tensor, sample_rate: int, n_steps: int, bins_per_octave: int = 12,
                n_fft: int = 512, win_length: int | None = None, hop_length: int | None = None,
                window: Tensor | None = None) -> Tensor:
    """Shift the pitch by ``n_steps`` of ``1/bins_per_octave`` octave, keeping the length:
    a phase-vocoder time stretch by the pitch ratio, then resampling back."""
    stretched = stretch_for_pitch_shift(waveform, n_steps, bins_per_octave, n_fft, win_length,
                                        hop_length, window)
    rate = 2.0 ** (-float(n_steps) / bins_per_octave)
    shifted = resample(stretched, int(sample_rate / rate), sample_rate)
    return fit_length(shifted, waveform.shape)


def stretch_for_pitch_shift(waveform: Tensor, n_steps: int, bins_per_octave: int = 12,
                            n_fft: int = 512, win_length: int | None = None,
                            hop_length: int | None = None, window: Tensor | None = None
                            ) -> Tensor:
    """The first half of :func:`pitch_shift`: ``[..., time]`` time-stretched by the pitch
    ratio with a phase vocoder, as ``(batch, stretched_time)``."""
    hop_length = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    if window is None:
        window = torch.hann_window(win_length, device=waveform.device)
    shape = waveform.shape
    rows = waveform.reshape(-1, shape[-1])
    rate = 2.0 ** (-float(n_steps) / bins_per_octave)
    spec = torch.stft(rows, n_fft, hop_length, win_length, window, center=True,
                      pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    advance = torch.linspace(0, math.pi * hop_length, spec.shape[-2],
                             device=spec.device).unsqueeze(-1)
    return torch.istft(phase_vocoder(spec, rate, advance), n_fft, hop_length, win_length,
                       window, length=int(round(shape[-1] / rate)))


def fit_length(shifted: Tensor, shape: torch.Size) -> Tensor:
    """``(batch, time')`` cut or zero-padded to ``shape[-1]`` samples, reshaped to ``shape``."""
    if shifted.shape[-1] >= shape[-1]:
        shifted = shifted[..., :shape[-1]]
    else:
        shifted = torch.nn.functional.pad(shifted, (0, shape[-1] - shifted.shape[-1]))
    return shifted.reshape(shape)
