"""Time-domain filters: IIR ``lfilter`` and the RBJ biquad family, emphasis, FFT convolution,
deltas and noise mixing. Inputs are ``[..., time]``; everything is differentiable.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ember.audio.functional import _iir_native

__all__ = [
    "add_noise",
    "allpass_biquad",
    "band_biquad",
    "bandpass_biquad",
    "bandreject_biquad",
    "bass_biquad",
    "biquad",
    "compute_deltas",
    "convolve",
    "deemphasis",
    "equalizer_biquad",
    "fftconvolve",
    "highpass_biquad",
    "lfilter",
    "lowpass_biquad",
    "preemphasis",
    "treble_biquad",
]

# Samples per block of the blocked IIR recursion (see _iir): the sequential loop runs
# time / block steps, each a small matmul, instead of one Python step per sample. Above second
# order the block is short: the operators of filters with clustered poles grow fast with the
# block length (a 6th-order one passed 7e4 entries at 32 samples against 5e3 at 8), and the
# cancellation in their products costs accuracy. The rule reads only shapes, so it neither
# syncs a device nor breaks a compiled graph.
_BLOCK = 64
_HIGH_ORDER_BLOCK = 8
# The recursion runs in float64 for lower-precision inputs: a float32 direct-form recursion
# drifts (a stable 6th-order filter overflowed; a 20 Hz biquad lost three digits).
_WORK_DTYPE = {torch.float32: torch.float64, torch.float16: torch.float64,
               torch.bfloat16: torch.float64}


def _iir_block_operators(a: Tensor, length: int) -> tuple[Tensor, Tensor]:
    """For normalised denominators ``a`` (C, N+1): the block maps of ``y = x - sum a_k y[n-k]``.

    Returns ``H`` (C, L, L), the response inside a block to the block's own input, and ``Z``
    (C, L, N), the response to the last N outputs of the previous block (oldest first).
    """
    n_order = a.shape[1] - 1
    channels = a.shape[0]
    # Run the recursion once on N+1 seed sequences: unit state vectors and a unit impulse.
    eye = torch.eye(n_order, dtype=a.dtype, device=a.device).expand(channels, n_order, n_order)
    impulse = torch.zeros(channels, 1, n_order, dtype=a.dtype, device=a.device)
    hist = list(torch.cat([eye, impulse], dim=1).unbind(-1))  # N tensors of (C, N+1)
    taps = a[:, 1:].flip(1)  # a_N ... a_1, aligned with hist[-N:]
    drive = torch.zeros(channels, n_order + 1, dtype=a.dtype, device=a.device)
    drive[:, -1] = 1.0
    outs = []
    for n in range(length):
        recent = torch.stack(hist[-n_order:], dim=-1)  # (C, N+1, N)
        y = -(recent * taps.unsqueeze(1)).sum(-1) + (drive if n == 0 else 0.0)
        hist.append(y)
        outs.append(y)
    resp = torch.stack(outs, dim=1)  # (C, L, N+1)
    z = resp[:, :, :n_order]
    h = resp[:, :, n_order]  # impulse response (C, L)
    idx = torch.arange(length, device=a.device)
    diff = idx.view(-1, 1) - idx.view(1, -1)
    hmat = h[:, diff.clamp(min=0)] * (diff >= 0)
    return hmat, z


def _block_length(n_order: int, time: int) -> int:
    """Samples per block for a filter of ``n_order`` on ``time`` samples (never below the order,
    since a block's state is its last ``n_order`` outputs)."""
    return max(min(_BLOCK if n_order <= 2 else _HIGH_ORDER_BLOCK, time), n_order)


def _iir(x: Tensor, a: Tensor) -> Tensor:
    """All-pole part of lfilter on ``x`` (B, C, T) with normalised ``a`` (C, N+1)."""
    n_order = a.shape[1] - 1
    if n_order == 0:
        return x
    work = _WORK_DTYPE.get(x.dtype)
    if work is not None:
        return _iir(x.to(work), a.to(work)).to(x.dtype)
    batch, channels, time = x.shape
    block = _block_length(n_order, time)
    hmat, zmat = _iir_block_operators(a, block)
    n_blocks = -(-time // block)
    xb = F.pad(x, (0, n_blocks * block - time)).reshape(batch, channels, n_blocks, block)
    forced = torch.einsum("bcnj,cij->bcni", xb, hmat)
    state = x.new_zeros(batch, channels, n_order)
    out = []
    for i in range(n_blocks):
        y = forced[:, :, i] + torch.einsum("bcm,cim->bci", state, zmat)
        state = y[..., block - n_order:]
        out.append(y)
    return torch.stack(out, dim=2).reshape(batch, channels, -1)[..., :time]


def lfilter(waveform: Tensor, a_coeffs: Tensor, b_coeffs: Tensor, clamp: bool = True,
            batching: bool = True) -> Tensor:
    """IIR filter ``a[0] y[n] = sum b[k] x[n-k] - sum_{k>0} a[k] y[n-k]`` along the last dim.

    Coefficients are ``(order+1,)`` or, for a bank of filters, ``(num_filters, order+1)``
    applied to dim -2 of the waveform (``batching=True``) or each to the whole waveform.
    """
    if not isinstance(waveform, Tensor) or waveform.ndim < 1:
        raise ValueError("waveform must be a tensor of shape (..., time)")
    if a_coeffs.shape != b_coeffs.shape:
        raise ValueError(f"a_coeffs and b_coeffs must have the same shape, got "
                         f"{tuple(a_coeffs.shape)} and {tuple(b_coeffs.shape)}")
    if a_coeffs.ndim not in (1, 2) or a_coeffs.shape[-1] < 1:
        raise ValueError(f"a_coeffs must be 1-D or 2-D (num_filters, order+1), "
                         f"got shape {tuple(a_coeffs.shape)}")
    a = a_coeffs.to(waveform.dtype)
    b = b_coeffs.to(waveform.dtype)
    if a.ndim == 2:
        if batching:
            if waveform.ndim < 2 or waveform.shape[-2] != a.shape[0]:
                raise ValueError(f"waveform dim -2 must equal num_filters={a.shape[0]} when "
                                 f"batching, got shape {tuple(waveform.shape)}")
        else:
            waveform = torch.stack([waveform] * a.shape[0], -2)
    else:
        a, b = a.unsqueeze(0), b.unsqueeze(0)
    shape = waveform.shape
    x = waveform.reshape(-1, a.shape[0], shape[-1])
    a0 = a[:, :1]
    a, b = a / a0, b / a0
    order = a.shape[1]
    # CPU outside autograd and tracing: one native pass (FIR and recursion, float64 inside)
    if order > 1 and _iir_native.usable(x, a, b):
        out = _iir_native.lfilter_rows(x, b, a)
    else:
        fir = F.conv1d(F.pad(x, (order - 1, 0)), b.flip(1).unsqueeze(1), groups=a.shape[0])
        out = _iir(fir, a)
    if clamp:
        out = torch.clamp(out, -1.0, 1.0)
    return out.reshape(shape[:-1] + out.shape[-1:])


def _coef(v, like: Tensor) -> Tensor:
    return torch.as_tensor(v, dtype=like.dtype, device=like.device).reshape(())


def biquad(waveform: Tensor, b0, b1, b2, a0, a1, a2) -> Tensor:
    """Second-order IIR filter with the given coefficients (floats or 0-d tensors)."""
    a = torch.stack([_coef(c, waveform) for c in (a0, a1, a2)])
    b = torch.stack([_coef(c, waveform) for c in (b0, b1, b2)])
    return lfilter(waveform, a, b)


def _w0_alpha(waveform: Tensor, sample_rate: int, freq, q) -> tuple[Tensor, Tensor]:
    w0 = 2 * math.pi * _coef(freq, waveform) / sample_rate
    return w0, torch.sin(w0) / 2 / _coef(q, waveform)


def highpass_biquad(waveform: Tensor, sample_rate: int, cutoff_freq, Q=0.707) -> Tensor:
    """Second-order high-pass (RBJ cookbook)."""
    w0, alpha = _w0_alpha(waveform, sample_rate, cutoff_freq, Q)
    c = torch.cos(w0)
    return biquad(waveform, (1 + c) / 2, -1 - c, (1 + c) / 2, 1 + alpha, -2 * c, 1 - alpha)


def lowpass_biquad(waveform: Tensor, sample_rate: int, cutoff_freq, Q=0.707) -> Tensor:
    """Second-order low-pass (RBJ cookbook)."""
    w0, alpha = _w0_alpha(waveform, sample_rate, cutoff_freq, Q)
    c = torch.cos(w0)
    return biquad(waveform, (1 - c) / 2, 1 - c, (1 - c) / 2, 1 + alpha, -2 * c, 1 - alpha)


def allpass_biquad(waveform: Tensor, sample_rate: int, central_freq, Q=0.707) -> Tensor:
    """Second-order all-pass (RBJ cookbook)."""
    w0, alpha = _w0_alpha(waveform, sample_rate, central_freq, Q)
    c = torch.cos(w0)
    return biquad(waveform, 1 - alpha, -2 * c, 1 + alpha, 1 + alpha, -2 * c, 1 - alpha)


def bandpass_biquad(waveform: Tensor, sample_rate: int, central_freq, Q=0.707,
                    const_skirt_gain: bool = False) -> Tensor:
    """Second-order band-pass; constant skirt gain (peak = Q) or constant 0 dB peak."""
    w0, alpha = _w0_alpha(waveform, sample_rate, central_freq, Q)
    c = torch.cos(w0)
    g = torch.sin(w0) / 2 if const_skirt_gain else alpha
    return biquad(waveform, g, 0.0, -g, 1 + alpha, -2 * c, 1 - alpha)


def bandreject_biquad(waveform: Tensor, sample_rate: int, central_freq, Q=0.707) -> Tensor:
    """Second-order band-reject (notch)."""
    w0, alpha = _w0_alpha(waveform, sample_rate, central_freq, Q)
    c = torch.cos(w0)
    return biquad(waveform, 1.0, -2 * c, 1.0, 1 + alpha, -2 * c, 1 - alpha)


def equalizer_biquad(waveform: Tensor, sample_rate: int, center_freq, gain, Q=0.707) -> Tensor:
    """Peaking equaliser: ``gain`` dB around ``center_freq``."""
    w0, alpha = _w0_alpha(waveform, sample_rate, center_freq, Q)
    c = torch.cos(w0)
    amp = torch.exp(_coef(gain, waveform) / 40.0 * math.log(10))
    return biquad(waveform, 1 + alpha * amp, -2 * c, 1 - alpha * amp,
                  1 + alpha / amp, -2 * c, 1 - alpha / amp)


def _shelf_terms(waveform, sample_rate, gain, central_freq, Q):
    w0, alpha = _w0_alpha(waveform, sample_rate, central_freq, Q)
    amp = torch.exp(_coef(gain, waveform) / 40.0 * math.log(10))
    c = torch.cos(w0)
    return amp, 2 * torch.sqrt(amp) * alpha, (amp - 1) * c, (amp + 1) * c


def bass_biquad(waveform: Tensor, sample_rate: int, gain, central_freq=100, Q=0.707) -> Tensor:
    """Low-shelf boost or cut of ``gain`` dB (SoX ``bass``)."""
    A, t1, t2, t3 = _shelf_terms(waveform, sample_rate, gain, central_freq, Q)
    return biquad(waveform, A * ((A + 1) - t2 + t1), 2 * A * ((A - 1) - t3),
                  A * ((A + 1) - t2 - t1), (A + 1) + t2 + t1, -2 * ((A - 1) + t3),
                  (A + 1) + t2 - t1)


def treble_biquad(waveform: Tensor, sample_rate: int, gain, central_freq=3000,
                  Q=0.707) -> Tensor:
    """High-shelf boost or cut of ``gain`` dB (SoX ``treble``)."""
    A, t1, t2, t3 = _shelf_terms(waveform, sample_rate, gain, central_freq, Q)
    return biquad(waveform, A * ((A + 1) + t2 + t1), -2 * A * ((A - 1) + t3),
                  A * ((A + 1) + t2 - t1), (A + 1) - t2 + t1, 2 * ((A - 1) - t3),
                  (A + 1) - t2 - t1)


def band_biquad(waveform: Tensor, sample_rate: int, central_freq, Q=0.707,
                noise: bool = False) -> Tensor:
    """Two-pole band-pass (SoX ``band``); ``noise=True`` tunes it for unpitched audio."""
    w0 = 2 * math.pi * _coef(central_freq, waveform) / sample_rate
    bw_hz = _coef(central_freq, waveform) / _coef(Q, waveform)
    a2 = torch.exp(-2 * math.pi * bw_hz / sample_rate)
    a1 = -4 * a2 / (1 + a2) * torch.cos(w0)
    b0 = torch.sqrt(1 - a1 * a1 / (4 * a2)) * (1 - a2)
    if noise:
        b0 = torch.sqrt(((1 + a2) ** 2 - a1 * a1) * (1 - a2) / (1 + a2))
    return biquad(waveform, b0, 0.0, 0.0, 1.0, a1, a2)


def preemphasis(waveform: Tensor, coeff: float = 0.97) -> Tensor:
    """``y[n] = x[n] - coeff * x[n-1]`` along the last dim."""
    return torch.cat([waveform[..., :1], waveform[..., 1:] - coeff * waveform[..., :-1]], dim=-1)


def deemphasis(waveform: Tensor, coeff: float = 0.97) -> Tensor:
    """Inverse of ``preemphasis``: ``y[n] = x[n] + coeff * y[n-1]`` (clamped to [-1, 1])."""
    a = torch.tensor([1.0, -coeff], dtype=waveform.dtype, device=waveform.device)
    b = torch.tensor([1.0, 0.0], dtype=waveform.dtype, device=waveform.device)
    return lfilter(waveform, a, b)


_CONVOLVE_MODES = ("full", "valid", "same")


def fftconvolve(x: Tensor, y: Tensor, mode: str = "full") -> Tensor:
    """Convolution along the last dim via FFT; leading dims broadcast. Modes as numpy's."""
    if mode not in _CONVOLVE_MODES:
        raise ValueError(f"mode must be one of {_CONVOLVE_MODES}, got {mode!r}")
    if x.ndim < 1 or y.ndim < 1 or x.shape[-1] == 0 or y.shape[-1] == 0:
        raise ValueError(f"x and y must be non-empty (..., time) tensors, got shapes "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")
    try:
        torch.broadcast_shapes(x.shape[:-1], y.shape[:-1])
    except RuntimeError as err:
        raise ValueError(f"leading dims of x {tuple(x.shape)} and y {tuple(y.shape)} "
                         f"do not broadcast") from err
    n = x.shape[-1] + y.shape[-1] - 1
    out = torch.fft.irfft(torch.fft.rfft(x, n=n) * torch.fft.rfft(y, n=n), n=n)
    if mode == "full":
        return out
    target = x.shape[-1] if mode == "same" else abs(x.shape[-1] - y.shape[-1]) + 1
    start = (n - target) // 2
    return out[..., start:start + target]


def convolve(x: Tensor, y: Tensor, mode: str = "full") -> Tensor:
    """Direct convolution along the last dim (same results as ``fftconvolve``; faster when
    one input is short). Leading dims broadcast."""
    if mode not in _CONVOLVE_MODES:
        raise ValueError(f"mode must be one of {_CONVOLVE_MODES}, got {mode!r}")
    if x.ndim < 1 or y.ndim < 1 or x.shape[-1] == 0 or y.shape[-1] == 0:
        raise ValueError(f"x and y must be non-empty (..., time) tensors, got shapes "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")
    try:
        lead = torch.broadcast_shapes(x.shape[:-1], y.shape[:-1])
    except RuntimeError as err:
        raise ValueError(f"leading dims of x {tuple(x.shape)} and y {tuple(y.shape)} "
                         f"do not broadcast") from err
    if x.shape[-1] < y.shape[-1]:
        x, y = y, x  # convolution commutes; slide the shorter one
        swapped = True
    else:
        swapped = False
    xb = x.expand(lead + x.shape[-1:]).reshape(1, -1, x.shape[-1])
    yb = y.expand(lead + y.shape[-1:]).reshape(-1, 1, y.shape[-1]).flip(-1)
    out = F.conv1d(xb, yb, padding=y.shape[-1] - 1, groups=xb.shape[1])
    out = out.reshape(lead + out.shape[-1:])
    n = out.shape[-1]
    if mode == "full":
        return out
    first_len = y.shape[-1] if swapped else x.shape[-1]
    target = first_len if mode == "same" else x.shape[-1] - y.shape[-1] + 1
    start = (n - target) // 2
    return out[..., start:start + target]


def compute_deltas(specgram: Tensor, win_length: int = 5, mode: str = "replicate") -> Tensor:
    """Regression deltas of ``[..., freq, time]`` along time over ``win_length`` frames."""
    if win_length < 3:
        raise ValueError(f"win_length must be >= 3, got {win_length}")
    if specgram.ndim < 1:
        raise ValueError("specgram must have shape (..., time)")
    shape = specgram.shape
    x = specgram.reshape(1, -1, shape[-1])
    n = (win_length - 1) // 2
    denom = n * (n + 1) * (2 * n + 1) / 3
    x = F.pad(x, (n, n), mode=mode)
    kernel = torch.arange(-n, n + 1, dtype=x.dtype, device=x.device).repeat(x.shape[1], 1, 1)
    return (F.conv1d(x, kernel, groups=x.shape[1]) / denom).reshape(shape)


def add_noise(waveform: Tensor, noise: Tensor, snr: Tensor,
              lengths: Tensor | None = None) -> Tensor:
    """Add ``noise`` scaled so that the signal-to-noise ratio is ``snr`` dB (per item).

    ``waveform`` and ``noise`` are ``(..., L)`` and ``snr``/``lengths`` ``(...)`` with the same
    number of leading dims; those broadcast against each other, as in torchaudio.
    """
    lead = waveform.ndim - 1
    if not (noise.ndim - 1 == snr.ndim == lead and (lengths is None or lengths.ndim == lead)):
        raise ValueError(
            f"waveform {tuple(waveform.shape)} and noise {tuple(noise.shape)} must be (..., L) "
            f"and snr {tuple(snr.shape)}"
            + ("" if lengths is None else f" and lengths {tuple(lengths.shape)}")
            + " (...,) with the same number of leading dims")
    if noise.shape[-1] != waveform.shape[-1]:
        raise ValueError(f"waveform and noise must have the same length, got "
                         f"{waveform.shape[-1]} and {noise.shape[-1]}")
    shapes = [waveform.shape[:-1], noise.shape[:-1], snr.shape]
    shapes += [] if lengths is None else [lengths.shape]
    try:
        torch.broadcast_shapes(*shapes)
    except RuntimeError as err:
        raise ValueError(f"leading dims do not broadcast: waveform {tuple(waveform.shape)}, "
                         f"noise {tuple(noise.shape)}, snr {tuple(snr.shape)}"
                         + ("" if lengths is None else f", lengths {tuple(lengths.shape)}")
                         ) from err
    sig, nse = waveform, noise
    if lengths is not None:
        mask = torch.arange(waveform.shape[-1], device=lengths.device) < lengths.unsqueeze(-1)
        sig, nse = waveform * mask, noise * mask
    energy_sig = torch.linalg.vector_norm(sig, ord=2, dim=-1) ** 2
    energy_noise = torch.linalg.vector_norm(nse, ord=2, dim=-1) ** 2
    snr_now = 10 * (torch.log10(energy_sig) - torch.log10(energy_noise))
    scale = 10 ** ((snr_now - snr) / 20.0)
    return waveform + scale.unsqueeze(-1) * noise
