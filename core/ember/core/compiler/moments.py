"""Mean and variance together (``var_mean``, ``std_mean``), as corrected two-pass sums.

Batch, layer and group norm reach the compiler as ``var_mean``. torch's decomposition takes
the mean as a float sum divided by N, which is several ulps off where the mean dwarfs the
spread (activations of 300 +- 0.05: each ulp of 300 is 6e-4 of a standard deviation), and
that error passes straight into every normalised value. Eager accumulates in double on CPU.

Here the plain mean ``m0`` is only a shift: the second pass sums ``d = x - m0`` (exact where x
is near m0) beside ``d * d``; with ``c = sum(d) / N`` the mean is ``m0 + c`` and the sum of
squares ``sum(d * d) - c * sum(d)`` (the corrected two-pass algorithm of Chan, Golub and
LeVeque, 1983). Both sums share one loop: an add per element more than torch's two passes.

An infinite element gives torch.mean's mean (inf); eager's var_mean (Welford) gives nan where
a finite element follows it.
"""

from __future__ import annotations

import torch
from torch._decomp import decomposition_table as _torch_decompositions

aten = torch.ops.aten

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _dims(x: torch.Tensor, dim) -> list[int]:
    """The reduced dims; ``None``, ``[]`` (var's legacy "every dimension") and any dim of a
    0-d tensor (0 or -1) reduce everything."""
    dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if not dims or x.dim() == 0:
        return list(range(x.dim()))
    return sorted({d % x.dim() for d in dims})


def _moments(x: torch.Tensor, dim, correction, keepdim: bool):
    """(variance, mean) of a real floating tensor, in float32 at least (callers round)."""
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    xa = x.to(acc)
    dims = _dims(x, dim)
    n = 1
    for d in dims:
        n = n * x.shape[d]
    m0 = torch.sum(xa, dims, keepdim=True) / n
    d = xa - m0
    sd = torch.sum(d, dims, keepdim=True)
    c = sd / n
    # an infinite or NaN shift makes c NaN, and the plain mean is then the answer. (m0 and c
    # have few readers, so lowering keeps them inline rather than in buffers of their own.)
    mean = m0 + torch.where(torch.isfinite(c), c, 0)
    # sum(d)^2 / N <= sum(d * d): where the squares overflow, the correction may too, and
    # inf - inf must stay inf (eager's double sum fits; its variance rounds to inf)
    fix = sd * (sd / n)
    fix = torch.where(torch.isfinite(fix), fix, 0)
    ss = torch.clamp_min(torch.sum(d * d, dims, keepdim=True) - fix, 0)
    corr = 1 if correction is None else correction
    var = ss / torch.sym_max(n - corr, 0)
    if not keepdim and dims:
        var, mean = var.squeeze(dims), mean.squeeze(dims)
    return var, mean


def var_mean(x, dim=None, *, correction=None, keepdim=False):
    if x.dtype not in _FLOATS:
        return _torch_decompositions[aten.var_mean.correction](
            x, dim, correction=correction, keepdim=keepdim)
    var, mean = _moments(x, dim, correction, keepdim)
    return var.to(x.dtype), mean.to(x.dtype)


def std_mean(x, dim=None, *, correction=None, keepdim=False):
    if x.dtype not in _FLOATS:
        return _torch_decompositions[aten.std_mean.correction](
            x, dim, correction=correction, keepdim=keepdim)
    var, mean = _moments(x, dim, correction, keepdim)
    return torch.sqrt(var).to(x.dtype), mean.to(x.dtype)


def _unbiased(fn):
    """The ``unbiased=`` spelling (the ``dim`` and default overloads) of ``fn``."""
    def by_flag(x, dim=None, unbiased=True, keepdim=False):
        return fn(x, dim, correction=1 if unbiased else 0, keepdim=keepdim)
    return by_flag


def decompositions() -> dict:
    """Our overloads of ``var_mean`` and ``std_mean`` (ATen overload -> Python function)."""
    var_flag, std_flag = _unbiased(var_mean), _unbiased(std_mean)
    return {
        aten.var_mean.correction: var_mean, aten.std_mean.correction: std_mean,
        aten.var_mean.dim: var_flag, aten.std_mean.dim: std_flag,
        aten.var_mean.default: lambda x, unbiased=True: var_flag(x, None, unbiased),
        aten.std_mean.default: lambda x, unbiased=True: std_flag(x, None, unbiased),
    }
