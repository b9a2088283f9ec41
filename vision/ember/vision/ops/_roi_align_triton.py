"""roi_align forward and backward as Triton kernels (float32, CUDA): one lane per output
element, lanes ordered as the output [K, C, PH, PW] so neighbours sample the same channel plane
(coalesced gathers); each lane loops over its bin's samples, the backward adds its shares with
atomics. Imported only when triton is installed; tests run it in Triton's interpreter."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["forward", "backward"]

BLOCK = 128  # output elements per program (one per lane at 4 warps)


@triton.jit
def _tap(y, x, H, W):
    """torchvision's bilinear rule for one sample: 4 flat positions, 4 weights."""
    ok = (y >= -1.0) & (y <= H) & (x >= -1.0) & (x <= W)
    y = tl.maximum(y, 0.0)
    x = tl.maximum(x, 0.0)
    y0 = y.to(tl.int32)
    x0 = x.to(tl.int32)
    ylast = y0 >= H - 1
    xlast = x0 >= W - 1
    y0 = tl.where(ylast, H - 1, y0)
    x0 = tl.where(xlast, W - 1, x0)
    y1 = tl.where(ylast, y0, y0 + 1)
    x1 = tl.where(xlast, x0, x0 + 1)
    y = tl.where(ylast, y0.to(tl.float32), y)
    x = tl.where(xlast, x0.to(tl.float32), x)
    ly = y - y0.to(tl.float32)
    lx = x - x0.to(tl.float32)
    hy = 1.0 - ly
    hx = 1.0 - lx
    zero = 0.0
    return (y0 * W + x0, y0 * W + x1, y1 * W + x0, y1 * W + x1,
            tl.where(ok, hy * hx, zero), tl.where(ok, hy * lx, zero),
            tl.where(ok, ly * hx, zero), tl.where(ok, ly * lx, zero))


@triton.jit
def _box(rois, k, live, scale, PH, PW, sampling, ALIGNED: tl.constexpr):
    """Per lane: box ``k``'s image, start, bin size, sample grid and sample count."""
    r = rois + k * 5
    b = tl.load(r, mask=live, other=0.0).to(tl.int64)
    off = 0.5 if ALIGNED else 0.0
    sw = tl.load(r + 1, mask=live, other=0.0) * scale - off
    sh = tl.load(r + 2, mask=live, other=0.0) * scale - off
    rw = tl.load(r + 3, mask=live, other=0.0) * scale - off - sw
    rh = tl.load(r + 4, mask=live, other=0.0) * scale - off - sh
    if not ALIGNED:
        rw = tl.maximum(rw, 1.0)
        rh = tl.maximum(rh, 1.0)
    bh = rh / PH
    bw = rw / PW
    gh = tl.where(sampling > 0, sampling, tl.ceil(rh / PH).to(tl.int32))
    gw = tl.where(sampling > 0, sampling, tl.ceil(rw / PW).to(tl.int32))
    gh = tl.where(live, gh, 0)
    gw = tl.where(live, gw, 0)
    count = tl.maximum(gh * gw, 1).to(tl.float32)
    return b, sh, sw, bh, bw, gh, gw, count


@triton.jit
def _element(pid, total, C, PH, PW, BLOCK: tl.constexpr, I64: tl.constexpr):
    """The lanes' output elements: flat index, live mask, box, channel, bin row and column."""
    if I64:
        i = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        i = pid * BLOCK + tl.arange(0, BLOCK)
    live = i < total
    px = i % PW
    rest = i // PW
    py = rest % PH
    rest = rest // PH
    return i, live, rest // C, rest % C, py, px


@triton.jit
def _fwd_kernel(inp, rois, out, total, C, H, W, PH, PW, scale, sampling,
                ALIGNED: tl.constexpr, BLOCK: tl.constexpr, I64: tl.constexpr):
    i, live, k, c, py, px = _element(tl.program_id(0), total, C, PH, PW, BLOCK, I64)
    b, sh, sw, bh, bw, gh, gw, count = _box(rois, k, live, scale, PH, PW, sampling, ALIGNED)
    plane = inp + (b * C + c) * H * W
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for iy in range(0, tl.max(gh, 0)):
        y = (sh + py * bh) + (iy + 0.5) * bh / tl.maximum(gh, 1)
        for ix in range(0, tl.max(gw, 0)):
            x = (sw + px * bw) + (ix + 0.5) * bw / tl.maximum(gw, 1)
            ok = (iy < gh) & (ix < gw)
            p1, p2, p3, p4, w1, w2, w3, w4 = _tap(y, x, H, W)
            v = (w1 * tl.load(plane + p1, mask=ok, other=0.0)
                 + w2 * tl.load(plane + p2, mask=ok, other=0.0)
                 + w3 * tl.load(plane + p3, mask=ok, other=0.0)
                 + w4 * tl.load(plane + p4, mask=ok, other=0.0))
            acc += tl.where(ok, v, 0.0)
    tl.store(out + i, acc / count, mask=live)


@triton.jit
def _bwd_kernel(grad, rois, gin, total, C, H, W, PH, PW, scale, sampling,
                ALIGNED: tl.constexpr, BLOCK: tl.constexpr, I64: tl.constexpr):
    i, live, k, c, py, px = _element(tl.program_id(0), total, C, PH, PW, BLOCK, I64)
    b, sh, sw, bh, bw, gh, gw, count = _box(rois, k, live, scale, PH, PW, sampling, ALIGNED)
    g = tl.load(grad + i, mask=live, other=0.0)
    plane = gin + (b * C + c) * H * W
    for iy in range(0, tl.max(gh, 0)):
        y = (sh + py * bh) + (iy + 0.5) * bh / tl.maximum(gh, 1)
        for ix in range(0, tl.max(gw, 0)):
            x = (sw + px * bw) + (ix + 0.5) * bw / tl.maximum(gw, 1)
            ok = (iy < gh) & (ix < gw)
            p1, p2, p3, p4, w1, w2, w3, w4 = _tap(y, x, H, W)
            tl.atomic_add(plane + p1, g * w1 / count, mask=ok, sem="relaxed")
            tl.atomic_add(plane + p2, g * w2 / count, mask=ok, sem="relaxed")
            tl.atomic_add(plane + p3, g * w3 / count, mask=ok, sem="relaxed")
            tl.atomic_add(plane + p4, g * w4 / count, mask=ok, sem="relaxed")


def _launch(kernel, total, src, rois, dst, c, h, w, ph, pw, scale, sampling, aligned):
    """One lane per output element (``total`` of them); int64 indices when a flat index of
    ``src``, ``dst`` or the lanes may pass int32."""
    big = max(total, src.numel(), dst.numel()) + BLOCK >= 2 ** 31
    kernel[(triton.cdiv(total, BLOCK),)](src, rois, dst, total, c, h, w, ph, pw, float(scale),
                                         int(sampling), ALIGNED=bool(aligned), BLOCK=BLOCK,
                                         I64=big)


def forward(input, rois, scale, ph, pw, sampling, aligned):
    """roi_align of float32 contiguous ``input`` [N, C, H, W] and rois [K, 5]."""
    n, c, h, w = input.shape
    out = input.new_zeros((rois.shape[0], c, ph, pw))
    if out.numel() and input.numel():
        _launch(_fwd_kernel, out.numel(), input, rois, out, c, h, w, ph, pw, scale, sampling,
                aligned)
    return out


def backward(grad, rois, scale, ph, pw, shape, sampling, aligned):
    """The input gradient [N, C, H, W] of :func:`forward` for ``grad`` [K, C, ph, pw]."""
    gin = torch.zeros(shape, dtype=grad.dtype, device=grad.device)
    if grad.numel() and gin.numel():
        _launch(_bwd_kernel, grad.numel(), grad, rois, gin, grad.shape[1], shape[2], shape[3],
                ph, pw, scale, sampling, aligned)
    return gin
