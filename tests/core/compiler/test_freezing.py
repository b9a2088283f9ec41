"""options={"freezing": True}: parameters and buffers baked into inference graphs as constants
(folded BatchNorms, prepacked oneDNN convolutions), checked per call, ignored in training."""

import logging

import pytest
import torch
from torch import nn

from ember.core.compiler import freezing, prepack

pytestmark = pytest.mark.usefixtures("one_thread")

FREEZE = {"freezing": True}


class FrozenBN(nn.Module):
    """torchvision's FrozenBatchNorm2d: x * scale + shift from four buffers."""

    def __init__(self, c):
        super().__init__()
        for name in ("weight", "bias", "running_mean", "running_var"):
            self.register_buffer(name, torch.rand(c) + 0.5)

    def forward(self, x):
        scale = self.weight.reshape(1, -1, 1, 1) * \
            (self.running_var.reshape(1, -1, 1, 1) + 1e-5).rsqrt()
        shift = self.bias.reshape(1, -1, 1, 1) - self.running_mean.reshape(1, -1, 1, 1) * scale
        return x * scale + shift


class ConvNet(nn.Module):
    """conv-bn-relu, conv-frozen bn, a residual 1x1 conv + add + relu, a strided conv."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.fbn = FrozenBN(8)
        self.proj = nn.Conv2d(8, 8, 1)
        self.down = nn.Conv2d(8, 4, 3, stride=2, groups=4)

    def forward(self, x):
        y = self.fbn(self.conv(self.stem(x)))
        y = torch.relu(self.proj(y) + y)
        z = self.proj(y) + y  # add without a relu after it
        return self.down(z).sum((2, 3)), y


def _randomize_bn(m):
    for bn in m.modules():
        if isinstance(bn, nn.BatchNorm2d):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-1, 1)
    return m


@pytest.fixture
def packed(monkeypatch):
    """How many ops ``prepack.apply`` packed, per frozen graph."""
    counts = []
    apply = prepack.apply

    def spy(gm, fake_mode):
        counts.append(apply(gm, fake_mode))
        return counts[-1]

    monkeypatch.setattr(prepack, "apply", spy)
    return counts


def _close(a, b, tol=1e-4):
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        torch.testing.assert_close(x, y, atol=tol, rtol=tol)


def test_option_is_checked():
    from ember.core.compiler.options import check_options

    assert check_options({"freezing": True}) == {"freezing": True}
    with pytest.raises(ValueError, match="freezing"):
        check_options({"freezing": 1})


def test_conv_bn_relu_net_matches_eager_and_packs_every_conv(ecompile, packed, caplog):
    torch.manual_seed(0)
    m = _randomize_bn(ConvNet()).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="ember.fallback"):
        ref = m(x)
        compiled = ecompile(m, options=FREEZE)
        for _ in range(3):
            _close(compiled(x), ref)
    assert packed == [5]
    assert not caplog.text  # the frozen graph ran every time


def test_fold_rewrites_conv_with_per_channel_ops():
    """The folds alone, on an ATen graph: conv -> sub, mul, add by constants -> one conv."""
    w, c = torch.randn(4, 3, 3, 3), torch.randn(1, 4, 1, 1)

    class G(nn.Module):
        def forward(self, x, w, c):
            y = torch.ops.aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1], False,
                                                   [0, 0], 1)
            aten = torch.ops.aten
            return (aten.add.Tensor(aten.mul.Tensor(c, aten.sub.Tensor(y, c)), 2.0),)

    x = torch.randn(1, 3, 8, 8)
    gm = torch.fx.symbolic_trace(G())
    from torch.fx.passes.shape_prop import ShapeProp

    ShapeProp(gm).propagate(x, w, c)
    for n in gm.graph.nodes:
        tm = n.meta.get("tensor_meta")
        n.meta["val"] = torch.empty(tm.shape) if hasattr(tm, "shape") else None
    frozen = freezing.bake_inputs(gm, [x, w, c], [1, 2])
    assert [f.pos for f in frozen] == [1, 2]
    assert freezing.fold_into_convs(gm) == 3
    gm.graph.eliminate_dead_code()
    gm.recompile()
    ops = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert ops == [torch.ops.aten.convolution.default]
    _close(gm(x)[0], G()(x, w, c)[0], 1e-5)


def test_resnet18_matches_eager(ecompile, packed):
    from ember.vision.models import resnet18

    torch.manual_seed(0)
    m = _randomize_bn(resnet18(num_classes=10)).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        ref = m(x)
        out = ecompile(m, options=FREEZE)(x)
    _close(out, ref, 1e-3)
    assert packed == [20]  # every convolution, downsampling ones included


@pytest.mark.parametrize("sizes, batch, n_packed", [((32, 64, 8), 5, 0),  # skinny: loops
                                                     ((64, 128, 48), 32, 2)])
def test_linear_mlp_matches_eager(ecompile, packed, sizes, batch, n_packed):
    torch.manual_seed(0)
    a, b, c = sizes
    m = nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c)).eval()
    x = torch.randn(batch, a)
    with torch.no_grad():
        ref = m(x)
        compiled = ecompile(m, options=FREEZE)
        out = compiled(x)
        _close(out, ref)
        assert packed == [n_packed]
        y = torch.randn(batch + 3, a)  # another batch size (recompiled, maybe dynamic)
        _close(compiled(y), m(y))


def test_parameter_changed_in_place_after_compiling_still_correct(ecompile, caplog):
    torch.manual_seed(0)
    m = _randomize_bn(ConvNet()).eval()
    x = torch.randn(1, 3, 12, 12)
    with torch.no_grad():
        c = ecompile(m, options=FREEZE)
        _close(c(x), m(x))
        m.proj.weight.mul_(2)  # in place
        with caplog.at_level(logging.WARNING, logger="ember.fallback"):
            _close(c(x), m(x))
        assert "modified in place" in caplog.text
        m.stem[1].running_mean.add_(1)  # a buffer, once unfrozen: still followed
        _close(c(x), m(x))
        m.load_state_dict({k: v * 0.5 for k, v in m.state_dict().items()})
        _close(c(x), m(x))


def test_parameter_replaced_after_compiling_still_correct(ecompile):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        c = ecompile(m, options=FREEZE)
        _close(c(x), m(x))
        m[0].weight.data = torch.randn(4, 3, 3, 3)  # same Parameter, new storage
        _close(c(x), m(x))
        m[0].bias = nn.Parameter(torch.randn(4))  # another Parameter object
        _close(c(x), m(x))


def test_frozen_check_reports_each_kind_of_change():
    t = torch.randn(3)
    frozen = [freezing.Frozen(0, t, t._version, t.data_ptr())]
    assert freezing.changed([t], frozen) is None
    assert "another tensor" in freezing.changed([t.clone()], frozen)
    t.add_(1)
    assert "in place" in freezing.changed([t], frozen)


def test_training_graphs_ignore_freezing(ecompile, packed):
    torch.manual_seed(0)
    m = ConvNet().train()
    ref_m = ConvNet().train()
    ref_m.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 12, 12)
    out = ecompile(m, options=FREEZE)(x)
    ref = ref_m(x)
    _close(out, ref)
    out[0].sum().backward()
    ref[0].sum().backward()
    _close(m.conv.weight.grad, ref_m.conv.weight.grad, 1e-3)
    _close(m.stem[1].running_mean, ref_m.stem[1].running_mean)
    assert packed == []


def test_batchnorm_in_train_mode_without_grad_keeps_its_buffers_as_inputs(ecompile):
    """Running statistics the graph updates stay inputs (written each call, as in eager)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    ref_m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    ref_m.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        c = ecompile(m, options=FREEZE)
        for _ in range(2):
            _close(c(x), ref_m(x))
    _close(m[1].running_mean, ref_m[1].running_mean)
    _close(m[1].running_var, ref_m[1].running_var)


def test_a_failing_rewrite_compiles_the_graph_unfrozen(monkeypatch, caplog):
    import ember.core as ec

    def broken(gm, fake_mode):
        raise RuntimeError("no packing today")

    monkeypatch.setattr(prepack, "apply", broken)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    torch._dynamo.reset()
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="ember.fallback"):
        _close(ec.compile(m, options=FREEZE)(x), m(x))
    assert "no packing today" in caplog.text
    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(Exception, match="no packing today"):
        ec.compile(m, options={**FREEZE, "strict": True})(x)
    torch._dynamo.reset()


def test_dynamic_sizes_fold_but_do_not_pack(ecompile, packed):
    """Symbolic sizes: BatchNorms still fold; packing needs static sizes and is skipped."""
    torch.manual_seed(0)
    m = _randomize_bn(ConvNet()).eval()
    compiled = ecompile(m, options=FREEZE, dynamic=True)
    with torch.no_grad():
        for side in (12, 15):
            x = torch.randn(1, 3, side, side)
            _close(compiled(x), m(x))
    assert packed and all(n == 0 for n in packed)


def test_float64_model_matches_eager(ecompile, packed):
    torch.manual_seed(0)
    m = _randomize_bn(ConvNet()).double().eval()
    x = torch.randn(1, 3, 12, 12, dtype=torch.float64)
    with torch.no_grad():
        _close(ecompile(m, options=FREEZE)(x), m(x), 1e-9)
    assert packed == [0]  # oneDNN packing is float32 only; the folds still apply


def test_graph_holding_tensors_of_its_own_still_freezes(packed):
    """AOTAutograd puts a Dynamo graph's own tensors (get_attr: anchors a module keeps as a
    plain attribute, say) ahead of the graph's inputs; the parameters still freeze and pack."""
    from ember.core.compiler.backend import ember_backend

    torch.manual_seed(0)
    w, x = nn.Parameter(torch.randn(4, 3, 3, 3)), torch.randn(1, 3, 8, 8)
    g = torch.fx.Graph()
    pw, px = g.placeholder("w"), g.placeholder("x")
    conv = g.call_function(torch.conv2d, (px, pw))
    g.output((g.call_function(torch.add, (conv, g.get_attr("anchors"))),))
    root = nn.Module()
    root.register_buffer("anchors", torch.randn(4, 1, 1))
    gm = torch.fx.GraphModule(root, g)
    with torch.no_grad():
        fn = ember_backend(gm, [w, x], options=FREEZE)
        got, = fn(w, x)
    _close(got, torch.conv2d(x, w) + root.anchors)
    assert packed == [1]


class WinogradNet(nn.Module):
    """3x3 convolutions: three large enough for Winograd (one with a folded BatchNorm and a
    relu, one plain, one with a residual add fused), then a strided one that keeps oneDNN's."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1, bias=False),
                               nn.BatchNorm2d(64), nn.ReLU())
        self.b = nn.Conv2d(64, 64, 3, padding=1)
        self.c = nn.Conv2d(64, 64, 3, padding=1)
        self.down = nn.Conv2d(64, 32, 3, stride=2)

    def forward(self, x):
        y = self.b(self.a(x))
        return self.down(self.c(y) + y)


def test_large_3x3_convolutions_run_winograd_and_match_eager(ecompile, packed, monkeypatch):
    from ember.core.nn import winograd_conv

    if not winograd_conv.available():
        pytest.skip("no C++ compiler or no oneDNN")
    routed = []
    choose = prepack._winograd

    def spy(gm, conv, weight, fusion, fake_mode):
        routed.append(choose(gm, conv, weight, fusion, fake_mode))
        return routed[-1]

    monkeypatch.setattr(prepack, "_winograd", spy)
    torch.manual_seed(0)
    m = _randomize_bn(WinogradNet()).eval()
    x = torch.randn(2, 64, 25, 23)  # 2 x 13 x 12 tiles
    with torch.no_grad():
        ref = m(x)
        compiled = ecompile(m, options=FREEZE)
        for _ in range(2):
            _close(compiled(x), ref, 1e-4)
    assert packed == [4] and routed == [True, True, True, False]


def test_flatten_view_of_a_channels_last_output_still_freezes(ecompile, packed, caplog):
    """A packed convolution's channels-last output reaching a view that needs contiguous
    strides (VGG's flatten of its pooled features) gets a copy first; freezing used to fail
    there and the graph ran unfrozen."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                      nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 40)).eval()
    x = torch.randn(4, 3, 12, 12)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="ember.fallback"):
        _close(ecompile(m, options=FREEZE)(x), m(x), 1e-5)
    assert not caplog.text
    assert packed == [1]  # the convolution (the linears are too skinny to pack)


def test_residual_after_a_max_pool_is_fused(ecompile, monkeypatch):
    """Packing runs in graph order on current layouts: the identity a max pool makes from a
    packed (channels-last) convolution is channels-last when the add after the next
    convolution is considered, so that add is fused into it (ResNet's first block)."""
    fusions = []
    fusion = prepack._fusion

    def spy(conv):
        fusions.append(fusion(conv))
        return fusions[-1]

    monkeypatch.setattr(prepack, "_fusion", spy)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.pool = nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(2)
            self.conv = nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x):
            y = self.pool(torch.relu(self.stem(x)))
            return torch.relu(self.conv(y) + y)

    torch.manual_seed(0)
    m, x = Block().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        _close(ecompile(m, options=FREEZE)(x), m(x), 1e-5)
    assert [f.unary for f in fusions] == ["relu", "relu"] and fusions[1].other is not None
