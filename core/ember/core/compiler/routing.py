"""Which code path a graph takes, by the device its tensors live on.

CPU graphs get C++ kernels, CUDA graphs Triton kernels; any other device (MPS, XPU...) takes
the portable path: the captured graph runs as eager ATen on that device, announced once per
device type in the process, never an error.
"""

from __future__ import annotations

import torch

from ember.core.logs import get_logger

log = get_logger("fallback")

CODEGEN = {"cpu": "cpp", "cuda": "triton"}
_announced: set[str] = set()


def device_type(example_inputs) -> str:
    """The device type of the graph's tensor inputs (``cpu`` when it has none)."""
    types = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    if len(types) > 1:
        types.discard("cpu")  # CPU scalars ride along with GPU graphs
    if len(types) > 1:
        return "mixed"
    return types.pop() if types else "cpu"


def codegen_for(device: str, options: dict) -> str:
    """``cpp``, ``triton`` or ``portable``; ``options["codegen"]`` forces one (CPU tests)."""
    forced = options.get("codegen")
    if forced is not None:
        if forced not in ("cpp", "triton", "portable"):
            raise ValueError(f"options['codegen'] must be 'cpp', 'triton' or 'portable', "
                             f"got {forced!r}")
        return forced
    return CODEGEN.get(device, "portable")


def announce_portable(device: str) -> None:
    """Log, once per device type, that graphs on ``device`` run as eager ATen."""
    if device not in _announced:
        _announced.add(device)
        log.warning("tensors on %r have no Ember code generator: their graphs run as eager "
                    "ATen on that device (the portable path)", device)
