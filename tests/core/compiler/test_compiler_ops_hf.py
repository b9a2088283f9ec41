"""Lowerings HuggingFace models needed (repeat, flip, integer fmod/remainder/division by
constants, slice and as_strided scatters, weight-norm backward), each against eager in strict
mode and checked absent from explain()'s eager ops; and explain() not listing our own kernels
as eager ops."""

import pytest
import torch
import torch.nn.functional as F

from ember.core import explain


def _exact(out, ref):
    assert len(out) == len(ref)
    for k, (o, r) in enumerate(zip(out, ref)):
        assert o.dtype == r.dtype and o.shape == r.shape, k
        assert torch.equal(o, r), (k, o, r)


def test_repeat_is_an_index_map(ecompile):
    def f(x, z):
        return x.repeat(2, 1, 3), x.repeat(1, 2, 1, 1), z.repeat(3), (x * 2).repeat(1, 1, 2)

    x, z = torch.randn(2, 3, 4), torch.arange(5)
    _exact(ecompile(f)(x, z), f(x, z))
    assert explain(f, x, z).fallback_ops == []


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8])
def test_integer_fmod_remainder_by_constants_follow_python_and_c(ecompile, dtype):
    def f(i):
        return i % 7, i % -7, torch.fmod(i, 7), torch.fmod(i, -7), torch.remainder(i, 3), \
            torch.fmod(i, 1), i % 1

    lo = 0 if dtype == torch.uint8 else -100
    i = torch.arange(lo, lo + 200).to(dtype)
    if dtype == torch.int64:  # beyond float64's exact integers
        i = torch.cat([i, torch.tensor([2 ** 62 + 3, -(2 ** 62) - 5, -(2 ** 63)])])
    _exact(ecompile(f)(i), f(i))
    # uint8: a negative divisor is outside the type, refused (eager's wrap-around stays eager)
    assert explain(f, i).fallback_ops == ([] if dtype != torch.uint8 else
                                          ["aten.remainder.Scalar", "aten.fmod.Scalar"])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_integer_floor_and_trunc_division_by_constants(ecompile, dtype):
    def f(i):
        return (torch.div(i, 7, rounding_mode="floor"), torch.div(i, -7, rounding_mode="floor"),
                torch.div(i, 7, rounding_mode="trunc"), torch.div(i, -3, rounding_mode="trunc"),
                i // 4)

    i = torch.arange(-100, 100).to(dtype)
    if dtype == torch.int64:
        i = torch.cat([i, torch.tensor([2 ** 62 + 3, -(2 ** 62) - 5, -(2 ** 63)])])
    _exact(ecompile(f)(i), f(i))
    assert explain(f, i).fallback_ops == []


def test_flip_is_an_index_map(ecompile):
    def f(x, m):  # wav2vec2's mask: flip, cumsum, flip
        return x.flip(0), x.flip([0, -1]), m.flip([-1]).cumsum(-1).flip([-1]).bool()

    x, m = torch.randn(5, 6), (torch.arange(12).reshape(2, 6) < 9).long()
    _exact(ecompile(f)(x, m), f(x, m))
    assert explain(f, x, m).fallback_ops == []


def test_roll_runs_without_eager_ops(ecompile):
    def f(x):
        return torch.roll(x, 3, 1), torch.roll(x, (-2, 1), (0, 1)), torch.roll(x, 5)

    x = torch.randn(6, 10)
    _exact(ecompile(f)(x), f(x))
    assert explain(f, x).fallback_ops == []


def test_integer_fmod_by_zero_minus_one_or_a_tensor_is_refused():
    def f(i, j):
        return i % j, torch.fmod(i, -1)

    i, j = torch.arange(-5, 5), torch.tensor([3] * 10)
    torch._dynamo.reset()
    ex = explain(f, i, j)
    _exact(ex.output, f(i, j))
    assert "aten.fmod.Scalar" in ex.fallback_ops and "aten.remainder.Tensor" in ex.fallback_ops
    assert "aten.div.Tensor_mode" in explain(
        lambda i: torch.div(i, -1, rounding_mode="floor"), i).fallback_ops


def test_slice_scatter_with_start_end_step(ecompile):
    def f(x, y):
        return (torch.slice_scatter(x, y, 1, 1, 4), torch.slice_scatter(x, y, 1, 1, None, 2),
                torch.slice_scatter(x, y[:, :1], 1, -1), torch.slice_scatter(x, x[:, :0], 1, 2, 2),
                torch.slice_scatter(x, y[:, :2], 1, 0, 5, 3),
                torch.slice_scatter(x, y.transpose(0, 2).contiguous().transpose(0, 2), 1, 3))

    x, y = torch.randn(2, 6, 5), torch.randn(2, 3, 5)
    _exact(ecompile(f)(x, y), f(x, y))
    assert explain(f, x, y).fallback_ops == []


def test_strided_slicing_backward_matches_eager(ecompile):
    def f(x):
        y = x[:, 1::2, ::3] * 2 + x[:, :3].sum()
        y.sum().backward()
        return y

    x = torch.randn(2, 7, 9, requires_grad=True)
    f(x)
    ref, x.grad = x.grad.clone(), None
    ecompile(f)(x)
    torch.testing.assert_close(x.grad, ref)


def test_as_strided_scatter_boxes_and_dense_views(ecompile):
    def f(x, y):
        flat = x.flatten()
        return (torch.as_strided_scatter(x, y[:, :2, :3], (2, 2, 3), (30, 5, 1), 6),
                torch.as_strided_scatter(x, y[:, :3, :2], (2, 3, 2), (30, 10, 2), 1),
                torch.as_strided_scatter(x, y[:1, :1, :5], (1, 1, 5), (30, 5, 1), 35),
                torch.as_strided_scatter(x, y, (2, 3, 5), (30, 5, 1), 0),
                torch.as_strided_scatter(flat, y.reshape(2, 15), (2, 15), (15, 1), 10),
                torch.as_strided_scatter(x, y.reshape(3, 10), (3, 10), (10, 1), 0),
                torch.as_strided_scatter(x, y.reshape(30)[:7], (7,), (1,), 53))

    x, y = torch.randn(2, 6, 5), torch.randn(2, 3, 5)
    _exact(ecompile(f)(x, y), f(x, y))
    assert explain(f, x, y).fallback_ops == []


def test_as_strided_scatter_that_is_no_box_stays_in_eager():
    def f(x, y):
        return (torch.as_strided_scatter(x, y[0, 0, :4], (4,), (7,), 0),
                torch.as_strided_scatter(x, y[:, :2, :2], (2, 2, 2), (30, 1, 5), 0),
                torch.as_strided_scatter(x.transpose(1, 2), y[:, :2, :2], (2, 2, 2),
                                         (30, 5, 1), 0))

    x, y = torch.randn(2, 6, 5), torch.randn(2, 3, 5)
    ex = explain(f, x, y)
    _exact(ex.output, f(x, y))
    assert ex.fallback_ops == ["aten.as_strided_scatter.default"]


@pytest.mark.parametrize("dim", [0, 2, -1])
def test_weight_norm_backward(ecompile, dim):
    torch.manual_seed(0)
    conv = torch.nn.utils.weight_norm(torch.nn.Conv1d(4, 6, 3), dim=dim)

    def f(x):
        out = conv(x)
        (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
        return out

    x = torch.randn(2, 4, 9)
    f(x)
    ref = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad(set_to_none=True)
    ecompile(f)(x)
    for p, r in zip(conv.parameters(), ref):
        torch.testing.assert_close(p.grad, r, rtol=1e-5, atol=1e-6)
    conv.zero_grad(set_to_none=True)
    assert "aten._weight_norm_interface_backward.default" not in explain(f, x).fallback_ops


def test_explain_does_not_list_our_sdpa_kernel_as_eager():
    def attention(q, k, v):
        return F.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1) @ v

    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    ex = explain(attention, q, k, v)
    torch.testing.assert_close(ex.output, attention(q, k, v), rtol=1e-4, atol=1e-5)
    assert ex.fallback_ops == []
