"""ember.core.memory.empty_huge: a plain empty tensor (huge pages are only advice), and the
compiled wrappers allocating big static buffers through it."""

from __future__ import annotations

import logging

import torch

from ember.core import compile as ember_compile
from ember.core import memory
from ember.core.logs import set_logs


def test_empty_huge_is_an_empty_strided_tensor():
    for size, stride in [((3, 4), (4, 1)), ((2, 1 << 20), (1, 2)), ((1 << 22,), (1,)),
                         ((0, 5), (5, 1))]:
        t = memory.empty_huge(size, stride, torch.float32)
        assert t.shape == size and t.stride() == stride and t.dtype == torch.float32
        t.fill_(1.5)  # every byte is writable
        assert t.numel() == 0 or float(t.sum()) == 1.5 * t.numel()


def test_compiled_big_intermediate_uses_huge_pages():
    msgs = []

    class H(logging.Handler):
        def emit(self, record):
            msgs.append(record.getMessage())
    h = H()
    set_logs(output_code=True)
    logging.getLogger("ember.output_code").addHandler(h)
    try:
        fn = lambda x, w: (x.exp() @ w).relu() + 1
        x, w = torch.randn(2048, 1024), torch.randn(1024, 64)
        torch._dynamo.reset()
        got = ember_compile(fn, options={"strict": True})(x, w)
        torch.testing.assert_close(got, fn(x, w), atol=1e-4, rtol=1e-4)
    finally:
        logging.getLogger("ember.output_code").removeHandler(h)
        set_logs(output_code=None)
        torch._dynamo.reset()
    wrapper = "\n".join(msgs).split("wrapper:")[1]
    assert "_empty_huge((2048, 1024, )" in wrapper, wrapper  # 8 MiB: exp(x) for the matmul
