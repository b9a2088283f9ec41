"""The channels-last rewrite of JIT inference graphs: which convolutions go NHWC, and that
values and output layouts stay eager's either way."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from ember.core.compiler import channels_last, pipeline


def _nhwc(v) -> bool:
    return v.is_contiguous(memory_format=torch.channels_last) and not v.is_contiguous()


def _conv_inputs(gm):
    return [n.args[0].meta["val"] for n in gm.graph.nodes
            if n.target is torch.ops.aten.convolution.default]


def _body(x, w_small, w_dw, w_big):
    y = F.conv2d(x, w_small, padding=1).relu()
    y = F.conv2d(y, w_dw, padding=1, groups=16)
    y = F.avg_pool2d(y, 8)  # 4x4: the big kernel's weight dwarfs its input
    return F.conv2d(y, w_big, padding=1)


def _args():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 8, 32, 32, generator=g), torch.randn(16, 8, 3, 3, generator=g),
            torch.randn(16, 1, 3, 3, generator=g), torch.randn(512, 16, 3, 3, generator=g))


def test_jit_rule_keeps_convolutions_with_costly_weight_copies_nchw():
    args = _args()
    gm = make_fx(_body, tracing_mode="fake")(*args)
    channels_last.apply(gm, set(), jit=True)
    assert [_nhwc(v) for v in _conv_inputs(gm)] == [True, True, False]
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert out.meta["val"].is_contiguous()  # the output keeps eager's layout
    torch.testing.assert_close(gm(*args), _body(*args), atol=1e-4, rtol=1e-4)


def _pointwise_body(x, w_a, w_b, w_c):
    y = F.conv2d(x, w_a).relu()  # 1x1: 128 -> 512 at 8x8, weight 4x its input
    y = F.avg_pool2d(y, 4)  # 2x2
    y = F.conv2d(y, w_b).relu()  # 1x1: 512 -> 2048 at 2x2, weight 256x its input
    return F.conv2d(y, w_c)  # 1x1: 2048 -> 8, weight 4x its input


def test_jit_rule_keeps_1x1_convolutions_whose_weight_dwarfs_their_input_nchw():
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(2, 128, 8, 8, generator=g), torch.randn(512, 128, 1, 1, generator=g),
            torch.randn(2048, 512, 1, 1, generator=g), torch.randn(8, 2048, 1, 1, generator=g))
    gm = make_fx(_pointwise_body, tracing_mode="fake")(*args)
    channels_last.apply(gm, set(), jit=True)
    # a 1x1 weight needs no copy to be NHWC, yet oneDNN's NHWC call is the slower one there
    assert [_nhwc(v) for v in _conv_inputs(gm)] == [True, False, True]
    torch.testing.assert_close(gm(*args), _pointwise_body(*args), atol=1e-4, rtol=1e-4)


def test_package_rule_puts_every_convolution_nhwc():
    gm = make_fx(_body, tracing_mode="fake")(*_args())
    channels_last.apply(gm, set())
    assert all(_nhwc(v) for v in _conv_inputs(gm))


def test_sibling_convolutions_share_one_layout_copy():
    """Branches that read one NCHW value (an inception block's) get one NHWC copy of it."""
    def body(x, w1, w2, w3):
        return F.conv2d(x, w1), F.conv2d(x, w2, padding=1), F.conv2d(x.relu(), w3)

    args = (torch.randn(2, 8, 16, 16), torch.randn(4, 8, 1, 1), torch.randn(4, 8, 3, 3),
            torch.randn(4, 8, 1, 1))
    gm = make_fx(body, tracing_mode="fake")(*args)
    channels_last.apply(gm, set(), jit=True)
    copies = [n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default and
              n.kwargs["memory_format"] is torch.channels_last]  # not the outputs' way back
    assert len(copies) == 2  # x's, shared by two convolutions, and x.relu()'s
    assert sorted(len(c.users) for c in copies) == [1, 2]
    assert all(_nhwc(v) for v in _conv_inputs(gm))
    for got, want in zip(gm(*args), body(*args)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_narrow_nchw_max_pools_are_fed_nhwc():
    """A max pool over 4-wide NCHW rows (behind a convolution kept NCHW by its costly weight)
    gets an NHWC copy of its input; one over rows as wide as POOL_NHWC_BELOW_WIDTH does not.
    Values and the output's layout stay eager's."""
    def body(x, w_big, w_small):
        y = F.conv2d(x, w_big, padding=1)
        narrow = F.max_pool2d(y, 3, 1, 1)
        wide = F.max_pool2d(F.interpolate(y, scale_factor=4), 2)
        return F.conv2d(narrow, w_small), wide

    width = channels_last.POOL_NHWC_BELOW_WIDTH // 4
    args = (torch.randn(1, 16, width, width), torch.randn(256, 16, 3, 3),
            torch.randn(8, 256, 1, 1))
    gm = make_fx(body, tracing_mode="fake")(*args)
    channels_last.apply(gm, set(), jit=True)
    pools = [n for n in gm.graph.nodes
             if n.target is torch.ops.aten.max_pool2d_with_indices.default]
    assert [_nhwc(p.args[0].meta["val"]) for p in pools] == [True, False]
    assert _conv_inputs(gm)[0].is_contiguous()  # the big weight's convolution stays NCHW
    for got, want in zip(gm(*args), body(*args)):
        assert got.is_contiguous() and want.is_contiguous()
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_computed_weight_is_written_nhwc_by_its_own_kernel():
    """An AMP cast of a weight feeds the convolution NHWC through a copy of the cast's value
    (fused with the cast when lowered), so ATen makes no copy of its own per call."""
    def body(x, w):
        return F.conv2d(x.to(torch.bfloat16), w.to(torch.bfloat16), padding=1)

    gm = make_fx(body, tracing_mode="fake")(torch.randn(2, 8, 16, 16), torch.randn(32, 8, 3, 3))
    channels_last.apply(gm, set(), jit=True)
    conv = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.convolution.default)
    assert _nhwc(conv.args[0].meta["val"]) and _nhwc(conv.args[1].meta["val"])
    assert conv.args[1].target is torch.ops.aten.clone.default


class _MixedNet(nn.Module):
    """A stem, a depthwise-separable block, then a wide 3x3 convolution on a tiny map: the
    rewrite feeds the first ones NHWC and the last one NCHW."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16),
                                nn.ReLU(), nn.Conv2d(16, 32, 1), nn.BatchNorm2d(32), nn.ReLU())
        self.wide = nn.Sequential(nn.Conv2d(32, 256, 3, padding=1), nn.BatchNorm2d(256),
                                  nn.ReLU())
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        z = self.dw(self.stem(x))  # NHWC inside the graph, handed back in eager's layout
        y = self.wide(F.max_pool2d(z, 4))
        return self.head(y.mean((2, 3))), y, z


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("on", [True, False], ids=["channels_last", "plain"])
def test_compiled_mixed_layout_model_matches_eager(ecompile, precision, on):
    m = _MixedNet().eval()
    for bn in m.modules():
        if isinstance(bn, nn.BatchNorm2d):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 32, 32)
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16")
    f = ecompile(m, options={"channels_last": on})
    with torch.no_grad(), amp:
        got, want = f(x), m(x)
    tol = 1e-4 if precision == "float32" else 3e-2
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.stride() == w.stride()
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)


def test_dynamic_batch_keeps_one_graph(ecompile):
    """With a dynamic batch size the rule decides by the example value: one graph serves
    every batch, each equal to eager in values and strides."""
    m = _MixedNet().eval()
    f = ecompile(m, dynamic=True)
    before = pipeline.stats["graphs_compiled"]
    with torch.no_grad():
        for n in (2, 5, 3):
            x = torch.randn(n, 3, 32, 32)
            for g, w in zip(f(x), m(x)):
                assert g.stride() == w.stride()
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
    assert pipeline.stats["graphs_compiled"] - before == 1


def _patches(x, w1, w2):
    """MobileViT's unfolding: a convolution's output cut into 2x2 patches by views (traced as
    views: the value was contiguous then), then folded back for another convolution."""
    y = F.conv2d(x, w1, padding=1)
    n, c, h, wd = y.shape
    p = y.view(n * c * h // 2, 2, wd // 2, 2).transpose(1, 2)
    p = p.reshape(n, c, -1, 4).transpose(1, 3).relu()
    z = p.transpose(1, 3).reshape(n * c * h // 2, wd // 2, 2, 2).transpose(1, 2)
    return F.conv2d(z.reshape(n, c, h, wd), w2)


def test_a_view_the_new_layout_cannot_take_gets_a_contiguous_copy_first():
    """Before: propagating again raised at the first view and the whole graph stayed NCHW."""
    args = (torch.randn(2, 8, 8, 8), torch.randn(16, 8, 3, 3), torch.randn(16, 16, 1, 1))
    gm = make_fx(_patches, tracing_mode="fake")(*args)
    views = [n for n in gm.graph.nodes if n.target is torch.ops.aten.view.default]
    channels_last.apply(gm, set())
    assert all(_nhwc(v) for v in _conv_inputs(gm))
    relaid = [n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default and
              n.kwargs["memory_format"] is torch.contiguous_format and
              any(u in views for u in n.users)]
    assert len(relaid) == 1 and relaid[0].meta["val"].is_contiguous()
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert out.meta["val"].is_contiguous()
    torch.testing.assert_close(gm(*args), _patches(*args), atol=1e-4, rtol=1e-4)


def test_compiled_patch_unfolding_matches_eager(ecompile):
    args = (torch.randn(2, 8, 8, 8), torch.randn(16, 8, 3, 3), torch.randn(16, 16, 1, 1))
    got, want = ecompile(_patches)(*args), _patches(*args)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_a_graph_fake_tensors_cannot_run_again_is_left_as_traced(monkeypatch):
    """A graph whose fake tensors raise when propagated again (an op whose fake kernel
    cannot take the new layout): the rewrite is not applied and every value and node stays
    as traced, the copies taken out again."""
    def body(x, w):
        return F.conv2d(x, w).transpose(2, 3).contiguous().view(2, -1).sin()

    gm = make_fx(body, tracing_mode="fake")(torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3))
    traced = {n: n.meta.get("val") for n in gm.graph.nodes}
    nodes = list(gm.graph.nodes)
    run_node = channels_last._Propagation.run_node

    def refuse(self, n):
        if n.target is torch.ops.aten.sin.default:
            raise RuntimeError("a fake kernel that cannot run again")
        return run_node(self, n)

    monkeypatch.setattr(channels_last._Propagation, "run_node", refuse)
    assert channels_last.apply(gm, set()) == []
    assert list(gm.graph.nodes) == nodes
    assert all(n.meta.get("val") is v for n, v in traced.items())
