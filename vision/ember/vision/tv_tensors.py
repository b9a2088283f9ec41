"""Typed samples: tensor subclasses that tell transforms what a tensor holds.

``Image``, ``Video``, ``Mask`` and ``BoundingBoxes`` (with ``format`` and ``canvas_size``)
behave as plain tensors; torch ops on them return plain tensors, as in
torchvision.tv_tensors, and transforms re-wrap their outputs.

Under TorchDynamo (torch 2.13) plain-tensor pipelines capture as one graph, while typed
samples still break the graph where a transform re-wraps its result: Dynamo refuses
``Tensor.as_subclass`` on values it traced (gb0001, "non-dispatcher-style tensor
subclass"); unwrapping is traceable (``unwrap``). Results stay correct, in several graphs.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["TVTensor", "Image", "Video", "Mask", "BoundingBoxes", "BoundingBoxFormat", "wrap",
           "unwrap", "set_return_type", "KeyPoints", "is_rotated_bounding_format"]

# Ops whose result keeps the subclass (and its metadata): they copy or move, never reinterpret.
_KEEP_TYPE = {
    torch.Tensor.clone, torch.Tensor.to, torch.Tensor.detach, torch.Tensor.requires_grad_,
    torch.Tensor.pin_memory, torch.Tensor.cpu, torch.Tensor.cuda,
}


_RETURN_TYPE = ["Tensor"]   # what torch ops on typed samples return: "Tensor" or "TVTensor"


class _ReturnType:
    """Returned by ``set_return_type``: as a context manager it restores the previous type."""

    def __init__(self, previous: str) -> None:
        self.previous = previous

    def __enter__(self) -> _ReturnType:
        return self

    def __exit__(self, *exc: Any) -> None:
        _RETURN_TYPE[0] = self.previous


def set_return_type(return_type: str) -> _ReturnType:
    """What torch ops on typed samples return: "Tensor" (plain, the default) or "TVTensor"
    (the type and metadata of their first typed argument). Global, or scoped in a ``with``."""
    names = {"tensor": "Tensor", "tvtensor": "TVTensor"}
    if not isinstance(return_type, str) or return_type.lower() not in names:
        raise ValueError(f"return_type must be 'Tensor' or 'TVTensor', got {return_type!r}")
    previous = _RETURN_TYPE[0]
    _RETURN_TYPE[0] = names[return_type.lower()]
    return _ReturnType(previous)


def _rewrap(out: Any, like: TVTensor) -> Any:
    if isinstance(out, torch.Tensor) and not isinstance(out, TVTensor):
        return wrap(out, like=like)
    if isinstance(out, (tuple, list)):
        return type(out)(_rewrap(o, like) for o in out)
    return out


class TVTensor(torch.Tensor):
    """Base of the typed samples; results of torch ops are plain tensors (typed ones under
    ``set_return_type("TVTensor")``)."""

    @staticmethod
    def _to_tensor(data: Any, dtype=None, device=None, requires_grad=None) -> torch.Tensor:
        if requires_grad is None:
            requires_grad = data.requires_grad if isinstance(data, torch.Tensor) else False
        return torch.as_tensor(data, dtype=dtype, device=device).requires_grad_(requires_grad)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if func in _KEEP_TYPE and isinstance(args[0], TVTensor) and isinstance(out, torch.Tensor):
            return wrap(out, like=args[0])
        if _RETURN_TYPE[0] == "TVTensor" and func is not torch.Tensor.as_subclass:
            like = next((a for a in args if isinstance(a, TVTensor)), None)
            if like is not None:
                return _rewrap(out, like)
        return out

    def _meta(self) -> dict[str, Any]:
        return {}

    def __repr__(self, *, tensor_contents=None) -> str:
        with torch._C.DisableTorchFunctionSubclass():
            body = torch.Tensor.__repr__(self.as_subclass(torch.Tensor))
        extra = "".join(f", {k}={v!r}" for k, v in self._meta().items())
        return f"{type(self).__name__}({body}{extra})"

    def __deepcopy__(self, memo):
        return wrap(self.as_subclass(torch.Tensor).clone(), like=self)

    def __reduce_ex__(self, protocol):
        return (_rebuild, (type(self), self.as_subclass(torch.Tensor).detach().clone(),
                           self._meta()))


def _from_pil(data: Any) -> Any:
    """A PIL image as its uint8 (or I;16 / I / F) tensor [C, H, W], as torchvision's Image and
    Mask take it; anything else unchanged."""
    import sys

    pil = sys.modules.get("PIL.Image")   # no PIL imported: data cannot be a PIL image
    if pil is not None and isinstance(data, pil.Image):
        from ember.vision.transforms.functional import pil_to_tensor

        return pil_to_tensor(data)
    return data


def _rebuild(cls, tensor, meta):
    out = tensor.as_subclass(cls)
    for k, v in meta.items():
        setattr(out, k, v)
    return out


class Image(TVTensor):
    """An image tensor ``[..., C, H, W]`` (a PIL image is converted, as torchvision does)."""

    def __new__(cls, data: Any, *, dtype=None, device=None, requires_grad=None) -> Image:
        t = cls._to_tensor(_from_pil(data), dtype=dtype, device=device, requires_grad=requires_grad)
        if t.ndim < 2:
            raise ValueError(f"Image data must have at least 2 dimensions, "
                             f"got shape {tuple(t.shape)}")
        if t.ndim == 2:
            t = t.unsqueeze(0)
        return t.as_subclass(cls)


class Video(TVTensor):
    """A video tensor ``[..., T, C, H, W]``."""

    def __new__(cls, data: Any, *, dtype=None, device=None, requires_grad=None) -> Video:
        t = cls._to_tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
        if t.ndim < 4:
            raise ValueError(f"Video data must have at least 4 dimensions (T, C, H, W), "
                             f"got shape {tuple(t.shape)}")
        return t.as_subclass(cls)


class Mask(TVTensor):
    """A segmentation or instance mask ``[..., H, W]`` (a PIL image becomes ``[C, H, W]``, as
    torchvision converts it)."""

    def __new__(cls, data: Any, *, dtype=None, device=None, requires_grad=None) -> Mask:
        t = cls._to_tensor(_from_pil(data), dtype=dtype, device=device, requires_grad=requires_grad)
        if t.ndim < 2:
            raise ValueError(f"Mask data must have at least 2 dimensions, "
                             f"got shape {tuple(t.shape)}")
        return t.as_subclass(cls)


class BoundingBoxFormat(enum.Enum):
    """Box coordinate layouts (torchvision names)."""

    XYXY = "XYXY"
    XYWH = "XYWH"
    CXCYWH = "CXCYWH"


def is_rotated_bounding_format(format: BoundingBoxFormat | str) -> bool:
    """Whether ``format`` names a rotated box layout (XYWHR, CXCYWHR, XYXYXYXY); ours has
    none, so only those names as strings give True."""
    if isinstance(format, BoundingBoxFormat):
        return format.name in _ROTATED_FORMATS
    if isinstance(format, str):
        return format in _ROTATED_FORMATS
    raise ValueError(f"format must be a str or a BoundingBoxFormat, got {type(format)}")


_ROTATED_FORMATS = ("XYWHR", "CXCYWHR", "XYXYXYXY")


def _as_format(fmt: BoundingBoxFormat | str) -> BoundingBoxFormat:
    if isinstance(fmt, BoundingBoxFormat):
        return fmt
    if isinstance(fmt, str) and fmt.upper() in BoundingBoxFormat.__members__:
        return BoundingBoxFormat[fmt.upper()]
    raise ValueError(f"format must be one of {list(BoundingBoxFormat.__members__)}, got {fmt!r}")


class KeyPoints(TVTensor):
    """Points ``[..., 2]`` (x, y in pixel indices) on an image of ``canvas_size`` (H, W):
    single points, polygons ``[N, K, 2]``, skeletons ``[N, B, 2, 2]``."""

    canvas_size: tuple[int, int]

    def __new__(cls, data: Any, *, canvas_size: Sequence[int], dtype=None, device=None,
                requires_grad=None) -> KeyPoints:
        t = cls._to_tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
        if t.ndim == 1:
            t = t.unsqueeze(0)
        if t.ndim == 0 or t.shape[-1] != 2:
            raise ValueError(f"KeyPoints data must have shape [..., 2], got {tuple(t.shape)}")
        if len(canvas_size) != 2 or not all(int(s) >= 0 for s in canvas_size):
            raise ValueError(f"canvas_size must be (height, width), got {canvas_size!r}")
        out = t.as_subclass(cls)
        out.canvas_size = (int(canvas_size[0]), int(canvas_size[1]))
        return out

    def _meta(self) -> dict[str, Any]:
        return {"canvas_size": self.canvas_size}


def _as_clamping_mode(mode: Any) -> str | None:
    if mode not in ("soft", "hard", None):
        raise ValueError(f"clamping_mode must be 'soft', 'hard' or None, got {mode!r}")
    return mode


class BoundingBoxes(TVTensor):
    """Boxes ``[..., N, 4]`` in ``format`` on an image of ``canvas_size`` (H, W)."""

    format: BoundingBoxFormat
    canvas_size: tuple[int, int]
    clamping_mode: str | None

    def __new__(cls, data: Any, *, format: BoundingBoxFormat | str,
                canvas_size: Sequence[int], clamping_mode: str | None = "soft", dtype=None,
                device=None, requires_grad=None) -> BoundingBoxes:
        t = cls._to_tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
        if t.ndim == 1:
            t = t.unsqueeze(0)
        if t.ndim == 0 or t.shape[-1] != 4:
            raise ValueError(f"BoundingBoxes data must have shape [..., N, 4], "
                             f"got {tuple(t.shape)}")
        if len(canvas_size) != 2 or not all(int(s) >= 0 for s in canvas_size):
            raise ValueError(f"canvas_size must be (height, width), got {canvas_size!r}")
        out = t.as_subclass(cls)
        out.format = _as_format(format)
        out.canvas_size = (int(canvas_size[0]), int(canvas_size[1]))
        out.clamping_mode = _as_clamping_mode(clamping_mode)
        return out

    def _meta(self) -> dict[str, Any]:
        return {"format": self.format, "canvas_size": self.canvas_size,
                "clamping_mode": getattr(self, "clamping_mode", "soft")}


def unwrap(x: Any) -> Any:
    """``x`` as a plain ``torch.Tensor`` sharing its storage (anything else unchanged)."""
    if not isinstance(x, TVTensor):
        return x
    if torch.compiler.is_compiling():
        # TorchDynamo cannot trace as_subclass(Tensor) on a subclass; an identity view goes
        # through __torch_function__, which returns plain tensors
        return x.view(x.shape)
    return x.as_subclass(torch.Tensor)


def wrap(tensor: torch.Tensor, *, like: TVTensor, **meta: Any) -> TVTensor:
    """``tensor`` as the type of ``like``, with ``like``'s metadata updated by ``meta``."""
    out = tensor.as_subclass(type(like))
    for k, v in {**like._meta(), **meta}.items():
        setattr(out, k, _as_format(v) if k == "format" else v)
    return out
