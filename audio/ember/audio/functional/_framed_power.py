"""CPU fast path: STFT power spectrum times a filterbank, one cache-sized block of frames at a
time, blocks spread over single-threaded workers (``ember.core.parallel``).

Per block: window the strided frames into a reused buffer, ``rfft``, square the interleaved
(re, im) pairs in place and sum them inside the filterbank GEMMs (the filterbank with each
column repeated), written straight into the output slice. A mel filterbank is ~97% zeros,
so consecutive filters are grouped with the band of bins they use (``band_groups``): a few
small GEMMs over their bands instead of one dense one. Nothing full-size is materialised but
the output, and only the few edge frames that reach into the padding copy their samples.
Inference only (``out=`` ops); callers keep the differentiable torch.stft path for autograd.
float32 blocks go through the native kernel of :mod:`_stft_native` where it is available.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ember.audio.functional import _stft_native
from ember.core.parallel import run, scratch

__all__ = ["BLOCK_FRAMES", "PAD_MODES", "band_groups", "stft_power_project"]

BLOCK_FRAMES = 512  # frames per unit of work (fewer, larger FFT and GEMM calls won up to ~1k)
GEMM_PRICE = 1200  # a GEMM call's fixed cost, in multiply-adds per frame (measured, 1 core)

# padded index -> index into the unpadded signal of length n (may be out of range: zero)
PAD_MODES = {
    "constant": lambda j, n: j,
    "reflect": lambda j, n: torch.where(j < 0, -j, torch.where(j >= n, 2 * (n - 1) - j, j)),
    "replicate": lambda j, n: j.clamp(0, n - 1),
    "circular": lambda j, n: j.remainder(n),
}


def _segment(row: Tensor, start: int, stop: int, pad: int, center_pad: int,
             pad_mode: str) -> Tensor:
    """Samples ``start:stop`` of ``row`` zero-padded by ``pad`` and then padded by
    ``center_pad`` in ``pad_mode`` (torch.stft's ``center``), without padding the row."""
    length = row.shape[0]
    lo, hi = start - center_pad - pad, stop - center_pad - pad
    if lo >= 0 and hi <= length:
        return row[lo:hi]
    parts = []
    if lo < 0:
        parts.append(_padding(row, start, min(stop, center_pad + pad), pad, center_pad,
                              pad_mode))
    parts.append(row[max(lo, 0):max(0, min(hi, length))])
    if hi > length:
        parts.append(_padding(row, max(start, center_pad + pad + length), stop, pad,
                              center_pad, pad_mode))
    return torch.cat(parts)


def _padding(row: Tensor, start: int, stop: int, pad: int, center_pad: int,
             pad_mode: str) -> Tensor:
    """Padded samples ``start:stop`` that lie outside the row (or each row of a batch, along
    the last dim), gathered by index."""
    length = row.shape[-1]
    j = torch.arange(start - center_pad, stop - center_pad)  # index after the zero pad
    j = PAD_MODES[pad_mode](j, length + 2 * pad) - pad  # then into the row itself
    inside = (j >= 0) & (j < length)
    return torch.where(inside, row[..., j.clamp(0, length - 1)], row.new_zeros(()))


def band_groups(projection: Tensor) -> list[tuple[int, int, int, int]]:
    """Consecutive rows of ``projection`` grouped with the columns they use: (first row, end
    row, first column, end column), the grouping of least multiply-adds plus a price per GEMM
    (dynamic programming over the split points). A group of all-zero rows has no columns."""
    nonzero = projection != 0
    used = nonzero.any(1).tolist()
    first = nonzero.float().argmax(1).tolist()
    last = (projection.shape[1] - nonzero.flip(1).float().argmax(1)).tolist()
    n = projection.shape[0]
    best = [0.0] + [float("inf")] * n  # best[m]: cost of rows < m
    split = [0] * (n + 1)
    for m1 in range(1, n + 1):
        lo, hi = projection.shape[1], 0
        for m0 in range(m1 - 1, -1, -1):
            if used[m0]:
                lo, hi = min(lo, first[m0]), max(hi, last[m0])
            cost = best[m0] + (m1 - m0) * max(0, hi - lo) + GEMM_PRICE
            if cost < best[m1]:
                best[m1], split[m1] = cost, m0
    groups, m1 = [], n
    while m1 > 0:
        m0 = split[m1]
        cols = [c for m in range(m0, m1) if used[m] for c in (first[m], last[m])]
        groups.append((m0, m1, min(cols, default=0), max(cols, default=0)))
        m1 = m0
    return groups[::-1]


def stft_power_project(waveform: Tensor, window: Tensor, n_fft: int, hop_length: int,
                       pad: int, center: bool, pad_mode: str, projection: Tensor) -> Tensor:
    """``projection @ |STFT|^2`` for ``[rows, time]`` float CPU input -> ``[rows, P, frames]``.

    ``window`` is ``win_length`` long (centred in ``n_fft`` like torch.stft); ``projection``
    is ``(P, n_fft // 2 + 1)`` with any normalisation already folded in.
    """
    rows, length = waveform.shape
    center_pad = n_fft // 2 if center else 0
    padded = length + 2 * pad + 2 * center_pad
    n_frames = 1 + (padded - n_fft) // hop_length
    dtype = waveform.dtype
    left = (n_fft - window.shape[0]) // 2
    full_window = window.new_zeros(n_fft, dtype=dtype)
    full_window[left:left + window.shape[0]] = window
    projection = projection.to(dtype)
    if _stft_native.available(n_fft, dtype):
        return _native(waveform.contiguous(), full_window, n_fft, hop_length, pad, center_pad,
                       pad_mode, projection.contiguous(), n_frames)
    pairs = projection.repeat_interleave(2, dim=1)  # column k twice: for re^2 and im^2
    groups = [(m0, m1, 2 * lo, 2 * hi) for m0, m1, lo, hi in band_groups(projection)]
    out = waveform.new_empty(rows, projection.shape[0], n_frames)
    blocks = -(-n_frames // BLOCK_FRAMES)

    def unit(i: int) -> None:
        with torch.no_grad():  # inference only: the out= ops must not record autograd
            _block(*divmod(i, blocks))

    def _block(r: int, b: int) -> None:
        f0 = b * BLOCK_FRAMES
        f1 = min(n_frames, f0 + BLOCK_FRAMES)
        seg = _segment(waveform[r], f0 * hop_length, (f1 - 1) * hop_length + n_fft, pad,
                       center_pad, pad_mode)
        frames = scratch("frames", (f1 - f0, n_fft), dtype)
        torch.mul(seg.unfold(0, n_fft, hop_length), full_window, out=frames)
        squares = torch.view_as_real(torch.fft.rfft(frames)).flatten(-2).square_()
        dest = out[r, :, f0:f1]
        for m0, m1, c0, c1 in groups:
            if c1 > c0:
                torch.mm(pairs[m0:m1, c0:c1], squares[:, c0:c1].t(), out=dest[m0:m1])
            else:
                dest[m0:m1].zero_()

    run(unit, rows * blocks)
    return out


def _native(waveform: Tensor, window: Tensor, n_fft: int, hop_length: int, pad: int,
            center_pad: int, pad_mode: str, projection: Tensor, n_frames: int) -> Tensor:
    """:func:`stft_power_project` through the native kernel, frame blocks as work units."""
    rows, length = waveform.shape
    edge = pad + center_pad  # padded samples on each side
    padded = length + 2 * edge
    lo, hi = _stft_native.bands(projection)
    out = waveform.new_empty(rows, projection.shape[0], n_frames)
    lefts = _padding(waveform, 0, edge, pad, center_pad, pad_mode).contiguous()
    rights = _padding(waveform, edge + length, padded, pad, center_pad, pad_mode).contiguous()
    blocks = -(-n_frames // BLOCK_FRAMES)

    def unit(i: int) -> None:
        r, b = divmod(i, blocks)
        f0 = b * BLOCK_FRAMES
        _stft_native.frames_power_project(waveform[r], lefts[r], rights[r], window, n_fft,
                                          hop_length, f0, min(n_frames, f0 + BLOCK_FRAMES),
                                          projection, lo, hi, out[r])

    run(unit, rows * blocks)
    return out
