"""RoI ops (roi_align, roi_pool, ps_roi_align, ps_roi_pool) against a plain float64
reference written from the papers' rules as torchvision implements them; the native CPU and
the torch-op kernels against each other; gradcheck; compiled with fullgraph=True."""

from __future__ import annotations

import math

import pytest
import torch

from ember.core import kernels
from ember.vision import ops
from ember.vision.ops import _roi_native


def make_rois(k, n, h, w, seed=0, dtype=torch.float64):
    """Boxes from 20% outside the image, sizes -1 .. 0.6 x side (some degenerate)."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(k, 2, generator=g, dtype=torch.float64) * torch.tensor(
        [w * 1.4, h * 1.4]) - torch.tensor([w * 0.2, h * 0.2])
    wh = torch.rand(k, 2, generator=g, dtype=torch.float64) * torch.tensor(
        [w * 0.6, h * 0.6]) - 1
    idx = torch.randint(0, n, (k, 1), generator=g).double()
    return torch.cat([idx, xy, xy + wh], 1).to(dtype)


def image(shape, seed=1, dtype=torch.float64):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ----------------------------------------------------------------- float64 references

def bilinear(plane, y, x):
    h, w = plane.shape
    if y < -1 or y > h or x < -1 or x > w:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return float((1 - ly) * (1 - lx) * plane[y0, x0] + (1 - ly) * lx * plane[y0, x1]
                 + ly * (1 - lx) * plane[y1, x0] + ly * lx * plane[y1, x1])


def ref_align(x, rois, ph, pw, scale, sampling, aligned, ps=False):
    n, c, h, w = x.shape
    c_out = c // (ph * pw) if ps else c
    out = torch.zeros(len(rois), c_out, ph, pw, dtype=torch.float64)
    for r, (b, x1, y1, x2, y2) in enumerate(rois.tolist()):
        off = 0.5 if aligned or ps else 0.0
        sx, sy = x1 * scale - off, y1 * scale - off
        rw, rh = x2 * scale - off - sx, y2 * scale - off - sy
        if not aligned and not ps:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = sampling if sampling > 0 else math.ceil(rh / ph)
        gw = sampling if sampling > 0 else math.ceil(rw / pw)
        count = gh * gw if ps else max(gh * gw, 1)
        for co in range(c_out):
            for i in range(ph):
                for j in range(pw):
                    plane = x[int(b), (co * ph + i) * pw + j if ps else co]
                    total = sum(bilinear(plane, sy + i * rh / ph + (iy + 0.5) * rh / ph / gh,
                                         sx + j * rw / pw + (ix + 0.5) * rw / pw / gw)
                                for iy in range(max(gh, 0)) for ix in range(max(gw, 0)))
                    out[r, co, i, j] = total / count if count else float("nan")
    return out


def pool_bins(box, scale, ph, pw, extra, lim_h, lim_w):
    def rnd(v):  # C's round: halves away from zero
        return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)
    x1, y1, x2, y2 = (rnd(v * scale) for v in box)
    bh, bw = max(y2 - y1 + extra, 1) / ph, max(x2 - x1 + extra, 1) / pw
    for i in range(ph):
        for j in range(pw):
            h0 = min(max(math.floor(i * bh) + y1, 0), lim_h)
            h1 = min(max(math.ceil((i + 1) * bh) + y1, 0), lim_h)
            w0 = min(max(math.floor(j * bw) + x1, 0), lim_w)
            w1 = min(max(math.ceil((j + 1) * bw) + x1, 0), lim_w)
            yield i, j, h0, h1, w0, w1


def ref_pool(x, rois, ph, pw, scale):
    n, c, h, w = x.shape
    out = torch.zeros(len(rois), c, ph, pw, dtype=torch.float64)
    for r, (b, *box) in enumerate(rois.tolist()):
        for i, j, h0, h1, w0, w1 in pool_bins(box, scale, ph, pw, 1, h, w):
            if h1 > h0 and w1 > w0:
                out[r, :, i, j] = x[int(b), :, h0:h1, w0:w1].amax((1, 2))
    return out


def ref_ps_pool(x, rois, ph, pw, scale):
    n, c, h, w = x.shape
    out = torch.zeros(len(rois), c // (ph * pw), ph, pw, dtype=torch.float64)
    for r, (b, *box) in enumerate(rois.tolist()):
        for i, j, h0, h1, w0, w1 in pool_bins(box, scale, ph, pw, 0, h - 1, w - 1):
            if h1 > h0 and w1 > w0:
                chans = torch.arange(c // (ph * pw)) * ph * pw + i * pw + j
                out[r, :, i, j] = x[int(b), chans, h0:h1, w0:w1].mean((1, 2))
    return out


# ----------------------------------------------------------------- forward vs reference

@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [-1, 2])
@pytest.mark.parametrize("scale", [1.0, 0.37])
def test_roi_align_matches_reference(aligned, sampling, scale):
    x = image((2, 3, 9, 11))
    rois = make_rois(15, 2, 9 / scale, 11 / scale)
    ref = ref_align(x, rois, 3, 2, scale, sampling, aligned)
    torch.testing.assert_close(ops.roi_align(x, rois, (3, 2), scale, sampling, aligned), ref)
    out32 = ops.roi_align(x.float(), rois.float(), (3, 2), scale, sampling, aligned)
    torch.testing.assert_close(out32.double(), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [-1, 2])
def test_roi_align_nhwc_kernel_equals_nchw_kernel(dtype, aligned, sampling):
    """A channels-last input (a frozen convolution's output) takes the NHWC kernel: the same
    sums in the same order as the NCHW kernel, so bitwise its result, and gradients too."""
    x = image((2, 8, 40, 44)).to(dtype)
    rois = make_rois(5, 2, 40 / 0.37, 44 / 0.37).to(dtype)  # too few boxes to copy x
    xcl = x.contiguous(memory_format=torch.channels_last)
    assert not xcl.is_contiguous()
    want = ops.roi_align(x, rois, (3, 2), 0.37, sampling, aligned)
    assert torch.equal(ops.roi_align(xcl, rois, (3, 2), 0.37, sampling, aligned), want)
    xg = xcl.clone().requires_grad_()
    ops.roi_align(xg, rois, (3, 2), 0.37, sampling, aligned).sum().backward()
    xr = x.clone().requires_grad_()
    ops.roi_align(xr, rois, (3, 2), 0.37, sampling, aligned).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, atol=0, rtol=0)
    assert ops.roi_align(xcl, rois[:0], 2).shape == (0, 8, 2, 2)
    with pytest.raises(ValueError, match="batch index"):
        ops.roi_align(xcl, torch.cat([rois[:1, :1] + 5, rois[:1, 1:]], 1), 2)


@pytest.mark.parametrize("aligned", [False, True])
def test_roi_align_many_boxes_on_nchw_input_matches_reference(aligned):
    """Enough boxes that the NCHW input is copied to NHWC for the faster kernel."""
    x = image((2, 8, 9, 11))
    rois = make_rois(40, 2, 9 / 0.37, 11 / 0.37)
    ref = ref_align(x, rois, 3, 2, 0.37, 2, aligned)
    torch.testing.assert_close(ops.roi_align(x, rois, (3, 2), 0.37, 2, aligned), ref)
    out32 = ops.roi_align(x.float(), rois.float(), (3, 2), 0.37, 2, aligned)
    torch.testing.assert_close(out32.double(), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("sampling", [-1, 2])
def test_ps_roi_align_matches_reference(sampling):
    x = image((2, 12, 9, 11))
    rois = make_rois(15, 2, 9, 11, seed=2)
    torch.testing.assert_close(ops.ps_roi_align(x, rois, (2, 3), 0.8, sampling),
                               ref_align(x, rois, 2, 3, 0.8, sampling, False, ps=True),
                               equal_nan=True)


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.37])
def test_roi_pool_and_ps_roi_pool_match_reference(scale):
    x = image((2, 8, 9, 11))
    rois = make_rois(20, 2, 9 / scale, 11 / scale, seed=3)
    assert torch.equal(ops.roi_pool(x, rois, (2, 3), scale), ref_pool(x, rois, 2, 3, scale))
    torch.testing.assert_close(ops.ps_roi_pool(x, rois, 2, scale),
                               ref_ps_pool(x, rois, 2, 2, scale))


# ----------------------------------------------------------------- kernels agree

OPS = {
    "roi_align": (lambda x, r: (x, r, 0.6, 3, 2, -1, True)),
    "ps_roi_align": (lambda x, r: (x, r, 0.6, 2, 3, 2)),
    "roi_pool": (lambda x, r: (x, r, 0.6, 2, 3)),
    "ps_roi_pool": (lambda x, r: (x, r, 0.6, 2, 3)),
}


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_and_portable_kernels_agree(name, dtype):
    op = kernels.get(f"ember_vision::{name}")
    devices = ["cpu", "cuda", "portable"] if name == "roi_align" else ["cpu", "portable"]
    assert sorted(op.kernels) == devices and op.has_fake and op.has_autograd
    x = image((2, 12, 13, 10), dtype=dtype)
    rois = make_rois(25, 2, 13 / 0.6, 10 / 0.6, seed=4, dtype=dtype)
    native, portable = op.kernels["cpu"](*OPS[name](x, rois)), op.kernels["portable"](
        *OPS[name](x, rois))
    if name == "roi_pool":
        assert torch.equal(native[1], portable[1])
        native, portable = native[0], portable[0]
    # float32 sums in another order: a few ulps of values up to ~10
    atol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(native, portable, atol=atol, rtol=0, equal_nan=True)


@pytest.fixture(params=["native", "portable"])
def kernel(request, monkeypatch):
    if request.param == "portable":
        monkeypatch.setattr(_roi_native, "library", lambda: None)
    return request.param


@pytest.mark.parametrize("name", sorted(OPS))
def test_gradcheck(name, kernel):
    # boxes kept off sample positions that sit exactly on pixel edges (max/floor kinks)
    x = image((2, 8, 7, 6)).requires_grad_()
    rois = make_rois(6, 2, 7 / 0.6, 6 / 0.6, seed=5) + 0.013
    rois[:, 0] = torch.tensor([0.0, 1, 0, 1, 1, 0])
    fn = {"roi_align": lambda t: ops.roi_align(t, rois, (3, 2), 0.6, -1, True),
          "ps_roi_align": lambda t: ops.ps_roi_align(t, rois, (2, 2), 0.6, 2),
          "roi_pool": lambda t: ops.roi_pool(t, rois, (2, 2), 0.6),
          "ps_roi_pool": lambda t: ops.ps_roi_pool(t, rois, (2, 2), 0.6)}[name]
    assert torch.autograd.gradcheck(fn, (x,), fast_mode=True)


@pytest.mark.parametrize("name", sorted(OPS))
def test_compiles_without_graph_breaks(name):
    x = image((2, 8, 9, 11), dtype=torch.float32)
    rois = make_rois(10, 2, 9, 11, seed=6, dtype=torch.float32)
    fn = {"roi_align": lambda t, r: ops.roi_align(t, r, 2, 0.9, 2).relu().sum(),
          "ps_roi_align": lambda t, r: ops.ps_roi_align(t, r, 2, 0.9, 2).relu().sum(),
          "roi_pool": lambda t, r: (ops.roi_pool(t, r, 2, 0.9) * 2).sum(),
          "ps_roi_pool": lambda t, r: (ops.ps_roi_pool(t, r, 2, 0.9) * 2).sum()}[name]
    compiled = torch.compile(fn, backend="ember", fullgraph=True)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager, comp = fn(xe, rois), compiled(xc, rois)
    torch.testing.assert_close(comp, eager)
    eager.backward()
    comp.backward()
    torch.testing.assert_close(xc.grad, xe.grad)


# ----------------------------------------------------------------- inputs

def test_box_list_empty_boxes_and_modules():
    x = image((2, 3, 9, 11), dtype=torch.float32)
    rois = make_rois(8, 2, 9, 11, dtype=torch.float32)
    as_list = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    order = torch.cat([torch.where(rois[:, 0] == i)[0] for i in range(2)])
    torch.testing.assert_close(ops.roi_align(x, as_list, 2), ops.roi_align(x, rois, 2)[order])
    assert ops.roi_align(x, torch.zeros(0, 5), 2).shape == (0, 3, 2, 2)
    assert ops.roi_pool(x, [torch.zeros(0, 4)], 3).shape == (0, 3, 3, 3)
    torch.testing.assert_close(ops.RoIAlign(2, 1.0, -1)(x, rois), ops.roi_align(x, rois, 2))
    torch.testing.assert_close(ops.RoIPool(2, 1.0)(x, rois), ops.roi_pool(x, rois, 2))
    x12 = image((2, 12, 9, 11), dtype=torch.float32)
    torch.testing.assert_close(ops.PSRoIAlign(2, 1.0, 2)(x12, rois),
                               ops.ps_roi_align(x12, rois, 2, 1.0, 2))
    torch.testing.assert_close(ops.PSRoIPool(2, 1.0)(x12, rois), ops.ps_roi_pool(x12, rois, 2))
    grad_x = x.clone().requires_grad_()
    ops.roi_align(grad_x, torch.zeros(0, 5), 2).sum().backward()
    assert torch.equal(grad_x.grad, torch.zeros_like(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_computes_in_float32(dtype):
    x = image((1, 3, 9, 11), dtype=torch.float32)
    rois = make_rois(6, 1, 9, 11, dtype=torch.float32)
    out = ops.roi_align(x.to(dtype), rois.to(dtype), 2)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ops.roi_align(x.to(dtype).float(),
                                                          rois.to(dtype).float(), 2),
                               atol=1e-2, rtol=1e-2)


def test_bad_arguments_raise():
    x = image((1, 4, 5, 5), dtype=torch.float32)
    with pytest.raises(ValueError, match="K, 5"):
        ops.roi_align(x, torch.zeros(3, 4), 2)
    with pytest.raises(ValueError, match="L, 4"):
        ops.roi_pool(x, [torch.zeros(3, 5)], 2)
    with pytest.raises(TypeError, match="dtype"):
        ops.roi_align(x, torch.zeros(1, 5, dtype=torch.float64), 2)
    with pytest.raises(ValueError, match="input"):
        ops.roi_align(x[0], torch.zeros(1, 5), 2)
    with pytest.raises(ValueError, match="multiple"):
        ops.ps_roi_align(image((1, 5, 5, 5), dtype=torch.float32), torch.zeros(1, 5), 2)
    with pytest.raises(ValueError, match="output_size"):
        ops.roi_align(x, torch.zeros(1, 5), 0)

@pytest.mark.parametrize("name", sorted(OPS))
def test_box_outside_the_batch_raises(name, kernel):
    x = image((1, 4, 5, 5), dtype=torch.float32)
    fn = getattr(ops, name)
    for index in (3.0, -1.0):  # image 3 of a batch of 1; -1 must not wrap to the last
        with pytest.raises(ValueError, match="batch index"):
            fn(x, torch.tensor([[index, 0, 0, 2, 2]]), 2)
    assert fn(x, torch.tensor([[0.7, 0, 0, 2, 2]]), 2).shape[0] == 1  # truncated to 0
