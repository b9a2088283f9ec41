"""Compiled graphs keep working in forked children (DataLoader workers) after the parent ran
them: libgomp's thread pool does not survive fork, so children run kernels on one thread."""

import multiprocessing as mp

import pytest
import torch

from ember.core.compiler import compile as ember_compile


def _fn(x):
    return (x * 2 + 1).relu().sum(-1)


def _child(f, x, queue):
    queue.put(f(x).tolist())  # plain data: a tensor would go through shared memory


@pytest.mark.parametrize("mode", ["default", "max-autotune"])
def test_compiled_graph_runs_in_a_forked_child(mode):
    torch._dynamo.reset()
    f = ember_compile(_fn, mode=mode, options={"strict": True})
    x = torch.randn(512, 1024)  # big enough for the kernel's parallel loop to start a team
    expected = _fn(x)
    torch.testing.assert_close(f(x), expected)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(f, x, queue))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("the compiled graph hung in a forked child")
    assert child.exitcode == 0
    torch.testing.assert_close(torch.tensor(queue.get(timeout=10)), expected)
    torch._dynamo.reset()
