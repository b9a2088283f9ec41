"""decompose: the table's own entries compute what eager's kernels compute."""

import pytest
import torch
from torch import nn

from ember.core.aot.export import export
from ember.core.compiler.decompose import decomposition_table

aten = torch.ops.aten


@pytest.mark.parametrize("p, train", [(0.5, False), (0.0, True), (1.0, False)])
def test_dropout_that_drops_nothing_is_its_input_as_in_eager(p, train):
    x = torch.randn(4, 5)
    assert torch.dropout(x, p, train) is x  # eager returns the input itself
    assert decomposition_table()[aten.dropout.default](x, p, train) is x


def test_training_dropout_still_drops_and_scales():
    torch.manual_seed(0)
    x = torch.ones(10_000)
    y = decomposition_table()[aten.dropout.default](x, 0.25, True)
    kept = y != 0
    assert 0.7 < kept.float().mean().item() < 0.8
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.75))


def test_exported_eval_dropout_leaves_no_op_and_training_dropout_draws():
    def ops(model):
        gm = export(model, (torch.randn(3, 8),)).gm
        return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}

    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3), nn.ReLU())
    evaluated = ops(model.eval())
    assert not any("dropout" in op or "clone" in op or "rand" in op for op in evaluated), evaluated
    trained = ops(model.train())
    assert any("rand" in op or "bernoulli" in op for op in trained), trained
