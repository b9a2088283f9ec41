"""The torch-op kernels of roi_align and ps_roi_align.

roi_align's samples are separable: a bin's average is ``Wy @ plane @ Wx^T`` with dense
per-box row and column weights (the bilinear weights of its samples summed per pixel), so it
runs as matrix products per image. ps_roi_align reads another channel per bin: every sample
of every bin in one gather (the grid of the box with the most samples, the rest masked).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ember.vision.ops._roi_common import batch_index, bilinear_1d


def _axis(start, bin_size, grid, pooled, big, ps):
    """Sample coordinates ``[K, pooled, big]`` along one axis and which of them exist."""
    dt = start.dtype
    cell = torch.arange(big, device=start.device, dtype=dt)
    step = (cell + 0.5) * bin_size[:, None] / grid[:, None].to(dt)
    p = torch.arange(pooled, device=start.device, dtype=dt)
    scaled = p * bin_size[:, None]
    base = (scaled + start[:, None]) if ps else (start[:, None] + scaled)
    return base[:, :, None] + step[:, None, :], (cell < grid[:, None])[:, None, :]


ROI_CHUNK = 256  # boxes per matrix product: bounds the [boxes, C, H, ow] intermediate


def _dense_weights(rois, shape, scale, ph, pw, sampling, aligned):
    """Row weights ``[K, ph, H]``, column weights ``[K, pw, W]`` (each bin's samples summed
    per pixel, divided by the sample count) and the image index of each box."""
    n, c, h, w = shape
    k = rois.shape[0]
    off = 0.5 if aligned else 0.0
    sw, sh = rois[:, 1] * scale - off, rois[:, 2] * scale - off
    rw, rh = (rois[:, 3] * scale - off) - sw, (rois[:, 4] * scale - off) - sh
    if not aligned:
        rw, rh = rw.clamp(min=1), rh.clamp(min=1)
    if sampling > 0:
        gh = gw = torch.full((k,), sampling, dtype=torch.long, device=rois.device)
    else:
        gh, gw = torch.ceil(rh / ph).long(), torch.ceil(rw / pw).long()
    count = (gh * gw).clamp(min=1).to(rois.dtype)
    dense = []
    for start, size, grid, pooled, extent in ((sh, rh, gh, ph, h), (sw, rw, gw, pw, w)):
        coord, ok = _axis(start, size / pooled, grid, pooled, max(int(grid.max()), 0), False)
        low, high, w_low, w_high = bilinear_1d(coord, extent, ok)
        m = rois.new_zeros((k * pooled, extent))
        m.scatter_add_(1, low.reshape(k * pooled, -1), w_low.reshape(k * pooled, -1))
        m.scatter_add_(1, high.reshape(k * pooled, -1), w_high.reshape(k * pooled, -1))
        dense.append(m.view(k, pooled, extent))
    wy = dense[0] / count.view(k, 1, 1)
    return wy, dense[1], batch_index(rois, n)


def _per_image(b, n):
    """(image, indices of its boxes in chunks) for every image that has boxes."""
    for i in range(n):
        idx = torch.where(b == i)[0]
        for j in range(0, idx.numel(), ROI_CHUNK):
            yield i, idx[j:j + ROI_CHUNK]


def separable_forward(input: Tensor, rois: Tensor, scale: float, ph: int, pw: int,
                      sampling: int, aligned: bool) -> Tensor:
    """roi_align as ``Wy @ plane @ Wx^T`` per box, grouped by image."""
    n, c, h, w = input.shape
    k = rois.shape[0]
    out = input.new_zeros((k, c, ph, pw))
    if k == 0 or input.numel() == 0:
        return out
    wy, wx, b = _dense_weights(rois, input.shape, scale, ph, pw, sampling, aligned)
    for i, idx in _per_image(b, n):
        cols = torch.einsum("cyx,kqx->kcyq", input[i], wx[idx])
        out[idx] = torch.einsum("kpy,kcyq->kcpq", wy[idx], cols)
    return out


def separable_backward(grad: Tensor, rois: Tensor, scale: float, ph: int, pw: int, shape,
                       sampling: int, aligned: bool) -> Tensor:
    """The adjoint of :func:`separable_forward`: ``Wy^T @ grad @ Wx`` summed over boxes."""
    n, c, h, w = shape
    gin = grad.new_zeros(shape)
    if rois.shape[0] == 0 or gin.numel() == 0:
        return gin
    wy, wx, b = _dense_weights(rois, shape, scale, ph, pw, sampling, aligned)
    for i, idx in _per_image(b, n):
        rows = torch.einsum("kcpq,kqx->kcpx", grad[idx], wx[idx])
        gin[i] += torch.einsum("kpy,kcpx->cyx", wy[idx], rows)
    return gin


def _plan(rois, shape, scale, ph, pw, sampling, aligned, ps):
    """Box index, channel index, the four (flat position, weight) corners, each
    broadcastable to ``[K, C_out, PH, GH, PW, GW]``, and the sample count per box."""
    n, c, h, w = shape
    k = rois.shape[0]
    c_out = c // (ph * pw) if ps else c
    r = rois
    off = 0.5 if aligned or ps else 0.0
    sw, sh = r[:, 1] * scale - off, r[:, 2] * scale - off
    rw, rh = (r[:, 3] * scale - off) - sw, (r[:, 4] * scale - off) - sh
    if not aligned and not ps:
        rw, rh = rw.clamp(min=1), rh.clamp(min=1)
    bin_h, bin_w = rh / ph, rw / pw
    if sampling > 0:
        gh = gw = torch.full((k,), sampling, dtype=torch.long, device=r.device)
    else:
        gh, gw = torch.ceil(rh / ph).long(), torch.ceil(rw / pw).long()
    count = (gh * gw).to(r.dtype)
    if not ps:
        count = count.clamp(min=1)
    big_h, big_w = max(int(gh.max()), 0), max(int(gw.max()), 0)
    y, y_ok = _axis(sh, bin_h, gh, ph, big_h, ps)          # [K, PH, GH]
    x, x_ok = _axis(sw, bin_w, gw, pw, big_w, ps)          # [K, PW, GW]
    y0, y1, wy0, wy1 = bilinear_1d(y, h, y_ok)
    x0, x1, wx0, wx1 = bilinear_1d(x, w, x_ok)
    b = batch_index(r, n).view(k, 1, 1, 1, 1, 1)
    if ps:
        ch = (torch.arange(c_out, device=r.device).view(1, c_out, 1, 1, 1, 1) * (ph * pw)
              + torch.arange(ph, device=r.device).view(1, 1, ph, 1, 1, 1) * pw
              + torch.arange(pw, device=r.device).view(1, 1, 1, 1, pw, 1))
    else:
        ch = torch.arange(c, device=r.device).view(1, c, 1, 1, 1, 1)

    def ydim(t):
        return t.view(k, 1, ph, big_h, 1, 1)

    def xdim(t):
        return t.view(k, 1, 1, 1, pw, big_w)

    corners = [(ydim(yi) * w + xdim(xi), ydim(wyi) * xdim(wxi))
               for yi, wyi in ((y0, wy0), (y1, wy1)) for xi, wxi in ((x0, wx0), (x1, wx1))]
    return b, ch, corners, count.view(k, 1, 1, 1)


def _empty(shape, k, ph, pw, ps):
    c = shape[1]
    c_out = c // (ph * pw) if ps else c
    return k == 0 or c_out == 0 or 0 in shape, c_out


def align_forward(input: Tensor, rois: Tensor, scale: float, ph: int, pw: int,
                  sampling: int, aligned: bool, ps: bool) -> Tensor:
    """roi_align (``ps=False``) or ps_roi_align on ``input`` [N, C, H, W], rois [K, 5]."""
    k = rois.shape[0]
    empty, c_out = _empty(input.shape, k, ph, pw, ps)
    if empty:
        return input.new_zeros((k, c_out, ph, pw))
    b, ch, corners, count = _plan(rois, input.shape, scale, ph, pw, sampling, aligned, ps)
    flat = input.reshape(input.shape[0], input.shape[1], -1)
    out = sum(flat[b, ch, idx] * wt for idx, wt in corners)
    return out.sum((3, 5)) / count


def align_backward(grad: Tensor, rois: Tensor, scale: float, ph: int, pw: int, shape,
                   sampling: int, aligned: bool, ps: bool) -> Tensor:
    """The adjoint of :func:`align_forward`: each sample's share of its bin's gradient,
    added into its four pixels."""
    n, c, h, w = shape
    gin = grad.new_zeros((n, c, h * w))
    empty, _ = _empty(shape, rois.shape[0], ph, pw, ps)
    if empty:
        return gin.view(n, c, h, w)
    b, ch, corners, count = _plan(rois, shape, scale, ph, pw, sampling, aligned, ps)
    g, cnt = grad[:, :, :, None, :, None], count[..., None, None]
    for idx, wt in corners:
        val = g * wt / cnt
        bi, ci, ii = torch.broadcast_tensors(b, ch, idx)
        gin.index_put_((bi.reshape(-1), ci.reshape(-1), ii.reshape(-1)),
                       val.expand(bi.shape).reshape(-1), accumulate=True)
    return gin.view(n, c, h, w)
