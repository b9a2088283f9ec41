"""lfilter's native float64 CPU kernel agrees with its torch-op path (autograd/tracing)."""

import pytest
import torch

from ember.audio.functional import _iir_native, lfilter

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(_iir_native._library() is None, reason="no C++ compiler")]


def _both(x, a, b, **kw):
    with torch.no_grad():
        native = lfilter(x, a, b, **kw)
    ops = lfilter(x.clone().requires_grad_(), a, b, **kw).detach()  # grad: the torch-op path
    return native, ops


@pytest.mark.parametrize("a,b", [
    ([1.0, -0.5], [0.5, 0.5]),
    ([2.0, -1.8, 0.9], [0.1, 0.2, 0.1]),
    ([1.0, -5.0, 10.5, -11.9, 7.6, -2.6, 0.37], [1e-4, 6e-4, 1.5e-3, 2e-3, 1.5e-3, 6e-4, 1e-4]),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_matches_torch_ops(a, b, dtype):
    torch.manual_seed(0)
    x = torch.rand(2, 3, 700, dtype=dtype) - 0.5
    native, ops = _both(x, torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype),
                        clamp=False)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(native, ops, rtol=tol, atol=tol * ops.abs().max().item())


def test_filter_bank_and_short_signals():
    torch.manual_seed(1)
    a = torch.tensor([[1.0, -0.9, 0.2], [1.0, 0.3, 0.0]], dtype=torch.float64)
    b = torch.tensor([[1.0, 0.0, 0.5], [0.2, 0.2, 0.2]], dtype=torch.float64)
    for time in (1, 2, 5):
        x = torch.randn(4, 2, time, dtype=torch.float64)
        native, ops = _both(x, a, b, clamp=False)
        torch.testing.assert_close(native, ops)
    x = torch.randn(3, 50, dtype=torch.float64)
    native, ops = _both(x, a, b, batching=False)
    assert native.shape == (3, 2, 50)
    torch.testing.assert_close(native, ops)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_orders_above_the_unrolled_ones(dtype):
    torch.manual_seed(2)
    a = torch.zeros(11, dtype=dtype)
    a[0], a[1], a[10] = 1.0, -0.3, 0.4
    b = torch.linspace(1.0, 0.1, 11, dtype=dtype)
    native, ops = _both(torch.randn(2, 3, 400, dtype=dtype), a, b, clamp=False)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(native, ops, rtol=tol, atol=tol * ops.abs().max().item())
