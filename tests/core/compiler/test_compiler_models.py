"""Model-level suite: small networks forward (and backward) against eager."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ember.core.compiler.pipeline import stats


def _grads_match(model, ref):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4,
                                   msg=lambda m, name=name: f"grad of {name}: {m}")


def test_mlp_inference(ecompile, matches):
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 5)).eval()
    x = torch.randn(16, 20)
    with torch.no_grad():
        matches(ecompile(model)(x), model(x), atol=1e-5, rtol=1e-4)


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8),
                         nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def test_cnn_with_batchnorm_eval_and_train(ecompile, matches):
    torch.manual_seed(0)
    model, ref = _cnn(), None
    ref = copy.deepcopy(model)
    x = torch.randn(4, 3, 16, 16)
    compiled = ecompile(model)
    model.eval(), ref.eval()
    with torch.no_grad():
        matches(compiled(x), ref(x), atol=1e-5, rtol=1e-4)
    model.train(), ref.train()
    out, expect = compiled(x), ref(x)
    matches(out, expect, atol=1e-4, rtol=1e-4)
    # running statistics were updated like eager's
    for (name, b), r in zip(model.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b, r, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    out.sum().backward()
    expect.sum().backward()
    _grads_match(model, ref)


def test_uint8_image_normalisation(ecompile, matches):
    img = torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    f = lambda img, mean, std: (img.to(torch.float32) / 255 - mean) / std
    matches(ecompile(f)(img, mean, std), f(img, mean, std))


def test_layer_norm_gelu_is_one_kernel(ecompile, matches):
    x, w, b = torch.randn(64, 256), torch.randn(256), torch.randn(256)
    f = lambda x, w, b: F.gelu(F.layer_norm(x, (256,), w, b))
    before = stats["kernels"]
    matches(ecompile(f)(x, w, b), f(x, w, b), atol=1e-5, rtol=1e-4)
    assert stats["kernels"] - before == 1


def test_softmax_is_one_kernel(ecompile, matches):
    x = torch.randn(32, 100) * 5
    before = stats["kernels"]
    matches(ecompile(lambda x: torch.softmax(x, -1))(x), torch.softmax(x, -1))
    assert stats["kernels"] - before == 1


def test_transformer_block_inference(ecompile, matches):
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        matches(ecompile(block)(x), block(x), atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_transformer_block_training(ecompile, matches):
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    ref = copy.deepcopy(block)
    x, t = torch.randn(2, 6, 32), torch.randn(2, 6, 32)
    loss = F.mse_loss(ecompile(block)(x), t)
    expect = F.mse_loss(ref(x), t)
    matches(loss, expect, atol=1e-5, rtol=1e-4)
    loss.backward()
    expect.backward()
    _grads_match(block, ref)


def test_training_step_with_cross_entropy(ecompile, matches):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Dropout(0.0),
                          nn.Linear(32, 10))
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    compiled = ecompile(lambda x, y: F.cross_entropy(model(x), y))
    for _ in range(2):
        x, y = torch.randn(8, 16), torch.randint(0, 10, (8,))
        loss, expect = compiled(x, y), F.cross_entropy(ref(x), y)
        matches(loss, expect, atol=1e-5, rtol=1e-4)
        opt.zero_grad()
        ref_opt.zero_grad()
        loss.backward()
        expect.backward()
        _grads_match(model, ref)
        opt.step()
        ref_opt.step()
