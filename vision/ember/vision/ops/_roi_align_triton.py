"""roi_align forward and backward as Triton kernels (float32, CUDA): one program per box bin
and block of channels, the samples of the bin in a loop; the backward adds its shares with
atomics. Imported only when triton is installed; tests run it in Triton's interpreter."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["forward", "backward"]

BLOCK_C = 32


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
def _box(rois, k, scale, PH, PW, sampling, ALIGNED: tl.constexpr):
    r = rois + k * 5
    b = tl.load(r).to(tl.int64)
    off = 0.5 if ALIGNED else 0.0
    sw = tl.load(r + 1) * scale - off
    sh = tl.load(r + 2) * scale - off
    rw = tl.load(r + 3) * scale - off - sw
    rh = tl.load(r + 4) * scale - off - sh
    if not ALIGNED:
        rw = tl.maximum(rw, 1.0)
        rh = tl.maximum(rh, 1.0)
    bh = rh / PH
    bw = rw / PW
    gh = tl.where(sampling > 0, sampling, tl.ceil(rh / PH).to(tl.int32))
    gw = tl.where(sampling > 0, sampling, tl.ceil(rw / PW).to(tl.int32))
    count = tl.maximum(gh * gw, 1).to(tl.float32)
    return b, sh, sw, bh, bw, gh, gw, count


@triton.jit
def _fwd_kernel(inp, rois, out, C, H, W, PH, PW, scale, sampling, ALIGNED: tl.constexpr,
                BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    k = pid // (PH * PW)
    bin = pid % (PH * PW)
    py = bin // PW
    px = bin % PW
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cm = c < C
    b, sh, sw, bh, bw, gh, gw, count = _box(rois, k, scale, PH, PW, sampling, ALIGNED)
    plane = inp + (b * C + c.to(tl.int64)) * H * W
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for iy in range(0, gh):
        y = (sh + py * bh) + (iy + 0.5) * bh / gh
        for ix in range(0, gw):
            x = (sw + px * bw) + (ix + 0.5) * bw / gw
            p1, p2, p3, p4, w1, w2, w3, w4 = _tap(y, x, H, W)
            acc += (w1 * tl.load(plane + p1, mask=cm, other=0.0)
                    + w2 * tl.load(plane + p2, mask=cm, other=0.0)
                    + w3 * tl.load(plane + p3, mask=cm, other=0.0)
                    + w4 * tl.load(plane + p4, mask=cm, other=0.0))
    tl.store(out + (k * C + c.to(tl.int64)) * PH * PW + bin, acc / count, mask=cm)


@triton.jit
def _bwd_kernel(grad, rois, gin, C, H, W, PH, PW, scale, sampling, ALIGNED: tl.constexpr,
                BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    k = pid // (PH * PW)
    bin = pid % (PH * PW)
    py = bin // PW
    px = bin % PW
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cm = c < C
    b, sh, sw, bh, bw, gh, gw, count = _box(rois, k, scale, PH, PW, sampling, ALIGNED)
    g = tl.load(grad + (k * C + c.to(tl.int64)) * PH * PW + bin, mask=cm, other=0.0)
    plane = gin + (b * C + c.to(tl.int64)) * H * W
    for iy in range(0, gh):
        y = (sh + py * bh) + (iy + 0.5) * bh / gh
        for ix in range(0, gw):
            x = (sw + px * bw) + (ix + 0.5) * bw / gw
            p1, p2, p3, p4, w1, w2, w3, w4 = _tap(y, x, H, W)
            tl.atomic_add(plane + p1, g * w1 / count, mask=cm)
            tl.atomic_add(plane + p2, g * w2 / count, mask=cm)
            tl.atomic_add(plane + p3, g * w3 / count, mask=cm)
            tl.atomic_add(plane + p4, g * w4 / count, mask=cm)


def forward(input, rois, scale, ph, pw, sampling, aligned):
    """roi_align of float32 contiguous ``input`` [N, C, H, W] and rois [K, 5]."""
    n, c, h, w = input.shape
    k = rois.shape[0]
    out = input.new_zeros((k, c, ph, pw))
    if out.numel() and input.numel():
        grid = (k * ph * pw, triton.cdiv(c, BLOCK_C))
        _fwd_kernel[grid](input, rois, out, c, h, w, ph, pw, float(scale), int(sampling),
                          ALIGNED=bool(aligned), BLOCK=BLOCK_C)
    return out


def backward(grad, rois, scale, ph, pw, shape, sampling, aligned):
    """The input gradient [N, C, H, W] of :func:`forward` for ``grad`` [K, C, ph, pw]."""
    gin = torch.zeros(shape, dtype=grad.dtype, device=grad.device)
    k, c = grad.shape[:2]
    if grad.numel() and gin.numel():
        grid = (k * ph * pw, triton.cdiv(c, BLOCK_C))
        _bwd_kernel[grid](grad, rois, gin, c, shape[2], shape[3], ph, pw, float(scale),
                          int(sampling), ALIGNED=bool(aligned), BLOCK=BLOCK_C)
    return gin
