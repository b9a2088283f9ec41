"""CTC alignment with torchaudio's names: Viterbi forced alignment and merging a frame-level
token path into spans."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["TokenSpan", "forced_align", "merge_tokens"]


@dataclass
class TokenSpan:
    """One token of an alignment: frames ``[start, end)`` and its mean frame score."""

    token: int
    start: int
    end: int
    score: float

    def __len__(self) -> int:
        return self.end - self.start


def merge_tokens(tokens: Tensor, scores: Tensor, blank: int = 0) -> list[TokenSpan]:
    """Collapse repeats of a frame-level CTC path ``tokens`` ``(time,)`` into spans, dropping
    ``blank``; each span's score is the mean of ``scores`` over its frames."""
    if tokens.ndim != 1 or scores.ndim != 1:
        raise ValueError(f"tokens and scores must be 1-D, got {tuple(tokens.shape)} and "
                         f"{tuple(scores.shape)}")
    if len(tokens) != len(scores):
        raise ValueError(f"tokens and scores must have the same length, got {len(tokens)} "
                         f"and {len(scores)}")
    edge = torch.full((1,), -1, dtype=tokens.dtype, device=tokens.device)
    bounds = torch.nonzero(torch.diff(tokens, prepend=edge, append=edge)).flatten().tolist()
    values = tokens.tolist()
    return [TokenSpan(values[s], s, e, scores[s:e].mean().item())
            for s, e in zip(bounds[:-1], bounds[1:]) if values[s] != blank]


def _check_align(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | None,
                 target_lengths: Tensor | None, blank: int) -> None:
    """Raise ValueError naming the argument that torchaudio's op would reject."""
    if log_probs.ndim != 3 or not log_probs.is_floating_point():
        raise ValueError("log_probs must be a floating-point (batch, time, class) tensor, got "
                         f"{log_probs.dtype} {tuple(log_probs.shape)}")
    if targets.ndim != 2 or targets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"targets must be an int32 or int64 (batch, length) tensor, got "
                         f"{targets.dtype} {tuple(targets.shape)}")
    if log_probs.shape[0] != 1 or targets.shape[0] != 1:
        raise ValueError(f"log_probs and targets must have batch size 1, got "
                         f"{log_probs.shape[0]} and {targets.shape[0]}")
    classes = log_probs.shape[-1]
    if not 0 <= blank < classes:
        raise ValueError(f"blank must index one of the {classes} classes, got {blank}")
    if targets.numel() and bool((targets == blank).any()):
        raise ValueError(f"targets must not contain the blank index {blank}")
    if targets.numel() and (int(targets.max()) >= classes or int(targets.min()) < 0):
        raise ValueError(f"targets values must lie in [0, {classes})")
    for name, lengths, full in (("input_lengths", input_lengths, log_probs.shape[1]),
                                ("target_lengths", target_lengths, targets.shape[1])):
        if lengths is None:
            continue
        if lengths.ndim != 1 or len(lengths) != 1 or lengths.is_floating_point():
            raise ValueError(f"{name} must be an integer tensor of shape (1,), got "
                             f"{lengths.dtype} {tuple(lengths.shape)}")
        if int(lengths[0]) != full:
            raise ValueError(f"{name} must equal the padded length {full}, got {int(lengths[0])}")


def forced_align(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | None = None,
                 target_lengths: Tensor | None = None, blank: int = 0) -> tuple[Tensor, Tensor]:
    """Viterbi CTC alignment of ``targets`` ``(1, L)`` to ``log_probs`` ``(1, T, C)``: the
    frame-level token path ``(1, T)`` and each frame's log probability ``(1, T)``."""
    _check_align(log_probs, targets, input_lengths, target_lengths, blank)
    lp, tg = log_probs[0], targets[0]
    steps, length = lp.shape[0], tg.shape[0]
    tgl = tg.tolist()
    repeats = sum(a == b for a, b in zip(tgl[:-1], tgl[1:]))
    if steps < length + repeats:
        raise ValueError(f"targets are too long for log_probs: {steps} frames for {length} "
                         f"tokens with {repeats} repeats")
    states = 2 * length + 1
    dev = lp.device
    labels = torch.full((states,), blank, dtype=torch.long, device=dev)
    labels[1::2] = tg.to(dev, torch.long)
    # the recursion runs on host arrays: one small vector step per frame, where torch's per-op
    # overhead would dominate; the float arithmetic (one add, compares) is the same
    work = lp if lp.dtype != torch.bfloat16 else lp.float()
    emit = work[:, labels].detach().cpu().numpy()              # (T, S)
    neg = -np.inf
    # adding skip_add to state i - 2 allows skipping the blank only between different tokens
    skip_add = np.full(states, neg, dtype=emit.dtype)
    if length > 1:
        skip_add[3::2] = np.where(np.diff(np.asarray(tgl)) != 0, 0.0, neg)
    start = 0 if steps - (length + repeats) > 0 else 1
    end = 1 if states == 1 else 2
    # alpha rows are padded by two -inf states in front, so the three predecessors are views
    prev = np.full(states + 2, neg, dtype=emit.dtype)
    prev[2 + start:2 + end] = emit[0, start:end]
    back = np.zeros((steps, states), dtype=np.int8)
    for t in range(1, steps):
        # the window [start, end) of states that can still be reached and still reach the end
        if steps - t <= length + repeats:
            if start % 2 == 1 and tgl[start // 2] != tgl[start // 2 + 1]:
                start += 1
            start += 1
        if t <= length + repeats:
            if end % 2 == 0 and end < 2 * length and tgl[end // 2 - 1] != tgl[end // 2]:
                end += 1
            end += 1
        x0, x1 = prev[2 + start:2 + end], prev[1 + start:1 + end]
        x2 = prev[start:end] + skip_add[start:end]
        # torchaudio's order: skip if strictly best, else the previous state if strictly best
        take2 = (x2 > x1) & (x2 > x0)
        take1 = (x1 > x0) & (x1 > x2)
        back[t, start:end] = take2 * np.int8(2) + take1
        cur = np.full(states + 2, neg, dtype=emit.dtype)
        cur[2 + start:2 + end] = np.where(take2, x2, np.where(take1, x1, x0)) + emit[t, start:end]
        prev = cur
    alpha = prev[2:]
    state = 0
    if states > 1:
        state = states - 1 if alpha[-1] > alpha[-2] else states - 2
    label_list = labels.tolist()
    path = [0] * steps
    for t in range(steps - 1, -1, -1):
        path[t] = label_list[state]
        state -= int(back[t, state])
    paths = torch.tensor([path], dtype=targets.dtype, device=dev)
    scores = lp[torch.arange(steps, device=dev), paths[0].long()]
    return paths, scores[None]
