"""CTC alignment helpers with torchaudio's names: merging a frame-level token path into spans."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["TokenSpan", "merge_tokens"]


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
