"""Matmul externs write into buffers the wrapper plans (``wrapper.OUT_VARIANTS``): the
Python wrapper calls ``torch.mm(..., out=buf)`` with ``buf`` allocated or reused from a dead
buffer, instead of ``aten.mm.default`` allocating its result."""

import pytest
import torch

from ember.core.compiler.codegen import wrapper


def _wrappers(output_code) -> list[str]:
    return [m.split("wrapper:")[1] for m in output_code if "wrapper:" in m]


def _matmul_lines(src: str) -> list[str]:
    return [ln for ln in src.splitlines()
            if any(f"# aten.{op}." in ln for op in ("mm", "addmm", "bmm", "baddbmm"))]


def _grads(model, x):
    model.zero_grad(set_to_none=True)
    out = model(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return [out.detach()] + [p.grad.clone() for p in model.parameters()]


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(48, 64)
        self.b = torch.nn.Linear(64, 64, bias=False)
        self.c = torch.nn.Linear(64, 40)
        self.w = torch.nn.Parameter(torch.randn(4, 40, 24) / 8)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        h = torch.relu(self.b(h)) + h
        y = self.c(h).view(4, -1, 40)
        return torch.bmm(y, self.w).sigmoid()


def test_training_matmuls_write_planned_buffers_and_match_eager(ecompile, output_code, matches):
    torch.manual_seed(0)
    model, x = _Net(), torch.randn(32, 48)
    ref = _grads(model, x)
    got = _grads(ecompile(model), x)
    matches(got, ref, atol=1e-5, rtol=1e-4)
    srcs = _wrappers(output_code)
    assert len(srcs) == 2  # forward and backward
    for src in srcs:
        lines = _matmul_lines(src)
        assert lines and all(ln.endswith(", out=") and "out=buf" in ln for ln in lines), lines
        assert "(*(" not in "\n".join(lines)  # none called boxed, none allocated by ATen
    fw, bw = (_matmul_lines(s) for s in srcs)
    assert sum("addmm" in ln for ln in fw) == 2 and sum("bmm" in ln for ln in fw) == 1


def test_an_out_buffer_reused_from_a_dead_one_holds_the_right_values(ecompile, output_code,
                                                                     matches):
    def fn(x, w1, w2, w3):
        h = torch.relu(x @ w1)  # x @ w1 dies in the relu kernel
        g = torch.relu(h @ w2)  # h @ w2 may land in x @ w1's buffer
        return g @ w3 + 1

    args = [torch.randn(32, 32) for _ in range(4)]
    matches(ecompile(fn)(*args), fn(*args), atol=1e-4, rtol=1e-4)
    src = _wrappers(output_code)[0]
    lines = _matmul_lines(src)
    assert len(lines) == 3 and all("out=" in ln for ln in lines)
    reused = [ln.split(" = ")[0].strip() for ln in src.splitlines() if "# reuse" in ln]
    assert any(f"out={name})" in ln for name in reused for ln in lines), src


@pytest.mark.parametrize("n", [24, 40])
def test_dynamic_sizes_allocate_out_buffers_from_bound_symbols(ecompile, matches, n):
    fn = lambda a, b, bias: torch.addmm(bias, a, b).relu() @ b.t()
    a, b, bias = torch.randn(n, 32), torch.randn(32, 20), torch.randn(20)
    matches(ecompile(fn, dynamic=True)(a, b, bias), fn(a, b, bias), atol=1e-4, rtol=1e-4)


def test_plans_without_extern_out_call_every_op_boxed():
    """The C++ (ahead-of-time) wrapper's plans keep ATen's own allocation."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ember.core.compiler import pipeline

    gm = make_fx(lambda a, b: (torch.ops.aten.mm.default(a, b),))(torch.randn(20, 30),
                                                                  torch.randn(30, 40))
    lowered = pipeline.lower(gm, "cpu", True)
    g = lowered.graph
    for extern_out in (False, True):
        steps = wrapper.plan(g.inputs, g.outputs, g.checks, lowered.steps, {}, lowered.buffers,
                             extern_out=extern_out)
        calls = [s for s in steps if isinstance(s, wrapper.CallExtern)]
        assert [c.out for c in calls] == [extern_out]
        assert any(isinstance(s, wrapper.Alloc) for s in steps) == extern_out


def test_an_undefined_extern_output_passes_through_the_stride_fix():
    """CUDA flash attention returns no debug mask where its fake kernel made an empty one."""
    assert wrapper._fix_strides(None, (0,), (1,)) is None
    t = torch.randn(3, 4).t()
    fixed = wrapper._fix_strides(t, (4, 3), (3, 1))
    assert fixed.stride() == (3, 1) and torch.equal(fixed, t)
