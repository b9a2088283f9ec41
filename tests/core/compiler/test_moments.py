"""var_mean / std_mean (``ember.core.compiler.moments``) and the norms built on them, compared
with eager and with float64."""

import math

import pytest
import torch
import torch.nn.functional as F

import ember.core  # noqa: F401  (registers the backend)


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="ember", fullgraph=True)


def _rms_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return (got.double() - ref).pow(2).mean().sqrt().item()


_NORMS = {
    "batch_norm": lambda x: F.batch_norm(x, None, None, training=True),
    "batch_norm_affine": lambda x: F.batch_norm(
        x, torch.zeros(x.shape[1], dtype=x.dtype), torch.ones(x.shape[1], dtype=x.dtype),
        torch.linspace(0.5, 2, x.shape[1], dtype=x.dtype),
        torch.linspace(-1, 1, x.shape[1], dtype=x.dtype), training=True),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[1:]),
    "group_norm": lambda x: F.group_norm(x, 8),
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("norm", sorted(_NORMS))
def test_norms_are_as_accurate_as_eager_where_the_mean_dwarfs_the_spread(norm, seed):
    # a deep residual stream: each value 300 +- 0.05, where an ulp of the mean is 6e-4 of a
    # standard deviation; a float sum's error in the mean lands in every normalised value
    fn = _NORMS[norm]
    g = torch.Generator().manual_seed(seed)
    x = 300 + 0.05 * torch.randn(2, 64, 4, 4, generator=g)
    ref = fn(x.double())
    got, eager = _compiled(fn)(x), fn(x)
    assert _rms_error(got, ref) <= _rms_error(eager, ref)


def _mean_error_in_ulps(mean: torch.Tensor, ref: torch.Tensor) -> float:
    ulp = torch.finfo(mean.dtype).eps * ref.abs().clamp_min(torch.finfo(mean.dtype).tiny)
    return ((mean.double() - ref).abs() / ulp.double()).max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_mean_is_the_float_mean_rounded_once(dtype):
    g = torch.Generator().manual_seed(0)
    x = (1000 + 0.01 * torch.randn(16, 4096, generator=g, dtype=torch.float64)).to(dtype)
    var, mean = _compiled(lambda t: torch.var_mean(t, 1, correction=0))(x)
    # each row's exact sum (math.fsum) divided once: eager's own float64 mean is off here
    ref_mean = torch.tensor([math.fsum(row) / len(row) for row in x.tolist()],
                            dtype=torch.float64)
    assert _mean_error_in_ulps(mean, ref_mean) <= 0.5 + 1e-6
    ref_var = torch.var(x.double(), 1, correction=0)
    torch.testing.assert_close(var.double(), ref_var, rtol=1e-5 if dtype == torch.float32
                               else 1e-9, atol=0)


_CALLS = {
    "dim1": lambda t: torch.var_mean(t, 1),
    "dims_keepdim": lambda t: torch.var_mean(t, (0, 2), keepdim=True),
    "negative_dim": lambda t: torch.var_mean(t, -1, correction=0),
    "all": lambda t: torch.var_mean(t),
    "empty_dim_list": lambda t: torch.var_mean(t, []),
    "unbiased_flag": lambda t: torch.var_mean(t, 1, False, True),
    "default_overload": lambda t: torch.var_mean(t, False),
    "correction_2": lambda t: torch.var_mean(t, 2, correction=2),
    "fractional_correction": lambda t: torch.var_mean(t, 2, correction=0.5),
    "std_mean": lambda t: torch.std_mean(t, 1),
    "std_mean_flag": lambda t: torch.std_mean(t, (1, 2), True, True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16,
                                   torch.float16])
@pytest.mark.parametrize("call", sorted(_CALLS))
def test_var_mean_and_std_mean_match_eager(call, dtype):
    fn = _CALLS[call]
    g = torch.Generator().manual_seed(1)
    x = (3 + torch.randn(3, 5, 7, generator=g)).to(dtype)
    got, want = _compiled(fn)(x), fn(x)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b)


_SPECIAL = {
    "inf": torch.tensor([[1.0, float("inf"), 2.0], [1.0, 2.0, 3.0]]),
    "minus_inf": torch.tensor([[1.0, -float("inf"), 2.0], [1.0, 2.0, 3.0]]),
    "both_infs": torch.tensor([[float("inf"), -float("inf"), 2.0], [1.0, 2.0, 3.0]]),
    "nan": torch.tensor([[1.0, float("nan"), 2.0], [1.0, 2.0, 3.0]]),
    "constant": torch.full((2, 3), 0.1),
    "one_per_row": torch.tensor([[5.0], [7.0]]),   # N - correction = 0: nan, as eager
    "zero_size": torch.empty(2, 0),
    "squares_overflow": torch.tensor([[1e30, 1.0, 2.0], [1.0, 2.0, 3.0]]),  # var inf, as eager
}


@pytest.mark.parametrize("case", sorted(_SPECIAL))
def test_special_values_give_eagers_results(case):
    x = _SPECIAL[case]
    var, mean = _compiled(lambda t: torch.var_mean(t, 1))(x)
    torch.testing.assert_close(var, torch.var(x, 1), equal_nan=True)
    # torch.mean's: eager's var_mean (Welford) gives [1, inf, 2] a mean of nan (the running
    # mean inf plus (2 - inf) / 3) but [1, 2, inf] a mean of inf
    torch.testing.assert_close(mean, torch.mean(x, 1), equal_nan=True)


@pytest.mark.parametrize("fn", [lambda t: torch.var_mean(t, correction=0),
                                lambda t: torch.var_mean(t, 0, correction=0),
                                lambda t: torch.std_mean(t, -1, keepdim=True, correction=0)])
def test_a_zero_dimensional_tensor(fn):
    x = torch.tensor(2.5)
    for a, b in zip(_compiled(fn)(x), fn(x)):
        torch.testing.assert_close(a, b)


def test_gradients_through_var_mean_match_eager():
    g = torch.Generator().manual_seed(2)
    x0 = 50 + torch.randn(4, 6, 5, generator=g, dtype=torch.float64)

    def fn(t):
        var, mean = torch.var_mean(t, (0, 2))
        return (var * torch.arange(6.0, dtype=t.dtype)).sum() + (mean ** 2).sum()

    grads = []
    for f in (fn, _compiled(fn)):
        x = x0.clone().requires_grad_()
        f(x).backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0])


def test_batch_norm_training_step_matches_eager():
    g = torch.Generator().manual_seed(3)
    x0 = 20 + torch.randn(4, 8, 6, 6, generator=g)
    results = []
    for compile_it in (False, True):
        torch.manual_seed(0)
        bn = torch.nn.BatchNorm2d(8)
        f = _compiled(bn) if compile_it else bn
        x = x0.clone().requires_grad_()
        out = f(x)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append([out, x.grad, bn.weight.grad, bn.bias.grad, bn.running_mean,
                        bn.running_var])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("correction", [0, 1, 0.5, 3])
def test_dynamic_sizes_divide_by_eagers_count(correction):
    fn = lambda t: torch.var_mean(t, 1, correction=correction)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="ember", dynamic=True)
    for n in (2, 5, 9):   # n = 2 with correction 3: a count below zero, nan as eager
        x = 5 + torch.randn(3, n, generator=torch.Generator().manual_seed(n))
        for a, b in zip(compiled(x), fn(x)):
            torch.testing.assert_close(a, b, equal_nan=True)
