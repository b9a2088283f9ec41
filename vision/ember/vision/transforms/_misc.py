"""Normalize, ToDtype, RandomErasing and the bounding-box utilities."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ember.vision import tv_tensors
from ember.vision.transforms import functional as F
from ember.vision.transforms._transform import (
    RandomTransform,
    Transform,
    batch_info,
    plain,
    query_size,
)
from ember.vision.transforms.functional._utils import max_value
from ember.vision.tv_tensors import _as_format


class Normalize(Transform):
    """``(image - mean) / std`` per channel on float images."""

    chunkable = True
    pil = "reject"

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False):
        super().__init__()
        mean, std = list(mean), list(std)
        if len(mean) != len(std) or not mean:
            raise ValueError(f"mean and std must be non-empty and the same length, got "
                             f"{mean} and {std}")
        if any(s == 0 for s in std):
            raise ValueError(f"std must not contain zeros, got {std}")
        self.mean, self.std, self.inplace = mean, std, inplace

    in_place = True

    def transform(self, inpt, params):
        return F.normalize(inpt, self.mean, self.std, self.inplace)

    def transform_(self, inpt, params):
        return F.normalize(inpt, self.mean, self.std, True)


class _DtypeArgError(TypeError, ValueError):
    """A ``dtype`` argument that is neither a dtype nor a dict (torchvision: ValueError)."""


class ToDtype(Transform):
    """Convert dtypes; ``dtype`` may be a dict {type: dtype, "others": dtype}."""

    chunkable = True
    pil = "pass"

    def __init__(self, dtype, scale: bool = False) -> None:
        super().__init__()
        if not isinstance(dtype, (torch.dtype, dict)):
            raise _DtypeArgError(f"dtype must be a torch.dtype or a dict of them, got {dtype!r}")
        self.dtype, self.scale = dtype, scale

    def transform(self, inpt, params):
        if isinstance(self.dtype, torch.dtype):
            dtype = self.dtype
            if not isinstance(inpt, (tv_tensors.Image, tv_tensors.Video)) and isinstance(
                    inpt, tv_tensors.TVTensor):
                return inpt  # as torchvision: a bare dtype converts images and videos only
        elif type(inpt) in self.dtype:   # the exact type, then "others", as torchvision
            dtype = self.dtype[type(inpt)]
        elif "others" in self.dtype:
            dtype = self.dtype["others"]
        else:
            raise ValueError(f"ToDtype: no dtype for inputs of type {type(inpt).__name__}; add "
                             f"it to the dict, or an 'others' entry (None passes them through)")
        if dtype is None:
            return inpt
        return F.to_dtype(inpt, dtype, self.scale)

    def transform_into(self, inpt, params, out):
        if (type(inpt) in (torch.Tensor, tv_tensors.Image, tv_tensors.Video) and self.scale
                and out.dtype == self.dtype and out.dtype.is_floating_point
                and inpt.dtype in (torch.uint8, torch.int16, torch.int32, torch.int64)):
            x = plain(inpt)
            # the conversion of F.to_dtype, without a fresh buffer
            out.copy_(x).mul_(1.0 / max_value(x.dtype))
            return
        super().transform_into(inpt, params, out)


class RandomErasing(RandomTransform):
    """With probability ``p``, set a random rectangle to ``value`` (a number, per-channel
    values, or ``"random"`` for Gaussian noise)."""

    def __init__(self, p: float = 0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0.0,
                 inplace: bool = False, per_sample: bool = False) -> None:
        super().__init__(p, per_sample)
        for name, v in (("scale", scale), ("ratio", ratio)):
            if len(v) != 2 or not 0 < v[0] <= v[1]:
                raise ValueError(f"{name} must be a pair (min, max) of positive numbers, got {v!r}")
        if scale[1] > 1:
            raise ValueError(f"scale must lie in (0, 1], got {scale!r}")
        if not (isinstance(value, (int, float)) or value == "random"
                or isinstance(value, (list, tuple))):
            raise ValueError(f"value must be a number, a sequence or 'random', got {value!r}")
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.value, self.inplace = value, inplace

    def _one(self, leaves, h: int, w: int) -> dict:
        """One rectangle drawn as torchvision draws it (the same random numbers in the same
        order, its noise for value="random" included), so a seed gives torchvision's."""
        log_r = torch.log(torch.tensor(self.ratio))
        for _ in range(10):
            area = h * w * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = torch.exp(torch.empty(1).uniform_(float(log_r[0]), float(log_r[1]))).item()
            eh = int(round(math.sqrt(area * aspect)))
            ew = int(round(math.sqrt(area / aspect)))
            if not (eh < h and ew < w):
                continue
            noise = None
            if self.value == "random":
                c = next((int(x.shape[-3]) for x in leaves if isinstance(x, torch.Tensor)
                          and not isinstance(x, (tv_tensors.Mask, tv_tensors.BoundingBoxes,
                                                 tv_tensors.KeyPoints)) and x.ndim >= 3), 1)
                noise = torch.empty([c, eh, ew], dtype=torch.float32).normal_()
            i = int(torch.randint(0, h - eh + 1, size=(1,)))
            j = int(torch.randint(0, w - ew + 1, size=(1,)))
            return {"i": i, "j": j, "h": eh, "w": ew, "noise": noise}
        return {"i": 0, "j": 0, "h": 0, "w": 0, "noise": None}

    def make_params(self, leaves):
        h, w = query_size(leaves)
        if isinstance(self.value, (list, tuple)):
            c = next((int(x.shape[-3]) for x in leaves if isinstance(x, torch.Tensor)
                      and not isinstance(x, (tv_tensors.Mask, tv_tensors.BoundingBoxes,
                                             tv_tensors.KeyPoints)) and x.ndim >= 3), None)
            if c is not None and len(self.value) not in (1, c):
                raise ValueError(f"value must have 1 or {c} (the channel count) entries, got "
                                 f"{len(self.value)}")
        if not self.per_sample:
            return self._one(leaves, h, w)
        n, dev = batch_info(leaves)
        tries = 10
        area = h * w * (self.scale[0] + (self.scale[1] - self.scale[0]) * torch.rand(n, tries))
        lr = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        aspect = torch.exp(lr[0] + (lr[1] - lr[0]) * torch.rand(n, tries))
        eh = torch.sqrt(area * aspect).round().long()
        ew = torch.sqrt(area / aspect).round().long()
        ok = (eh < h) & (ew < w)
        first = ok.long().argmax(1, keepdim=True)
        found = ok.any(1)
        eh = torch.where(found, eh.gather(1, first).squeeze(1), 0)
        ew = torch.where(found, ew.gather(1, first).squeeze(1), 0)
        i = (torch.rand(n) * (h - eh + 1)).long()
        j = (torch.rand(n) * (w - ew + 1)).long()
        return {"i": i.to(dev), "j": j.to(dev), "h": eh.to(dev), "w": ew.to(dev)}

    def transform(self, inpt, params):
        if not isinstance(inpt, torch.Tensor) or isinstance(
                inpt, (tv_tensors.Mask, tv_tensors.BoundingBoxes)):
            return inpt
        if isinstance(params["h"], int) and params["h"] == 0:
            return inpt   # no rectangle fitted in 10 tries: nothing erased, as torchvision
        if self.value == "random" and params.get("noise") is not None:
            # torchvision's noise; integer images take it around mid-range (torchvision casts
            # the raw N(0, 1) values, which wraps negatives)
            v = params["noise"].to(inpt.device)
            if not inpt.is_floating_point():
                top = F._utils.max_value(inpt.dtype)
                v = v.mul(0.5 * top).add(0.5 * top).clamp(0, top)
            v = v.to(inpt.dtype)
        elif self.value == "random":
            v = torch.randn(inpt.shape[-3:], device=inpt.device)
            if not inpt.is_floating_point():
                v = v.mul(0.5 * F._utils.max_value(inpt.dtype)).add(0.5 * F._utils.max_value(
                    inpt.dtype)).clamp(0, F._utils.max_value(inpt.dtype))
            v = v.to(inpt.dtype)
            if isinstance(params["h"], int):
                v = v[..., :params["h"], :params["w"]]
        elif isinstance(self.value, (list, tuple)):
            v = torch.as_tensor(self.value, dtype=inpt.dtype, device=inpt.device).view(-1, 1, 1)
        else:
            v = self.value
        return F.erase(inpt, params["i"], params["j"], params["h"], params["w"], v, self.inplace)


class ConvertBoundingBoxFormat(Transform):
    """Convert every ``BoundingBoxes`` in the sample to ``format``."""

    pil = "pass"

    def __init__(self, format) -> None:
        super().__init__()
        self.format = _as_format(format)

    def transform(self, inpt, params):
        if isinstance(inpt, tv_tensors.BoundingBoxes):
            return F.convert_bounding_box_format(inpt, new_format=self.format)
        return inpt


class SetClampingMode(Transform):
    """Set the ``clamping_mode`` ('soft', 'hard' or None) of every ``BoundingBoxes``; the
    coordinates are not changed."""

    pil = "pass"

    def __init__(self, clamping_mode) -> None:
        super().__init__()
        self.clamping_mode = tv_tensors._as_clamping_mode(clamping_mode)

    def transform(self, inpt, params):
        if isinstance(inpt, tv_tensors.BoundingBoxes):
            return tv_tensors.wrap(tv_tensors.unwrap(inpt).clone(), like=inpt,
                                   clamping_mode=self.clamping_mode)
        return inpt


class ClampKeyPoints(Transform):
    """Clamp every ``KeyPoints`` into its canvas (x to [0, W - 1], y to [0, H - 1])."""

    pil = "pass"

    def transform(self, inpt, params):
        if isinstance(inpt, tv_tensors.KeyPoints):
            return F.clamp_keypoints(inpt)
        return inpt


class ClampBoundingBoxes(Transform):
    """Clip every ``BoundingBoxes`` to its canvas; ``clamping_mode`` 'auto' uses each
    box tensor's own mode ('soft' and 'hard' clip axis-aligned boxes alike, None keeps)."""

    pil = "pass"

    def __init__(self, clamping_mode="auto") -> None:
        super().__init__()
        self.clamping_mode = F._boxes._check_clamping_mode(clamping_mode)

    def transform(self, inpt, params):
        if isinstance(inpt, tv_tensors.BoundingBoxes):
            return F.clamp_bounding_boxes(inpt, clamping_mode=self.clamping_mode)
        return inpt


def _label_key(d: dict):
    """The key 'labels' (any case), else the first key containing 'label' (any case)."""
    keys = [k for k in d if isinstance(k, str)]
    exact = next((k for k in keys if k.lower() == "labels"), None)
    return exact if exact is not None else next((k for k in keys if "label" in k.lower()), None)


def _default_labels(sample: Any, who: str = "SanitizeBoundingBoxes"):
    """torchvision's heuristic: the sample (or the second item of a pair) is a dict with a
    label-like key, or the second item of a pair is the labels tensor itself."""
    inner = sample[1] if isinstance(sample, (tuple, list)) and len(sample) >= 2 else sample
    if isinstance(inner, torch.Tensor) and not isinstance(inner, tv_tensors.TVTensor):
        return inner
    if isinstance(inner, dict):
        key = _label_key(inner)
        if key is not None:
            return inner[key]
    raise ValueError(f"{who} found no labels in the sample (a dict key 'labels' "
                     "or one containing 'label'); pass labels_getter=None or a callable "
                     "returning the labels")


class SanitizeBoundingBoxes(Transform):
    """Drop degenerate boxes (side < ``min_size``, area < ``min_area``, off canvas) and the
    labels and instance masks that go with them."""

    pil = "pass"

    def __init__(self, min_size: float = 1.0, min_area: float = 1.0,
                 labels_getter: Callable | str | None = "default") -> None:
        super().__init__()
        if min_size < 1:
            raise ValueError(f"min_size must be >= 1, got {min_size!r}")
        if min_area < 0:
            raise ValueError(f"min_area must be >= 0, got {min_area!r}")
        if not (labels_getter is None or labels_getter == "default" or callable(labels_getter)):
            raise ValueError(f"labels_getter must be 'default', None or a callable, "
                             f"got {labels_getter!r}")
        self.min_size, self.min_area, self.labels_getter = min_size, min_area, labels_getter

    def forward(self, *inputs):
        sample = inputs if len(inputs) > 1 else inputs[0]
        if self.labels_getter is None:
            labels = ()
        else:
            getter = _default_labels if self.labels_getter == "default" else self.labels_getter
            labels = getter(sample)
            labels = tuple(labels) if isinstance(labels, (tuple, list)) else (labels,)
        leaves, spec = tree_flatten(sample)
        boxes = [x for x in leaves if isinstance(x, tv_tensors.BoundingBoxes)]
        if len(boxes) != 1:
            raise ValueError(f"SanitizeBoundingBoxes needs exactly one BoundingBoxes in the "
                             f"sample, found {len(boxes)}")
        b = boxes[0]
        valid = F._boxes.sanitize_mask(tv_tensors.unwrap(b), b.format, b.canvas_size,
                                       self.min_size, self.min_area)
        n = b.shape[0]
        out = []
        for x in leaves:
            if x is b or any(x is lab for lab in labels) or (
                    isinstance(x, tv_tensors.Mask) and x.ndim >= 3 and x.shape[0] == n):
                out.append(x[valid.to(x.device)] if not isinstance(x, tv_tensors.TVTensor) else
                           tv_tensors.wrap(tv_tensors.unwrap(x)[valid.to(x.device)], like=x))
            else:
                out.append(x)
        return tree_unflatten(out, spec)


class SanitizeKeyPoints(Transform):
    """Drop keypoints (or whole groups of them) that lie off their canvas, and the labels
    that go with them (``labels_getter``: None by default, 'default' or a callable)."""

    pil = "pass"

    def __init__(self, labels_getter: Callable | str | None = None) -> None:
        super().__init__()
        if not (labels_getter is None or labels_getter == "default" or callable(labels_getter)):
            raise ValueError(f"labels_getter must be 'default', None or a callable, "
                             f"got {labels_getter!r}")
        self.labels_getter = labels_getter

    def forward(self, *inputs):
        sample = inputs if len(inputs) > 1 else inputs[0]
        labels: tuple = ()
        if self.labels_getter is not None:
            getter = (self.labels_getter if callable(self.labels_getter)
                      else lambda s: _default_labels(s, "SanitizeKeyPoints"))
            got = getter(sample)
            if got is not None:
                labels = tuple(got) if isinstance(got, (tuple, list)) else (got,)
                bad = [type(x).__name__ for x in labels if not isinstance(x, torch.Tensor)]
                if bad or not isinstance(got, (torch.Tensor, tuple, list)):
                    raise ValueError(f"the labels must be a tensor or a tuple/list of tensors, "
                                     f"got {bad or type(got).__name__}")
        leaves, spec = tree_flatten(sample)
        points = next((x for x in leaves if isinstance(x, tv_tensors.KeyPoints)), None)
        if points is None:
            raise ValueError("SanitizeKeyPoints found no tv_tensors.KeyPoints in the sample")
        for lab in labels:
            if lab.shape[0] != points.shape[0]:
                raise ValueError(f"the labels (shape {tuple(lab.shape)}) must have one entry "
                                 f"per keypoint group (shape {tuple(points.shape)})")
        valid = F._keypoints.sanitize_keypoints_mask(plain(points), points.canvas_size)
        out = []
        for x in leaves:
            if isinstance(x, tv_tensors.KeyPoints):
                x = tv_tensors.wrap(plain(x)[valid.to(x.device)], like=x)
            elif any(x is lab for lab in labels):
                x = x[valid.to(x.device)]
            out.append(x)
        return tree_unflatten(out, spec)


class Identity(Transform):
    """Returns its input unchanged."""

    pil = "pass"

    def forward(self, *inputs):
        return inputs if len(inputs) > 1 else inputs[0]


class Lambda(Transform):
    """``lambd(x)`` for every leaf of the sample that is an instance of one of ``types``
    (default: every leaf; a plain tensor only when it is the sample's image, as for any
    transform)."""

    pil = "pass"

    def __init__(self, lambd: Callable[[Any], Any], *types: type) -> None:
        super().__init__()
        if not callable(lambd):
            raise TypeError(f"lambd must be callable, got {type(lambd).__name__}")
        self.lambd, self.types = lambd, types or (object,)

    def forward(self, *inputs):
        from ember.vision.transforms._transform import transformed_leaves

        sample = inputs if len(inputs) > 1 else inputs[0]
        leaves, spec = tree_flatten(sample)
        tensor_taken = transformed_leaves(leaves)
        out = []
        for x, taken in zip(leaves, tensor_taken):
            eligible = taken if F.is_pure_tensor(x) else True
            out.append(self.lambd(x) if eligible and isinstance(x, self.types) else x)
        return tree_unflatten(out, spec)

    def extra_repr(self) -> str:
        return f"{getattr(self.lambd, '__name__', repr(self.lambd))}, " \
               f"types={[t.__name__ for t in self.types]}"


class LinearTransformation(Transform):
    """Flatten every image (C*H*W values), subtract ``mean_vector`` and multiply by
    ``transformation_matrix`` (e.g. ZCA whitening); PIL images are refused."""

    pil = "reject"

    def __init__(self, transformation_matrix: torch.Tensor, mean_vector: torch.Tensor) -> None:
        super().__init__()
        m, v = transformation_matrix, mean_vector
        if not isinstance(m, torch.Tensor) or not isinstance(v, torch.Tensor):
            raise TypeError("transformation_matrix and mean_vector must be tensors")
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"transformation_matrix must be square, got {tuple(m.shape)}")
        if v.ndim != 1 or v.shape[0] != m.shape[0]:
            raise ValueError(f"mean_vector must have {m.shape[0]} values (one per row of the "
                             f"matrix), got shape {tuple(v.shape)}")
        if m.device != v.device or m.dtype != v.dtype:
            raise ValueError(f"transformation_matrix and mean_vector must share device and "
                             f"dtype, got {m.device}/{m.dtype} and {v.device}/{v.dtype}")
        self.transformation_matrix, self.mean_vector = m, v

    def transform(self, inpt, params):
        if isinstance(inpt, (tv_tensors.Mask, tv_tensors.BoundingBoxes)):
            return inpt
        x = plain(inpt)
        n = x.shape[-3] * x.shape[-2] * x.shape[-1]
        if n != self.transformation_matrix.shape[0]:
            raise ValueError(f"an image of {tuple(x.shape[-3:])} has {n} values, the matrix "
                             f"takes {self.transformation_matrix.shape[0]}")
        if x.device.type != self.mean_vector.device.type:
            raise ValueError(f"the image is on {x.device}, the matrix on "
                             f"{self.mean_vector.device}")
        flat = x.reshape(-1, n) - self.mean_vector
        out = (flat @ self.transformation_matrix.to(flat.dtype)).reshape(x.shape)
        return tv_tensors.wrap(out, like=inpt) if isinstance(inpt, tv_tensors.TVTensor) else out


class UniformTemporalSubsample(Transform):
    """``num_samples`` evenly spaced frames of every video (dim -4)."""

    def __init__(self, num_samples: int) -> None:
        super().__init__()
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
        self.num_samples = num_samples

    def transform(self, inpt, params):
        if isinstance(inpt, tv_tensors.TVTensor) and not isinstance(inpt, tv_tensors.Video):
            return inpt
        return F.uniform_temporal_subsample(inpt, self.num_samples)


class ConvertImageDtype(Transform):
    """Deprecated in torchvision: ``ToDtype(dtype, scale=True)`` for images and videos."""

    chunkable = True
    pil = "pass"

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
        self.dtype = dtype

    def transform(self, inpt, params):
        if isinstance(inpt, (tv_tensors.Mask, tv_tensors.BoundingBoxes)):
            # as torchvision (its to_dtype kernel for these): a plain cast, no scaling
            return tv_tensors.wrap(plain(inpt).to(self.dtype), like=inpt)
        return F.convert_image_dtype(inpt, self.dtype)
