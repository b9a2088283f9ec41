"""HuBERT pre-training pieces: span masking of frames, and logits against label embeddings.

The span sampler draws from torch's default generator in the same order as torchaudio's,
so one seed gives both libraries the same masks.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["LogitGenerator", "MaskGenerator", "compute_mask_indices"]

_SELECTIONS = ("static", "uniform", "normal", "poisson")


def _span_lengths(selection: str, count: int, length: int, other: float) -> Tensor:
    if selection == "static":
        return torch.full((count,), length)
    if selection == "uniform":
        return torch.randint(int(other), length * 2 + 1, size=(count,))
    if selection == "normal":
        drawn = torch.normal(float(length), float(other), size=(count,))
        return torch.maximum(torch.ones(1), torch.round(drawn)).int()
    return torch.round(torch.poisson(torch.full((count,), float(length)))).int()


def _non_overlapping(size: int, lengths: Tensor, min_space: int) -> Tensor:
    """Starts placed one span at a time into the free parts, longest span first."""
    picked: list[Tensor] = []
    parts = [(0, size)]
    keep = int(lengths.min())
    for span in sorted(lengths.tolist(), reverse=True):
        room = torch.tensor([e - s for s, e in parts], dtype=torch.int)
        room[room < span + min_space] = 0
        if int(room.sum()) == 0:
            break
        choice = int(torch.distributions.Categorical(room / room.sum()).sample())
        s, e = parts.pop(choice)
        start = torch.randint(s, e - span, size=(1,))
        picked.append(start + torch.arange(span))
        if start - s - min_space >= keep:
            parts.append((s, int(start) - min_space + 1))
        if e - start - keep - min_space > keep:
            parts.append((int(start) + span + min_space, e))
    return torch.cat(picked) if picked else torch.zeros(0, dtype=torch.long)


def compute_mask_indices(shape: tuple[int, int], padding_mask: Tensor | None, mask_prob: float,
                         mask_length: int, mask_type: str = "static", mask_other: float = 0.0,
                         min_masks: int = 0, no_overlap: bool = False,
                         min_space: int = 0) -> Tensor:
    """Boolean ``shape`` mask of random spans covering about ``mask_prob`` of each row.

    Every row gets the same number of masked positions (the smallest any row drew).
    """
    if mask_type not in _SELECTIONS:
        raise ValueError(f"mask selection must be one of {_SELECTIONS}, got {mask_type!r}")
    if mask_length < 1:
        raise ValueError(f"mask_length must be >= 1, got {mask_length}")
    batch, frames = shape
    mask = torch.zeros(batch, frames, dtype=torch.bool)
    shared = max(min_masks, int(mask_prob * frames / float(mask_length) + torch.rand(1)))
    chosen: list[Tensor] = []
    for i in range(batch):
        size, count = frames, shared
        if padding_mask is not None:
            size = frames - int(padding_mask[i].long().sum())
            count = max(min_masks, int(mask_prob * size / float(mask_length) + torch.rand(1)))
        if count == 0:
            chosen.append(torch.zeros(0, dtype=torch.long))
            continue
        lengths = _span_lengths(mask_type, count, mask_length, mask_other)
        if int(lengths.sum()) == 0:
            lengths[0] = min(mask_length, size - 1)
        if no_overlap:
            idx = _non_overlapping(size, lengths, min_space)
        else:
            shortest = int(lengths.min())
            if size - shortest <= count:
                shortest = size - count - 1
            starts = torch.randperm(size - shortest)[:count]
            offsets = torch.arange(int(lengths.max()))
            spans = starts[:, None] + offsets[None, :]
            idx = spans[offsets[None, :] < lengths[:len(starts), None]]
        chosen.append(torch.unique(idx[idx < size]))
    fewest = min(len(c) for c in chosen)
    for i, idx in enumerate(chosen):
        if len(idx) > fewest:
            idx = idx[torch.randperm(len(idx))[:fewest].long()]
        mask[i, idx] = True
    return mask


class MaskGenerator(nn.Module):
    """Replaces random time spans by a learned embedding and zeroes random channel spans."""

    def __init__(self, encoder_embed_dim: int, mask_prob: float, mask_selection: str,
                 mask_other: float, mask_length: int, no_mask_overlap: bool,
                 mask_min_space: int, mask_channel_prob: float, mask_channel_selection: str,
                 mask_channel_other: float, mask_channel_length: int,
                 no_mask_channel_overlap: bool, mask_channel_min_space: int) -> None:
        super().__init__()
        for name, value in (("mask_selection", mask_selection),
                            ("mask_channel_selection", mask_channel_selection)):
            if value not in _SELECTIONS:
                raise ValueError(f"{name} must be one of {_SELECTIONS}, got {value!r}")
        self.mask_prob, self.mask_selection, self.mask_other = mask_prob, mask_selection, mask_other
        self.mask_length, self.no_mask_overlap = mask_length, no_mask_overlap
        self.mask_min_space = mask_min_space
        self.mask_channel_prob = mask_channel_prob
        self.mask_channel_selection = mask_channel_selection
        self.mask_channel_other = mask_channel_other
        self.mask_channel_length = mask_channel_length
        self.no_mask_channel_overlap = no_mask_channel_overlap
        self.mask_channel_min_space = mask_channel_min_space
        self.mask_embedding = nn.Parameter(torch.empty(encoder_embed_dim).uniform_())

    def forward(self, x: Tensor, padding_mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """``x`` ``(B, T, C)`` -> masked ``x`` and the time mask (None when mask_prob is 0)."""
        batch, frames, channels = x.shape
        time_mask = None
        if self.mask_prob > 0:
            time_mask = compute_mask_indices(
                (batch, frames), padding_mask, self.mask_prob, self.mask_length,
                self.mask_selection, self.mask_other, min_masks=2,
                no_overlap=self.no_mask_overlap, min_space=self.mask_min_space).to(x.device)
            x = torch.where(time_mask[:, :, None], self.mask_embedding.to(x.dtype), x)
        if self.mask_channel_prob > 0:
            channel_mask = compute_mask_indices(
                (batch, channels), None, self.mask_channel_prob, self.mask_channel_length,
                self.mask_channel_selection, self.mask_channel_other,
                no_overlap=self.no_mask_channel_overlap,
                min_space=self.mask_channel_min_space).to(x.device)
            x = x.masked_fill(channel_mask[:, None, :], 0.0)
        return x, time_mask


def _logits(projected: Tensor, target: Tensor, label_embeddings: Tensor) -> Tensor:
    """Cosine similarity / 0.1 to the target's embedding (column 0) and every label's."""
    positive = label_embeddings[target.long()]
    negatives = label_embeddings[:, None, :].expand(-1, projected.shape[0], -1)
    duplicate = (positive[None] == negatives).all(-1)
    candidates = torch.cat([positive[None], negatives], dim=0)
    logits = torch.cosine_similarity(projected.float(), candidates.float(), dim=-1)
    logits = logits.type_as(projected) / 0.1
    # a label equal to the target is no negative
    blocked = torch.cat([torch.zeros_like(duplicate[:1]), duplicate], dim=0)
    return logits.masked_fill(blocked, float("-inf")).transpose(0, 1)


class LogitGenerator(nn.Module):
    """Projects encoder frames and scores them against every label's embedding."""

    def __init__(self, encoder_embed_dim: int, num_classes: int, final_dim: int,
                 skip_masked: bool, skip_nomask: bool) -> None:
        super().__init__()
        self.label_embeddings = nn.Parameter(torch.empty(num_classes, final_dim).uniform_())
        self.final_proj = nn.Linear(encoder_embed_dim, final_dim)
        self.skip_masked, self.skip_nomask = skip_masked, skip_nomask

    def forward(self, x: Tensor, label: Tensor, mask_m: Tensor,
                mask_u: Tensor) -> tuple[Tensor | None, Tensor | None]:
        projected = self.final_proj(x)
        logit_m = logit_u = None
        if not self.skip_masked:
            logit_m = _logits(projected[mask_m], label[mask_m], self.label_embeddings)
        if not self.skip_nomask:
            logit_u = _logits(projected[mask_u], label[mask_u], self.label_embeddings)
        return logit_m, logit_u
