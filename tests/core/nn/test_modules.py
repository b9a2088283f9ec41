"""MultiheadAttention and TransformerEncoderLayer against torch.nn's with copied weights."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.core.nn import MultiheadAttention, TransformerEncoderLayer

E, H = 16, 4


def _pair(**kwargs):
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(E, H, **kwargs).double()
    ours = MultiheadAttention(E, H, **kwargs).double()
    assert set(ours.state_dict()) == set(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _inputs(batch_first, n=3, length_q=7, length_k=9, kdim=E, vdim=E):
    g = torch.Generator().manual_seed(1)
    shape = (lambda s: (n, s)) if batch_first else (lambda s: (s, n))
    q = torch.randn(*shape(length_q), E, generator=g, dtype=torch.float64)
    k = torch.randn(*shape(length_k), kdim, generator=g, dtype=torch.float64)
    v = torch.randn(*shape(length_k), vdim, generator=g, dtype=torch.float64)
    return q, k, v


def _close(ours, theirs):
    torch.testing.assert_close(ours[0], theirs[0])
    if theirs[1] is None:
        assert ours[1] is None
    else:
        torch.testing.assert_close(ours[1], theirs[1])


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_cross_attention_with_masks(batch_first, need_weights, average):
    ours, theirs = _pair(batch_first=batch_first)
    q, k, v = _inputs(batch_first)
    kpm = torch.zeros(3, 9, dtype=torch.bool)
    kpm[0, -3:] = True
    attn = torch.rand(7, 9, generator=torch.Generator().manual_seed(2)) > 0.8
    attn[:, 0] = False
    kwargs = dict(key_padding_mask=kpm, attn_mask=attn, need_weights=need_weights,
                  average_attn_weights=average)
    _close(ours(q, k, v, **kwargs), theirs(q, k, v, **kwargs))


@pytest.mark.parametrize("ctor", [dict(kdim=10, vdim=6), dict(add_bias_kv=True),
                                  dict(add_zero_attn=True), dict(bias=False),
                                  dict(add_bias_kv=True, add_zero_attn=True)])
def test_constructor_options(ctor):
    ours, theirs = _pair(batch_first=True, **ctor)
    q, k, v = _inputs(True, kdim=ctor.get("kdim", E), vdim=ctor.get("vdim", E))
    float_mask = torch.randn(3 * H, 7, 9, generator=torch.Generator().manual_seed(3),
                             dtype=torch.float64)
    kpm = torch.randn(3, 9, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    for need_weights in (False, True):
        kwargs = dict(attn_mask=float_mask, key_padding_mask=kpm, need_weights=need_weights)
        _close(ours(q, k, v, **kwargs), theirs(q, k, v, **kwargs))


@pytest.mark.parametrize("training", [False, True])
def test_self_attention_packed_path_and_gradients(training):
    ours, theirs = _pair(batch_first=False)
    ours.train(training)
    theirs.train(training)
    x = _inputs(False)[0].requires_grad_()
    y = x.detach().clone().requires_grad_()
    causal = torch.ones(7, 7, dtype=torch.bool).triu(1)
    a = ours(x, x, x, need_weights=False, attn_mask=causal, is_causal=True)[0]
    b = theirs(y, y, y, need_weights=False, attn_mask=causal, is_causal=True)[0]
    torch.testing.assert_close(a, b)
    a.sum().backward()
    b.sum().backward()
    torch.testing.assert_close(x.grad, y.grad)
    for (name, p), (_, r) in zip(ours.named_parameters(), theirs.named_parameters()):
        torch.testing.assert_close(p.grad, r.grad, msg=name)


def test_unbatched_input():
    ours, theirs = _pair()
    q, k, v = (t[:, 0] for t in _inputs(False))
    kpm = torch.zeros(9, dtype=torch.bool)
    kpm[-2:] = True
    for need_weights in (False, True):
        kwargs = dict(key_padding_mask=kpm, need_weights=need_weights)
        _close(ours(q, k, v, **kwargs), theirs(q, k, v, **kwargs))


def test_dropout_in_training_only():
    ours, _ = _pair(dropout=0.5)
    x = _inputs(True)[0]
    ours.eval()
    first = ours(x, x, x, need_weights=False)[0]
    torch.testing.assert_close(first, ours(x, x, x, need_weights=False)[0])
    ours.train()
    torch.manual_seed(0)
    a = ours(x, x, x, need_weights=False)[0]
    torch.manual_seed(0)
    torch.testing.assert_close(a, ours(x, x, x, need_weights=False)[0])
    assert not torch.allclose(a, first)


def test_bad_arguments():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MultiheadAttention(10, 3)
    mha = MultiheadAttention(E, H)
    x = torch.randn(5, 2, E)
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        mha(x, x, x, attn_mask=torch.zeros(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        mha(x, x, x, key_padding_mask=torch.zeros(5, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_mask is required"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="embed_dim"):
        mha(torch.randn(5, 2, E + 1), x, x)
    with pytest.raises(ValueError, match="activation must be one of"):
        TransformerEncoderLayer(E, H, activation="swish")


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", F.silu])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer_matches_torch(norm_first, activation, batch_first):
    torch.manual_seed(0)
    kwargs = dict(dim_feedforward=32, dropout=0.0, activation=activation,
                  batch_first=batch_first, norm_first=norm_first)
    theirs = nn.TransformerEncoderLayer(E, H, **kwargs).double()
    ours = TransformerEncoderLayer(E, H, **kwargs).double()
    assert set(ours.state_dict()) == set(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    src = _inputs(batch_first)[0].requires_grad_()
    src2 = src.detach().clone().requires_grad_()
    kpm = torch.zeros(3, 7, dtype=torch.bool)
    kpm[1, -2:] = True
    causal = torch.ones(7, 7, dtype=torch.bool).triu(1)
    a = ours(src, src_mask=causal, src_key_padding_mask=kpm, is_causal=True)
    b = theirs(src2, src_mask=causal, src_key_padding_mask=kpm, is_causal=True)
    torch.testing.assert_close(a, b)
    a.sum().backward()
    b.sum().backward()
    torch.testing.assert_close(src.grad, src2.grad)
    ours.eval()
    theirs.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(src), theirs(src2))


def test_encoder_layer_compiles_without_graph_breaks():
    layer = TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.1, batch_first=True)
    x = torch.randn(2, 7, E)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[0, -2:] = True
    assert torch._dynamo.explain(layer)(x, src_key_padding_mask=kpm).graph_break_count == 0
    layer.eval()
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, src_key_padding_mask=kpm),
                               layer(x, src_key_padding_mask=kpm))
    torch._dynamo.reset()


@pytest.mark.slow  # ~30 s of Inductor compile
def test_encoder_layer_trains_under_inductor(tmp_path, monkeypatch):
    """Inductor trusts ember::sdpa's fake strides in the training graph (packed-QKV views)."""
    import torch._inductor.config as inductor_config

    # A fresh cache: Inductor's FX graph cache does not key on custom ops' fake functions.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0, batch_first=True)
    x = torch.randn(2, 8, E)
    torch._dynamo.reset()
    try:
        out = torch.compile(layer, backend="inductor")(x)
        out.square().sum().backward()
    finally:
        torch._dynamo.reset()
    ours = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    ref = layer(x)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    for a, p in zip(ours, layer.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-4)
