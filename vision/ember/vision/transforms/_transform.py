"""The Transform base: walk a sample pytree, draw parameters once, apply kernels per leaf."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import PIL.Image
import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map_only, tree_unflatten

from ember.vision import tv_tensors
from ember.vision.transforms.functional._type_conversion import (
    PILImage,
    image_as_pil,
    pil_as_image,
)
from ember.vision.transforms.functional._utils import per_image_parallel

_CHUNK_BYTES = 6 << 20  # a few images per chunk: cache-resident, little Python overhead


def _is_plain(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not isinstance(x, tv_tensors.TVTensor)


def plain(x: torch.Tensor) -> torch.Tensor:
    """``x`` without its typed-sample subclass."""
    return tv_tensors.unwrap(x)


def transformed_leaves(leaves: list) -> list[bool]:
    """Which leaves a transform acts on: typed tensors, and the first plain tensor when the
    sample has no ``Image``/``Video`` (it is taken as the image); everything else passes."""
    has_image = any(isinstance(x, (tv_tensors.Image, tv_tensors.Video, PIL.Image.Image))
                    for x in leaves)
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
        if isinstance(x, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
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
    if torch.compiler.is_compiling() or new.device.type != "cpu":
        m = mask.to(new.device).view((-1,) + (1,) * (new.ndim - 1))
        out = torch.where(m, plain(new), plain(old))
    else:  # CPU torch.where and index_copy_ are slow; copy the chosen samples over instead
        out = plain(old).clone()
        src = plain(new)
        for i in torch.nonzero(mask.cpu()).flatten().tolist():
            out[i] = src[i]
    return tv_tensors.wrap(out, like=new) if isinstance(new, tv_tensors.TVTensor) else out


def uniform(lo: float, hi: float, n: int | None = None, device=None):
    """A float in [lo, hi), or a [n] tensor of them on ``device`` when ``n`` is given. The
    single draw is torchvision's (``uniform_`` of a float32 tensor, whose arithmetic is
    float32): the same value to the last bit, so Pillow warps of PIL images match exactly."""
    if n is None:
        return float(torch.empty(1).uniform_(lo, hi))
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


def check_fill(fill: Any) -> Any:
    """``fill`` checked as torchvision does: None, a number, a sequence of numbers, or a dict
    of those keyed by input type (or "others"); TypeError otherwise."""
    values = fill.values() if isinstance(fill, dict) else (fill,)
    for v in values:
        if isinstance(v, dict) or not (v is None or isinstance(v, (numbers.Number, tuple, list))):
            raise TypeError(f"fill must be None, a number, a tuple or list of numbers, or a "
                            f"dict of those by input type, got {v!r}")
    return fill


def fill_for(fill: Any, inpt: Any) -> Any:
    """The fill for one leaf: a dict is looked up by the leaf's type (PIL images under
    ``PIL.Image.Image``), then its "others" key, else None, as torchvision's."""
    if not isinstance(fill, dict):
        return fill
    cls = PIL.Image.Image if isinstance(inpt, PILImage) else type(inpt)
    if cls in fill:
        return fill[cls]
    return fill.get("others")


def _chunk_plan(targets: Sequence) -> tuple[int, int] | None:
    """(batch size, images per chunk) when every leaf is a CPU batch sharing dim 0."""
    if torch.compiler.is_compiling() or not targets:
        return None
    n = None
    for x in targets:
        if not isinstance(x, torch.Tensor) or x.device.type != "cpu" or x.ndim < 3:
            return None
        if is_image_like(x) and x.ndim < (5 if isinstance(x, tv_tensors.Video) else 4):
            return None
        if n is None:
            n = int(x.shape[0])
        elif x.shape[0] != n:
            return None
    images = [x for x in targets if is_image_like(x)]
    if not images or n is None or n < 4 or torch.get_num_threads() < 1:
        return None
    per_image = images[0][0].numel() * 4
    return n, max(1, _CHUNK_BYTES // max(per_image, 1))


def _slice_params(params: Any, sl: slice | torch.Tensor, n: int) -> Any:
    if isinstance(params, torch.Tensor):
        return params[sl] if params.ndim >= 1 and params.shape[0] == n else params
    if isinstance(params, dict):
        return {k: _slice_params(v, sl, n) for k, v in params.items()}
    if isinstance(params, list):
        return [_slice_params(v, sl, n) for v in params]
    return params


def _rows(x: torch.Tensor, sl: slice | torch.Tensor) -> torch.Tensor:
    part = plain(x)[sl]
    return tv_tensors.wrap(part, like=x) if isinstance(x, tv_tensors.TVTensor) else part


def apply_transform(t: Transform, targets: list, params: dict, fn=None) -> list:
    """``t.transform`` on every target; CPU batches of a ``chunkable`` transform run in
    cache-sized chunks of images over the thread pool (one intra-op thread each), each
    chunk written straight into the output."""
    fn = fn or t.transform
    plan = _chunk_plan(targets) if t.chunkable else None
    if plan is None:
        return [fn(x, params) for x in targets]
    n, k = plan
    starts = list(range(0, n, k))
    first: list = []

    def head(_: int) -> None:
        p0 = _slice_params(params, slice(0, k), n)
        first.extend(fn(_rows(x, slice(0, k)), p0) for x in targets)

    per_image_parallel(head, 1)  # single-threaded too: it fixes the output shapes
    if len(starts) == 1:
        return first
    # an in-place transform (e.g. Normalize(inplace=True)) returns its input rows: then the
    # input is the output and nothing is copied
    in_place = all(isinstance(f, torch.Tensor) and f.data_ptr() == x.data_ptr()
                   and f.shape[1:] == x.shape[1:] for f, x in zip(first, targets))
    if in_place:
        outs = [plain(x) for x in targets]
    else:
        outs = [plain(f).new_empty((n,) + tuple(f.shape[1:])) for f in first]
        for o, f in zip(outs, first):
            o[:k] = plain(f)

    def one(ci: int) -> None:
        sl = slice(starts[ci + 1], starts[ci + 1] + k)
        p = _slice_params(params, sl, n)
        for j, x in enumerate(targets):
            res = plain(fn(_rows(x, sl), p))
            if not in_place:
                outs[j][sl] = res

    per_image_parallel(one, len(starts) - 1)
    return [tv_tensors.wrap(o, like=f) if isinstance(f, tv_tensors.TVTensor) else o
            for o, f in zip(outs, first)]


def _standin(x: Any, n: int) -> Any:
    """A zero-copy [n, ...] tensor shaped like the rows ``x`` (types kept), for drawing the
    next stage's parameters before the whole batch has gone through this one."""
    if not isinstance(x, torch.Tensor):
        return x
    full = plain(x)[:1].expand((n,) + tuple(x.shape[1:]))
    return tv_tensors.wrap(full, like=x) if isinstance(x, tv_tensors.TVTensor) else full


def fusable(t: Any) -> bool:
    """``t`` draws through ``draw`` and maps images independently along dim 0."""
    return (isinstance(t, Transform) and t.chunkable
            and type(t).forward is Transform.forward)


def run_fused(stages: Sequence[Transform], sample: Any) -> Any:
    """Consecutive chunkable transforms as one pass: every chunk of images goes through all
    ``stages`` on one thread while it is in cache. Parameters are drawn stage by stage in
    the order (and with the random numbers) of running the stages one after the other."""
    leaves, spec = tree_flatten(sample)
    chosen = transformed_leaves(leaves)
    targets = [x for x, c in zip(leaves, chosen) if c]
    plan = None if has_pil(leaves) else _chunk_plan(targets)
    if plan is None:
        for t in stages:
            sample = t(sample)
        return sample
    n, k = plan
    draws: list = []
    head_out: list = []

    def head(_: int) -> None:
        cur = [_rows(x, slice(0, k)) for x in targets]
        shapes = targets
        for t in stages:
            d = t.draw(shapes)
            draws.append(d)
            if d is None:
                continue
            p0 = _slice_params(d[0], slice(0, k), n)
            cur = [d[1](x, p0) for x in cur]
            shapes = [_standin(x, n) for x in cur]
        head_out.extend(cur)

    per_image_parallel(head, 1)
    active = [(t, d) for t, d in zip(stages, draws) if d is not None]
    if not active:
        return sample
    if n <= k:
        out = head_out
    else:
        in_place = all(isinstance(f, torch.Tensor) and f.data_ptr() == x.data_ptr()
                       and f.shape[1:] == x.shape[1:] for f, x in zip(head_out, targets))
        if in_place:
            outs = [plain(x) for x in targets]
        else:
            outs = [plain(f).new_empty((n,) + tuple(f.shape[1:])) for f in head_out]
            for o, f in zip(outs, head_out):
                o[:k] = plain(f)
        into = None if in_place or len(targets) != 1 else _into_stage(active)
        starts = list(range(k, n, k))

        def one(ci: int) -> None:
            sl = slice(starts[ci], starts[ci] + k)
            cur = [_rows(x, sl) for x in targets]
            for j, (t, (params, fn)) in enumerate(active):
                p = _slice_params(params, sl, n)
                if into is None or j < into:
                    cur = [fn(x, p) for x in cur]
                    continue
                x = cur[0]
                if j == into:  # the result goes straight into the output rows
                    dest = outs[0][sl]
                    if fn == t.transform:
                        t.transform_into(x, p, dest)
                    else:
                        dest.copy_(plain(fn(x, p)))
                    x = tv_tensors.wrap(dest, like=x) if isinstance(x, tv_tensors.TVTensor) \
                        else dest
                else:  # later stages overwrite the output rows they own
                    t.transform_(x, p)
                cur = [x]
            if into is None and not in_place:
                for o, r in zip(outs, cur):
                    o[sl] = plain(r)

        per_image_parallel(one, len(starts))
        out = [tv_tensors.wrap(o, like=f) if isinstance(f, tv_tensors.TVTensor) else o
               for o, f in zip(outs, head_out)]
    done = iter(out)
    return tree_unflatten([next(done) if c else x for x, c in zip(leaves, chosen)], spec)


def _into_stage(active: list) -> int:
    """The stage whose result is written into the output: the trailing stages after it can
    all overwrite their input (``in_place``), so no later buffer or final copy is needed."""
    j = len(active) - 1
    while j > 0 and active[j][0].in_place and active[j][1][1] == active[j][0].transform:
        j -= 1
    return j


def has_pil(tree: Any) -> bool:
    return any(isinstance(x, PIL.Image.Image) for x in tree_flatten(tree)[0])


class Transform(nn.Module):
    """Base class: ``make_params`` draws once per call, ``transform`` maps one leaf.

    PIL images in a sample (``pil = "convert"``, the default) become tensor images for the
    call and come back as PIL images; ``"pass"`` leaves them untouched and ``"reject"``
    raises ``pil_error``, where torchvision's transform of the same name does so."""

    pil: str = "convert"
    pil_error: type = TypeError
    per_sample: bool = False
    chunkable: bool = False  # transform() treats images independently along dim 0
    in_place: bool = False  # transform_() computes into its input, keeping shape and dtype

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        if self.pil == "pass" or not has_pil(inputs):
            return super().__call__(*inputs, **kwargs)
        name = type(self).__name__
        if self.pil == "reject":
            raise self.pil_error(f"{name}() does not support PIL images; convert them with "
                                 f"ToImage() first")
        converted = tree_map_only(PIL.Image.Image, lambda x: pil_as_image(x, name), inputs)
        out = super().__call__(*converted, **kwargs)
        return tree_map_only(PILImage, image_as_pil, out)

    def make_params(self, leaves: list) -> dict[str, Any]:
        return {}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def transform_(self, inpt: Any, params: dict[str, Any]) -> Any:
        """``transform`` computed into ``inpt`` itself, a buffer the caller owns."""
        plain(inpt).copy_(plain(self.transform(inpt, params)))
        return inpt

    def transform_into(self, inpt: Any, params: dict[str, Any], out: torch.Tensor) -> None:
        """``transform`` with its result written into ``out`` (its shape and dtype)."""
        out.copy_(plain(self.transform(inpt, params)))

    def draw(self, targets: list) -> tuple[dict[str, Any], Any] | None:
        """This call's parameters and per-leaf function, or None when the call keeps the
        sample as it is."""
        return self.make_params(targets), self.transform

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        leaves, spec = tree_flatten(sample)
        chosen = transformed_leaves(leaves)
        targets = [x for x, c in zip(leaves, chosen) if c]
        drawn = self.draw(targets)
        if drawn is None:
            return sample
        done = iter(apply_transform(self, targets, drawn[0], drawn[1]))
        out = [next(done) if c else x for x, c in zip(leaves, chosen)]
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

    def _transform_or_keep(self, inpt: Any, params: dict[str, Any]) -> Any:
        apply = params["_apply"]
        if (not self.chunkable or not isinstance(inpt, torch.Tensor) or inpt.ndim < 1
                or inpt.device.type != "cpu" or torch.compiler.is_compiling()
                or inpt.shape[0] != apply.shape[0]):
            return select_samples(apply, self.transform(inpt, params), inpt)
        # CPU: transform only the chosen samples (images are independent along dim 0)
        n = int(apply.shape[0])
        chosen = torch.nonzero(apply.cpu()).flatten()
        out = plain(inpt).clone()
        if chosen.numel():
            new = plain(self.transform(_rows(inpt, chosen), _slice_params(params, chosen, n)))
            if new.shape[1:] != out.shape[1:]:
                raise ValueError(f"per-sample selection needs the transform to keep the shape, "
                                 f"got {tuple(inpt.shape)} -> {tuple(new.shape)}")
            for j, i in enumerate(chosen.tolist()):
                out[i] = new[j]
        return tv_tensors.wrap(out, like=inpt) if isinstance(inpt, tv_tensors.TVTensor) else out

    def draw(self, targets: list) -> tuple[dict[str, Any], Any] | None:
        if self.per_sample:
            n, device = batch_info(targets)
            apply = torch.rand(n, device=device) < self.p
            return {**self.make_params(targets), "_apply": apply}, self._transform_or_keep
        # drawn even when p is 1, as torchvision does, so the random stream stays in step
        if float(torch.rand(1)) >= self.p:
            return None
        return self.make_params(targets), self.transform
