"""Compiler behaviour: API, recompiles, disk cache, fallbacks, fullgraph, explain, logging."""

import logging

import pytest
import torch
import torch.nn as nn

import ember.core
from ember.core import set_logs
from ember.core.compiler import pipeline
from ember.core.compiler.lowering import graph as lowering_graph
from ember.core.compiler.options import OPTIONS
from ember.core.compiler.runtime import build, cache


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def captured():
    """``captured(component, level)`` -> list of messages logged on ``ember.<component>``."""
    handlers = []

    def attach(component, level=True):
        set_logs(**{component: level})
        h = _Capture()
        logging.getLogger(f"ember.{component}").addHandler(h)
        handlers.append((component, h))
        return h.messages
    yield attach
    for component, h in handlers:
        logging.getLogger(f"ember.{component}").removeHandler(h)
        set_logs(**{component: None})  # back to the default level


def test_compile_and_explain_are_exported():
    assert ember.core.compile is ember.core.compiler.compile
    assert callable(ember.core.explain)


def test_torch_compile_finds_the_ember_backend():
    torch._dynamo.reset()
    f = torch.compile(lambda x: (x * 3).cos(), backend="ember")
    x = torch.randn(10)
    torch.testing.assert_close(f(x), (x * 3).cos())


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="mode"):
        ember.core.compile(lambda x: x, mode="fastest")
    with pytest.raises(TypeError, match="options"):
        ember.core.compile(lambda x: x, options=3)
    with pytest.raises(TypeError, match="model"):
        ember.core.compile(42)
    listed = ", ".join(sorted(OPTIONS))  # the message lists every valid key
    with pytest.raises(ValueError, match=f"unknown option 'strcit'.*{listed}$"):
        ember.core.compile(lambda x: x, options={"strcit": True})
    with pytest.raises(ValueError, match=r"options\['codegen'\] must be one of"):
        ember.core.compile(lambda x: x, options={"codegen": "llvm"})
    with pytest.raises(TypeError, match="dynamic must be True, False or None"):
        ember.core.compile(lambda x: x, dynamic="yes")


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "fastest"}, "mode must be one of"),
    ({"options": {"strcit": True}}, "unknown option 'strcit'"),
    ({"options": {"strict": "yes"}}, r"options\['strict'\] must be one of"),
])
def test_bad_arguments_raise_through_torch_compile(kwargs, message):
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 2, backend="ember", **kwargs)
    with pytest.raises(Exception, match=message) as info:  # torch wraps it: BackendCompilerFailed
        f(torch.randn(3))
    assert isinstance(info.value.__cause__ or info.value, ValueError) or \
        "ValueError" in str(info.value)


def test_compiled_module_keeps_module_behaviour(ecompile):
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    compiled = ecompile(model)
    assert set(compiled.state_dict()) == {f"_orig_mod.{k}" for k in model.state_dict()} or \
        set(compiled.state_dict()) == set(model.state_dict())
    assert [p for p in compiled.parameters()] == [p for p in model.parameters()]
    compiled.eval()
    assert not model.training
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    compiled.train()
    assert model.training


def test_dynamic_true_does_not_recompile(ecompile):
    f = ecompile(lambda x: torch.softmax(x * 2, -1) + x.mean(0), dynamic=True)
    before = pipeline.stats["graphs_compiled"]
    for batch, seq in [(3, 8), (5, 8), (9, 17), (2, 31)]:
        x = torch.randn(batch, seq)
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1) + x.mean(0))
    assert pipeline.stats["graphs_compiled"] - before == 1


def test_dynamic_none_recompiles_once_then_generalises(ecompile):
    f = ecompile(lambda x: x.relu() * 2)
    before = pipeline.stats["graphs_compiled"]
    for n in (4, 6, 9, 13):
        x = torch.randn(n, 3)
        torch.testing.assert_close(f(x), x.relu() * 2)
    assert pipeline.stats["graphs_compiled"] - before == 2


def test_disk_cache_hit_builds_nothing_and_corrupt_entry_is_rebuilt(ecompile, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    fn = lambda x: (x - 0.123).tanh() * 7
    x = torch.randn(33)
    builds = build.builds
    ecompile(fn)(x)
    assert build.builds == builds + 1
    build._loaded.clear()
    ecompile(fn)(x)
    assert build.builds == builds + 1  # served from disk
    (entry,) = list((cache.cache_dir() / "cpp").rglob("*.so"))
    entry.unlink()  # a new file: never scribble over a library this process has mapped
    entry.write_bytes(b"not a shared library")
    build._loaded.clear()
    torch.testing.assert_close(ecompile(fn)(x), fn(x))
    assert build.builds == builds + 2


def test_unsupported_op_falls_back_once_logged(ecompile, captured):
    messages = captured("fallback")
    lowering_graph._logged_fallbacks.discard("aten.erfinv.default")
    f = lambda x: torch.erfinv(x * 0.5) + 1
    x = torch.rand(20)
    torch.testing.assert_close(ecompile(f)(x), f(x))
    torch.testing.assert_close(ecompile(f)(x + 0.1), f(x + 0.1))
    assert sum("aten.erfinv" in m for m in messages) == 1


def test_build_failure_falls_back_to_eager(monkeypatch, captured):
    messages = captured("fallback")

    def broken(*_args):
        raise build.BuildError("g++ exploded")
    monkeypatch.setattr(build, "load", broken)
    torch._dynamo.reset()
    before = pipeline.stats["graphs_fallback"]
    f = ember.core.compile(lambda x: x.exp() + 1)
    x = torch.randn(5)
    torch.testing.assert_close(f(x), x.exp() + 1)
    assert pipeline.stats["graphs_fallback"] == before + 1
    assert any("g++ exploded" in m for m in messages)


def _with_break(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return torch.erfinv(y * 0.5)


def test_fullgraph_raises_with_the_reason():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="graph_break"):
        ember.core.compile(_with_break, fullgraph=True)(torch.randn(4))


def test_graph_breaks_and_recompiles_are_logged(captured):
    breaks = captured("graph_breaks")
    recompiles = captured("recompiles")
    torch._dynamo.reset()
    f = ember.core.compile(_with_break, dynamic=False)
    f(torch.randn(4))
    f(torch.randn(7))
    assert any("graph_break" in m or "Graph Break" in m for m in breaks)
    assert any("ecompil" in m for m in recompiles)


def test_explain_lists_graphs_breaks_and_fallbacks():
    out = ember.core.explain(_with_break, torch.randn(6))
    assert out.graph_count == 2
    assert out.graph_break_count == 1
    assert any("erfinv" in op for op in out.fallback_ops)
    assert "graph breaks: 1" in str(out)


def test_output_code_and_refused_fusions_are_logged(ecompile, captured):
    code = captured("output_code")
    refusals = captured("schedule", logging.DEBUG)
    f = lambda x: x + x.sum(0)
    x = torch.randn(5, 7)
    torch.testing.assert_close(ecompile(f)(x), f(x))
    text = "\n".join(code)
    assert 'extern "C" void kernel' in text and "#pragma omp" in text and "def call(args)" in text
    assert any("not fusing" in m for m in refusals)


def test_prim_table_in_the_docs_matches_the_code():
    from pathlib import Path

    from ember.core.compiler.codegen import cpp

    readme = (Path(cpp.__file__).parents[1] / "README.md").read_text()
    assert cpp.prim_table_markdown() in readme


def test_dynamic_training_compiles_forward_and_backward_once(ecompile):
    import copy

    import torch.nn.functional as F

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 10))
    ref = copy.deepcopy(model)
    step = ecompile(lambda x, y: F.cross_entropy(model(x), y), dynamic=True)
    before = pipeline.stats["graphs_compiled"]
    for batch in (4, 7, 13):
        x, y = torch.randn(batch, 16), torch.randint(0, 10, (batch,))
        model.zero_grad()
        ref.zero_grad()
        step(x, y).backward()
        F.cross_entropy(ref(x), y).backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)
    assert pipeline.stats["graphs_compiled"] - before == 2  # one forward, one backward


def test_in_place_samplers_draw_eagers_numbers_as_atens_own_calls():
    # uniform_ (detection's random resize), normal_, ... functionalize into ops that sample
    # from torch's generator: they run as ATen calls in graph order, like rand, not as
    # fallbacks, and draw eager's numbers from the same seed
    def f(x):
        draws = [torch.empty(3).uniform_(0.0, 5.0), torch.empty(3).normal_(1.0, 2.0),
                 torch.empty(3).exponential_(2.0), torch.empty(3).cauchy_(),
                 torch.empty(3).log_normal_(), torch.empty(3).geometric_(0.3)]
        return [x * d for d in draws]

    torch.manual_seed(0)
    want = f(torch.ones(3))
    torch.manual_seed(0)
    out = ember.core.explain(f, torch.ones(3))
    assert out.graph_count == 1 and out.fallback_ops == []
    torch.manual_seed(0)
    torch._dynamo.reset()
    for got, w in zip(ember.core.compile(f)(torch.ones(3)), want):
        torch.testing.assert_close(got, w)
