"""Batch mixing (MixUp, CutMix) and automatic augmentation policies."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ember.vision import tv_tensors
from ember.vision.transforms import functional as F
from ember.vision.transforms._transform import (
    Transform,
    check_fill,
    fill_for,
    is_image_like,
    plain,
    query_size,
    transformed_leaves,
)
from ember.vision.transforms.functional._utils import InterpolationMode, as_interpolation


class _BatchMix(Transform):
    pil = "reject"
    pil_error = ValueError

    def __init__(self, *, alpha: float = 1.0, num_classes: int | None = None,
                 labels_getter: Callable | str = "default") -> None:
        super().__init__()
        if not isinstance(alpha, (int, float)) or alpha <= 0:
            raise ValueError(f"alpha must be a positive number, got {alpha!r}")
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
            raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
        if not (labels_getter == "default" or callable(labels_getter)):
            raise ValueError(f"labels_getter must be 'default' or a callable, "
                             f"got {labels_getter!r}")
        self.alpha, self.num_classes = float(alpha), num_classes
        self.labels_getter = labels_getter

    def _labels_index(self, leaves: list, sample: Any = None) -> int:
        if callable(self.labels_getter):
            labels = self.labels_getter(sample)
            found = [i for i, x in enumerate(leaves) if x is labels]
            if not found:
                raise ValueError("labels_getter must return a tensor held by the sample")
            return found[0]
        idx = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)
               and not isinstance(x, tv_tensors.TVTensor) and x.ndim == 1
               and not x.is_floating_point()]
        if not idx:
            raise ValueError(f"{type(self).__name__} needs integer class labels of shape [N] in "
                             f"the sample, e.g. (images, labels)")
        return idx[-1]

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        leaves, spec = tree_flatten(sample)
        li = self._labels_index(leaves, sample)
        labels = leaves[li]
        images = [i for i, x in enumerate(leaves) if i != li and is_image_like(x)]
        if not images:
            raise ValueError(f"{type(self).__name__} needs a batch of images in the sample")
        n = labels.shape[0]
        for i in images:
            if leaves[i].ndim < 4 or leaves[i].shape[0] != n:
                raise ValueError(f"images must be a batch [N, C, H, W] with N = {n} labels, got "
                                 f"{tuple(leaves[i].shape)}")
        num_classes = self.num_classes
        if num_classes is None:
            raise ValueError("num_classes is required")
        if bool((labels < 0).any()) or bool((labels >= num_classes).any()):
            raise ValueError(f"labels must lie in [0, {num_classes}), got {labels.tolist()}")
        lam = float(torch.distributions.Beta(self.alpha, self.alpha).sample())
        params = self.mix_params(lam, query_size([leaves[i] for i in images]))
        out = list(leaves)
        for i in images:
            out[i] = self.mix(leaves[i], params)
        onehot = torch.nn.functional.one_hot(labels.long(), num_classes).to(torch.float32)
        lam_eff = params["lam"]
        out[li] = onehot.roll(1, 0).mul(1.0 - lam_eff).add(onehot.mul(lam_eff))
        return tree_unflatten(out, spec)


def _as_float_then_back(x, fn):
    xf = plain(x)
    res = fn(xf if xf.is_floating_point() else xf.to(torch.float32))
    res = res if x.is_floating_point() else res.round().clamp(0, 255).to(x.dtype)
    return tv_tensors.wrap(res, like=x) if isinstance(x, tv_tensors.TVTensor) else res


class MixUp(_BatchMix):
    """Blend each image and one-hot label with the next in the batch, weight ~ Beta(alpha)."""

    def mix_params(self, lam, size):
        return {"lam": lam}

    def mix(self, x, params):
        lam = params["lam"]
        return _as_float_then_back(x, lambda t: t.roll(1, 0).mul(1.0 - lam).add(t.mul(lam)))


class CutMix(_BatchMix):
    """Paste a box of the next image of the batch; labels mixed by the box's area."""

    def mix_params(self, lam, size):
        h, w = size
        cy, cx = int(torch.randint(0, h, ())), int(torch.randint(0, w, ()))
        r = 0.5 * math.sqrt(1.0 - lam)
        rh, rw = int(r * h), int(r * w)
        y1, y2 = max(cy - rh, 0), min(cy + rh, h)
        x1, x2 = max(cx - rw, 0), min(cx + rw, w)
        return {"box": (y1, y2, x1, x2), "lam": 1.0 - (x2 - x1) * (y2 - y1) / (w * h)}

    def mix(self, x, params):
        y1, y2, x1, x2 = params["box"]
        out = plain(x).clone()
        out[..., y1:y2, x1:x2] = plain(x).roll(1, 0)[..., y1:y2, x1:x2]
        return tv_tensors.wrap(out, like=x) if isinstance(x, tv_tensors.TVTensor) else out


# ----------------------------------------------------------------------------- auto augment

def _apply_op(img, name: str, magnitude: float, interpolation, fill):
    """One augmentation op with torchvision's magnitude conventions."""
    bound = F._utils.max_value(img.dtype) if isinstance(img, torch.Tensor) else 255
    if name == "ShearX":
        return F.affine(img, 0.0, [0, 0], 1.0, [math.degrees(math.atan(magnitude)), 0.0],
                        interpolation, fill, center=[0, 0])
    if name == "ShearY":
        return F.affine(img, 0.0, [0, 0], 1.0, [0.0, math.degrees(math.atan(magnitude))],
                        interpolation, fill, center=[0, 0])
    if name == "TranslateX":
        return F.affine(img, 0.0, [int(magnitude), 0], 1.0, [0.0, 0.0], interpolation, fill)
    if name == "TranslateY":
        return F.affine(img, 0.0, [0, int(magnitude)], 1.0, [0.0, 0.0], interpolation, fill)
    if name == "Rotate":
        return F.rotate(img, magnitude, interpolation, fill=fill)
    if name == "Brightness":
        return F.adjust_brightness(img, 1.0 + magnitude)
    if name == "Color":
        return F.adjust_saturation(img, 1.0 + magnitude)
    if name == "Contrast":
        return F.adjust_contrast(img, 1.0 + magnitude)
    if name == "Sharpness":
        return F.adjust_sharpness(img, 1.0 + magnitude)
    if name == "Posterize":
        return F.posterize(img, int(magnitude))
    if name == "Solarize":
        return F.solarize(img, bound * magnitude)
    if name == "AutoContrast":
        return F.autocontrast(img)
    if name == "Equalize":
        return F.equalize(img)
    if name == "Invert":
        return F.invert(img)
    if name == "Identity":
        return img
    raise ValueError(f"unknown augmentation op {name!r}")


def _spaces(num_bins: int, h: int, w: int, wide: bool) -> dict[str, tuple[torch.Tensor, bool]]:
    """op -> (magnitudes per bin, signed)."""
    lin = lambda a, b: torch.linspace(a, b, num_bins)
    none = torch.tensor(0.0)
    return {
        "Identity": (none, False),
        "ShearX": (lin(0.0, 0.99 if wide else 0.3), True),
        "ShearY": (lin(0.0, 0.99 if wide else 0.3), True),
        "TranslateX": (lin(0.0, 32.0 if wide else 150.0 / 331.0 * w), True),
        "TranslateY": (lin(0.0, 32.0 if wide else 150.0 / 331.0 * h), True),
        "Rotate": (lin(0.0, 135.0 if wide else 30.0), True),
        "Brightness": (lin(0.0, 0.99 if wide else 0.9), True),
        "Color": (lin(0.0, 0.99 if wide else 0.9), True),
        "Contrast": (lin(0.0, 0.99 if wide else 0.9), True),
        "Sharpness": (lin(0.0, 0.99 if wide else 0.9), True),
        "Posterize": (8 - (torch.arange(num_bins) / ((num_bins - 1) / (6 if wide else 4)))
                      .round().int(), False),
        "Solarize": (lin(1.0, 0.0), False),
        "AutoContrast": (none, False),
        "Equalize": (none, False),
    }


class _AutoAugmentBase(Transform):
    def __init__(self, interpolation=InterpolationMode.NEAREST, fill=None,
                 per_sample: bool = False) -> None:
        super().__init__()
        if not isinstance(per_sample, bool):
            raise TypeError(f"per_sample must be a bool, got {per_sample!r}")
        self.interpolation = as_interpolation(interpolation)
        self.fill = check_fill(fill)
        self.per_sample = per_sample

    def program(self, h: int, w: int) -> list[tuple[str, float]]:
        """The randomly drawn ops and signed magnitudes for one image (or one batch)."""
        raise NotImplementedError

    def augment(self, img, h: int, w: int):
        fill = fill_for(self.fill, img)
        if not self.per_sample:
            for name, mag in self.program(h, w):
                img = _apply_op(img, name, mag, self.interpolation, fill)
            return img
        if img.ndim < (5 if isinstance(img, tv_tensors.Video) else 4):
            raise ValueError(f"per_sample=True needs a batched input (dim 0 = batch), got "
                             f"shape {tuple(img.shape)}")
        # one program per image; images that drew the same program are augmented together
        groups: dict[tuple, list[int]] = {}
        for i in range(img.shape[0]):
            groups.setdefault(tuple(self.program(h, w)), []).append(i)
        out = plain(img).clone()
        for prog, rows in groups.items():
            idx = torch.tensor(rows, device=img.device)
            part = plain(img).index_select(0, idx)
            for name, mag in prog:
                part = _apply_op(part, name, mag, self.interpolation, fill)
            out.index_copy_(0, idx, plain(part))
        return tv_tensors.wrap(out, like=img) if isinstance(img, tv_tensors.TVTensor) else out

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        leaves, spec = tree_flatten(sample)
        chosen = transformed_leaves(leaves)
        unsupported = (tv_tensors.BoundingBoxes, tv_tensors.Mask, tv_tensors.KeyPoints)
        if any(isinstance(x, unsupported) for x in leaves):
            raise TypeError(f"{type(self).__name__} does not support boxes, masks or keypoints")
        idx = [i for i, (x, c) in enumerate(zip(leaves, chosen)) if c and is_image_like(x)]
        if len(idx) != 1:  # TypeError, as torchvision's
            raise TypeError(f"{type(self).__name__} needs exactly one image or video in the "
                            f"sample, found {len(idx)}")
        img = leaves[idx[0]]
        h, w = img.shape[-2:]
        out = list(leaves)
        out[idx[0]] = self.augment(img, int(h), int(w))
        return tree_unflatten(out, spec)


def _signed(mags: torch.Tensor, signed: bool, k: int | None) -> float:
    mag = float(mags[k]) if k is not None and mags.ndim else 0.0
    return -mag if signed and float(torch.rand(())) <= 0.5 else mag


class AutoAugmentPolicy(enum.Enum):
    """Learned policies of the AutoAugment paper."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


# (op, probability, magnitude bin) pairs of the AutoAugment paper's ImageNet policy
_IMAGENET_POLICY = [
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
]


# the paper's CIFAR-10 policy (reduced CIFAR-10 search), same layout
_CIFAR10_POLICY = [
    (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
    (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
    (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
    (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
    (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
    (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
    (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
    (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
    (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
    (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
    (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
    (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
    (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
    (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
    (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
    (("Color", 0.9, 9), ("Equalize", 0.6, None)),
    (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
    (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
    (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
    (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
    (("Equalize", 0.8, None), ("Invert", 0.1, None)),
    (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
]

# the paper's SVHN policy (reduced SVHN search)
_SVHN_POLICY = [
    (("ShearX", 0.9, 4), ("Invert", 0.2, None)),
    (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
    (("Equalize", 0.6, None), ("Solarize", 0.6, 6)),
    (("Invert", 0.9, None), ("Equalize", 0.6, None)),
    (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
    (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
    (("ShearY", 0.9, 8), ("Invert", 0.4, None)),
    (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
    (("Invert", 0.9, None), ("AutoContrast", 0.8, None)),
    (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
    (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)),
    (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
    (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)),
    (("Invert", 0.9, None), ("Equalize", 0.6, None)),
    (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)),
    (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
    (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)),
    (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
    (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)),
    (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
    (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)),
    (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
    (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)),
    (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
    (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
]

_POLICIES = {"imagenet": _IMAGENET_POLICY, "cifar10": _CIFAR10_POLICY, "svhn": _SVHN_POLICY}


class AutoAugment(_AutoAugmentBase):
    """A random sub-policy (two ops) of a learned AutoAugment policy (ImageNet, CIFAR-10 or
    SVHN)."""

    def __init__(self, policy=AutoAugmentPolicy.IMAGENET,
                 interpolation=InterpolationMode.NEAREST, fill=None,
                 per_sample: bool = False) -> None:
        super().__init__(interpolation, fill, per_sample)
        try:
            self.policy = AutoAugmentPolicy(policy)
        except ValueError:
            raise ValueError(f"policy must be one of {[p.name for p in AutoAugmentPolicy]} "
                             f"(an AutoAugmentPolicy), got {policy!r}") from None

    def program(self, h, w):
        spaces = _spaces(10, h, w, wide=False)
        spaces["Invert"] = (torch.tensor(0.0), False)
        table = _POLICIES[self.policy.value]
        sub = table[int(torch.randint(len(table), ()))]
        ops = []
        for name, p, mag_bin in sub:
            if float(torch.rand(())) <= p:
                mags, signed = spaces[name]
                ops.append((name, _signed(mags, signed, mag_bin)))
        return ops


class RandAugment(_AutoAugmentBase):
    """``num_ops`` random ops at a fixed ``magnitude`` (RandAugment)."""

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation=InterpolationMode.NEAREST, fill=None,
                 per_sample: bool = False) -> None:
        super().__init__(interpolation, fill, per_sample)
        if not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops must be a non-negative int, got {num_ops!r}")
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"num_magnitude_bins must be an int >= 2, got {num_magnitude_bins!r}")
        if not isinstance(magnitude, int) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"magnitude must be an int in [0, {num_magnitude_bins}), "
                             f"got {magnitude!r}")
        self.num_ops, self.magnitude = num_ops, magnitude
        self.num_magnitude_bins = num_magnitude_bins

    def program(self, h, w):
        spaces = _spaces(self.num_magnitude_bins, h, w, wide=False)
        names = list(spaces)
        ops = []
        for _ in range(self.num_ops):
            name = names[int(torch.randint(len(names), ()))]
            mags, signed = spaces[name]
            ops.append((name, _signed(mags, signed, self.magnitude)))
        return ops


class TrivialAugmentWide(_AutoAugmentBase):
    """One random op at a random magnitude from the wide ranges (TrivialAugment)."""

    def __init__(self, num_magnitude_bins: int = 31, interpolation=InterpolationMode.NEAREST,
                 fill=None, per_sample: bool = False) -> None:
        super().__init__(interpolation, fill, per_sample)
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"num_magnitude_bins must be an int >= 2, got {num_magnitude_bins!r}")
        self.num_magnitude_bins = num_magnitude_bins

    def program(self, h, w):
        spaces = _spaces(self.num_magnitude_bins, h, w, wide=True)
        names = list(spaces)
        name = names[int(torch.randint(len(names), ()))]
        mags, signed = spaces[name]
        # the bin is drawn only for ops with magnitudes, as torchvision draws it
        k = int(torch.randint(self.num_magnitude_bins, ())) if mags.ndim else None
        return [(name, _signed(mags, signed, k))]


def _augmix_space(h: int, w: int, all_ops: bool) -> dict[str, tuple[torch.Tensor | None, bool]]:
    """AugMix's ops in torchvision's order: op -> (magnitudes of its 10 bins or None, signed)."""
    lin = lambda a, b: torch.linspace(a, b, 10)
    space = {
        "ShearX": (lin(0.0, 0.3), True),
        "ShearY": (lin(0.0, 0.3), True),
        "TranslateX": (lin(0.0, w / 3.0), True),
        "TranslateY": (lin(0.0, h / 3.0), True),
        "Rotate": (lin(0.0, 30.0), True),
        "Posterize": ((4 - (torch.arange(10) / ((10 - 1) / 4))).round().int(), False),
        "Solarize": (lin(1.0, 0.0), False),
        "AutoContrast": (None, False),
        "Equalize": (None, False),
    }
    if all_ops:
        for name in ("Brightness", "Color", "Contrast", "Sharpness"):
            space[name] = (lin(0.0, 0.9), True)
    return space


class AugMix(_AutoAugmentBase):
    """AugMix: a Dirichlet-weighted mix of ``mixture_width`` random op chains, blended with
    the image by a Beta(alpha, alpha) weight (draws in torchvision's order)."""

    _PARAMETER_MAX = 10

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1,
                 alpha: float = 1.0, all_ops: bool = True,
                 interpolation=InterpolationMode.BILINEAR, fill=None,
                 per_sample: bool = False) -> None:
        super().__init__(interpolation, fill, per_sample)
        if not 1 <= severity <= self._PARAMETER_MAX:
            raise ValueError(f"The severity must be between [1, {self._PARAMETER_MAX}]. "
                             f"Got {severity} instead.")
        if not isinstance(severity, int):   # torchvision: a TypeError at the first call
            raise TypeError(f"severity must be an int, got {severity!r}")
        if not isinstance(mixture_width, int) or mixture_width < 0:
            raise ValueError(f"mixture_width must be a non-negative int, got {mixture_width!r}")
        if not isinstance(chain_depth, int):
            raise ValueError(f"chain_depth must be an int, got {chain_depth!r}")
        if not isinstance(alpha, (int, float)) or not alpha > 0:
            raise ValueError(f"alpha must be a positive number, got {alpha!r}")
        self.severity, self.mixture_width, self.chain_depth = severity, mixture_width, chain_depth
        self.alpha, self.all_ops = float(alpha), bool(all_ops)

    def _sample_dirichlet(self, params: torch.Tensor) -> torch.Tensor:
        """One Dirichlet draw per row of ``params`` (a method, so tests can replace it)."""
        return torch._sample_dirichlet(params)

    def chain(self, h: int, w: int) -> list[tuple[str, float]]:
        """One augmentation chain: its ops and signed magnitudes."""
        space = _augmix_space(h, w, self.all_ops)
        names = list(space)
        depth = self.chain_depth if self.chain_depth > 0 else int(torch.randint(1, 4, (1,)))
        ops = []
        for _ in range(depth):
            name = names[int(torch.randint(len(names), ()))]
            mags, signed = space[name]
            mag = 0.0
            if mags is not None:
                mag = float(mags[int(torch.randint(self.severity, ()))])
                if signed and float(torch.rand(())) <= 0.5:
                    mag = -mag
            ops.append((name, mag))
        return ops

    def _mix(self, x: torch.Tensor, video: bool, h: int, w: int) -> torch.Tensor:
        dims = list(x.shape)
        need = 5 if video else 4
        batch = x.reshape([1] * max(need - x.ndim, 0) + dims)
        n = batch.shape[0]
        bshape = [n] + [1] * (batch.ndim - 1)
        alpha = torch.tensor([self.alpha, self.alpha], device=batch.device)
        m = self._sample_dirichlet(alpha.expand(n, -1))
        weights = self._sample_dirichlet(
            torch.tensor([self.alpha] * self.mixture_width, device=batch.device).expand(n, -1)
        ) * m[:, 1].reshape(n, -1)
        mix = m[:, 0].reshape(bshape) * batch
        fill = fill_for(self.fill, batch)   # the batch is a plain tensor, as torchvision's
        for i in range(self.mixture_width):
            aug = batch
            for name, mag in self.chain(h, w):
                aug = _apply_op(aug, name, mag, self.interpolation, fill)
            mix.add_(weights[:, i].reshape(bshape) * aug)
        return mix.reshape(dims).to(x.dtype)

    def augment(self, img, h: int, w: int):
        video = isinstance(img, tv_tensors.Video)
        x = plain(img)
        if not self.per_sample:
            out = self._mix(x, video, h, w)
        else:
            if x.ndim < (5 if video else 4):
                raise ValueError(f"per_sample=True needs a batched input (dim 0 = batch), got "
                                 f"shape {tuple(x.shape)}")
            out = torch.stack([self._mix(x[i], video and x.ndim > 4, h, w)
                               for i in range(x.shape[0])])
        return tv_tensors.wrap(out, like=img) if isinstance(img, tv_tensors.TVTensor) else out
