"""The torch-op kernels of roi_pool and ps_roi_pool: integer bins, every pixel of every bin
in one gather (the widest bin's span, the rest masked)."""

from __future__ import annotations

import torch
from torch import Tensor

from ember.vision.ops._roi_common import batch_index, round_half_away


def _edges(start, end, scale, pooled, extra, limit, dt):
    """Bin edges ``[K, pooled]`` along one axis, clipped to ``[0, limit]``."""
    s, e = round_half_away(start * scale).long(), round_half_away(end * scale).long()
    size = (e - s + extra).clamp(min=1).to(dt) / pooled
    p = torch.arange(pooled, device=start.device, dtype=dt)
    lo = (torch.floor(p * size[:, None]).long() + s[:, None]).clamp(0, limit)
    hi = (torch.ceil((p + 1) * size[:, None]).long() + s[:, None]).clamp(0, limit)
    return lo, hi


def _span(lo, hi, size):
    """Pixel indices ``[K, pooled, span]`` of each bin and which of them are inside it."""
    span = max(int((hi - lo).max()), 0) if lo.numel() else 0
    j = torch.arange(span, device=lo.device)
    idx = lo[:, :, None] + j
    return idx.clamp(max=max(size - 1, 0)), idx < hi[:, :, None], span


def _gather_plan(rois, shape, scale, ph, pw, ps):
    n, c, h, w = shape
    k = rois.shape[0]
    extra, lim_h, lim_w = (0, h - 1, w - 1) if ps else (1, h, w)
    h0, h1 = _edges(rois[:, 2], rois[:, 4], scale, ph, extra, lim_h, rois.dtype)
    w0, w1 = _edges(rois[:, 1], rois[:, 3], scale, pw, extra, lim_w, rois.dtype)
    rows, row_ok, sh = _span(h0, h1, h)
    cols, col_ok, sw = _span(w0, w1, w)
    b = batch_index(rois, n).view(k, 1, 1, 1, 1, 1)
    if ps:
        c_out = c // (ph * pw)
        ch = (torch.arange(c_out, device=rois.device).view(1, c_out, 1, 1, 1, 1) * (ph * pw)
              + torch.arange(ph, device=rois.device).view(1, 1, ph, 1, 1, 1) * pw
              + torch.arange(pw, device=rois.device).view(1, 1, 1, 1, pw, 1))
    else:
        ch = torch.arange(c, device=rois.device).view(1, c, 1, 1, 1, 1)
    pos = rows.view(k, 1, ph, sh, 1, 1) * w + cols.view(k, 1, 1, 1, pw, sw)
    ok = row_ok.view(k, 1, ph, sh, 1, 1) & col_ok.view(k, 1, 1, 1, pw, sw)
    area = ((h1 - h0).clamp(min=0)[:, :, None] * (w1 - w0).clamp(min=0)[:, None, :])
    return b, ch, pos, ok, area.view(k, 1, ph, pw)


def pool_forward(input: Tensor, rois: Tensor, scale: float, ph: int, pw: int):
    """roi_pool: the maximum of each bin and its flat ``y * W + x`` (int32, -1 if empty)."""
    n, c, h, w = input.shape
    k = rois.shape[0]
    out = input.new_zeros((k, c, ph, pw))
    arg = torch.full((k, c, ph, pw), -1, dtype=torch.int32, device=input.device)
    if out.numel() == 0 or input.numel() == 0:
        return out, arg
    b, ch, pos, ok, area = _gather_plan(rois, input.shape, scale, ph, pw, False)
    if pos.shape[3] * pos.shape[5] == 0:
        return out, arg
    vals = input.reshape(n, c, h * w)[b, ch, pos]
    vals = torch.where(ok, vals, torch.full((), float("-inf"), dtype=vals.dtype,
                                            device=vals.device))
    vals = vals.permute(0, 1, 2, 4, 3, 5).flatten(4)
    best, which = vals.max(-1)
    where = torch.gather(pos.expand(k, c, *pos.shape[2:]).permute(0, 1, 2, 4, 3, 5)
                         .flatten(4), 4, which[..., None])[..., 0]
    empty = area == 0
    return (torch.where(empty, out, best),
            torch.where(empty, arg, where.to(torch.int32)))


def pool_backward(grad: Tensor, rois: Tensor, argmax: Tensor, shape) -> Tensor:
    """roi_pool's gradient: each bin's gradient to the pixel its maximum came from."""
    n, c, h, w = shape
    gin = grad.new_zeros(n * c * h * w)
    k = rois.shape[0]
    if grad.numel() == 0 or gin.numel() == 0:
        return gin.view(shape)
    plane = (batch_index(rois, n).view(k, 1, 1, 1) * c
             + torch.arange(c, device=grad.device).view(1, c, 1, 1)) * (h * w)
    ok = argmax >= 0
    gin.index_put_(((plane + argmax.long())[ok],), grad[ok], accumulate=True)
    return gin.view(shape)


def ps_pool_forward(input: Tensor, rois: Tensor, scale: float, ph: int, pw: int) -> Tensor:
    """ps_roi_pool: the mean of each bin over its own channel (0 if empty)."""
    n, c, h, w = input.shape
    k = rois.shape[0]
    out = input.new_zeros((k, c // (ph * pw), ph, pw))
    if out.numel() == 0 or input.numel() == 0:
        return out
    b, ch, pos, ok, area = _gather_plan(rois, input.shape, scale, ph, pw, True)
    if pos.shape[3] * pos.shape[5] == 0:
        return out
    vals = torch.where(ok, input.reshape(n, c, h * w)[b, ch, pos], 0)
    total = vals.sum((3, 5))
    return torch.where(area == 0, out, total / area.clamp(min=1).to(total.dtype))


def ps_pool_backward(grad: Tensor, rois: Tensor, scale: float, ph: int, pw: int,
                     shape) -> Tensor:
    """The adjoint of :func:`ps_pool_forward`: each bin's gradient spread evenly over it."""
    n, c, h, w = shape
    gin = grad.new_zeros((n, c, h * w))
    if grad.numel() == 0 or gin.numel() == 0:
        return gin.view(shape)
    b, ch, pos, ok, area = _gather_plan(rois, shape, scale, ph, pw, True)
    if pos.shape[3] * pos.shape[5] == 0:
        return gin.view(shape)
    share = (grad / area.clamp(min=1).to(grad.dtype))[:, :, :, None, :, None] * ok
    bi, ci, pi = torch.broadcast_tensors(b, ch, pos)
    gin.index_put_((bi.reshape(-1), ci.reshape(-1), pi.reshape(-1)),
                   share.expand(bi.shape).reshape(-1), accumulate=True)
    return gin.view(shape)
