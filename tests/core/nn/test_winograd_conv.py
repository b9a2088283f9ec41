"""ember::winograd_conv2d (F(2x2, 3x3) for frozen graphs) against ATen's conv2d computed in
float64, its native and torch-op paths, and the sizes the compiler routes to it."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from ember.core.compiler.runtime import build, isa
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


def _check(got, ref, channels_last=True):
    """Within a few float32 roundings of the exact result, as ATen's own conv2d is."""
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert got.is_contiguous(memory_format=torch.channels_last if channels_last else
                             torch.contiguous_format)
    scale = ref.abs().max().clamp_min(1.0)
    assert ((got.double() - ref).abs().max() / scale).item() < 5e-6


def _run(x, weight, b, padding, unary, packed=None, channels_last=True, other=None):
    return wg.winograd_conv2d(x, weight, packed, b, other, padding, unary, channels_last)


@pytest.mark.parametrize("shape", SHAPES)
def test_packed_once_matches_conv2d(shape):
    x, weight, b, padding, unary = _case(shape)
    packed = wg.pack(weight, x.shape, padding)
    got = _run(x.contiguous(memory_format=torch.channels_last), weight, b, padding, unary,
               packed)
    _check(got, _reference(x, weight, b, padding, unary))


@pytest.mark.parametrize("shape", SHAPES)
def test_packed_per_call_matches_conv2d(shape):
    x, weight, b, padding, unary = _case(shape)
    got = _run(x, weight, b, padding, unary, channels_last=False)
    _check(got, _reference(x, weight, b, padding, unary), channels_last=False)


# the kernels built for the CPU's own level and for AVX2 (x86-64-v3): CI may land on either
LEVELS = ["native"] + (["x86-64-v3"] if isa.LEVELS["x86-64-v3"].needs <= isa.cpu_flags()
                       else [])


@pytest.mark.parametrize("level", LEVELS)
def test_each_instruction_set_level(level, monkeypatch):
    monkeypatch.setenv(isa.ENV, level)
    lib = build.load_kernels(wg.__package__, "winograd_conv.cpp", wg._SIGNATURES,
                             "Winograd kernels", logging.getLogger(__name__))
    assert lib is not None
    monkeypatch.setattr(wg, "_library", lambda: lib)
    for shape in SHAPES:
        x, weight, b, padding, unary = _case(shape, seed=3)
        ref = _reference(x, weight, b, padding, unary)
        _check(_run(x, weight, b, padding, unary, wg.pack(weight, x.shape, padding)), ref)
        _check(_run(x, weight, b, padding, unary, channels_last=False), ref,
               channels_last=False)


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[1], SHAPES[4]])
@pytest.mark.parametrize("other_channels_last", [True, False])
def test_residual_add_before_the_relu(shape, other_channels_last):
    """A frozen ResNet block's second convolution: conv + bias + identity, then relu."""
    x, weight, b, padding, unary = _case(shape)
    ref = _reference(x, weight, b, padding, "none")
    other = torch.randn(ref.shape, generator=torch.Generator().manual_seed(5))
    if other_channels_last:
        other = other.contiguous(memory_format=torch.channels_last)
    ref = (ref + other.double()).relu()
    _check(_run(x, weight, b, padding, "relu", wg.pack(weight, x.shape, padding),
                other=other), ref)
    _check(_run(x, weight, b, padding, "relu", other=other), ref)


def test_packed_weight_reaches_the_native_kernel(monkeypatch):
    """oneDNN's opaque weight dispatches to the registered kernel, not the portable one
    (which, like the native kernel's declines, is ATen's direct convolution)."""
    def refuse(*args):
        raise AssertionError("direct convolution taken")

    x, weight, b, padding, unary = _case(SHAPES[0])
    packed = wg.pack(weight, x.shape, padding)
    monkeypatch.setattr(wg, "_direct", refuse)
    _check(_run(x, weight, b, padding, unary, packed),
           _reference(x, weight, b, padding, unary))
    _check(_run(x, weight, b, padding, unary), _reference(x, weight, b, padding, unary))


def test_another_size_than_packed_for():
    x, weight, b, padding, unary = _case(SHAPES[1])
    packed = wg.pack(weight, (1, 17, 40, 40), padding)  # another chunk size: reordered
    _check(_run(x, weight, b, padding, unary, packed), _reference(x, weight, b, padding, unary))


def test_other_dtypes_and_empty_batches_run_aten():
    x, weight, b, padding, unary = _case(SHAPES[3])
    xd, wd, bd = x.double(), weight.double(), b.double()
    got = _run(xd, wd, bd, padding, unary, channels_last=False)
    torch.testing.assert_close(got, _reference(x, weight, b, padding, unary))
    empty = _run(x[:0], weight, b, padding, unary)
    assert empty.shape == (0, weight.shape[0], x.shape[2] + 2, x.shape[3] + 2)


def test_non_finite_inputs_stay_non_finite():
    """A NaN or inf input reaches every output eager's conv2d makes non-finite (F(2x2, 3x3)
    spreads it over the whole tile, and inf may turn into NaN there)."""
    x, weight, b, padding, unary = _case(SHAPES[0])
    x[0, 3, 5, 7] = float("nan")
    x[1, 0, 10, 2] = float("inf")
    got = _run(x, weight, b, padding, "none")
    ref = _reference(x, weight, b, padding, "none")
    bad = ~torch.isfinite(ref)
    assert bad.any() and (~torch.isfinite(got[bad])).all()
    fine = torch.isfinite(got)
    assert ((got[fine].double() - ref[fine]).abs().max() / ref[fine].abs().max()) < 5e-6


def test_filter_transform_matches_float64():
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(70, 67, 3, 3, generator=g)  # blocks of 64 input channels and a rest
    G = torch.tensor([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
                     dtype=torch.float64)
    ref = torch.einsum("ai,kcij,bj->abkc", G, weight.double(), G).reshape(16 * 70, 67, 1, 1)
    assert torch.equal(wg.transform_weight(weight), ref.float())


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


@pytest.mark.parametrize("cin, cout, tiles, channels_last, expected", [
    (256, 256, 3200, False, True), (128, 128, 128, False, True), (64, 64, 512, True, True),
    (256, 256, 50, True, False),   # the filter's transform and packing per call cost more
    (64, 64, 3200, False, False),  # the NCHW copies cost more
    (64, 64, 200, True, False)])
def test_routing_rule_when_each_call_packs(cin, cout, tiles, channels_last, expected):
    assert wg.suits(cin, cout, tiles, packed_once=False, channels_last=channels_last) is expected


def test_chunks_cover_every_tile_in_equal_parts():
    for cin, cout, n in [(256, 256, 3200), (64, 64, 3200), (256, 256, 242), (512, 512, 50)]:
        chunk = wg.chunk_tiles(cin, cout, n)
        chunks = -(-n // chunk)
        assert chunk * chunks >= n > chunk * (chunks - 1) and chunks * chunk - n < chunks


class _Body(torch.nn.Module):
    """A large 3x3 convolution (Winograd), a relu, a strided one and a small one (ATen's)."""

    def __init__(self):
        super().__init__()
        self.big = torch.nn.Conv2d(128, 128, 3, padding=1)
        self.down = torch.nn.Conv2d(128, 64, 3, stride=2, padding=1)
        self.small = torch.nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x):
        return self.small(self.down(torch.relu(self.big(x))))


@pytest.mark.parametrize("channels_last", [False, True])
def test_compiled_large_convolution_runs_winograd(output_code, channels_last):
    """Unfrozen graphs too (the filter is transformed and packed per call), in the layout
    eager's convolution returns."""
    from ember.core import compile as ember_compile

    torch.manual_seed(0)
    model, x = _Body().eval(), torch.randn(2, 128, 40, 40)  # 800 tiles; 200 after the stride
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    torch._dynamo.reset()
    with torch.no_grad():
        got, ref = ember_compile(model, options={"strict": True})(x), model(x)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert got.stride() == ref.stride()
    wrapper = "\n".join(output_code).split("wrapper:")[1]
    assert wrapper.count("ember.winograd_conv2d") == 1, wrapper
    assert wrapper.count("aten.convolution") == 2, wrapper
    torch._dynamo.reset()


def test_training_step_uses_it_and_gradients_match(output_code):
    """In a training graph the forward convolution runs Winograd; the backward is ATen's
    (it reads the inputs and the weight, not the output)."""
    from ember.core import compile as ember_compile

    torch.manual_seed(0)
    model, x = _Body(), torch.randn(2, 128, 40, 40)
    ref_model = _Body()
    ref_model.load_state_dict(model.state_dict())
    torch._dynamo.reset()
    out = ember_compile(model, options={"strict": True})(x)
    out.square().mean().backward()
    ref = ref_model(x)
    ref.square().mean().backward()
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3)
    forward = "\n".join(output_code).split("wrapper:")[1]
    assert forward.count("ember.winograd_conv2d") == 1, forward  # the big convolution
    torch._dynamo.reset()
