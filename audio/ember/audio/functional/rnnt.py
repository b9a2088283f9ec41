"""RNN Transducer loss with torchaudio's name and semantics, computed over the anti-diagonals of
the T x U lattice (every cell of one diagonal at once, for the whole batch)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rnnt_loss"]


def _check(logits: Tensor, targets: Tensor, logit_lengths: Tensor, target_lengths: Tensor,
           blank: int, reduction: str) -> None:
    """Raise ValueError naming the argument whose shape, dtype or value is wrong."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f'reduction should be one of "none", "mean", or "sum", got {reduction!r}')
    if logits.ndim != 4 or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point (batch, time, target + 1, class) tensor,"
                         f" got {logits.dtype} {tuple(logits.shape)}")
    batch, _, _, classes = logits.shape
    if targets.ndim != 2 or targets.is_floating_point() or targets.is_complex():
        raise ValueError(f"targets must be an integer (batch, target) tensor, got {targets.dtype} "
                         f"{tuple(targets.shape)}")
    for name, lengths in (("logit_lengths", logit_lengths), ("target_lengths", target_lengths)):
        if lengths.ndim != 1 or lengths.is_floating_point() or len(lengths) != batch:
            raise ValueError(f"{name} must be an integer (batch,) tensor with batch={batch}, got "
                             f"{lengths.dtype} {tuple(lengths.shape)}")
    if len(targets) != batch:
        raise ValueError(f"targets has batch {len(targets)}, logits has {batch}")
    if not 0 <= blank < classes:
        raise ValueError(f"blank must index one of the {classes} classes, got {blank}")
    if batch == 0 or torch.compiler.is_compiling():
        return      # the length checks read values: skipped while export/compile traces
    if int(logit_lengths.max()) != logits.shape[1] or int(logit_lengths.min()) < 1:
        raise ValueError(f"logit_lengths must lie in [1, {logits.shape[1]}] with the longest equal "
                         f"to logits.shape[1]={logits.shape[1]}")
    if int(target_lengths.max()) + 1 != logits.shape[2] or int(target_lengths.min()) < 0:
        raise ValueError(f"target_lengths must be >= 0 with the longest + 1 equal to "
                         f"logits.shape[2]={logits.shape[2]}")
    if targets.shape[1] < logits.shape[2] - 1:
        raise ValueError(f"targets has {targets.shape[1]} columns, fewer than the longest target "
                         f"({logits.shape[2] - 1})")


def _log_denominators(x: Tensor) -> Tensor:
    """logsumexp over classes; float32 sums the classes in order, as torchaudio's kernel does."""
    if x.dtype == torch.float64:
        return torch.logsumexp(x, -1)
    m = x.amax(-1, keepdim=True)
    e = torch.exp(x - m).movedim(-1, 0).contiguous()
    total = e[0].clone()
    for j in range(1, len(e)):
        total += e[j]
    return torch.log(total) + m[..., 0]


def _skew(x: Tensor, fill: float) -> Tensor:
    """(B, T, U) -> (B, T + U - 1, U) with ``out[:, n, u] = x[:, n - u, u]`` (``fill`` outside)."""
    b, t, u = x.shape
    n = torch.arange(t + u - 1, device=x.device)[:, None] - torch.arange(u, device=x.device)
    inside = (n >= 0) & (n < t)
    out = x.gather(1, n.clamp(0, t - 1).expand(b, -1, -1))
    return out.masked_fill(~inside, fill)


def _unskew(x: Tensor, t: int) -> Tensor:
    """Inverse of :func:`_skew`: (B, T + U - 1, U) -> (B, T, U)."""
    b, _, u = x.shape
    n = torch.arange(t, device=x.device)[:, None] + torch.arange(u, device=x.device)
    return x.gather(1, n.expand(b, -1, -1))


def _lattice(blank_lp: Tensor, emit_lp: Tensor, terminal: Tensor) -> tuple[Tensor, Tensor]:
    """Forward (alpha) and backward (beta) log variables, one anti-diagonal per step."""
    b, t, u = blank_lp.shape
    neg = float("-inf")
    sb, se, st = _skew(blank_lp, neg), _skew(emit_lp, neg), _skew(terminal.to(torch.uint8), 0)
    steps = t + u - 1
    pad = torch.full((b, 1), neg, dtype=sb.dtype, device=sb.device)
    alpha = torch.full_like(sb, neg)
    alpha[:, 0, 0] = 0.0
    for n in range(1, steps):
        prev = alpha[:, n - 1]
        stay = prev + sb[:, n - 1]
        move = torch.cat([pad, prev[:, :-1] + se[:, n - 1, :-1]], 1)
        alpha[:, n] = torch.logaddexp(stay, move)
    beta = torch.full_like(sb, neg)
    nxt = torch.full((b, u), neg, dtype=sb.dtype, device=sb.device)
    for n in range(steps - 1, -1, -1):
        stay = nxt + sb[:, n]
        move = torch.cat([nxt[:, 1:], pad], 1) + se[:, n]
        row = torch.where(st[:, n].bool(), sb[:, n], torch.logaddexp(stay, move))
        beta[:, n] = row
        nxt = row
    return _unskew(alpha, t), _unskew(beta, t)


def _costs_and_grads(logits: Tensor, targets: Tensor, logit_lengths: Tensor,
                     target_lengths: Tensor, blank: int, clamp: float, fused: bool,
                     need_grad: bool) -> tuple[Tensor, Tensor | None]:
    """Per-sequence costs ``-log P(y|x)`` and, if asked, their gradients w.r.t. ``logits``."""
    work = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits.to(work)
    b, t, u, _ = x.shape
    dev = x.device
    tl = logit_lengths.to(dev, torch.long)[:, None, None]
    ul = target_lengths.to(dev, torch.long)[:, None, None] + 1
    ti = torch.arange(t, device=dev)[:, None]
    ui = torch.arange(u, device=dev)
    valid = (ti < tl) & (ui < ul)
    terminal = (ti == tl - 1) & (ui == ul - 1)
    tg = targets[:, : u - 1].to(dev, torch.long)
    tg = torch.cat([tg, torch.zeros(b, 1, dtype=torch.long, device=dev)], 1)   # (B, U)
    denom = _log_denominators(x) if fused else torch.zeros((b, t, u), dtype=work, device=dev)
    neg = float("-inf")
    blank_lp = (x[..., blank] - denom).masked_fill(~valid, neg)
    emit_raw = x.gather(3, tg[:, None, :, None].expand(b, t, u, 1))[..., 0] - denom
    emit_lp = emit_raw.masked_fill(~valid | (ui >= ul - 1), neg)
    alpha, beta = _lattice(blank_lp, emit_lp, terminal)
    log_p = beta[:, 0, 0]
    costs = -log_p
    if not need_grad:
        return costs, None
    cost = costs[:, None, None]
    beta_t1 = torch.cat([beta[:, 1:], torch.full_like(beta[:, :1], neg)], 1)
    beta_u1 = torch.cat([beta[:, :, 1:], torch.full_like(beta[:, :, :1], neg)], 2)
    tg_idx = tg[:, None, :, None].expand(b, t, u, 1)
    if fused:
        # torchaudio's association: g = logit + (alpha + cost - denom), then exp(g + beta)
        g = x + (alpha + cost - denom)[..., None]
        g_blank, g_emit = g[..., blank].clone(), g.gather(3, tg_idx)[..., 0]
        grad = g.add_(beta[..., None]).exp_()                   # in place: one lattice copy
        blank_next = torch.where(terminal, torch.exp(g_blank), torch.exp(g_blank + beta_t1))
        grad[..., blank] -= blank_next
        emit_next = torch.exp(g_emit + beta_u1).masked_fill(ui >= ul - 1, 0.0)
        grad.scatter_add_(3, tg_idx, -emit_next[..., None])
    else:
        g = cost[..., None] + x
        grad = torch.zeros_like(x)
        g_blank = g[..., blank] + alpha
        grad[..., blank] = -torch.where(terminal, torch.exp(g_blank),
                                        torch.exp(g_blank + beta_t1))
        emit_next = torch.exp(g.gather(3, tg_idx)[..., 0] + alpha + beta_u1)
        grad.scatter_add_(3, tg_idx, -emit_next.masked_fill(ui >= ul - 1, 0.0)[..., None])
    keep = valid & torch.isfinite(cost)
    grad.masked_fill_(~keep[..., None], 0.0)
    if clamp > 0:
        grad.clamp_(-clamp, clamp)
    return costs, grad.to(logits.dtype)


class _RNNTLoss(torch.autograd.Function):
    """Costs in forward; the gradient is computed there too and scaled by the incoming one."""

    @staticmethod
    def forward(ctx, logits, targets, logit_lengths, target_lengths, blank, clamp, fused):
        costs, grad = _costs_and_grads(logits, targets, logit_lengths, target_lengths, blank,
                                       clamp, fused, ctx.needs_input_grad[0])
        ctx.save_for_backward(grad)
        return costs.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_costs):
        (grad,) = ctx.saved_tensors
        return grad * grad_costs.view(-1, 1, 1, 1), None, None, None, None, None, None


def rnnt_loss(logits: Tensor, targets: Tensor, logit_lengths: Tensor, target_lengths: Tensor,
              blank: int = -1, clamp: float = -1, reduction: str = "mean",
              fused_log_softmax: bool = True) -> Tensor:
    """RNN-T loss (Graves 2012) of joiner ``logits`` ``(batch, time, target + 1, class)``;
    ``blank < 0`` counts from the last class, ``clamp > 0`` clips each gradient element."""
    if blank < 0 and logits.ndim >= 1:
        blank = logits.shape[-1] + blank
    _check(logits, targets, logit_lengths, target_lengths, blank, reduction)
    costs = _RNNTLoss.apply(logits, targets, logit_lengths, target_lengths, blank, clamp,
                            fused_log_softmax)
    if reduction == "mean":
        return costs.mean()
    if reduction == "sum":
        return costs.sum()
    return costs
