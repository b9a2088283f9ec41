"""Compose, RandomApply, RandomChoice, RandomOrder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from ember.vision.transforms._transform import batch_info, select_samples, transformed_leaves


def _check_transforms(transforms) -> list[Callable]:
    if not isinstance(transforms, Sequence) or isinstance(transforms, str):
        raise TypeError(f"transforms must be a sequence of callables, "
                        f"got {type(transforms).__name__}")
    if not all(callable(t) for t in transforms):
        raise TypeError("every element of transforms must be callable")
    return list(transforms)


def _modules(transforms):
    return nn.ModuleList([t for t in transforms if isinstance(t, nn.Module)])


class Compose(nn.Module):
    """Apply ``transforms`` one after the other."""

    def __init__(self, transforms: Sequence[Callable]) -> None:
        super().__init__()
        self.transforms = _check_transforms(transforms)
        if not self.transforms:
            raise ValueError("transforms must not be empty")
        self._mods = _modules(self.transforms)

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        for t in self.transforms:
            sample = t(sample)
        return sample


class RandomApply(nn.Module):
    """Apply all ``transforms`` with probability ``p``; ``per_sample`` decides per image
    (the transforms must then keep every leaf's shape)."""

    def __init__(self, transforms: Sequence[Callable], p: float = 0.5,
                 per_sample: bool = False) -> None:
        super().__init__()
        self.transforms = _check_transforms(transforms)
        self._mods = _modules(self.transforms)
        if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
        self.p, self.per_sample = float(p), per_sample

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        if not self.per_sample:
            if float(torch.rand(())) >= self.p:
                return sample
            for t in self.transforms:
                sample = t(sample)
            return sample
        leaves, spec = tree_flatten(sample)
        chosen = transformed_leaves(leaves)
        n, device = batch_info([x for x, c in zip(leaves, chosen) if c])
        apply = torch.rand(n, device=device) < self.p
        out = sample
        for t in self.transforms:
            out = t(out)
        new_leaves, _ = tree_flatten(out)
        merged = [select_samples(apply, new, old) if isinstance(new, torch.Tensor) and c else new
                  for new, old, c in zip(new_leaves, leaves, chosen)]
        return tree_unflatten(merged, spec)


class RandomChoice(nn.Module):
    """Apply one of ``transforms``, picked with probabilities ``p`` (uniform by default)."""

    def __init__(self, transforms: Sequence[Callable], p: Sequence[float] | None = None) -> None:
        super().__init__()
        self.transforms = _check_transforms(transforms)
        self._mods = _modules(self.transforms)
        if p is None:
            p = [1.0] * len(self.transforms)
        if len(p) != len(self.transforms) or any(v < 0 for v in p) or sum(p) <= 0:
            raise ValueError(f"p must hold one non-negative weight per transform, got {p!r}")
        total = float(sum(p))
        self.p = [v / total for v in p]

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        idx = int(torch.multinomial(torch.tensor(self.p), 1))
        return self.transforms[idx](sample)


class RandomOrder(nn.Module):
    """Apply all ``transforms`` in a random order."""

    def __init__(self, transforms: Sequence[Callable]) -> None:
        super().__init__()
        self.transforms = _check_transforms(transforms)
        self._mods = _modules(self.transforms)

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        for i in torch.randperm(len(self.transforms)).tolist():
            sample = self.transforms[i](sample)
        return sample
