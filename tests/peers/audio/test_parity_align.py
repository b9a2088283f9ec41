"""ember.audio's RNN-T loss, CTC forced alignment and the legacy MVDR module against the real
torchaudio 2.9 (issue #22).

Same conventions as test_parity.py: runs in `.venv-peers-audio`, each test names the shared API
it covers in ``compares`` (read by test_coverage.py). torchaudio's RNN-T op takes float32 only;
our float32 path sums the softmax denominators in class order as its kernel does, so losses are
bit-equal; gradients, differences of two exponentials near 1, agree to 2.0e-6 (bound: 1e-5).
"""

from __future__ import annotations

import warnings

import pytest

torchaudio = pytest.importorskip("torchaudio")

import torch  # noqa: E402
import torchaudio.functional as TAF  # noqa: E402
import torchaudio.transforms as TAT  # noqa: E402

import ember.audio.functional as EF  # noqa: E402
import ember.audio.transforms as ET  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():
    # torchaudio 2.9 warns that rnnt_loss / forced_align are being dropped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def rnnt_inputs(b, t, u, d, seed, scale=3.0, blank=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, u + 1, d, generator=g) * scale
    low, high = (1, d) if blank == 0 else (0, d - 1)
    targets = torch.randint(low, high, (b, u), generator=g, dtype=torch.int32)
    logit_lengths = torch.randint(1, t + 1, (b,), generator=g, dtype=torch.int32)
    target_lengths = torch.randint(0, u + 1, (b,), generator=g, dtype=torch.int32)
    logit_lengths[0], target_lengths[-1] = t, u
    return logits, targets, logit_lengths, target_lengths


def loss_and_grad(fn, logits, *args, **kw):
    x = logits.clone().requires_grad_()
    loss = fn(x, *args, **kw)
    weights = torch.linspace(0.5, 2.0, loss.numel()).view(loss.shape)
    (loss * weights).sum().backward()
    return loss.detach(), x.grad


SHAPES = [(1, 1, 0, 3), (2, 4, 3, 5), (3, 17, 9, 12), (2, 40, 12, 30)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("clamp", [-1.0, 0.05])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("blank", [0, -1])
def test_rnnt_loss(shape, fused, clamp, reduction, blank):
    logits, *rest = rnnt_inputs(*shape, seed=sum(shape), blank=blank)
    kw = dict(blank=blank, clamp=clamp, reduction=reduction, fused_log_softmax=fused)
    ours = loss_and_grad(EF.rnnt_loss, logits, *rest, **kw)
    theirs = loss_and_grad(TAF.rnnt_loss, logits, *rest, **kw)
    torch.testing.assert_close(ours[0], theirs[0], atol=0, rtol=0)
    torch.testing.assert_close(ours[1], theirs[1], atol=1e-5, rtol=0)


test_rnnt_loss.compares = ("functional:rnnt_loss",)


@pytest.mark.parametrize("fused", [True, False])
def test_rnnt_loss_float16(fused):
    # both work in float32 and round once; unfused gradients differ by one float16 ulp (9.8e-4)
    logits, *rest = rnnt_inputs(2, 12, 5, 8, seed=1, scale=1.0)
    kw = dict(blank=0, reduction="none", fused_log_softmax=fused)
    ours = loss_and_grad(EF.rnnt_loss, logits.half(), *rest, **kw)
    theirs = loss_and_grad(TAF.rnnt_loss, logits.half(), *rest, **kw)
    assert ours[0].dtype == ours[1].dtype == theirs[1].dtype == torch.float16
    torch.testing.assert_close(ours[0], theirs[0], atol=0, rtol=0)
    torch.testing.assert_close(ours[1], theirs[1], atol=0 if fused else 1e-3, rtol=0)


test_rnnt_loss_float16.compares = ("functional:rnnt_loss",)


@pytest.mark.parametrize("kw", [dict(), dict(blank=0, clamp=0.1, reduction="sum"),
                                dict(blank=0, reduction="none", fused_log_softmax=False)],
                         ids=str)
def test_rnnt_loss_module(kw):
    logits, *rest = rnnt_inputs(3, 12, 5, 8, seed=3, blank=kw.get("blank", -1))
    if not kw.get("fused_log_softmax", True):
        logits = logits.log_softmax(-1)
    ours = loss_and_grad(ET.RNNTLoss(**kw), logits, *rest)
    theirs = loss_and_grad(TAT.RNNTLoss(**kw), logits, *rest)
    torch.testing.assert_close(ours[0], theirs[0], atol=0, rtol=0)
    torch.testing.assert_close(ours[1], theirs[1], atol=1e-5, rtol=0)
    assert ET.RNNTLoss(**kw).state_dict().keys() == TAT.RNNTLoss(**kw).state_dict().keys()


test_rnnt_loss_module.compares = ("transforms:RNNTLoss",)


def align_case(seed):
    """Random targets with repeats, 0 to 4 spare frames; some inputs rounded to make ties."""
    g = torch.Generator().manual_seed(seed)
    classes = int(torch.randint(2, 7, (1,), generator=g))
    length = int(torch.randint(1, 7, (1,), generator=g))
    targets = torch.randint(1, classes, (1, length), generator=g)
    repeats = int((targets[0, 1:] == targets[0, :-1]).sum())
    frames = length + repeats + int(torch.randint(0, 5, (1,), generator=g))
    dtype = torch.float64 if seed % 2 else torch.float32
    log_probs = torch.randn(1, frames, classes, generator=g, dtype=dtype).log_softmax(-1)
    if seed % 3 == 0:
        log_probs = log_probs.round()
    return log_probs, targets.to(torch.int32 if seed % 4 else torch.int64)


def test_forced_align():
    for seed in range(400):
        log_probs, targets = align_case(seed)
        ours = EF.forced_align(log_probs, targets)
        theirs = TAF.forced_align(log_probs, targets)
        for a, b in zip(ours, theirs):
            assert a.dtype == b.dtype and torch.equal(a, b), (seed, ours, theirs)


def test_forced_align_blank_lengths_and_long_input():
    g = torch.Generator().manual_seed(7)
    log_probs = torch.randn(1, 300, 30, generator=g).log_softmax(-1)
    targets = torch.randint(0, 29, (1, 80), generator=g, dtype=torch.int32)
    targets[0, 10:14] = 5                                   # a run of repeats
    lengths = torch.tensor([300]), torch.tensor([80])
    for blank in (29, 3):
        tg = torch.where(targets == blank, (blank + 1) % 30, targets)
        ours = EF.forced_align(log_probs, tg, *lengths, blank=blank)
        theirs = TAF.forced_align(log_probs, tg, *lengths, blank=blank)
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b)
        spans = EF.merge_tokens(ours[0][0], ours[1][0].exp(), blank=blank)
        assert [s.token for s in spans] == tg[0].tolist()


test_forced_align.compares = ("functional:forced_align",)


def multichannel(seed, dtype, multi_mask):
    g = torch.Generator().manual_seed(seed)
    spec = torch.randn(2, 4, 33, 20, generator=g, dtype=dtype)
    shape = (2, 4, 33, 20) if multi_mask else (2, 33, 20)
    return spec, torch.rand(shape, generator=g), torch.rand(shape, generator=g)


@pytest.mark.parametrize("solution", ["ref_channel", "stv_evd", "stv_power"])
@pytest.mark.parametrize("multi_mask", [False, True])
@pytest.mark.parametrize("online", [False, True])
@pytest.mark.parametrize("dtype", [torch.cfloat, torch.cdouble])
def test_mvdr(solution, multi_mask, online, dtype):
    kw = dict(ref_channel=1, solution=solution, multi_mask=multi_mask, online=online)
    ours, theirs = ET.MVDR(**kw), TAT.MVDR(**kw)
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())
    for call in range(3):                   # online: the running PSDs are updated per call
        spec, mask_s, mask_n = multichannel(call, dtype, multi_mask)
        mask_n = mask_n if call else None
        a, b = ours(spec, mask_s, mask_n), theirs(spec, mask_s, mask_n)
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        # computed in complex128 by both; measured 6e-15 relative (eigh / solve rounding)
        torch.testing.assert_close(a, b, atol=1e-12 * float(b.abs().max()), rtol=0)
    sa, sb = ours.state_dict(), theirs.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], atol=1e-12, rtol=1e-12)


test_mvdr.compares = ("transforms:MVDR",)
