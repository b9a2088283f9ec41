"""roi_align's Triton kernels (its CUDA kernels) against the native CPU kernel, run on CPU by
Triton's interpreter. ``TRITON_INTERPRET`` must be set before triton is imported, so unless
this process was started with it the kernel tests run in a child pytest process that is."""

import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

import ember.vision.ops  # noqa: F401  (declares the ops)
from ember.core import kernels

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INTERPRETED, reason="runs in the interpreter subprocess")


@pytest.mark.skipif(INTERPRETED, reason="this process already interprets Triton")
def test_kernels_in_an_interpreter_subprocess():
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           __file__], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


def rois(k, n, h, w, seed=0):
    """Boxes from 20% outside the image, sizes -1 .. 0.6 x side (some degenerate)."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(k, 2, generator=g) * torch.tensor([w * 1.4, h * 1.4]) - torch.tensor(
        [w * 0.2, h * 0.2])
    wh = torch.rand(k, 2, generator=g) * torch.tensor([w * 0.6, h * 0.6]) - 1
    return torch.cat([torch.randint(0, n, (k, 1), generator=g).float(), xy, xy + wh], 1)


@interpreted
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [-1, 2])
def test_triton_roi_align_matches_the_native_kernel(aligned, sampling):
    fwd, bwd = kernels.get("ember_vision::roi_align"), kernels.get(
        "ember_vision::roi_align_backward")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 33, 9, 11, generator=g)          # 33 channels: a partial block
    r = rois(7, 2, 9 / 0.6, 11 / 0.6)
    args = (0.6, 3, 2)
    out = fwd.kernels["cuda"](x, r, *args, sampling, aligned)   # Triton on CPU tensors
    torch.testing.assert_close(out, fwd.kernels["cpu"](x, r, *args, sampling, aligned),
                               atol=1e-5, rtol=0)
    go = torch.randn(out.shape, generator=g)
    grad = bwd.kernels["cuda"](go, r, *args, *x.shape, sampling, aligned)
    torch.testing.assert_close(grad, bwd.kernels["cpu"](go, r, *args, *x.shape, sampling,
                                                         aligned), atol=1e-5, rtol=0)


@interpreted
def test_triton_path_checks_the_image_index_and_falls_back_for_float64():
    fwd = kernels.get("ember_vision::roi_align")
    x = torch.randn(1, 4, 5, 5)
    with pytest.raises(ValueError, match="batch index"):
        fwd.kernels["cuda"](x, torch.tensor([[2.0, 0, 0, 2, 2]]), 1.0, 2, 2, -1, False)
    xd, rd = x.double(), torch.tensor([[0.0, 0.5, 0.5, 3, 4]], dtype=torch.float64)
    torch.testing.assert_close(fwd.kernels["cuda"](xd, rd, 1.0, 2, 2, -1, False),
                               fwd.kernels["cpu"](xd, rd, 1.0, 2, 2, -1, False))


@pytest.mark.cuda
@pytest.mark.skipif(INTERPRETED or not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [-1, 2])
def test_triton_roi_align_on_cuda_matches_the_native_kernel(aligned, sampling):
    """The compiled kernels on a GPU, many boxes and channels, against the native CPU kernel."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 70, 20, 24, generator=g)
    r = rois(300, 2, 20 / 0.5, 24 / 0.5, seed=3)
    args = (0.5, 7, 7)
    out = torch.ops.ember_vision.roi_align(x.cuda(), r.cuda(), *args, sampling, aligned)
    ref = torch.ops.ember_vision.roi_align(x, r, *args, sampling, aligned)
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)
    go = torch.randn(out.shape, generator=g)
    bwd = torch.ops.ember_vision.roi_align_backward
    grad = bwd(go.cuda(), r.cuda(), *args, *x.shape, sampling, aligned)
    torch.testing.assert_close(grad.cpu(), bwd(go, r, *args, *x.shape, sampling, aligned),
                               atol=1e-4, rtol=0)
