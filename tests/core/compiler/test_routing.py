"""Device routing: CPU -> C++, CUDA -> Triton, MPS and others -> eager ATen, announced once."""

import logging

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ember.core.compiler import routing
from ember.core.compiler.backend import ember_backend


def test_codegen_by_device():
    assert routing.codegen_for("cpu", {}) == "cpp"
    assert routing.codegen_for("cuda", {}) == "triton"
    assert routing.codegen_for("mps", {}) == "portable"
    assert routing.codegen_for("cpu", {"codegen": "triton"}) == "triton"
    with pytest.raises(ValueError, match="codegen"):
        routing.codegen_for("cpu", {"codegen": "llvm"})


def test_device_type_ignores_cpu_scalars_next_to_gpu_tensors():
    with FakeTensorMode(allow_non_fake_inputs=True):
        a = torch.empty(3, device="mps")
        b = torch.tensor(2.0)
        assert routing.device_type([a, b, 4]) == "mps"
        assert routing.device_type([b]) == "cpu"
    assert routing.device_type([]) == "cpu"


def test_mps_graph_runs_portable_with_one_notice(monkeypatch, caplog):
    monkeypatch.setattr(routing, "_announced", set())
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) * 2)
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(4, device="mps")
    with caplog.at_level(logging.WARNING, logger="ember.fallback"):
        first = ember_backend(gm, [x])
        second = ember_backend(gm, [x])
    assert first == gm.forward and second == gm.forward
    notices = [r for r in caplog.records if "portable path" in r.getMessage()]
    assert len(notices) == 1 and "'mps'" in notices[0].getMessage()
    # the returned callable really computes the graph (here on CPU tensors)
    torch.testing.assert_close(first(torch.tensor([-1.0, 3.0])), torch.tensor([0.0, 6.0]))
