"""Upsampling against eager where eager's CPU kernels ignore the scale (nearest 2-D: an output
of the input's size or twice it; linear modes: the input's size) and torch's decompositions
do not; multilabel margin loss, whose decomposition reads past a target row's -1
(``eager_parity``)."""

from __future__ import annotations

import contextlib
import math
import random
import shutil
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.core.compiler import eager_parity

# (mode, input spatial size, scale_factor): each holds a dimension whose output is exactly 2x
# or 1x the input while the scale is not 2 or 1 (3 * 2.3 -> 6, 4 * 1.1 -> 4, 10 * 2.05 -> 20)
SHORTCUTS = [("nearest", (3, 4), (2.3, 1.1)), ("nearest", (10,), 2.05), ("nearest", (4, 9), 1.2),
             ("nearest", (5, 3, 7), (2.1, 2.5, 0.9)), ("nearest", (3, 4), (2.3, 3.0)),
             ("linear", (5,), 1.15), ("bilinear", (11, 2), (0.73, 1.43)),
             ("bilinear", (5, 4), (1.1, 1.1)), ("bilinear", (3, 4), (2.3, 1.2)),
             ("trilinear", (4, 5, 3), (1.2, 2.1, 1.3)), ("bicubic", (5, 4), (1.1, 1.7))]


def _eager_and_compiled(ecompile, fn, *args, **kwargs):
    return fn(*args), ecompile(fn, **kwargs)(*args)


@pytest.mark.parametrize("mode,size,scale", SHORTCUTS, ids=str)
def test_scale_shortcuts_match_eager(ecompile, mode, size, scale):
    fn = lambda x: F.interpolate(x, mode=mode, scale_factor=scale) * 1
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
    ref, out = _eager_and_compiled(ecompile, fn, x)
    if mode == "nearest":
        assert torch.equal(out, ref)
    else:
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_decompositions_alone_differ_from_eager():
    """The cases the rewrite exists for (if torch's decompositions learn eager's shortcuts,
    this fails and the rewrite can go)."""
    table, aten = torch._decomp.decomposition_table, torch.ops.aten
    x = torch.randn(1, 1, 3, 4)
    for op, args in ((aten.upsample_nearest2d.vec, (None, [2.3, 1.0])),
                     (aten.upsample_bilinear2d.vec, (None, False, [1.0, 1.1]))):
        assert not torch.allclose(table[op](x, *args), op(x, *args)), op


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("layout", ["channels_last", "uint8"])
def test_shortcut_in_other_layouts_and_dtypes(ecompile, layout, mode):
    x = torch.randn(2, 5, 6, 7)
    x = x.to(memory_format=torch.channels_last) if layout == "channels_last" \
        else (x * 50 + 100).clamp(0, 255).to(torch.uint8)
    fn = lambda x: F.interpolate(x, scale_factor=(2.1, 1.05), mode=mode)
    ref, out = _eager_and_compiled(ecompile, fn, x)
    if mode == "nearest":
        assert torch.equal(out, ref)
    elif layout == "uint8":  # eager's uint8 bilinear weights are fixed point: 1 off at times
        torch.testing.assert_close(out, ref, atol=1, rtol=0)
    else:
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode,scale", [("nearest", (2.3, 2.1)), ("bilinear", (2.3, 1.1))])
def test_shortcut_gradients_match_eager(ecompile, mode, scale):
    w = torch.randn(1, 4, 9, math.floor(3 * scale[1]))

    def fn(x):
        return (F.interpolate(x, scale_factor=scale, mode=mode) * w).sum()

    x = torch.randn(1, 4, 4, 3, requires_grad=True)  # 4 -> 9 (plain), 3 -> 6 (shortcut)
    x2 = x.detach().clone().requires_grad_()
    fn(x).backward()
    ecompile(fn)(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("call", ["module", "upsample_nearest", "aten_vec", "aten_default"])
def test_every_spelling_of_nearest_upsampling(ecompile, call):
    calls = {
        "module": nn.Upsample(scale_factor=2.3),
        "upsample_nearest": lambda x: F.upsample_nearest(x, scale_factor=2.3),
        "aten_vec": lambda x: torch.ops.aten.upsample_nearest2d.vec(x, None, [2.3, 2.3]),
        "aten_default": lambda x: torch.ops.aten.upsample_nearest2d(x, [6, 6], 2.3, 2.3),
    }
    x = torch.randn(1, 2, 3, 3)
    with pytest.warns(UserWarning) if call == "upsample_nearest" else contextlib.nullcontext():
        ref, out = _eager_and_compiled(ecompile, calls[call], x)
    assert torch.equal(out, ref)


def test_dynamic_sizes_take_the_shortcut_where_eager_does(ecompile):
    """Symbolic sizes: the choice guards on the sizes, so a size giving exactly 2x and one
    that does not each compute eager's rows."""
    fn = ecompile(lambda x: F.interpolate(x, scale_factor=2.3) * 1, dynamic=True)
    for rows in (7, 3, 9, 10):  # 3 * 2.3 -> 6 = 2 * 3; 10 * 2.3 -> 23
        x = torch.randn(1, 2, rows, 5)
        assert torch.equal(fn(x), F.interpolate(x, scale_factor=2.3) * 1), rows


def test_random_upsamplings_match_eager(ecompile):
    """Sizes and scales nobody picked, near the shortcut ratios and away from them."""
    rng = random.Random(0)
    checked, rewritten = 0, Counter()
    while checked < 30:
        ndim = rng.choice([1, 2, 3])
        size = [rng.randint(1, 12) for _ in range(ndim)]
        scale = tuple(round(rng.choice([1, 2]) + rng.uniform(-0.3, 0.45), rng.choice([1, 2, 3]))
                      for _ in range(ndim))
        if min(math.floor(n * s) for n, s in zip(size, scale)) < 1:
            continue
        linear = {1: "linear", 2: "bilinear", 3: "trilinear"}[ndim]
        mode = rng.choice(["nearest", "nearest-exact", linear, linear, "area"])
        fn = lambda x, scale=scale, mode=mode: F.interpolate(x, scale_factor=scale,
                                                             mode=mode) * 1
        x = torch.randn(1, 2, *size)
        before = Counter(eager_parity.stats)
        ref, out = _eager_and_compiled(ecompile, fn, x)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5, msg=str((mode, size, scale)))
        if mode.startswith("nearest"):
            assert torch.equal(out, ref), (mode, size, scale)
        checked += 1
        rewritten.update(Counter(eager_parity.stats) - before)
    assert rewritten["nearest"] >= 2 and rewritten["linear"] >= 2, rewritten  # exercised


def test_only_kernels_that_take_the_shortcut_are_matched():
    nearest = lambda *a: eager_parity.eager_scales("nearest", *a)
    linear = lambda *a: eager_parity.eager_scales("linear", *a)
    assert nearest(torch.empty(1, 1, 3, 4), None, [2.3, 1.1]) == [2.0, 1.0]
    assert nearest(torch.empty(1, 1, 3, 4), [6, 4], [None, 1.1]) == [None, 1.0]
    assert nearest(torch.empty(1, 1, 3, 4, device="meta"), None, [2.3, 1.1]) == [2.3, 1.1]
    assert nearest(torch.empty(1, 1, 3), None, [2.3]) == [2.3]
    assert nearest(torch.empty(1, 1, 3, 4, 4), None, [2.3, 1.1, 2.0]) == [2.3, 1.1, 2.0]
    assert linear(torch.empty(1, 1, 3, 4), None, [2.3, 1.1]) == [2.3, 1.0]
    assert linear(torch.empty(1, 1, 3), None, [1.2]) == [1.0]


@pytest.mark.parametrize("mode,size,scale", [("nearest", (10,), 2.05),
                                             ("nearest", (10, 2, 2), (2.05, 1.0, 1.0)),
                                             ("bicubic", (5, 5), 1.1)], ids=str)
def test_gradients_are_the_gradient_of_the_forward(ecompile, mode, size, scale):
    """Where eager's backward takes a shortcut its forward does not (nearest 1-D and 3-D at
    2x; bicubic with every size unchanged), eager's gradient is not its forward's (gradcheck
    fails on eager). The compiled gradient is the forward's, and the forward equals eager's."""
    fn = lambda x: F.interpolate(x, scale_factor=scale, mode=mode)
    x = torch.randn(1, 2, *size, dtype=torch.float64, requires_grad=True)
    compiled = ecompile(fn)
    torch.testing.assert_close(compiled(x), fn(x), atol=1e-12, rtol=1e-12)
    assert torch.autograd.gradcheck(compiled, (x,))
    assert not torch.autograd.gradcheck(fn, (x,), raise_exception=False)


class _Up(nn.Module):
    def __init__(self, scale, mode="nearest"):
        super().__init__()
        self.scale, self.mode = scale, mode

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.scale, mode=self.mode) + 1


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_ahead_of_time_package_matches_eager(tmp_path, mode):
    from ember.core import aot

    x = torch.randn(1, 3, 3, 4)
    path = aot.aot_compile(_Up((2.3, 1.1), mode), (x,), path=str(tmp_path / "up.pt2"))
    torch.testing.assert_close(aot.aot_load(path)(x), _Up((2.3, 1.1), mode)(x), atol=1e-6,
                               rtol=1e-6)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_ahead_of_time_dynamic_sizes(tmp_path):
    """A package keeps no guards: where eager's indices depend on a dynamic size (a scale
    between 1 and 3 other than 1 or 2) export refuses, naming the dimension; a scale of
    exactly 2 (the common upsampling) or 3.5 exports and matches eager at every size."""
    from ember.core import aot

    height = {2: torch.export.Dim("h", min=2, max=64)}
    with pytest.raises(aot.AOTExportError, match="spatial dimension 0 .*2x the input"):
        aot.aot_compile(_Up((2.3, 1.0)), (torch.randn(1, 3, 3, 4),), dynamic_shapes=(height,),
                        path=str(tmp_path / "refused.pt2"))
    for scale in ((2.0, 2.0), (3.5, 2.0)):
        path = aot.aot_compile(_Up(scale), (torch.randn(1, 3, 3, 4),), dynamic_shapes=(height,),
                               path=str(tmp_path / "up.pt2"))
        model = aot.aot_load(path)
        for rows in (3, 5, 10):
            x = torch.randn(1, 3, rows, 4)
            assert torch.equal(model(x), _Up(scale)(x)), (scale, rows)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_upsampling_to_a_size_without_scales(mode):
    """``F.interpolate(x, size=...)`` exports as ``.vec`` with ``scale_factors=None``: its
    eager-scale decomposition was called with one argument too many (segformer's decode
    head did not export)."""
    aten = torch.ops.aten
    packet = aten.upsample_nearest2d if mode == "nearest" else aten.upsample_bilinear2d
    aligned = () if mode == "nearest" else (False,)
    x = torch.randn(1, 3, 5, 7)
    table = eager_parity.decompositions()
    want = F.interpolate(x, size=(16, 9), mode=mode)
    torch.testing.assert_close(table[packet.vec](x, [16, 9], *aligned, None), want)
    if packet.default in table:
        torch.testing.assert_close(table[packet.default](x, [16, 9], *aligned), want)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_ahead_of_time_package_of_an_upsampling_to_a_size(tmp_path):
    from ember.core import aot

    class Resize(nn.Module):
        def forward(self, x):
            return F.interpolate(x, size=(16, 9), mode="bilinear", align_corners=False)

    x = torch.randn(1, 3, 5, 7)
    path = aot.aot_compile(Resize(), (x,), path=str(tmp_path / "resize.pt2"))
    torch.testing.assert_close(aot.aot_load(path)(x), Resize()(x))


_MULTILABEL_TARGETS = torch.tensor([[0, 3, -1, 1], [1, -1, 0, 0], [3, 2, 1, 0]])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss_stops_at_the_first_minus_one(ecompile, reduction):
    """Random targets with -1 anywhere, in float64: eager's losses and input gradients."""
    g = torch.Generator().manual_seed(0)
    fn = lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction)
    cases = [(torch.randn(3, 4, generator=g, dtype=torch.float64), _MULTILABEL_TARGETS)]
    for n, c in [(5, 7), (1, 1), (6, 5)]:
        cases.append((torch.randn(n, c, generator=g, dtype=torch.float64),
                      torch.randint(-1, c, (n, c), generator=g)))
    cases.append((torch.randn(4, generator=g, dtype=torch.float64), torch.tensor([2, -1, 0, 0])))
    for x, t in cases:
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        ref, out = fn(xe, t), ecompile(fn)(xc, t)
        assert out.shape == ref.shape
        torch.testing.assert_close(out, ref)
        ref.sum().backward()
        out.sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)


def test_multilabel_margin_loss_decomposition_alone_differs_from_eager():
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    ref = torch.ops.aten.multilabel_margin_loss_forward(x, _MULTILABEL_TARGETS, 0)
    torch_decomposition = torch._decomp.decomposition_table[
        torch.ops.aten.multilabel_margin_loss_forward.default]
    ours = eager_parity.decompositions()[torch.ops.aten.multilabel_margin_loss_forward.default]
    assert not torch.allclose(torch_decomposition(x, _MULTILABEL_TARGETS, 0)[0], ref[0])
    for a, b in zip(ours(x, _MULTILABEL_TARGETS, 0), ref):
        torch.testing.assert_close(a, b)


def test_multilabel_margin_loss_package_matches_eager(tmp_path):
    from ember.core import aot

    loss = nn.MultiLabelMarginLoss(reduction="none")
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    path = aot.aot_compile(loss, (x, _MULTILABEL_TARGETS), path=str(tmp_path / "mlm.pt2"))
    torch.testing.assert_close(aot.aot_load(path)(x, _MULTILABEL_TARGETS),
                               loss(x, _MULTILABEL_TARGETS))
