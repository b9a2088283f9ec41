"""Compose, RandomApply, RandomChoice, RandomOrder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from ember.vision import tv_tensors
from ember.vision.transforms._transform import (
    batch_info,
    fusable,
    plain,
    run_fused,
    select_samples,
    transformed_leaves,
)


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
        run: list = []
        for t in self.transforms:
            if fusable(t) and not torch.compiler.is_compiling():
                run.append(t)
                continue
            sample = self._flush(run, sample)
            sample = t(sample)
        return self._flush(run, sample)

    @staticmethod
    def _flush(run: list, sample: Any) -> Any:
        """Apply the pending chunkable transforms, fused when there are several."""
        if len(run) > 1:
            sample = run_fused(run, sample)
        elif run:
            sample = run[0](sample)
        run.clear()
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


def _apply_grouped(sample: Any, keys: list, apply: Callable[[Any, Any], Any]) -> Any:
    """Per-sample dispatch: the images whose ``keys`` match go through ``apply(key, part)``
    together; every transformed leaf must keep its per-sample shape."""
    leaves, spec = tree_flatten(sample)
    chosen = transformed_leaves(leaves)
    outs = [plain(x).clone() if c else x for x, c in zip(leaves, chosen)]
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    for key, rows in groups.items():
        part_leaves = []
        for x, c in zip(leaves, chosen):
            if c:
                idx = torch.tensor(rows, device=x.device)
                rows_x = plain(x).index_select(0, idx)
                x = tv_tensors.wrap(rows_x, like=x) if isinstance(x, tv_tensors.TVTensor) \
                    else rows_x
            part_leaves.append(x)
        res_leaves, _ = tree_flatten(apply(key, tree_unflatten(part_leaves, spec)))
        for j, (r, c) in enumerate(zip(res_leaves, chosen)):
            if not c:
                continue
            if tuple(r.shape[1:]) != tuple(outs[j].shape[1:]):
                raise ValueError("per_sample=True needs transforms that keep the shape, got "
                                 f"{tuple(outs[j].shape[1:])} -> {tuple(r.shape[1:])}")
            outs[j].index_copy_(0, torch.tensor(rows, device=r.device), plain(r))
    final = [tv_tensors.wrap(o, like=x) if c and isinstance(x, tv_tensors.TVTensor) else o
             for o, x, c in zip(outs, leaves, chosen)]
    return tree_unflatten(final, spec)


def _batch_size(sample: Any) -> int:
    leaves, _ = tree_flatten(sample)
    chosen = transformed_leaves(leaves)
    return batch_info([x for x, c in zip(leaves, chosen) if c])[0]


class RandomChoice(nn.Module):
    """Apply one of ``transforms``, picked with probabilities ``p`` (uniform by default);
    ``per_sample`` picks per image (the transforms must then keep the shape)."""

    def __init__(self, transforms: Sequence[Callable], p: Sequence[float] | None = None,
                 per_sample: bool = False) -> None:
        super().__init__()
        self.per_sample = per_sample
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
        if self.per_sample:
            n = _batch_size(sample)
            picks = torch.multinomial(torch.tensor(self.p), n, replacement=True).tolist()
            return _apply_grouped(sample, picks, lambda k, part: self.transforms[k](part))
        idx = int(torch.multinomial(torch.tensor(self.p), 1))
        return self.transforms[idx](sample)


class RandomOrder(nn.Module):
    """Apply all ``transforms`` in a random order; ``per_sample`` draws an order per image."""

    def __init__(self, transforms: Sequence[Callable], per_sample: bool = False) -> None:
        super().__init__()
        self.transforms = _check_transforms(transforms)
        self._mods = _modules(self.transforms)
        self.per_sample = per_sample

    def _run(self, order, sample):
        for i in order:
            sample = self.transforms[i](sample)
        return sample

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        if self.per_sample:
            n = _batch_size(sample)
            orders = [tuple(torch.randperm(len(self.transforms)).tolist()) for _ in range(n)]
            return _apply_grouped(sample, orders, self._run)
        for i in torch.randperm(len(self.transforms)).tolist():
            sample = self.transforms[i](sample)
        return sample
