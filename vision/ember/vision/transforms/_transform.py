"""The Transform base: walk a sample pytree, draw parameters once, apply kernels per leaf."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from ember.vision import tv_tensors


def _is_plain(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not isinstance(x, tv_tensors.TVTensor)


def plain(x: torch.Tensor) -> torch.Tensor:
    """``x`` without its typed-sample subclass."""
    return x.as_subclass(torch.Tensor) if isinstance(x, tv_tensors.TVTensor) else x


def transformed_leaves(leaves: list) -> list[bool]:
    """Which leaves a transform acts on: typed tensors, and the first plain tensor when the
    sample has no ``Image``/``Video`` (it is taken as the image); everything else passes."""
    has_image = any(isinstance(x, (tv_tensors.Image, tv_tensors.Video)) for x in leaves)
    out, plain_taken = [], has_image
    for x in leaves:
        if isinstance(x, tv_tensors.TVTensor):
            out.append(True)
        elif _is_plain(x) and not plain_taken:
            out.append(True)
            plain_taken = True
        else:
            out.append(False)
    return out


def is_image_like(x: Any) -> bool:
    return isinstance(x, (tv_tensors.Image, tv_tensors.Video)) or _is_plain(x)


def query_size(leaves: Sequence) -> tuple[int, int]:
    """(height, width) shared by the images, videos, masks and boxes of a sample."""
    sizes = set()
    for x in leaves:
        if isinstance(x, tv_tensors.BoundingBoxes):
            sizes.add(tuple(x.canvas_size))
        elif isinstance(x, torch.Tensor):
            sizes.add((int(x.shape[-2]), int(x.shape[-1])))
    if not sizes:
        raise TypeError("the sample holds no image, video, mask or bounding boxes")
    if len(sizes) > 1:
        raise ValueError(f"the sample's images, masks and boxes disagree on their size: {sizes}")
    return sizes.pop()


def batch_info(leaves: Sequence) -> tuple[int, torch.device]:
    """Batch size (dim 0 of the image or video) and device, for per-sample draws."""
    for x in leaves:
        if is_image_like(x):
            need = 5 if isinstance(x, tv_tensors.Video) else 4
            if x.ndim < need:
                raise ValueError(f"per_sample=True needs a batched input (dim 0 = batch), got an "
                                 f"image of shape {tuple(x.shape)}")
            return int(x.shape[0]), x.device
    raise TypeError("per_sample=True needs an image or video in the sample")


def select_samples(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """Per-sample choice along dim 0: ``new`` where ``mask``, else ``old`` (types kept)."""
    if new.shape != old.shape:
        raise ValueError(f"per-sample selection needs the transform to keep the shape, got "
                         f"{tuple(old.shape)} -> {tuple(new.shape)}")
    m = mask.to(new.device).view((-1,) + (1,) * (new.ndim - 1))
    out = torch.where(m, plain(new), plain(old))
    return tv_tensors.wrap(out, like=new) if isinstance(new, tv_tensors.TVTensor) else out


def uniform(lo: float, hi: float, n: int | None = None, device=None):
    """A float in [lo, hi), or a [n] tensor of them on ``device`` when ``n`` is given."""
    if n is None:
        return lo + (hi - lo) * float(torch.rand(()))
    return lo + (hi - lo) * torch.rand(n, device=device)


def check_range(value, name: str, center: float | None = None, bound=(0.0, math.inf)):
    """A number v -> (center - v, center + v) (or (-v, v)); a pair is checked and kept."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name} must be non-negative, got {value!r}")
        c = 0.0 if center is None else center
        lo, hi = c - value, c + value
        if center is not None:
            lo = max(lo, bound[0])
    elif isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, (int, float)) for v in value):
        lo, hi = float(value[0]), float(value[1])
    else:
        raise TypeError(f"{name} must be a number or a pair of numbers, got {value!r}")
    if not bound[0] <= lo <= hi <= bound[1]:
        raise ValueError(f"{name} must lie in [{bound[0]}, {bound[1]}] with min <= max, "
                         f"got {value!r}")
    return float(lo), float(hi)


class Transform(nn.Module):
    """Base class: ``make_params`` draws once per call, ``transform`` maps one leaf."""

    per_sample: bool = False

    def make_params(self, leaves: list) -> dict[str, Any]:
        return {}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        leaves, spec = tree_flatten(sample)
        chosen = transformed_leaves(leaves)
        params = self.make_params([x for x, c in zip(leaves, chosen) if c])
        out = [self.transform(x, params) if c else x for x, c in zip(leaves, chosen)]
        return tree_unflatten(out, spec)

    def extra_repr(self) -> str:
        skip = {"training"}
        return ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()
                         if not k.startswith("_") and k not in skip)


class RandomTransform(Transform):
    """A transform applied with probability ``p``; ``per_sample`` decides per image."""

    def __init__(self, p: float = 0.5, per_sample: bool = False) -> None:
        super().__init__()
        if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
        if not isinstance(per_sample, bool):
            raise TypeError(f"per_sample must be a bool, got {per_sample!r}")
        self.p = float(p)
        self.per_sample = per_sample

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        leaves, spec = tree_flatten(sample)
        chosen = transformed_leaves(leaves)
        targets = [x for x, c in zip(leaves, chosen) if c]
        if self.per_sample:
            n, device = batch_info(targets)
            apply = torch.rand(n, device=device) < self.p
            params = self.make_params(targets)
            out = [select_samples(apply, self.transform(x, params), x) if c else x
                   for x, c in zip(leaves, chosen)]
            return tree_unflatten(out, spec)
        if self.p < 1.0 and float(torch.rand(())) >= self.p:
            return sample
        params = self.make_params(targets)
        out = [self.transform(x, params) if c else x for x, c in zip(leaves, chosen)]
        return tree_unflatten(out, spec)
