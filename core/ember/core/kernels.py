"""One registry for custom ops: a schema, a fake (meta) implementation, kernels per device.

An op is declared once and then compiles without graph breaks, because TorchDynamo and
AOTAutograd see an ordinary ``torch.ops.<namespace>.<name>`` with a fake implementation::

    nms = kernels.define("ember_vision::nms",
                         "(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor")

    @nms.register_fake
    def _(boxes, scores, iou_threshold): ...

    @nms.register_kernel("cpu")        # also "cuda", "mps"
    def _(boxes, scores, iou_threshold): ...

    @nms.register_kernel("portable")   # torch ops only; serves every device without its own
    def _(boxes, scores, iou_threshold): ...

    keep = nms(boxes, scores, 0.5)

torch.library does the dispatching underneath; ``portable`` is registered as
CompositeExplicitAutograd, so a device-specific kernel always wins over it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ember.core.logs import get_logger

_log = get_logger("kernels")

# device name -> torch dispatch key
_DISPATCH_KEYS = {
    "cpu": "CPU",
    "cuda": "CUDA",
    "mps": "MPS",
    "mkldnn": "MkldnnCPU",  # an argument is oneDNN's opaque tensor (a prepacked weight)
    "portable": "CompositeExplicitAutograd",
}

_libraries: dict[str, torch.library.Library] = {}


@dataclass
class CustomOp:
    """A declared op: call it like a function; register its fake, kernels and autograd."""

    qualname: str
    schema: str
    kernels: dict[str, Callable] = field(default_factory=dict)
    has_fake: bool = False
    has_autograd: bool = False

    @property
    def namespace(self) -> str:
        return self.qualname.split("::")[0]

    @property
    def name(self) -> str:
        return self.qualname.split("::")[1]

    @property
    def op(self) -> torch._ops.OpOverloadPacket:
        """The ``torch.ops.<namespace>.<name>`` packet."""
        return getattr(getattr(torch.ops, self.namespace), self.name)

    def __call__(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def register_fake(self, fn: Callable) -> Callable:
        """Shape/dtype-only implementation used by tracing and compilation."""
        torch.library.register_fake(self.qualname, fn, lib=_libraries[self.namespace])
        self.has_fake = True
        return fn

    def register_kernel(self, device: str) -> Callable[[Callable], Callable]:
        """Decorator registering the implementation for ``device`` (see ``_DISPATCH_KEYS``)."""
        if device not in _DISPATCH_KEYS:
            raise ValueError(f"device must be one of {sorted(_DISPATCH_KEYS)}, got {device!r}")

        def decorate(fn: Callable) -> Callable:
            if device in self.kernels:
                raise ValueError(f"{self.qualname} already has a {device!r} kernel")
            _libraries[self.namespace].impl(self.name, fn, _DISPATCH_KEYS[device])
            self.kernels[device] = fn
            _log.debug("registered %s kernel for %s", device, self.qualname)
            return fn

        return decorate

    def register_autograd(self, backward: Callable, *, setup_context: Callable) -> None:
        """Make the op differentiable (see ``torch.library.register_autograd``)."""
        torch.library.register_autograd(self.qualname, backward, setup_context=setup_context,
                                        lib=_libraries[self.namespace])
        self.has_autograd = True


_registry: dict[str, CustomOp] = {}


def define(qualname: str, schema: str) -> CustomOp:
    """Declare ``namespace::name`` with a schema such as ``"(Tensor x, float a) -> Tensor"``."""
    if qualname.count("::") != 1 or not all(qualname.split("::")):
        raise ValueError(f"op name must look like 'namespace::name', got {qualname!r}")
    if not schema.startswith("("):
        raise ValueError(f"schema must start with the argument list '(...)', got {schema!r}")
    if qualname in _registry:
        raise ValueError(f"op {qualname} is already defined")
    namespace, name = qualname.split("::")
    if namespace not in _libraries:
        _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
    _libraries[namespace].define(name + schema)
    op = CustomOp(qualname, schema)
    _registry[qualname] = op
    return op


def get(qualname: str) -> CustomOp:
    """The op declared as ``qualname``."""
    try:
        return _registry[qualname]
    except KeyError:
        raise ValueError(f"no custom op {qualname!r}; defined: {sorted(_registry)}") from None


def registered() -> dict[str, list[str]]:
    """Every declared op with the devices it has kernels for."""
    return {name: sorted(op.kernels) for name, op in sorted(_registry.items())}
