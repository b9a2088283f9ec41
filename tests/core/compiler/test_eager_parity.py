"""Nearest upsampling against eager where eager's 2-D CPU kernels ignore the scale (an output
of the input's size or twice it) and torch's decomposition does not (``eager_parity``)."""

from __future__ import annotations

import contextlib
import math
import random
import shutil

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.core.compiler import eager_parity

# (input spatial size, scale_factor): each holds a dimension whose output is exactly 2x or 1x
# the input while the scale is not 2 or 1 (3 * 2.3 -> 6, 4 * 1.1 -> 4, 10 * 2.05 -> 20)
SHORTCUTS = [((3, 4), (2.3, 1.1)), ((10,), 2.05), ((4, 9), 1.2), ((5, 3, 7), (2.1, 2.5, 0.9)),
             ((3, 4), (2.3, 3.0))]


def _eager_and_compiled(ecompile, fn, *args, **kwargs):
    return fn(*args), ecompile(fn, **kwargs)(*args)


@pytest.mark.parametrize("size,scale", SHORTCUTS, ids=str)
def test_nearest_scale_shortcuts_match_eager(ecompile, size, scale):
    fn = lambda x: F.interpolate(x, mode="nearest", scale_factor=scale) * 1
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
    ref, out = _eager_and_compiled(ecompile, fn, x)
    assert torch.equal(out, ref)


def test_decomposition_alone_differs_from_eager():
    """The case the rewrite exists for (if torch's decomposition learns eager's shortcut, this
    fails and the rewrite can go)."""
    x = torch.randn(1, 1, 3, 4)
    decomposed = torch._decomp.decomposition_table[torch.ops.aten.upsample_nearest2d.vec](
        x, None, [2.3, 1.0])
    assert not torch.equal(decomposed, torch.ops.aten.upsample_nearest2d.vec(x, None, [2.3, 1.0]))


@pytest.mark.parametrize("layout", ["channels_last", "uint8"])
def test_nearest_shortcut_in_other_layouts_and_dtypes(ecompile, layout):
    x = torch.randn(2, 5, 6, 7)
    x = x.to(memory_format=torch.channels_last) if layout == "channels_last" \
        else (x * 50 + 100).clamp(0, 255).to(torch.uint8)
    fn = lambda x: F.interpolate(x, scale_factor=(2.1, 1.05))
    ref, out = _eager_and_compiled(ecompile, fn, x)
    assert torch.equal(out, ref)


def test_nearest_shortcut_gradients_match_eager(ecompile):
    w = torch.randn(1, 4, 9, 6)

    def fn(x):
        return (F.interpolate(x, scale_factor=(2.3, 2.1)) * w).sum()

    x = torch.randn(1, 4, 4, 3, requires_grad=True)  # 4 -> 9 (plain), 3 -> 6 (shortcut)
    x2 = x.detach().clone().requires_grad_()
    fn(x).backward()
    ecompile(fn)(x2).backward()
    assert torch.equal(x2.grad, x.grad)


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


def test_random_nearest_upsamplings_match_eager(ecompile):
    """Sizes and scales nobody picked, near the shortcut ratios and away from them."""
    rng = random.Random(0)
    checked = shortcut = 0
    while checked < 24:
        ndim = rng.choice([1, 2, 3])
        size = [rng.randint(1, 12) for _ in range(ndim)]
        scale = [round(rng.choice([1, 2]) + rng.uniform(-0.3, 0.45), rng.choice([1, 2, 3]))
                 for _ in range(ndim)]
        out_size = [math.floor(n * s) for n, s in zip(size, scale)]
        if min(out_size) < 1:
            continue
        mode = rng.choice(["nearest", "nearest-exact"])
        fn = lambda x, scale=tuple(scale), mode=mode: F.interpolate(x, scale_factor=scale,
                                                                 mode=mode) * 1
        x = torch.randn(1, 2, *size)
        ref, out = _eager_and_compiled(ecompile, fn, x)
        assert torch.equal(out, ref), (mode, size, scale)
        checked += 1
        shortcut += any(o in (n, 2 * n) and s not in (1, 2)
                        for n, o, s in zip(size, out_size, scale)) and mode == "nearest"
    assert shortcut >= 3  # the draw exercised the rewrite


def test_only_kernels_that_take_the_shortcut_are_matched():
    scales = eager_parity.eager_nearest_scales
    assert scales(torch.empty(1, 1, 3, 4), None, [2.3, 1.1]) == [2.0, 1.0]
    assert scales(torch.empty(1, 1, 3, 4), [6, 4], [None, 1.1]) == [None, 1.0]
    assert scales(torch.empty(1, 1, 3, 4, device="meta"), None, [2.3, 1.1]) == [2.3, 1.1]
    assert scales(torch.empty(1, 1, 3), None, [2.3]) == [2.3]
    assert scales(torch.empty(1, 1, 3, 4, 4), None, [2.3, 1.1, 2.0]) == [2.3, 1.1, 2.0]


@pytest.mark.parametrize("ndim", [1, 3])
def test_1d_and_3d_gradients_are_the_gradient_of_the_forward(ecompile, ndim):
    """Eager's 1-D and 3-D CPU forwards use the scale but their backwards take the 2x shortcut,
    so eager's gradient is not its forward's (gradcheck fails on eager). The compiled
    gradient is the forward's, and the forward equals eager's."""
    scale = (2.05,) + (1.0,) * (ndim - 1)
    fn = lambda x: F.interpolate(x, scale_factor=scale)
    x = torch.randn(1, 2, 10, *([2] * (ndim - 1)), dtype=torch.float64, requires_grad=True)
    compiled = ecompile(fn)
    assert torch.equal(compiled(x), fn(x))
    assert torch.autograd.gradcheck(compiled, (x,))
    assert not torch.autograd.gradcheck(fn, (x,), raise_exception=False)


class _Up(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.scale) + 1


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_ahead_of_time_package_matches_eager(tmp_path):
    from ember.core import aot

    x = torch.randn(1, 3, 3, 4)
    path = aot.aot_compile(_Up((2.3, 1.1)), (x,), path=str(tmp_path / "up.pt2"))
    assert torch.equal(aot.aot_load(path)(x), _Up((2.3, 1.1))(x))


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
