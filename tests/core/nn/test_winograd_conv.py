"""ember::winograd_conv2d (F(2x2, 3x3) for frozen graphs) against ATen's conv2d computed in
float64, its native and torch-op paths, and the sizes the compiler routes to it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ember.core.nn import winograd_conv as wg

pytestmark = pytest.mark.skipif(not wg.available(), reason="no C++ compiler or no oneDNN")

# (batch, in channels, out channels, height, width, padding, bias, unary)
SHAPES = [
    (2, 64, 64, 20, 20, 1, True, "relu"),
    (1, 17, 9, 11, 7, 1, True, "none"),     # odd sizes: partial tiles at both edges
    (1, 8, 8, 9, 10, 0, False, "none"),     # no padding
    (2, 5, 6, 6, 5, 2, True, "relu"),       # wider padding than the filter's radius
    (2, 256, 256, 21, 21, 1, True, "none"),  # 242 tiles in 4 chunks, the last one padded
    (1, 3, 4, 3, 3, 0, False, "relu"),      # a single output
]


def _reference(x, w, b, padding, unary):
    y = F.conv2d(x.double(), w.double(), None if b is None else b.double(), padding=padding)
    return y.relu() if unary == "relu" else y


def _case(shape, seed=0):
    n, c, k, h, w, padding, bias, unary = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=g) * 2 - 0.5
    weight = torch.randn(k, c, 3, 3, generator=g) / (9 * c) ** 0.5
    b = torch.randn(k, generator=g) if bias else None
    return x, weight, b, [padding, padding], unary


def _check(got, ref):
    """Within a few float32 roundings of the exact result, as ATen's own conv2d is."""
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert got.is_contiguous(memory_format=torch.channels_last)
    scale = ref.abs().max().clamp_min(1.0)
    assert ((got.double() - ref).abs().max() / scale).item() < 5e-6


@pytest.mark.parametrize("shape", SHAPES)
def test_native_matches_conv2d(shape):
    x, weight, b, padding, unary = _case(shape)
    transformed = wg.transform_weight(weight)
    packed = wg.pack(transformed, x.shape, padding)
    got = wg.winograd_conv2d(x.contiguous(memory_format=torch.channels_last), packed,
                             transformed, b, padding, unary)
    _check(got, _reference(x, weight, b, padding, unary))


@pytest.mark.parametrize("shape", SHAPES[:4])
def test_torch_op_path_matches_conv2d(shape):
    x, weight, b, padding, unary = _case(shape)
    got = wg._torch_ops(x, wg.transform_weight(weight), b, padding, unary)
    _check(got, _reference(x, weight, b, padding, unary))


def test_packed_weight_reaches_the_native_kernel(monkeypatch):
    """oneDNN's opaque weight dispatches to the registered kernel, not the portable one."""
    def refuse(*args):
        raise AssertionError("torch-op path taken")

    x, weight, b, padding, unary = _case(SHAPES[0])
    transformed = wg.transform_weight(weight)
    packed = wg.pack(transformed, x.shape, padding)
    monkeypatch.setattr(wg, "_torch_ops", refuse)
    _check(wg.winograd_conv2d(x, packed, transformed, b, padding, unary),
           _reference(x, weight, b, padding, unary))


def test_nchw_input_and_another_size_than_packed_for():
    x, weight, b, padding, unary = _case(SHAPES[1])
    transformed = wg.transform_weight(weight)
    packed = wg.pack(transformed, (1, 17, 40, 40), padding)  # other chunk size: reordered
    got = wg.winograd_conv2d(x, packed, transformed, b, padding, unary)
    _check(got, _reference(x, weight, b, padding, unary))


def test_strided_weight_runs_the_torch_op_path():
    x, weight, b, padding, unary = _case(SHAPES[3])
    transformed = wg.transform_weight(weight)
    got = wg.winograd_conv2d(x, transformed, transformed, b, padding, unary)
    _check(got, _reference(x, weight, b, padding, unary))


def test_non_finite_inputs_stay_non_finite():
    """A NaN or inf input reaches every output eager's conv2d makes non-finite (F(2x2, 3x3)
    spreads it over the whole tile, and inf may turn into NaN there)."""
    x, weight, b, padding, unary = _case(SHAPES[0])
    x[0, 3, 5, 7] = float("nan")
    x[1, 0, 10, 2] = float("inf")
    transformed = wg.transform_weight(weight)
    got = wg.winograd_conv2d(x, wg.pack(transformed, x.shape, padding), transformed, b,
                             padding, "none")
    ref = _reference(x, weight, b, padding, "none")
    bad = ~torch.isfinite(ref)
    assert bad.any() and (~torch.isfinite(got[bad])).all()
    fine = torch.isfinite(got)
    assert ((got[fine].double() - ref[fine]).abs().max() / ref[fine].abs().max()) < 5e-6


def test_weight_transform_is_exact_for_an_identity_filter():
    weight = torch.zeros(1, 1, 3, 3)
    weight[0, 0, 1, 1] = 1.0
    x = torch.randn(1, 1, 6, 6)
    got = wg._torch_ops(x, wg.transform_weight(weight), None, [1, 1], "none")
    torch.testing.assert_close(got, x.contiguous(memory_format=torch.channels_last),
                               atol=1e-6, rtol=0)


@pytest.mark.parametrize("cin, cout, tiles, expected", [
    (256, 256, 3200, True),   # an FPN level at 80 x 80, batch 2
    (256, 256, 50, True),     # 256 channels at 10 x 10
    (64, 64, 3200, True),
    (64, 64, 49, False),      # 64 channels at 14 x 14, one image: oneDNN is faster
    (256, 256, 18, False),    # too few tiles
    (32, 64, 3136, False),    # too few channels
    (3, 64, 12544, False),    # a stem
])
def test_routing_rule(cin, cout, tiles, expected):
    assert wg.suits(cin, cout, tiles) is expected


def test_chunks_cover_every_tile_in_equal_parts():
    for cin, cout, n in [(256, 256, 3200), (64, 64, 3200), (256, 256, 242), (512, 512, 50)]:
        chunk = wg.chunk_tiles(cin, cout, n)
        chunks = -(-n // chunk)
        assert chunk * chunks >= n > chunk * (chunks - 1) and chunks * chunk - n < chunks
