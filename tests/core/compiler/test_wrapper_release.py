"""The wrapper drops each buffer it made after the last step naming it (``wrapper.Release``),
so later allocations of the same call reuse warm memory, and calls the hot extern ops through
torch's own bindings (``wrapper.BINDINGS``) rather than OpOverload's boxed call."""

import re

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ember.core.compiler import pipeline
from ember.core.compiler.codegen import wrapper
from ember.core.compiler.runtime import cpp_kernels

aten = torch.ops.aten
_BUF = re.compile(r"\bbuf\d+\b")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        h = torch.relu(self.bn(self.c1(x)))
        h = self.pool(torch.nn.functional.hardtanh(self.c2(h)) + h)
        return self.fc(torch.cat([h, h * 2], 1)[:, ::2].flatten(1))


def _body(src: str) -> list[str]:
    return src.split("wrapper:")[1].splitlines()


def _check_releases(lines: list[str]) -> None:
    """Every ``del`` names buffers no later line mentions; every buffer a line makes and
    the return does not hand out is deleted; inputs are never deleted."""
    made = {m.group(1) for ln in lines if (m := re.match(r"\s+(buf\d+) = ", ln))}
    deleted = []
    for i, ln in enumerate(lines):
        if ln.strip().startswith("del ") and "_r" not in ln:
            names = [n.strip() for n in ln.strip()[4:].split(",")]
            assert all(n.startswith("buf") for n in names), ln  # never an input or constant
            later = "\n".join(lines[i + 1:])
            assert not any(re.search(rf"\b{n}\b", later) for n in names), ln
            deleted += names
    returned = set(_BUF.findall(next(ln for ln in lines if ln.strip().startswith("return"))))
    assert len(deleted) == len(set(deleted))
    assert set(deleted) == made - returned


def test_training_graphs_release_each_buffer_after_its_last_use(ecompile, output_code,
                                                                matches):
    torch.manual_seed(0)
    model, x = _Net(), torch.randn(2, 3, 8, 8)
    ref_model = _Net()
    ref_model.load_state_dict(model.state_dict())
    out, ref = ecompile(model)(x), ref_model(x)
    out.square().sum().backward()
    ref.square().sum().backward()
    matches([out] + [p.grad for p in model.parameters()],
            [ref] + [p.grad for p in ref_model.parameters()], atol=1e-5, rtol=1e-4)
    srcs = [m for m in output_code if "wrapper:" in m]
    assert len(srcs) == 2  # forward and backward
    for src in srcs:
        lines = _body(src)
        assert any(ln.strip().startswith("del buf") for ln in lines)
        _check_releases(lines)


def test_inference_graphs_release_buffers_and_match(ecompile, output_code, matches):
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        ref = model(x)
        compiled = ecompile(model)
        for _ in range(3):  # memory released by one call is what the next one allocates
            matches(compiled(x), ref, atol=1e-5, rtol=1e-4)
    (src,) = [m for m in output_code if "wrapper:" in m]
    _check_releases(_body(src))


def test_plans_release_neither_inputs_nor_outputs():
    def fn(a, b):
        t = aten.mm.default(a, b)
        u = aten.relu.default(aten.mm.default(t, b))
        return (aten.mm.default(u, b), t)

    gm = make_fx(fn)(torch.randn(6, 4), torch.randn(4, 4))
    lowered = pipeline.lower(gm, "cpu", True)
    g = lowered.graph
    libs, _ = cpp_kernels.load(lowered.steps, lowered.buffers, {})
    steps = wrapper.plan(g.inputs, g.outputs, g.checks, lowered.steps, wrapper.specs_of(libs),
                         lowered.buffers, segments=wrapper.segments_of(libs))
    released = [n for s in steps if isinstance(s, wrapper.Release) for n in s.names]
    inputs = {b.name for b in g.inputs}
    outputs = {o.buf.name for o in g.outputs}
    assert released and not set(released) & (inputs | outputs)
    for i, s in enumerate(steps):
        if isinstance(s, wrapper.Release):
            for later in steps[i + 1:]:
                assert not set(s.names) & wrapper._NAMES[type(later)](later)


def _samples():
    x = torch.randn(2, 4, 9, 9)
    w = torch.randn(6, 4, 3, 3)
    idx = torch.tensor([[0, 2, 1], [3, 3, 0]])
    return {
        aten.convolution.default: (x, w, torch.randn(6), [2, 1], [1, 0], [1, 1], False,
                                   [0, 0], 1),
        aten.cat.default: ([x, x * 2], 1),
        aten.constant_pad_nd.default: (x, [1, 2, 0, 1], 0.5),
        aten.embedding.default: (torch.randn(5, 3), idx),
        aten.index_select.default: (x, 2, torch.tensor([0, 4, 4])),
        aten.gather.default: (torch.randn(2, 5), 1, idx),
        aten.cumsum.default: (x, 3),
        aten.argmax.default: (x, 1, True),
        aten.argmin.default: (x, -1),
        aten.topk.default: (x, 3, 2, False, True),
        aten.native_dropout.default: (x, 0.3, True),
        aten._adaptive_avg_pool2d.default: (x, [4, 3]),
        aten.avg_pool2d.default: (x, [3, 3], [2, 2], [1, 1], True, False, None),
        aten.max_pool2d_with_indices.default: (x, [3, 3], [2, 2], [1, 1], [1, 1], True),
    }


@pytest.mark.parametrize("op", list(wrapper.BINDINGS), ids=str)
def test_each_binding_computes_its_op(op):
    args = _samples()[op]
    torch.manual_seed(3)
    ref = op(*args)
    torch.manual_seed(3)
    got = wrapper.BINDINGS[op](*args)
    refs, gots = (list(r) if isinstance(r, (tuple, list)) else [r] for r in (ref, got))
    assert len(refs) == len(gots)
    for r, g in zip(refs, gots):
        assert r.dtype == g.dtype and r.shape == g.shape and r.stride() == g.stride()
        assert torch.equal(r, g)


def test_the_wrapper_calls_convolutions_through_the_binding():
    gm = make_fx(lambda x, w: (aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1],
                                                        False, [0, 0], 1),))(
        torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3))
    lowered = pipeline.lower(gm, "cpu", True)
    g = lowered.graph
    steps = wrapper.plan(g.inputs, g.outputs, g.checks, lowered.steps, {}, lowered.buffers)
    src, globs = wrapper.PythonWrapper(g.constants, {}).render(steps)
    assert any(v is torch.convolution for v in globs.values())
    assert not any(v is aten.convolution.default for v in globs.values())
    assert "# aten.convolution.default" in src
