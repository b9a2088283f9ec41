"""The attention rewrite: unfused softmax(q k^T * s [+ mask]) [dropout] @ v -> ember sdpa."""

import math

import pytest
import torch
import torch.nn.functional as F

from ember.core.compiler import patterns
from ember.core.nn.functional import scaled_dot_product_attention


def _rewritten(fn):
    """``fn`` under torch.compile with a backend that only runs the rewrite (no codegen)."""
    graphs = []

    def backend(gm, example_inputs):
        patterns.rewrite_attention(gm)
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True), graphs


def _fused(gm) -> list:
    """The fused attention calls: Ember's op, or torch's on CPU without dropout."""
    return [n for n in gm.graph.nodes
            if n.target in (scaled_dot_product_attention, F.scaled_dot_product_attention)]


def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]


def _check_forward_and_grads(fn, tensors, extra=()):
    compiled, graphs = _rewritten(fn)
    out = compiled(*tensors, *extra)
    ours = torch.autograd.grad(out, tensors, torch.ones_like(out))
    ref = fn(*tensors, *extra)
    theirs = torch.autograd.grad(ref, tensors, torch.ones_like(ref))
    torch.testing.assert_close(out, ref)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)
    return graphs


QKV4 = ((2, 3, 7, 8), (2, 3, 9, 8), (2, 3, 9, 5))

SPELLINGS = {
    "matmul_op_mul": lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1) @ v,
    "torch_matmul_div_sqrt": lambda q, k, v: F.softmax(
        torch.matmul(q, k.mT) / math.sqrt(q.shape[-1]), dim=-1).matmul(v),
    "scale_on_the_left_and_method_softmax": lambda q, k, v: (
        0.5 * (q @ k.transpose(3, 2))).softmax(-1) @ v,
    "permute_and_two_factors": lambda q, k, v: torch.matmul(
        torch.softmax((q @ k.permute(0, 1, 3, 2)) * 2.0 / 8.0, -1), v),
    "prescaled_q_no_factor": lambda q, k, v: torch.softmax((q * 0.2) @ k.mT, -1) @ v,
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_rewrite_fires_and_matches_eager(spelling):
    graphs = _check_forward_and_grads(SPELLINGS[spelling], _inputs(*QKV4))
    assert len(graphs) == 1 and len(_fused(graphs[0])) == 1
    targets = {getattr(n.target, "__name__", n.target) for n in graphs[0].graph.nodes}
    assert "softmax" not in targets


def test_bmm_with_boolean_mask_via_masked_fill():
    q, k, v = _inputs((6, 7, 8), (6, 9, 8), (6, 9, 4))
    keep = torch.rand(7, 9, generator=torch.Generator().manual_seed(3)) > 0.3
    keep[:, 0] = True

    def attention(q, k, v, keep):
        scores = torch.bmm(q, k.transpose(1, 2)) / 4
        return torch.bmm(scores.masked_fill(~keep, float("-inf")).softmax(-1), v)

    graphs = _check_forward_and_grads(attention, [q, k, v], (keep,))
    assert len(_fused(graphs[0])) == 1
    # the mask node handed to sdpa is `keep` itself: ~keep was folded away
    (node,) = _fused(graphs[0])
    assert node.kwargs["attn_mask"].op == "placeholder"


def test_masked_fill_with_a_padding_mask_and_2d_inputs():
    q, k, v = _inputs((7, 8), (9, 8), (9, 3))
    pad = torch.zeros(9, dtype=torch.bool)
    pad[6:] = True

    def attention(q, k, v, pad):
        scores = (q @ k.T * 0.25).masked_fill(pad, -math.inf)
        return F.softmax(scores, dim=1) @ v

    graphs = _check_forward_and_grads(attention, [q, k, v], (pad,))
    assert len(_fused(graphs[0])) == 1


def test_additive_float_mask_and_eval_dropout():
    q, k, v = _inputs(*QKV4)
    mask = torch.randn(7, 9, dtype=torch.float64)

    def attention(q, k, v, mask):
        p = F.softmax(q @ k.transpose(-2, -1) * 0.35 + mask, dim=-1)
        return F.dropout(p, 0.2, training=False) @ v

    graphs = _check_forward_and_grads(attention, [q, k, v], (mask,))
    (node,) = _fused(graphs[0])
    assert node.kwargs["dropout_p"] == 0.0 and node.kwargs["scale"] == pytest.approx(0.35)


def test_training_dropout_becomes_the_ops_dropout():
    q, k, v = (t.detach().float() for t in _inputs(*QKV4))

    def attention(q, k, v):
        return F.dropout(torch.softmax(q @ k.mT * 0.3, -1), 0.25, training=True) @ v

    compiled, graphs = _rewritten(attention)
    torch.manual_seed(11)
    out = compiled(q, k, v)
    (node,) = _fused(graphs[0])
    assert node.kwargs["dropout_p"] == 0.25
    torch.manual_seed(11)
    ref = scaled_dot_product_attention(q, k, v, dropout_p=0.25, scale=0.3)
    torch.testing.assert_close(out, ref)


NOT_FIRING = {
    # the scores are returned too: they must exist, so nothing is fused
    "scores_reused": lambda q, k, v: (lambda s: (torch.softmax(s * 0.3, -1) @ v, s))(q @ k.mT),
    "probabilities_reused": lambda q, k, v: (lambda p: (p @ v, p.sum()))(
        torch.softmax(q @ k.mT, -1)),
    "softmax_not_over_keys": lambda q, k, v: torch.softmax(q @ k.mT, dim=-2) @ v,
    "mask_added_before_scaling": lambda q, k, v: torch.softmax(
        (q @ k.mT + 1.0 * torch.ones(7, 9, dtype=q.dtype)) * 0.5, -1) @ v,
    "finite_fill_value": lambda q, k, v: torch.softmax(
        (q @ k.mT).masked_fill(torch.eye(7, 9, dtype=torch.bool), -1e9), -1) @ v,
    "not_a_transpose": lambda q, k, v: torch.softmax(q @ k.mT.contiguous(), -1) @ v,
}


@pytest.mark.parametrize("case", sorted(NOT_FIRING))
def test_rewrite_does_not_fire(case):
    q, k, v = (t.detach() for t in _inputs(*QKV4))
    compiled, graphs = _rewritten(NOT_FIRING[case])
    out = compiled(q, k, v)
    ref = NOT_FIRING[case](q, k, v)
    torch.testing.assert_close(out, ref)
    assert all(not _fused(g) for g in graphs)


def test_through_the_ember_compiler_training(ecompile):
    q, k, v = _inputs((1, 2, 16, 8), (1, 2, 16, 8), (1, 2, 16, 8))
    mask = torch.randn(16, 16, dtype=torch.float64)

    def block(q, k, v, mask):
        return (torch.softmax(q @ k.mT / math.sqrt(8) + mask, -1) @ v).relu().sum(-1)

    before = patterns.stats["attention"]
    out = ecompile(block)(q, k, v, mask)
    assert patterns.stats["attention"] == before + 1
    ours = torch.autograd.grad(out.sum(), (q, k, v))
    ref = block(q, k, v, mask)
    theirs = torch.autograd.grad(ref.sum(), (q, k, v))
    torch.testing.assert_close(out, ref)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_option_disables_the_rewrite(ecompile):
    q, k, v = (t.detach() for t in _inputs(*QKV4))
    fn = SPELLINGS["matmul_op_mul"]
    before = patterns.stats["attention"]
    out = ecompile(fn, options={"patterns": False})(q, k, v)
    assert patterns.stats["attention"] == before
    torch.testing.assert_close(out, fn(q, k, v))


def test_rewrite_is_logged(caplog):
    q, k, v = (t.detach() for t in _inputs(*QKV4))
    compiled, _ = _rewritten(SPELLINGS["matmul_op_mul"])
    with caplog.at_level("INFO", logger=patterns.log.name):
        compiled(q, k, v)
    assert any("attention pattern -> ATen's CPU sdpa" in r.getMessage()
               for r in caplog.records)


class _HandWrittenAttention(torch.nn.Module):
    """The textbook block: projections, split heads, softmax(q k^T / sqrt(d)) v, merge heads."""

    def __init__(self, dim=16, heads=2, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, x, pad):
        b, length, dim = x.shape
        q, k, v = (t.view(b, length, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dim // self.heads)
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
        attn = self.drop(scores.softmax(dim=-1))
        return self.out((attn @ v).transpose(1, 2).reshape(b, length, dim))


def test_hand_written_block_compiles_to_one_sdpa(ecompile):
    torch.manual_seed(0)
    block = _HandWrittenAttention().double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64, requires_grad=True)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    before = patterns.stats["attention"]
    out = ecompile(block)(x, pad)
    assert patterns.stats["attention"] == before + 1
    (ours,) = torch.autograd.grad(out.sum(), x)
    ref = block(x, pad)
    (theirs,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(ours, theirs)
