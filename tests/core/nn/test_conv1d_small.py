"""ember::conv1d_small (1-d convolutions with a short reduction) against ATen's conv1d, and the
compiler routing such convolutions to it (JIT graphs only; packages keep ATen's)."""

from __future__ import annotations

import zipfile

import pytest
import torch
import torch.nn.functional as F

from ember.core import aot
from ember.core import compile as ember_compile
from ember.core.compiler.lowering import externs
from ember.core.nn import conv1d_small as small

pytestmark = pytest.mark.skipif(not small.available(), reason="no C++ compiler")

# (batch, in channels, length, out channels, kernel, stride, padding, dilation, bias)
SHAPES = [
    (2, 1, 4000, 64, 10, 5, 0, 1, False),  # a waveform's first layer
    (2, 2, 1000, 7, 3, 1, 1, 1, True),
    (3, 1, 333, 16, 4, 2, 3, 2, True),
    (1, 3, 50, 5, 7, 3, 0, 1, False),  # 21 taps: the generic inner loop
    (1, 1, 9, 4, 10, 5, 1, 1, True),  # one frame, mostly padding
    (0, 1, 100, 4, 3, 1, 0, 1, False),  # empty batch
]


@pytest.mark.parametrize("shape", SHAPES)
def test_kernel_matches_aten(shape):
    batch, cin, length, cout, kernel, stride, padding, dilation, bias = shape
    torch.manual_seed(0)
    x, w = torch.randn(batch, cin, length), torch.randn(cout, cin, kernel)
    b = torch.randn(cout) if bias else None
    got = small.conv1d_small(x, w, b, stride, padding, dilation)
    torch.testing.assert_close(got, F.conv1d(x, w, b, stride, padding, dilation),
                               atol=1e-5, rtol=1e-5)


def test_non_contiguous_input_and_other_dtypes_fall_back():
    x = torch.randn(2, 50, 1).transpose(1, 2)  # (2, 1, 50), strided
    w = torch.randn(8, 1, 5)
    torch.testing.assert_close(small.conv1d_small(x, w, None, 2, 0, 1),
                               F.conv1d(x, w, None, 2), atol=1e-5, rtol=1e-5)
    xd, wd = x.double(), w.double()
    torch.testing.assert_close(small.conv1d_small(xd, wd, None, 2, 0, 1), F.conv1d(xd, wd, None, 2))


class _Front(torch.nn.Module):
    """A waveform front end: short-reduction conv -> GroupNorm -> GELU -> a wide conv."""

    def __init__(self):
        super().__init__()
        self.conv0 = torch.nn.Conv1d(1, 32, 10, stride=5, bias=False)
        self.norm = torch.nn.GroupNorm(32, 32)
        self.conv1 = torch.nn.Conv1d(32, 32, 3, stride=2)

    def forward(self, x):
        return self.conv1(F.gelu(self.norm(self.conv0(x.unsqueeze(1)))))


def test_compiled_short_convolution_runs_the_native_kernel(output_code):
    torch.manual_seed(0)
    model, x = _Front().eval(), torch.randn(2, 2000)
    torch._dynamo.reset()
    with torch.no_grad():
        got = ember_compile(model, options={"strict": True})(x)
        torch.testing.assert_close(got, model(x), atol=1e-4, rtol=1e-4)
    wrapper = "\n".join(output_code).split("wrapper:")[1]
    # the 1-channel layer runs natively; the 32-channel one (96 taps) stays ATen's
    assert wrapper.count("ember.conv1d_small") == 1, wrapper
    assert wrapper.count("aten.convolution") == 1, wrapper
    torch._dynamo.reset()


def test_training_step_and_package(tmp_path):
    """Training graphs use the kernel too (the backward reads the inputs, not the output);
    an ahead-of-time package, run without Python, keeps ATen's convolution."""
    torch.manual_seed(0)
    model, x = _Front(), torch.randn(2, 400)
    torch._dynamo.reset()
    out = ember_compile(model, options={"strict": True})(x)
    out.sum().backward()
    torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
    torch._dynamo.reset()
    assert externs.python_kernels.get()
    path = aot.aot_compile(model.eval(), (x,), path=str(tmp_path / "front.pt2"))
    assert externs.python_kernels.get()  # restored after the package's lowering
    wrapper = zipfile.ZipFile(path).read("source/wrapper.cpp").decode()
    assert "conv1d_small" not in wrapper and "convolution" in wrapper
    with torch.no_grad():
        torch.testing.assert_close(aot.aot_load(path)(x), model(x), atol=1e-4, rtol=1e-4)
