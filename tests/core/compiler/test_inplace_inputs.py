"""Graphs that write their inputs (AOTAutograd's ``copy_`` epilogue): kernels store straight
into the input when every read of its old contents happens first at the same element, and
keep the extern ``copy_`` (or a barrier) otherwise; results always equal eager's."""

import pytest
import sympy
import torch

from ember.core.compiler.codegen import wrapper
from ember.core.compiler.codegen.common import ArgKind, KernelArg
from ember.core.compiler.ir import Buffer, StridedView
from ember.core.compiler.lowering.builders import InputWrite
from ember.core.compiler.schedule import schedule


def test_wrapper_plan_leaves_a_kernel_output_that_is_an_input_alone():
    """The contract in-place stores rely on: a kernel writing a graph input's Buffer gets that
    input's tensor (no allocation, no alias), and a fresh output still gets its own."""
    size = [sympy.Integer(8)]
    a = Buffer("arg0", torch.float32, size, [sympy.Integer(1)])
    view = StridedView.of(a)
    steps = schedule([InputWrite(a, lambda i: view.load(i))], set())
    assert steps[0].outputs == [a]
    specs = {steps[0].name: [KernelArg(ArgKind.POINTER, "arg0")]}
    plan = wrapper.plan([a], [], [], steps, specs, {"arg0": a})
    assert not [s for s in plan if isinstance(s, (wrapper.Alloc, wrapper.Alias))]
    assert [s.name for s in plan if isinstance(s, wrapper.CallKernel)] == [steps[0].name]


def _run(ecompile, fn, *args):
    """fn on copies of args eagerly and compiled: returns (eager, compiled) args and outputs."""
    ref_args = [a.clone() for a in args]
    our_args = [a.clone() for a in args]
    ref = fn(*ref_args)
    ours = ecompile(fn)(*our_args)
    for r, o in zip(ref_args, our_args):
        torch.testing.assert_close(o, r, atol=1e-6, rtol=1e-6)
    if ref is not None:
        torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-6)
    return our_args, ours


def _kernels(output_code) -> str:
    return "\n".join(output_code).split("wrapper:")[0]


def _wrapper(output_code) -> str:
    return "\n".join(output_code).split("wrapper:")[-1]


def test_update_is_stored_into_the_input_without_a_copy(ecompile, output_code):
    def fn(p, g):
        p.mul_(0.5).add_(g)

    _run(ecompile, fn, torch.randn(300, 257), torch.randn(300, 257))
    assert "copy_" not in _wrapper(output_code)
    assert "arg0[" in _kernels(output_code) and "_empty" not in _wrapper(output_code)


def test_old_contents_read_elsewhere_are_read_before_the_write(ecompile):
    # the transpose reads other elements of the input it overwrites: never in one loop
    def fn(a):
        a.copy_(a.t() * 2 + 1)

    _run(ecompile, fn, torch.randn(257, 257))

    def flip(a):
        a.copy_(a.flip(0) - a)

    _run(ecompile, flip, torch.randn(300, 300))


def test_value_read_after_the_write_sees_old_and_new_contents_right(ecompile):
    def fn(a, b):
        old = a * 3  # read before the write, returned after it
        a.add_(b)
        return old, a * 2  # a's new contents

    _run(ecompile, fn, torch.randn(300, 300), torch.randn(300, 300))


def test_fresh_output_is_not_the_input_it_was_copied_into(ecompile):
    def fn(a, b):
        c = torch.exp(a) + b
        a.copy_(c)
        return c * 1, c  # c: a fresh tensor in eager

    args, outs = _run(ecompile, fn, torch.randn(64, 33), torch.randn(64, 33))
    assert outs[1].data_ptr() != args[0].data_ptr()


def test_dependent_updates_of_different_sizes_wait_for_each_other(ecompile):
    # b's update reads a's new contents over another loop size: it runs after a's whole loop
    # (sizes above the parallel threshold, so loops run on several threads)
    def fn(a, b):
        a.mul_(2).add_(1)
        b.copy_(a[: b.shape[0]] * 3 + b)

    for _ in range(3):
        _run(ecompile, fn, torch.randn(400_000), torch.randn(300_000))


def test_many_independent_updates_in_one_region(ecompile):
    shapes = [(513, 129), (4097,), (65, 1031), (1,), (3, 5, 7), (70_000,)]

    def fn(ps, gs):
        for p, g in zip(ps, gs):
            p.mul_(0.9).add_(g, alpha=0.1)

    ps = [torch.randn(s) for s in shapes]
    gs = [torch.randn(s) for s in shapes]
    ref = [p.clone() for p in ps]
    fn(ref, gs)
    compiled = ecompile(fn)
    compiled(ps, gs)
    for o, r in zip(ps, ref):
        torch.testing.assert_close(o, r, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("tail", ["same", "view", "twice"])
def test_value_copied_into_an_input_and_returned_stays_fresh(ecompile, tail):
    def fn(a, b):
        c = a + b
        a.copy_(c)
        if tail == "view":
            return c.view(-1)
        if tail == "twice":
            return c, c * 2
        return c

    args, outs = _run(ecompile, fn, torch.randn(64, 33), torch.randn(64, 33))
    for o in outs if isinstance(outs, tuple) else [outs]:
        assert o.data_ptr() != args[0].data_ptr()
    args[0].add_(1)  # the input moves on; the returned value must not
    torch.testing.assert_close((outs[0] if isinstance(outs, tuple) else outs).reshape(64, 33),
                               args[0] - 1)
