"""Per-type kernel registry: a functional dispatches on the type of its input.

Built-in kernels are registered for plain tensors (treated as images), ``Image``,
``Video``, ``Mask`` and ``BoundingBoxes``; users add their own types with
``register_kernel(functional, MyType)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ember.vision import tv_tensors

_KERNELS: dict[Callable, dict[type, Callable]] = {}


def register_kernel(functional: Callable, tv_tensor_cls: type) -> Callable[[Callable], Callable]:
    """Decorator: use the decorated kernel when ``functional`` gets a ``tv_tensor_cls`` input.

    The kernel is called as ``kernel(inpt, *args, **kwargs)`` and returns the output.
    """
    if functional not in _KERNELS:
        raise ValueError(f"functional must be one of ember.vision.transforms.functional's "
                         f"dispatching functions, got {functional!r}")
    if not isinstance(tv_tensor_cls, type):
        raise TypeError(f"tv_tensor_cls must be a type, got {tv_tensor_cls!r}")

    def decorate(kernel: Callable) -> Callable:
        _KERNELS[functional][tv_tensor_cls] = kernel
        return kernel

    return decorate


def dispatcher(fn: Callable) -> Callable:
    """Turn ``fn`` (whose body is never run) into a functional dispatching on its first arg."""
    table: dict[type, Callable] = {}

    @functools.wraps(fn)
    def functional(inpt: Any, *args, **kwargs):
        for cls in type(inpt).__mro__:
            kernel = table.get(cls)
            if kernel is not None:
                return kernel(inpt, *args, **kwargs)
        raise TypeError(f"{fn.__name__}() got an input of type {type(inpt).__name__}, which has "
                        f"no kernel; supported: {sorted(c.__name__ for c in table)}")

    _KERNELS[functional] = table
    return functional


def _plain(x: torch.Tensor) -> torch.Tensor:
    return tv_tensors.unwrap(x)


def register_image(functional: Callable, kernel: Callable, *, video: bool = True) -> None:
    """Register ``kernel(tensor, ...) -> tensor`` for plain tensors, Image (and Video)."""
    def typed(inpt, *args, **kwargs):
        return tv_tensors.wrap(kernel(_plain(inpt), *args, **kwargs), like=inpt)

    _KERNELS[functional][torch.Tensor] = kernel
    _KERNELS[functional][tv_tensors.Image] = typed
    if video:
        _KERNELS[functional][tv_tensors.Video] = typed


def register_mask(functional: Callable, kernel: Callable) -> None:
    """Register ``kernel(tensor, ...) -> tensor`` for Mask."""
    def typed(inpt, *args, **kwargs):
        return tv_tensors.wrap(kernel(_plain(inpt), *args, **kwargs), like=inpt)

    _KERNELS[functional][tv_tensors.Mask] = typed


def register_boxes(functional: Callable, kernel: Callable) -> None:
    """Register ``kernel(tensor, format, canvas_size, ..., clamping_mode=) -> (tensor,
    canvas_size)`` for boxes (``clamping_mode``: the boxes' own)."""
    def typed(inpt, *args, **kwargs):
        out, canvas = kernel(_plain(inpt), inpt.format, inpt.canvas_size, *args,
                             clamping_mode=getattr(inpt, "clamping_mode", "soft"), **kwargs)
        return tv_tensors.wrap(out, like=inpt, canvas_size=canvas)

    _KERNELS[functional][tv_tensors.BoundingBoxes] = typed


def passthrough(inpt, *args, **kwargs):
    """The kernel of types a functional leaves alone: the input itself."""
    return inpt


def register_passthrough(functional: Callable, *types: type) -> None:
    """Inputs of ``types`` come back unchanged (e.g. color ops on masks and boxes)."""
    for cls in types:
        _KERNELS[functional][cls] = passthrough


def passthrough_like(cls: type, like: type) -> None:
    """``cls`` passes through every functional that ``like`` passes through."""
    for table in _KERNELS.values():
        if table.get(like) is passthrough:
            table.setdefault(cls, passthrough)


def register_raw(functional: Callable, cls: type, kernel: Callable) -> None:
    """Register ``kernel(inpt, ...)`` for ``cls`` as is (no unwrapping)."""
    _KERNELS[functional][cls] = kernel


def register_pil(functional: Callable) -> None:
    """PIL images go through ``functional``'s Image kernel and come back as PIL images."""
    import PIL.Image

    from ember.vision.transforms.functional._type_conversion import pil_kernel

    _KERNELS[functional][PIL.Image.Image] = pil_kernel(functional)
