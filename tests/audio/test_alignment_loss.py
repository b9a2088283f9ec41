"""rnnt_loss, forced_align and the MVDR module without torchaudio: brute force over all
alignments on tiny cases, gradcheck, and the ValueErrors that name the argument (#22)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import ember.audio.functional as F
import ember.audio.transforms as T


def brute_rnnt(logits, targets, blank):
    """-log of the summed probability of every path through one (T, U + 1) lattice."""
    lp = logits.log_softmax(-1).tolist()
    steps, length = len(lp), len(targets)
    total = []
    # a path: T - 1 blanks and U emissions in any order, then the final blank at (T-1, U)
    for emits in itertools.combinations(range(steps - 1 + length), length):
        t = u = 0
        score = 0.0
        for k in range(steps - 1 + length):
            if k in emits:
                score += lp[t][u][targets[u]]
                u += 1
            else:
                score += lp[t][u][blank]
                t += 1
        total.append(score + lp[t][u][blank])
    return -torch.logsumexp(torch.tensor(total, dtype=logits.dtype), 0)


def rnnt_case(seed, b=3, t=4, u=3, d=5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, u + 1, d, generator=g, dtype=torch.float64)
    targets = torch.randint(1, d, (b, u), generator=g, dtype=torch.int32)
    logit_lengths = torch.tensor([t, 2, 1][:b], dtype=torch.int32)
    target_lengths = torch.tensor([1, u, 0][:b], dtype=torch.int32)
    return logits, targets, logit_lengths, target_lengths


def test_rnnt_loss_equals_brute_force_per_sequence():
    logits, targets, ll, tl = rnnt_case(0)
    costs = F.rnnt_loss(logits, targets, ll, tl, blank=0, reduction="none")
    for i in range(len(costs)):
        t, u = int(ll[i]), int(tl[i])
        ref = brute_rnnt(logits[i, :t, : u + 1], targets[i, :u].tolist(), 0)
        torch.testing.assert_close(costs[i], ref, atol=1e-12, rtol=1e-12)
    assert torch.allclose(F.rnnt_loss(logits, targets, ll, tl, blank=0), costs.mean())
    assert torch.allclose(F.rnnt_loss(logits, targets, ll, tl, blank=0, reduction="sum"),
                          costs.sum())
    # blank=-1 is the last class; unfused input of log-probabilities gives the same costs
    last = F.rnnt_loss(logits.flip(-1), 4 - targets, ll, tl, reduction="none")
    torch.testing.assert_close(last, costs)
    unfused = F.rnnt_loss(logits.log_softmax(-1), targets, ll, tl, blank=0, reduction="none",
                          fused_log_softmax=False)
    torch.testing.assert_close(unfused, costs)


@pytest.mark.parametrize("fused", [True, False])
def test_rnnt_loss_gradcheck(fused):
    logits, targets, ll, tl = rnnt_case(1, b=2, t=3, u=2, d=4)
    logits.requires_grad_()
    ll, tl = ll[:2], tl[:2]

    def fn(x):
        return F.rnnt_loss(x, targets, ll, tl, blank=0, reduction="sum", fused_log_softmax=fused)

    assert torch.autograd.gradcheck(fn, (logits,))
    # float32 runs the same lattice; padded cells get no gradient
    x = logits.detach().float().requires_grad_()
    T.RNNTLoss(blank=0, fused_log_softmax=fused)(x, targets, ll, tl).backward()
    assert x.grad[1, 2:].abs().sum() == 0 and x.grad[0, :, 2:].abs().sum() == 0


def test_rnnt_loss_clamp_clips_the_gradient():
    logits, targets, ll, tl = rnnt_case(2)
    grads = []
    for clamp in (-1, 0.05):
        x = logits.clone().requires_grad_()
        F.rnnt_loss(x, targets, ll, tl, blank=0, clamp=clamp, reduction="sum").backward()
        grads.append(x.grad)
    assert grads[0].abs().max() > 0.05
    torch.testing.assert_close(grads[1], grads[0].clamp(-0.05, 0.05))


@pytest.mark.parametrize("change,match", [
    (dict(reduction="avg"), "reduction"),
    (dict(logits=torch.zeros(3, 4, 5)), "logits"),
    (dict(blank=7), "blank"),
    (dict(logit_lengths=torch.tensor([4, 2, 9], dtype=torch.int32)), "logit_lengths"),
    (dict(target_lengths=torch.tensor([1, 1, 0], dtype=torch.int32)), "target_lengths"),
    (dict(targets=torch.zeros(3, 3)), "targets"),
])
def test_rnnt_loss_rejects_bad_input(change, match):
    logits, targets, ll, tl = rnnt_case(3)
    kw = dict(logits=logits, targets=targets, logit_lengths=ll, target_lengths=tl, blank=0)
    kw.update(change)
    with pytest.raises(ValueError, match=match):
        F.rnnt_loss(**kw)


def collapse(path, blank):
    return [k for k, _ in itertools.groupby(path) if k != blank]


@pytest.mark.parametrize("targets,frames", [([1, 2], 5), ([1, 1], 4), ([2, 2, 1], 6), ([1], 1),
                                            ([2, 1, 2], 3)])
def test_forced_align_is_the_best_valid_path(targets, frames):
    g = torch.Generator().manual_seed(frames)
    log_probs = torch.randn(1, frames, 3, generator=g, dtype=torch.float64).log_softmax(-1)
    paths, scores = F.forced_align(log_probs, torch.tensor([targets]), blank=0)
    path = paths[0].tolist()
    assert collapse(path, 0) == targets
    torch.testing.assert_close(scores[0], log_probs[0, torch.arange(frames), paths[0]])
    best = max(sum(log_probs[0, t, k].item() for t, k in enumerate(p))
               for p in itertools.product(range(3), repeat=frames) if collapse(p, 0) == targets)
    assert math.isclose(scores.sum().item(), best, rel_tol=1e-12)


@pytest.mark.parametrize("args,kw,match", [
    ((torch.zeros(1, 5, 3), torch.tensor([[1, 0]])), {}, "blank"),
    ((torch.zeros(2, 5, 3), torch.tensor([[1], [2]])), {}, "batch"),
    ((torch.zeros(1, 2, 3), torch.tensor([[1, 1]])), {}, "too long"),
    ((torch.zeros(1, 5, 3), torch.tensor([[1, 3]])), {}, "targets"),
    ((torch.zeros(1, 5, 3), torch.tensor([[1.0]])), {}, "targets"),
    ((torch.zeros(1, 5, 3), torch.tensor([[1]]), torch.tensor([4])), {}, "input_lengths"),
    ((torch.zeros(5, 3), torch.tensor([[1]])), {}, "log_probs"),
])
def test_forced_align_rejects_bad_input(args, kw, match):
    with pytest.raises(ValueError, match=match):
        F.forced_align(*args, **kw)


def test_mvdr_module():
    g = torch.Generator().manual_seed(4)
    spec = torch.randn(3, 9, 12, generator=g, dtype=torch.cfloat)
    mask = torch.rand(9, 12, generator=g)
    for solution in ("ref_channel", "stv_evd", "stv_power"):
        out = T.MVDR(solution=solution)(spec, mask, 1 - mask)
        assert out.shape == (9, 12) and out.dtype == torch.cfloat
        # the first online call uses this call's PSDs alone
        online = T.MVDR(solution=solution, online=True)
        torch.testing.assert_close(online(spec, mask, 1 - mask), out)
        assert online.psd_s.shape == (9, 3, 3)
    with pytest.raises(ValueError, match="solution"):
        T.MVDR(solution="evd")
    with pytest.raises(ValueError, match="specgram"):
        T.MVDR()(spec.real, mask, mask)
    with pytest.warns(UserWarning, match="mask_n"):
        T.MVDR()(spec, mask)


@pytest.mark.slow
def test_rnnt_loss_and_mvdr_export():
    logits, targets, ll, tl = rnnt_case(5, b=2, t=3, u=2, d=4)
    args = (logits.float(), targets, ll[:2], tl[:2])
    loss = T.RNNTLoss(blank=0, reduction="none")
    torch.testing.assert_close(torch.export.export(loss, args).module()(*args), loss(*args))
    g = torch.Generator().manual_seed(6)
    spec = torch.randn(3, 5, 7, generator=g, dtype=torch.cfloat)
    mask = torch.rand(5, 7, generator=g)
    mvdr = T.MVDR(solution="stv_power")
    exported = torch.export.export(mvdr, (spec, mask, 1 - mask)).module()
    torch.testing.assert_close(exported(spec, mask, 1 - mask), mvdr(spec, mask, 1 - mask))
