"""Scheduling decisions that change how many passes over memory a graph takes."""

import functools
import operator

import pytest
import torch
import torch.nn.functional as F

from ember.core.compiler import ir, schedule


def _kernels(output_code) -> int:
    return "\n".join(output_code).split("wrapper:")[0].count('extern "C" void kernel')


def test_per_row_operands_do_not_split_a_row_kernel(ecompile, output_code):
    # (x - mean[:, None]) * rstd[:, None] then a row sum: the per-row operands are loop
    # invariants, not a column walk, so it is one kernel
    fn = lambda x, m, r: ((x - m) * r * 2).sum(-1)
    args = (torch.randn(64, 128), torch.randn(64, 1), torch.rand(64, 1))
    torch.testing.assert_close(ecompile(fn)(*args), fn(*args))
    assert _kernels(output_code) == 1


def test_row_work_behind_a_column_sum_joins_the_row_kernel(ecompile, output_code):
    def fn(x):
        s = x.sum(1, keepdim=True)
        return (x * s).sum(0), x * s + 1

    x = torch.randn(64, 128)
    out, ref = ecompile(fn)(x), fn(x)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r, atol=1e-4, rtol=1e-4)
    assert _kernels(output_code) == 2  # rows: s and x*s+1; columns: the sum over dim 0


def test_layer_norm_backward_is_one_row_pass_and_one_column_pass(ecompile, output_code):
    w, b = torch.randn(256, requires_grad=True), torch.randn(256, requires_grad=True)

    def fn(x):
        return F.layer_norm(x, (256,), w, b).sum()

    x = torch.randn(32, 256, requires_grad=True)
    ecompile(fn)(x).backward()
    grads = (x.grad, w.grad, b.grad)
    x.grad = w.grad = b.grad = None
    fn(x).backward()
    for g, r in zip(grads, (x.grad, w.grad, b.grad)):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)
    backward = "\n".join(output_code).split("wrapper:")[1]
    assert backward.count('extern "C" void kernel') == 2


def test_horizontal_optimizer_loops_run_flat_over_each_parameter(ecompile, output_code):
    """A conv weight's update is one vector loop over all its elements, not a loop nest whose
    innermost loop walks the 3x3 (or 1x1) window."""
    shapes = [(8, 4, 3, 3), (16,), (16, 8, 1, 1)]
    params = [torch.randn(s, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    ref = [p.detach().clone().requires_grad_() for p in params]
    for p, r in zip(params, ref):
        r.grad = p.grad.clone()
    opt = torch.optim.AdamW(params, lr=1e-2, foreach=True)
    ref_opt = torch.optim.AdamW(ref, lr=1e-2, foreach=True)
    step = ecompile(opt.step)
    for _ in range(2):
        step()
        ref_opt.step()
    for p, r in zip(params, ref):
        torch.testing.assert_close(p, r)
    code = "\n".join(output_code).split("wrapper:")[0]
    bounds = {int(line.split("<")[1].split(";")[0]) for line in code.splitlines()
              if "for (int64_t r0 = 0; r0 <" in line}
    assert {288, 16, 128} <= bounds, bounds  # each parameter's numel
    assert "r1" not in code  # no second loop level inside any parameter's update


def test_extent_counts_a_shared_value_once_per_reader_without_walking_it():
    e = ir.Load(torch.float32, "buf1", 0)
    for _ in range(40):  # 2**41 - 1 nodes as a tree: a walk would never finish
        e = ir.op("add", torch.float32, e, e)
    assert ir.extent(e) == ir.Extent(2 ** 41 - 1, 41)


@pytest.fixture
def bounded_forwarding(monkeypatch):
    """Fails as soon as the scheduler lays out an expression past the forwarding bounds (each
    link of the chains below grows it, so the fixture fails long before the old scheduler's
    exponential walks or deep recursion would stall the run)."""
    add = schedule._Builder.add

    def checked(self, node):
        add(self, node)
        e = ir.extent(self.stages[-1].items[-1].expr)
        assert e.size <= schedule.FORWARD_MAX_SIZE and e.depth <= schedule.FORWARD_MAX_DEPTH, \
            f"{node.buf.name}: a forwarded expression of {e.size} nodes, {e.depth} deep"

    monkeypatch.setattr(schedule._Builder, "add", checked)


def test_a_value_read_twice_per_link_goes_through_memory(ecompile, matches, bounded_forwarding):
    """Forwarding ``a`` into both readers of ``a * a + a`` doubles the expression per link: 40
    links were 2**40 nodes to walk (12 links took five minutes to compile)."""
    def fn(y):
        for _ in range(40):
            a = (y * 0.5).sin()
            y = a * a + a
        return y

    x = torch.randn(64)
    matches(ecompile(fn)(x), fn(x))


def test_a_long_chain_of_fused_adds_stays_shallow(ecompile, matches, bounded_forwarding):
    """A sum of many terms is one chain of additions: forwarded whole it grew past Python's
    recursion limit (800 terms raised RecursionError)."""
    def fn(*xs):
        return functools.reduce(operator.add, [x * (i % 3 + 1) for i, x in enumerate(xs)])

    xs = [torch.randn(64) for _ in range(160)]
    matches(ecompile(fn)(*xs), fn(*xs))
