"""Geometric transforms (torchvision.transforms.v2 names), with optional per-sample draws."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ember.vision.transforms import functional as F
from ember.vision.transforms._transform import (
    RandomTransform,
    Transform,
    batch_info,
    check_fill,
    check_range,
    fill_for,
    query_size,
    uniform,
)
from ember.vision.transforms.functional._geometry import _check_size, parse_padding
from ember.vision.transforms.functional._utils import InterpolationMode, as_interpolation


def _pair_size(size, name="size") -> tuple[int, int]:
    s = _check_size(size, name)
    return (s[0], s[0]) if len(s) == 1 else (s[0], s[1])


def _check_per_sample(per_sample):
    if not isinstance(per_sample, bool):
        raise TypeError(f"per_sample must be a bool, got {per_sample!r}")
    return per_sample


class RandomHorizontalFlip(RandomTransform):
    """Mirror left-right with probability ``p``."""

    chunkable = True

    def transform(self, inpt, params):
        return F.horizontal_flip(inpt)


class RandomVerticalFlip(RandomTransform):
    """Mirror top-bottom with probability ``p``."""

    chunkable = True

    def transform(self, inpt, params):
        return F.vertical_flip(inpt)


class Resize(Transform):
    """Resize to ``size``: [h, w], or the shorter edge; antialiased bilinear by default."""

    chunkable = True

    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                 antialias: bool = True) -> None:
        super().__init__()
        self.size = _check_size(size, allow_none=max_size is not None)
        self.interpolation = as_interpolation(interpolation)
        self.max_size = max_size
        self.antialias = antialias
        F._geometry.output_size(1, 1, size, max_size)  # validates the combination

    def transform(self, inpt, params):
        return F.resize(inpt, self.size, self.interpolation, self.max_size, self.antialias)


class CenterCrop(Transform):
    """The central ``size`` window (zero-padded when the input is smaller)."""

    def __init__(self, size) -> None:
        super().__init__()
        self.size = list(_pair_size(size))

    def transform(self, inpt, params):
        return F.center_crop(inpt, self.size)


class FiveCrop(Transform):
    """The four corners and the centre: each image of the sample becomes a tuple of 5."""

    def __init__(self, size) -> None:
        super().__init__()
        self.size = list(_pair_size(size))

    def forward(self, *inputs):
        return _multi_crop(self, inputs, lambda x: F.five_crop(x, self.size))


def _multi_crop(t: Transform, inputs, crops):
    """Every image leaf replaced by the tuple of its crops (torchvision's structure: a sample
    (image, label) becomes ((crop, ...), label)); boxes and masks are refused."""
    from torch.utils._pytree import tree_flatten, tree_unflatten

    from ember.vision import tv_tensors
    from ember.vision.transforms._transform import transformed_leaves

    sample = inputs if len(inputs) > 1 else inputs[0]
    leaves, spec = tree_flatten(sample)
    if any(isinstance(x, (tv_tensors.BoundingBoxes, tv_tensors.Mask)) for x in leaves):
        raise TypeError(f"{type(t).__name__}() does not support BoundingBoxes or Mask inputs")
    chosen = transformed_leaves(leaves)
    return tree_unflatten([crops(x) if c else x for x, c in zip(leaves, chosen)], spec)


class TenCrop(Transform):
    """The five crops of the image and the five of its horizontal (or vertical) flip."""

    def __init__(self, size, vertical_flip: bool = False) -> None:
        super().__init__()
        self.size = list(_pair_size(size))
        self.vertical_flip = bool(vertical_flip)

    def forward(self, *inputs):
        return _multi_crop(self, inputs,
                           lambda x: F.ten_crop(x, self.size, vertical_flip=self.vertical_flip))


class Pad(Transform):
    """Pad the borders: constant ``fill``, edge, reflect or symmetric."""

    def __init__(self, padding, fill=0, padding_mode: str = "constant") -> None:
        super().__init__()
        parse_padding(padding)
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError(f"padding_mode must be constant, edge, reflect or symmetric, "
                             f"got {padding_mode!r}")
        self.padding, self.fill, self.padding_mode = padding, check_fill(fill), padding_mode

    def transform(self, inpt, params):
        return F.pad(inpt, self.padding, fill_for(self.fill, inpt), self.padding_mode)


class RandomCrop(Transform):
    """A random ``size`` window, after optional padding; ``per_sample`` draws one per image."""

    chunkable = True

    def __init__(self, size, padding=None, pad_if_needed: bool = False, fill=0,
                 padding_mode: str = "constant", per_sample: bool = False) -> None:
        super().__init__()
        self.size = list(_pair_size(size))
        if padding is not None:
            parse_padding(padding)
        self.padding, self.pad_if_needed = padding, pad_if_needed
        self.fill, self.padding_mode = check_fill(fill), padding_mode
        self.per_sample = _check_per_sample(per_sample)

    def make_params(self, leaves):
        h, w = query_size(leaves)
        lft, top, rgt, bot = parse_padding(self.padding) if self.padding is not None else (0,) * 4
        h, w = h + top + bot, w + lft + rgt
        th, tw = self.size
        if self.pad_if_needed:
            dw, dh = max(tw - w, 0), max(th - h, 0)
            lft, rgt, top, bot = lft + dw, rgt + dw, top + dh, bot + dh
            h, w = h + 2 * dh, w + 2 * dw
        if h < th or w < tw:
            raise ValueError(f"crop size {(th, tw)} is larger than the (padded) input {(h, w)}")
        padding = [lft, top, rgt, bot] if any((lft, top, rgt, bot)) else None
        if self.per_sample:
            n, dev = batch_info(leaves)
            i = (torch.rand(n, device=dev) * (h - th + 1)).long()
            j = (torch.rand(n, device=dev) * (w - tw + 1)).long()
        else:
            i = int(torch.randint(0, h - th + 1, ()))
            j = int(torch.randint(0, w - tw + 1, ()))
        return {"padding": padding, "top": i, "left": j}

    def transform(self, inpt, params):
        if params["padding"] is not None:
            inpt = F.pad(inpt, params["padding"], fill_for(self.fill, inpt), self.padding_mode)
        return F.crop(inpt, params["top"], params["left"], *self.size)


def _one_resized_crop(h: int, w: int, scale, ratio) -> dict[str, int]:
    """One RandomResizedCrop window drawn as torchvision draws it (the same random numbers
    in the same order, float64 sizes), so a seed gives torchvision's window."""
    log_r = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target = h * w * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect = torch.exp(torch.empty(1).uniform_(float(log_r[0]), float(log_r[1]))).item()
        cw = int(round(math.sqrt(target * aspect)))
        ch = int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, size=(1,)))
            left = int(torch.randint(0, w - cw + 1, size=(1,)))
            return {"top": top, "left": left, "height": ch, "width": cw}
    in_ratio = w / h
    if in_ratio < min(ratio):
        cw, ch = w, int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        cw, ch = int(round(h * max(ratio))), h
    else:
        cw, ch = w, h
    return {"top": (h - ch) // 2, "left": (w - cw) // 2, "height": ch, "width": cw}


def resized_crop_params(h: int, w: int, scale, ratio, n: int, device) -> tuple[torch.Tensor, ...]:
    """RandomResizedCrop windows (top, left, height, width) as [n] tensors, torchvision's rule:
    10 tries of random area and log-ratio, else a centre crop clamped to ``ratio``."""
    tries = 10
    area = h * w
    target = area * (scale[0] + (scale[1] - scale[0]) * torch.rand(n, tries, device=device))
    log_r = torch.log(torch.tensor(ratio, dtype=torch.float32))
    aspect = torch.exp(log_r[0] + (log_r[1] - log_r[0]) * torch.rand(n, tries, device=device))
    cw = torch.sqrt(target * aspect).round().long()
    ch = torch.sqrt(target / aspect).round().long()
    ok = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
    first = ok.long().argmax(1, keepdim=True)
    found = ok.any(1)
    cw, ch = cw.gather(1, first).squeeze(1), ch.gather(1, first).squeeze(1)
    in_ratio = w / h
    if in_ratio < min(ratio):
        fw, fh = w, int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        fw, fh = int(round(h * max(ratio))), h
    else:
        fw, fh = w, h
    cw = torch.where(found, cw, torch.full_like(cw, fw))
    ch = torch.where(found, ch, torch.full_like(ch, fh))
    top = (torch.rand(n, device=device) * (h - ch + 1)).long()
    left = (torch.rand(n, device=device) * (w - cw + 1)).long()
    top = torch.where(found, top, (h - ch) // 2)
    left = torch.where(found, left, (w - cw) // 2)
    return top, left, ch, cw


class RandomResizedCrop(Transform):
    """A random window of random area and aspect ratio, resized to ``size``."""

    chunkable = True

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias: bool = True,
                 per_sample: bool = False) -> None:
        super().__init__()
        self.size = list(_pair_size(size))
        for name, v in (("scale", scale), ("ratio", ratio)):
            if not isinstance(v, (list, tuple)) or len(v) != 2:   # TypeError, as torchvision
                raise TypeError(f"{name} must be a pair (min, max) of numbers, got {v!r}")
            if not all(x > 0 for x in v) or v[0] > v[1]:
                raise ValueError(f"{name} must be a pair (min, max) of positive numbers, got {v!r}")
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.interpolation = as_interpolation(interpolation)
        self.antialias = antialias
        self.per_sample = _check_per_sample(per_sample)

    def make_params(self, leaves):
        h, w = query_size(leaves)
        if self.per_sample:
            n, dev = batch_info(leaves)
            return dict(zip(("top", "left", "height", "width"),
                            resized_crop_params(h, w, self.scale, self.ratio, n, dev)))
        return _one_resized_crop(h, w, self.scale, self.ratio)

    def transform(self, inpt, params):
        return F.resized_crop(inpt, params["top"], params["left"], params["height"],
                              params["width"], self.size, self.interpolation, self.antialias)


class RandomRotation(Transform):
    """Rotate by a random angle in ``degrees`` (counter-clockwise)."""

    chunkable = True

    def __init__(self, degrees, interpolation=InterpolationMode.NEAREST, expand: bool = False,
                 center=None, fill=0, per_sample: bool = False) -> None:
        super().__init__()
        self.degrees = check_range(degrees, "degrees", bound=(-math.inf, math.inf))
        self.interpolation = as_interpolation(interpolation)
        self.expand, self.center, self.fill = expand, center, check_fill(fill)
        self.per_sample = _check_per_sample(per_sample)
        if per_sample and expand:
            raise ValueError("expand=True cannot be combined with per_sample=True "
                             "(the batch's outputs must share one size)")

    def make_params(self, leaves):
        n, dev = batch_info(leaves) if self.per_sample else (None, None)
        return {"angle": uniform(*self.degrees, n, dev)}

    def transform(self, inpt, params):
        return F.rotate(inpt, params["angle"], self.interpolation, self.expand, self.center,
                        fill_for(self.fill, inpt))


class RandomAffine(Transform):
    """Random rotation, translation, scale and shear about the image centre."""

    chunkable = True

    def __init__(self, degrees, translate=None, scale=None, shear=None,
                 interpolation=InterpolationMode.NEAREST, fill=0, center=None,
                 per_sample: bool = False) -> None:
        super().__init__()
        self.degrees = check_range(degrees, "degrees", bound=(-math.inf, math.inf))
        if translate is not None and (len(translate) != 2
                                      or not all(0.0 <= t <= 1.0 for t in translate)):
            raise ValueError(f"translate must be a pair of fractions in [0, 1], got {translate!r}")
        if scale is not None and (len(scale) != 2 or not 0 < scale[0] <= scale[1]):
            raise ValueError(f"scale must be a pair (min, max) of positive numbers, got {scale!r}")
        if shear is not None:
            if isinstance(shear, (int, float)):
                shear = check_range(shear, "shear", bound=(-math.inf, math.inf))
            elif len(shear) not in (2, 4):
                raise ValueError(f"shear must be a number or 2 or 4 numbers, got {shear!r}")
            shear = tuple(float(s) for s in shear)
        self.translate, self.scale, self.shear = translate, scale, shear
        self.interpolation = as_interpolation(interpolation)
        self.fill, self.center = check_fill(fill), center
        self.per_sample = _check_per_sample(per_sample)

    def make_params(self, leaves):
        h, w = query_size(leaves)
        n, dev = batch_info(leaves) if self.per_sample else (None, None)
        angle = uniform(*self.degrees, n, dev)
        if self.translate is not None:
            mx, my = self.translate[0] * w, self.translate[1] * h
            tx, ty = uniform(-mx, mx, n, dev), uniform(-my, my, n, dev)
            tx, ty = (tx.round(), ty.round()) if n is not None else (round(tx), round(ty))
        else:
            tx = ty = 0.0 if n is None else torch.zeros(n, device=dev)
        translate = [tx, ty] if n is None else torch.stack([tx, ty], -1)
        scale = uniform(*self.scale, n, dev) if self.scale is not None else (
            1.0 if n is None else torch.ones(n, device=dev))
        sx = uniform(self.shear[0], self.shear[1], n, dev) if self.shear else (
            0.0 if n is None else torch.zeros(n, device=dev))
        sy = uniform(self.shear[2], self.shear[3], n, dev) if self.shear and len(self.shear) == 4 \
            else (0.0 if n is None else torch.zeros(n, device=dev))
        shear = [sx, sy] if n is None else torch.stack([sx, sy], -1)
        return {"angle": angle, "translate": translate, "scale": scale, "shear": shear}

    def transform(self, inpt, params):
        return F.affine(inpt, params["angle"], params["translate"], params["scale"],
                        params["shear"], self.interpolation, fill_for(self.fill, inpt),
                        self.center)


class RandomPerspective(RandomTransform):
    """With probability ``p``, move each corner inwards by up to ``distortion_scale``."""

    chunkable = True

    def __init__(self, distortion_scale: float = 0.5, p: float = 0.5,
                 interpolation=InterpolationMode.BILINEAR, fill=0, per_sample: bool = False):
        super().__init__(p, per_sample)
        if not 0.0 <= distortion_scale <= 1.0:
            raise ValueError(f"distortion_scale must be in [0, 1], got {distortion_scale!r}")
        self.distortion_scale = distortion_scale
        self.interpolation = as_interpolation(interpolation)
        self.fill = check_fill(fill)

    def make_params(self, leaves):
        h, w = query_size(leaves)
        bh = int(self.distortion_scale * (h // 2)) + 1
        bw = int(self.distortion_scale * (w // 2)) + 1
        starts = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
        if not self.per_sample:  # torchvision's draws, in its order: a seed gives its corners

            def draw(lo, hi):
                return int(torch.randint(lo, hi, size=(1,)))

            ends = [[draw(0, bw), draw(0, bh)], [draw(w - bw, w), draw(0, bh)],
                    [draw(w - bw, w), draw(h - bh, h)], [draw(0, bw), draw(h - bh, h)]]
            return {"startpoints": starts, "endpoints": ends}
        n, dev = batch_info(leaves)
        dx = (torch.rand(n, 4) * bw).floor()
        dy = (torch.rand(n, 4) * bh).floor()
        ends = torch.stack([
            torch.stack([dx[:, 0], dy[:, 0]], -1),
            torch.stack([w - dx[:, 1] - 1, dy[:, 1]], -1),
            torch.stack([w - dx[:, 2] - 1, h - dy[:, 2] - 1], -1),
            torch.stack([dx[:, 3], h - dy[:, 3] - 1], -1)], 1)
        starts = torch.tensor(starts, dtype=ends.dtype).expand_as(ends)
        return {"startpoints": starts, "endpoints": ends}

    def transform(self, inpt, params):
        return F.perspective(inpt, params["startpoints"], params["endpoints"], self.interpolation,
                             fill_for(self.fill, inpt))


__all__: Sequence[str] = [
    "RandomHorizontalFlip", "RandomVerticalFlip", "Resize", "CenterCrop", "FiveCrop", "Pad",
    "RandomCrop", "RandomResizedCrop", "RandomRotation", "RandomAffine", "RandomPerspective",
]


class _RandomSize(Transform):
    """A resize to a size drawn per call (``size_for(h, w)``); the sample's parts follow."""

    chunkable = True

    def __init__(self, interpolation=InterpolationMode.BILINEAR, antialias: bool = True):
        super().__init__()
        self.interpolation = as_interpolation(interpolation)
        self.antialias = antialias

    def make_params(self, leaves):
        return {"size": self.size_for(*query_size(leaves))}

    def transform(self, inpt, params):
        return F.resize(inpt, params["size"], self.interpolation, antialias=self.antialias)


def _positive_int(v, name):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


class RandomResize(_RandomSize):
    """Resize the shorter edge to an int drawn uniformly from [min_size, max_size)."""

    def __init__(self, min_size: int, max_size: int, interpolation=InterpolationMode.BILINEAR,
                 antialias: bool = True) -> None:
        super().__init__(interpolation, antialias)
        self.min_size = _positive_int(min_size, "min_size")
        self.max_size = _positive_int(max_size, "max_size")
        if max_size <= min_size:
            raise ValueError(f"max_size must be larger than min_size (the draw excludes it), "
                             f"got {min_size}, {max_size}")

    def size_for(self, h, w):
        return [int(torch.randint(self.min_size, self.max_size, ()))]


class RandomShortestSize(_RandomSize):
    """Scale so the shorter edge is one of ``min_size`` (picked uniformly), the longer edge
    at most ``max_size``; sizes truncated to ints."""

    def __init__(self, min_size, max_size: int | None = None,
                 interpolation=InterpolationMode.BILINEAR, antialias: bool = True) -> None:
        super().__init__(interpolation, antialias)
        sizes = [min_size] if isinstance(min_size, int) else list(min_size)
        if not sizes:
            raise ValueError("min_size must be an int or a non-empty sequence of ints")
        self.min_size = [_positive_int(v, "min_size") for v in sizes]
        self.max_size = None if max_size is None else _positive_int(max_size, "max_size")

    def size_for(self, h, w):
        short = self.min_size[int(torch.randint(len(self.min_size), ()))]
        r = short / min(h, w)
        if self.max_size is not None:
            r = min(r, self.max_size / max(h, w))
        return [int(h * r), int(w * r)]


class ScaleJitter(_RandomSize):
    """Large-scale jitter: scale so the image fits ``target_size`` (given as (width,
    height), as torchvision reads it), times a factor uniform in ``scale_range``."""

    def __init__(self, target_size, scale_range=(0.1, 2.0),
                 interpolation=InterpolationMode.BILINEAR, antialias: bool = True) -> None:
        super().__init__(interpolation, antialias)
        if len(target_size) != 2 or not all(v > 0 for v in target_size):
            raise ValueError(f"target_size must be two positive numbers, got {target_size!r}")
        self.target_size = tuple(target_size)
        self.scale_range = check_range(scale_range, "scale_range")

    def size_for(self, h, w):
        lo, hi = self.scale_range
        # float32 as torchvision computes it: the truncation to ints depends on it
        scale = lo + torch.rand(1) * (hi - lo)
        r = min(self.target_size[1] / h, self.target_size[0] / w) * scale
        return [int(h * r), int(w * r)]


class RandomZoomOut(RandomTransform):
    """With probability ``p``, place the image on a canvas ``side`` times larger (``side``
    uniform in ``side_range``) at a random position, the rest filled with ``fill``."""

    def __init__(self, fill=0, side_range=(1.0, 4.0), p: float = 0.5) -> None:
        super().__init__(p)
        if len(side_range) != 2 or not 1.0 <= side_range[0] <= side_range[1]:
            raise ValueError(f"side_range must be (lo, hi) with 1 <= lo <= hi, got {side_range!r}")
        self.fill, self.side_range = check_fill(fill), tuple(float(v) for v in side_range)

    def make_params(self, leaves):
        h, w = query_size(leaves)
        lo, hi = self.side_range
        r = lo + torch.rand(1) * (hi - lo)  # float32, as torchvision draws it
        cw, ch = int(w * r), int(h * r)
        pos = torch.rand(2)
        left, top = int((cw - w) * pos[0]), int((ch - h) * pos[1])
        return {"padding": [left, top, cw - left - w, ch - top - h]}

    def transform(self, inpt, params):
        return F.pad(inpt, params["padding"], fill=fill_for(self.fill, inpt))


class RandomIoUCrop(Transform):
    """SSD's crop: draw a minimum IoU from ``sampler_options`` (1.0 or more: keep the sample),
    then up to ``trials`` crops (scale and aspect-ratio limited) until one holds a box
    centre and overlaps some such box by that IoU. Boxes whose centre falls outside are
    set to zeros (degenerate): follow with ``SanitizeBoundingBoxes``."""

    def __init__(self, min_scale: float = 0.3, max_scale: float = 1.0,
                 min_aspect_ratio: float = 0.5, max_aspect_ratio: float = 2.0,
                 sampler_options=None, trials: int = 40) -> None:
        super().__init__()
        if not 0 < min_scale <= max_scale:
            raise ValueError(f"need 0 < min_scale <= max_scale, got {min_scale}, {max_scale}")
        if not 0 < min_aspect_ratio <= max_aspect_ratio:
            raise ValueError(f"need 0 < min_aspect_ratio <= max_aspect_ratio, got "
                             f"{min_aspect_ratio}, {max_aspect_ratio}")
        self.min_scale, self.max_scale = float(min_scale), float(max_scale)
        self.min_aspect_ratio, self.max_aspect_ratio = min_aspect_ratio, max_aspect_ratio
        self.options = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] if sampler_options is None \
            else list(sampler_options)
        if not self.options:
            raise ValueError("sampler_options must not be empty")
        self.trials = _positive_int(trials, "trials")

    def forward(self, *inputs):
        import PIL.Image
        from torch.utils._pytree import tree_flatten

        from ember.vision import tv_tensors

        leaves = tree_flatten(inputs)[0]
        if not any(isinstance(x, tv_tensors.BoundingBoxes) for x in leaves) or not any(
                isinstance(x, (tv_tensors.Image, PIL.Image.Image)) or F.is_pure_tensor(x)
                for x in leaves):
            raise TypeError("RandomIoUCrop() needs a sample with an image and BoundingBoxes "
                            "(masks may come along)")
        return super().forward(*inputs)

    def _trial(self, h, w, centres):
        """One of torchvision's crop trials, with its draws and its float32 arithmetic
        (numpy float32 scalars round as torch's float32 tensors do)."""
        r = (self.min_scale + (self.max_scale - self.min_scale) * torch.rand(2)).numpy()
        nw, nh = int(np.float32(w) * r[0]), int(np.float32(h) * r[1])
        if nh == 0 or not self.min_aspect_ratio <= nw / nh <= self.max_aspect_ratio:
            return None
        r = torch.rand(2).numpy()
        left, top = int(np.float32(w - nw) * r[0]), int(np.float32(h - nh) * r[1])
        if nw == 0 or nh == 0:
            return None
        cx, cy = centres
        inside = (left < cx) & (cx < left + nw) & (top < cy) & (cy < top + nh)
        if not inside.any():
            return None
        return {"top": top, "left": left, "height": nh, "width": nw, "inside": inside}

    @staticmethod
    def _max_iou(boxes: np.ndarray, crop: list[int]) -> np.floating:
        """torchvision's box_iou of ``boxes`` with one crop, max over boxes, in the boxes'
        float dtype (the same operations in the same order)."""
        c = np.array(crop, dtype=boxes.dtype)
        area1 = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        area2 = (c[2] - c[0]) * (c[3] - c[1])
        wh = (np.minimum(boxes[:, 2:], c[2:]) - np.maximum(boxes[:, :2], c[:2])).clip(min=0)
        inter = wh[:, 0] * wh[:, 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            return (inter / (area1 + area2 - inter)).max()

    def make_params(self, leaves):
        from ember.vision import tv_tensors

        h, w = query_size(leaves)
        boxes = next(x for x in leaves if isinstance(x, tv_tensors.BoundingBoxes))
        if boxes.ndim != 2:
            raise ValueError(f"RandomIoUCrop works on unbatched boxes [N, 4], "
                             f"got {tuple(boxes.shape)}")
        xyxy = F.convert_bounding_box_format(tv_tensors.unwrap(boxes), boxes.format, "XYXY")
        centres = ((0.5 * (xyxy[:, 0] + xyxy[:, 2])).cpu().numpy(),
                   (0.5 * (xyxy[:, 1] + xyxy[:, 3])).cpu().numpy())
        # integer boxes: torchvision's box_iou upcasts them to float32
        xyxy_np = xyxy.cpu().to(xyxy.dtype if xyxy.is_floating_point() else torch.float32)
        xyxy_np = xyxy_np.numpy() if xyxy_np.dtype != torch.bfloat16 else xyxy_np.float().numpy()
        while True:  # as torchvision: redraw the option until a crop is found
            min_iou = self.options[int(torch.randint(len(self.options), (1,)))]
            if min_iou >= 1.0:
                return {}
            for _ in range(self.trials):
                p = self._trial(h, w, centres)
                if p is None:
                    continue
                crop = [p["left"], p["top"], p["left"] + p["width"], p["top"] + p["height"]]
                best = self._max_iou(xyxy_np[p["inside"]], crop)
                if best < best.dtype.type(min_iou):
                    continue
                p["inside"] = torch.from_numpy(p["inside"])
                return p

    def transform(self, inpt, params):
        from ember.vision import tv_tensors

        if not params:
            return inpt
        out = F.crop(inpt, params["top"], params["left"], params["height"], params["width"])
        if isinstance(out, tv_tensors.BoundingBoxes):
            keep = params["inside"].to(out.device).unsqueeze(-1)
            out = tv_tensors.wrap(torch.where(keep, tv_tensors.unwrap(out), 0), like=out)
        return out


class ElasticTransform(Transform):
    """Elastic distortion: a uniform [-1, 1] random field per axis, blurred with a Gaussian
    of ``sigma`` and scaled by ``alpha`` pixels; masks follow (nearest), boxes approximately."""

    def __init__(self, alpha=50.0, sigma=5.0, interpolation=InterpolationMode.BILINEAR,
                 fill=0) -> None:
        super().__init__()
        self.alpha = self._pair(alpha, "alpha")
        self.sigma = self._pair(sigma, "sigma")
        self.interpolation = as_interpolation(interpolation)
        self.fill = check_fill(fill)

    @staticmethod
    def _pair(v, name):
        vals = [v, v] if isinstance(v, (int, float)) else list(v)
        if len(vals) == 1:
            vals = vals * 2
        if len(vals) != 2 or not all(isinstance(x, (int, float)) and x >= 0 for x in vals):
            raise ValueError(f"{name} must be a non-negative number or two, got {v!r}")
        return [float(x) for x in vals]

    def _field(self, h, w, sigma_i, scale):
        d = torch.rand(1, 1, h, w) * 2 - 1
        if self.sigma[sigma_i] > 0.0:
            k = int(8 * self.sigma[sigma_i] + 1)
            k += 1 - k % 2  # odd
            d = F.gaussian_blur(d, [k, k], list(self.sigma))
        return d * scale

    def make_params(self, leaves):
        h, w = query_size(leaves)
        dx = self._field(h, w, 0, self.alpha[0] / w)
        dy = self._field(h, w, 1, self.alpha[1] / h)
        return {"displacement": torch.cat([dx, dy], 1).permute(0, 2, 3, 1)}

    def transform(self, inpt, params):
        return F.elastic(inpt, params["displacement"], self.interpolation,
                         fill_for(self.fill, inpt))
