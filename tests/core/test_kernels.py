import pytest
import torch

from ember.core import kernels

_scale = kernels.define("ember_test::scale", "(Tensor x, float a) -> Tensor")


@_scale.register_fake
def _(x, a):
    return torch.empty_like(x)


@_scale.register_kernel("cpu")
def _(x, a):
    return x * a + 0.0  # a fresh tensor, never an alias of the input


@_scale.register_kernel("portable")
def _(x, a):
    return x * a


def _setup(ctx, inputs, output):
    ctx.a = inputs[1]


def _backward(ctx, grad):
    return grad * ctx.a, None


_scale.register_autograd(_backward, setup_context=_setup)


def test_cpu_kernel_and_registry():
    x = torch.arange(4.0)
    torch.testing.assert_close(_scale(x, 2.0), x * 2)
    assert kernels.registered()["ember_test::scale"] == ["cpu", "portable"]
    assert kernels.get("ember_test::scale") is _scale


def test_portable_serves_meta_less_devices():
    # 'meta' has no dedicated kernel: the fake implementation answers shapes.
    out = _scale(torch.empty(3, 5, device="meta"), 3.0)
    assert out.shape == (3, 5) and out.device.type == "meta"


def test_autograd():
    x = torch.randn(5, requires_grad=True)
    _scale(x, 3.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((5,), 3.0))


def test_compiles_without_graph_break():
    def f(x):
        return _scale(x, 2.0).sin()

    explanation = torch._dynamo.explain(f)(torch.randn(8))
    assert explanation.graph_break_count == 0
    compiled = torch.compile(f, backend="eager", fullgraph=True)
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), f(x))


def test_bad_declarations():
    with pytest.raises(ValueError, match="namespace::name"):
        kernels.define("noname", "(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match="already defined"):
        kernels.define("ember_test::scale", "(Tensor x, float a) -> Tensor")
    with pytest.raises(ValueError, match="device must be one of"):
        _scale.register_kernel("tpu")
    with pytest.raises(ValueError, match="already has a 'cpu' kernel"):
        _scale.register_kernel("cpu")(lambda x, a: x)
    with pytest.raises(ValueError, match="no custom op"):
        kernels.get("ember_test::missing")
