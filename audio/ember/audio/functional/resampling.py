"""Band-limited resampling by windowed-sinc interpolation (torchaudio's ``resample``).

The polyphase kernel for a rate pair is built once (float64, then cast) and cached per
(rates, filter settings, dtype, device). Applying it equals torchaudio's strided ``conv1d``
but runs as a few GEMMs over strided windows that skip the kernel's zero taps. CPU inference
cuts each row into cache-sized spans, spread over single-threaded threads
(``ember.core.parallel``), and computes a span as one ``bmm`` over equal phase groups
whose windows start a fixed step apart; autograd, tracing and other devices take the
one-shot composition.
"""

from __future__ import annotations

import functools
import math
import warnings
import weakref
from dataclasses import dataclass

import torch
from torch import Tensor

from ember.core.logs import get_logger
from ember.core.parallel import run, scratch

__all__ = ["apply_sinc_resample_kernel", "polyphase_plan", "resample", "sinc_resample_kernel"]

_METHODS = ("sinc_interp_hann", "sinc_interp_kaiser")
# torchaudio's names before 2.0, still accepted there with a warning
_LEGACY_METHODS = {"sinc_interpolation": "sinc_interp_hann", "kaiser_window": "sinc_interp_kaiser"}
_KAISER_BETA = 14.769656459379492  # torchaudio's default: ~ -120 dB stopband
_log = get_logger("audio")
# input samples per unit of work on the blocked CPU path: large spans amortise the per-call
# cost of the phase-group GEMMs; smaller ones only to give every thread a few units
SPAN_SAMPLES = (1 << 15, 1 << 19)
# a phase group's GEMM call costs as much as this many multiply-adds per block (measured)
GROUP_PRICE = 1500


def _check_rates(orig_freq, new_freq) -> tuple[int, int]:
    for name, value in (("orig_freq", orig_freq), ("new_freq", new_freq)):
        if isinstance(value, bool) or not float(value).is_integer():
            raise ValueError(f"{name} must be an integer frequency, got {value!r}; reduce the "
                             f"ratio to integers (e.g. 8 -> 1 rather than 44100 -> 5512.5)")
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    return int(orig_freq), int(new_freq)


@functools.lru_cache(maxsize=64)
def _kernel_cached(orig: int, new: int, lowpass_filter_width: int, rolloff: float,
                   method: str, beta: float | None, dtype: torch.dtype,
                   device: str) -> tuple[Tensor, int]:
    base_freq = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base_freq)
    # t[phase, tap]: distance, in input samples scaled by base_freq, from output phase to tap
    idx = torch.arange(-width, width + orig, dtype=torch.float64) / orig
    t = (torch.arange(0, -new, -1, dtype=torch.float64)[:, None] / new + idx[None]) * base_freq
    t = t.clamp(-lowpass_filter_width, lowpass_filter_width)
    if method == "sinc_interp_hann":
        window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    else:
        b = torch.tensor(_KAISER_BETA if beta is None else float(beta), dtype=torch.float64)
        window = torch.special.i0(b * torch.sqrt(1 - (t / lowpass_filter_width) ** 2))
        window = window / torch.special.i0(b)
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / torch.where(t == 0, 1.0, t))
    kernel = sinc * window * (base_freq / orig)
    if not torch.compiler.is_compiling():  # a logging call would break the traced graph
        _log.debug("resample kernel %d -> %d (%s, width %d): %d phases x %d taps on %s",
                   orig, new, method, lowpass_filter_width, new, kernel.shape[-1], device)
    return kernel.unsqueeze(1).to(dtype=dtype, device=device), width


def sinc_resample_kernel(orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
                         rolloff: float = 0.99, resampling_method: str = "sinc_interp_hann",
                         beta: float | None = None, dtype: torch.dtype = torch.float32,
                         device: torch.device | str = "cpu") -> tuple[Tensor, int]:
    """Polyphase kernel ``(new/g, 1, taps)`` and its half-width for rates reduced by their gcd."""
    orig, new = _check_rates(orig_freq, new_freq)
    if resampling_method in _LEGACY_METHODS:
        warnings.warn(f"resampling_method {resampling_method!r} is deprecated; use "
                      f"{_LEGACY_METHODS[resampling_method]!r} (same result)", stacklevel=3)
        resampling_method = _LEGACY_METHODS[resampling_method]
    if resampling_method not in _METHODS:
        raise ValueError(f"resampling_method must be one of {_METHODS}, "
                         f"got {resampling_method!r}")
    if lowpass_filter_width <= 0:
        raise ValueError(f"lowpass_filter_width must be positive, got {lowpass_filter_width}")
    if not 0 < rolloff <= 1:
        raise ValueError(f"rolloff must be in (0, 1], got {rolloff}")
    g = math.gcd(orig, new)
    return _kernel_cached(orig // g, new // g, int(lowpass_filter_width), float(rolloff),
                          resampling_method, beta, dtype, str(torch.device(device)))


@functools.lru_cache(maxsize=64)
def polyphase_plan(orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
                   rolloff: float = 0.99, group_price: int = GROUP_PRICE
                   ) -> tuple[tuple[int, int, int, int], ...]:
    """Groups of consecutive phases and the taps they use: (first phase, end phase, first tap,
    tap count). Plain integer math, so tracing sees constants.

    The dense kernel spans ``orig + 2 * width`` taps, but phase ``p`` is non-zero only where
    ``|base * ((k - width) / orig - p / new)| < lowpass_filter_width``; grouping phases
    skips the zeros at the price of one GEMM per group.
    """
    g = math.gcd(int(orig_freq), int(new_freq))
    orig, new = int(orig_freq) // g, int(new_freq) // g
    base = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base)
    n_taps = 2 * width + orig
    reach = lowpass_filter_width * orig / base
    support = [(max(0, math.floor(width + orig * p / new - reach)),
                min(n_taps - 1, math.ceil(width + orig * p / new + reach))) for p in range(new)]
    best: tuple[float, tuple] | None = None
    size = 1
    while True:
        groups = []
        for p0 in range(0, new, size):
            p1 = min(new, p0 + size)
            lo = min(first for first, _ in support[p0:p1])
            hi = max(last for _, last in support[p0:p1])
            groups.append((p0, p1, lo, hi - lo + 1))
        # multiply-adds per block plus a price per group: narrow GEMMs run far below peak
        cost = sum((p1 - p0) * taps for p0, p1, _, taps in groups) + group_price * len(groups)
        if best is None or cost < best[0]:
            best = (cost, tuple(groups))
        if size >= new:
            return best[1]
        size *= 2


def apply_sinc_resample_kernel(waveform: Tensor, orig_freq: int, new_freq: int, kernel: Tensor,
                               width: int,
                               plan: tuple[tuple[int, int, int, int], ...] | None = None
                               ) -> Tensor:
    """Resample ``[..., time]`` with a kernel from :func:`sinc_resample_kernel`.

    Equivalent to one ``conv1d(stride=orig)`` with the dense kernel. Computed as one GEMM
    per group of phases (``plan``) over strided windows of the padded signal, which skips
    the kernel's zero taps and copies no windows.
    """
    g = math.gcd(orig_freq, new_freq)
    orig, new = orig_freq // g, new_freq // g
    if plan is None:  # one group spanning every tap: the dense kernel
        plan = ((0, kernel.shape[0], 0, kernel.shape[-1]),)
    shape = waveform.shape
    x = waveform.reshape(-1, shape[-1])
    if _blocked_cpu_path(x, kernel):
        out = _blocked_resample(x, orig, new, kernel, width)
        return out.reshape(shape[:-1] + out.shape[-1:])
    batch, length = x.shape
    # Each row is zero-padded to a whole number of blocks, at least as long as conv1d's
    # padded input; then the windows of all rows form one (rows, taps) strided matrix and
    # every window a kept output reads lies inside its own row.
    blocks = -(-(length + 2 * width + orig) // orig)
    rows = batch * blocks
    # one buffer: the padded rows, then a tail read only by the last row's spare windows;
    # only the padding is zeroed (a full memset would cost as much as the copy)
    flat = x.new_empty(rows * orig + kernel.shape[-1])
    grid = flat[: rows * orig].view(batch, blocks * orig)
    grid[:, :width].zero_()
    grid[:, width + length:].zero_()
    flat[rows * orig:].zero_()
    grid[:, width:width + length].copy_(x)
    parts = []
    for p0, p1, start, taps in plan:
        frames = flat[start:].unfold(0, taps, orig)[:rows]  # (rows, taps), a view
        parts.append(torch.mm(frames, kernel[p0:p1, 0, start:start + taps].t()))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (rows, new)
    out = out.reshape(batch, -1)
    target = -(-new * length // orig)  # ceil(new * length / orig)
    return out[..., :target].reshape(shape[:-1] + (target,))


def _blocked_cpu_path(x: Tensor, kernel: Tensor) -> bool:
    """CPU float inference: the blocked, threaded path (its ``out=`` GEMMs do not record
    autograd, and a traced graph wants the plain composition)."""
    if torch.compiler.is_compiling() or x.device.type != "cpu" or kernel.device.type != "cpu":
        return False
    if x.dtype not in (torch.float32, torch.float64) or kernel.dtype != x.dtype:
        return False
    return not (torch.is_grad_enabled() and (x.requires_grad or kernel.requires_grad))


def _span(row: Tensor, lo: int, hi: int) -> Tensor:
    """``row[lo:hi]`` with zeros where the range leaves the row (a view when it does not)."""
    length = row.shape[0]
    if lo >= 0 and hi <= length:
        return row[lo:hi]
    buf = scratch("resample-span", (hi - lo,), row.dtype)
    a, b = min(max(0, -lo), hi - lo), max(0, min(hi, length) - lo)
    buf[:a].zero_()
    buf[max(a, b):].zero_()
    if b > a:
        buf[a:b].copy_(row[lo + a:lo + b])
    return buf


@dataclass(frozen=True)
class _UniformBank:
    """Equal groups of ``size`` phases whose windows start ``step`` samples apart, the first
    at ``first`` (relative to a block's dense window): every group of a span is one ``bmm``
    over a strided (groups, blocks, taps) view of the input."""

    size: int
    groups: int
    step: int
    first: int
    taps: int
    bank: Tensor  # (groups, taps, size), zero outside each phase's support


# kernel tensor -> (its version, orig, new, bank); keyed by identity, because a lookup by
# value would run a full-size comparison, an OpenMP region on the caller whose spinning
# team then competes with the workers for the cores
_uniform_banks: dict[int, tuple] = {}  # id(kernel) -> (weakref, version, orig, new, bank)


def _uniform_bank(kernel: Tensor, orig: int, new: int) -> _UniformBank:
    """The cheapest equal grouping (multiply-adds per block) of a polyphase kernel, cached."""
    known = _uniform_banks.get(id(kernel))
    if known is not None and known[0]() is kernel and known[1:4] == (kernel._version, orig, new):
        return known[4]
    dense = kernel[:, 0]
    n_taps = dense.shape[1]
    nonzero = dense != 0
    lo = nonzero.float().argmax(1).tolist()
    hi = (n_taps - 1 - nonzero.flip(1).float().argmax(1)).tolist()
    best = None
    # 16 phases and up: narrower GEMMs run far below peak (AVX-512 holds 16 floats)
    for size in sorted({s for s in (16, 32, 64, 128) if s < new} | {new}):
        groups, step = -(-new // size), orig * size // new
        first = min(min(lo[g * size:(g + 1) * size]) - g * step for g in range(groups))
        taps = max(max(hi[g * size:(g + 1) * size]) - first - g * step + 1
                   for g in range(groups))
        if best is None or groups * size * taps < best[0]:
            best = (groups * size * taps, size, groups, step, first, taps)
    _, size, groups, step, first, taps = best
    g = torch.arange(groups)
    idx = first + g[:, None] * step + torch.arange(taps)  # (groups, taps) into the dense taps
    phase = g[:, None] * size + torch.arange(size)  # (groups, size)
    values = dense[phase.clamp(max=new - 1)[:, None, :], idx.clamp(0, n_taps - 1)[:, :, None]]
    valid = ((idx >= 0) & (idx < n_taps))[:, :, None] & (phase < new)[:, None, :]
    bank = _UniformBank(size, groups, step, first, taps, torch.where(valid, values, 0.0))
    if len(_uniform_banks) >= 64:  # forget the kernels that are gone
        for key in [k for k, v in _uniform_banks.items() if v[0]() is None]:
            del _uniform_banks[key]
    _uniform_banks[id(kernel)] = (weakref.ref(kernel), kernel._version, orig, new, bank)
    return bank


def _blocked_resample(x: Tensor, orig: int, new: int, kernel: Tensor, width: int) -> Tensor:
    """``apply_sinc_resample_kernel`` for ``[rows, time]`` CPU input, one span of blocks of
    ``orig`` input samples per unit: one ``bmm`` of the span's windows by the phase groups
    (:func:`_uniform_bank`), copied into the output."""
    rows, length = x.shape
    target = -(-new * length // orig)
    n_blocks = -(-target // new)
    ub = _uniform_bank(kernel, orig, new)
    reach = (ub.groups - 1) * ub.step + ub.taps  # samples a block's groups read
    lo, hi = (max(1, span // orig) for span in SPAN_SAMPLES)
    per_unit = min(hi, max(lo, -(-rows * n_blocks // (4 * torch.get_num_threads()))))
    units_per_row = -(-n_blocks // per_unit)
    out = x.new_empty(rows, target)
    whole_groups = new // ub.size

    # blocks [inner_lo, inner_hi) read only samples inside the row: their windows are views
    inner_lo = max(0, -(-(width - ub.first) // orig))
    inner_hi = max(inner_lo, (length + width - ub.first - reach) // orig + 1)

    def blocks(r: int, k0: int, k1: int) -> None:
        if k1 <= k0:
            return
        m = k1 - k0
        start = k0 * orig - width + ub.first
        seg = _span(x[r], start, start + (m - 1) * orig + reach)
        st = seg.stride(0)
        windows = seg.as_strided((ub.groups, m, ub.taps), (ub.step * st, orig * st, st))
        res = scratch("resample-groups", (ub.groups, m, ub.size), x.dtype)
        torch.bmm(windows, ub.bank, out=res)
        res = res.permute(1, 0, 2)  # (blocks, groups, size)
        kf = min(k1, target // new)  # blocks [k0, kf) are whole
        if kf > k0:
            dest = out[r, k0 * new:kf * new].view(kf - k0, new)
            cut = whole_groups * ub.size
            dest[:, :cut].unflatten(1, (whole_groups, ub.size)).copy_(
                res[:kf - k0, :whole_groups])
            if cut < new:
                dest[:, cut:].copy_(res[:kf - k0, whole_groups, :new - cut])
        if k1 > kf:  # the row's last, partial block
            out[r, kf * new:].copy_(res[kf - k0].reshape(-1)[:target - kf * new])

    def unit(i: int) -> None:
        r, u = divmod(i, units_per_row)
        k0 = u * per_unit
        k1 = min(n_blocks, k0 + per_unit)
        lo, hi = min(max(k0, inner_lo), k1), max(min(k1, inner_hi), k0)
        if lo >= hi:  # no inner block: one padded span
            blocks(r, k0, k1)
            return
        blocks(r, k0, lo)  # edge blocks copy their few samples into a zero-padded buffer
        blocks(r, lo, hi)
        blocks(r, hi, k1)

    def guarded(i: int) -> None:
        with torch.no_grad():  # inference only: the out= ops must not record autograd
            unit(i)

    run(guarded, rows * units_per_row)
    return out


def resample(waveform: Tensor, orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
             rolloff: float = 0.99, resampling_method: str = "sinc_interp_hann",
             beta: float | None = None) -> Tensor:
    """Resample ``[..., time]`` from ``orig_freq`` to ``new_freq`` Hz (windowed sinc)."""
    orig, new = _check_rates(orig_freq, new_freq)
    if not isinstance(waveform, Tensor) or waveform.ndim < 1:
        raise ValueError("waveform must be a tensor of shape (..., time)")
    if not waveform.is_floating_point():
        raise TypeError(f"waveform must be floating point, got {waveform.dtype}")
    if orig == new:
        return waveform
    kernel, width = sinc_resample_kernel(orig, new, lowpass_filter_width, rolloff,
                                         resampling_method, beta, waveform.dtype,
                                         waveform.device)
    plan = polyphase_plan(orig, new, lowpass_filter_width, rolloff)
    return apply_sinc_resample_kernel(waveform, orig, new, kernel, width, plan)
