"""Helpers shared by the model builders (kept apart from the registry)."""

from __future__ import annotations

import os

import torch
from torch import nn


def fixed(kwargs: dict, **values) -> dict:
    """``kwargs`` with ``values`` set; a caller's different value for one raises, as in
    torchvision (a builder's defining hyper-parameters cannot be overridden; None is unset)."""
    for key, value in values.items():
        if kwargs.get(key) is not None and kwargs[key] != value:
            raise ValueError(f"The parameter '{key}' expected value {value} "
                             f"but got {kwargs[key]} instead.")
    return {**kwargs, **values}


def divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round ``v`` to a multiple of ``divisor`` (not below ``min_value``, not more than 10%
    down): the channel rounding of the MobileNet family."""
    min_value = divisor if min_value is None else min_value
    new = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def read_state(weights) -> dict:
    """A state_dict from a dict or a local ``torch.save`` file (nothing downloads), for
    builders that must look at the checkpoint before building (auxiliary heads, old keys)."""
    if isinstance(weights, (str, os.PathLike)):
        if not os.path.isfile(weights):
            raise ValueError(f"weights must be a local state_dict file (nothing is downloaded), "
                             f"got {str(weights)!r}, which does not exist")
        weights = torch.load(weights, map_location="cpu", weights_only=True)
    if not isinstance(weights, dict):
        raise TypeError(f"weights must be a path or a state_dict, got {type(weights).__name__}")
    if "state_dict" in weights and isinstance(weights["state_dict"], dict):
        weights = weights["state_dict"]
    return weights


def load_with_aux(make, weights, kwargs: dict, aux_prefix: str, default_aux: bool):
    """torchvision's pretrained GoogLeNet / Inception v3 loading: ``transform_input`` on,
    auxiliary heads loaded when present, then dropped unless ``aux_logits`` was asked for."""
    want_aux = kwargs.get("aux_logits", default_aux)
    if weights is None:
        return make(**kwargs)
    state = read_state(weights)
    has_aux = any(k.startswith(aux_prefix) for k in state)
    kwargs.setdefault("transform_input", True)
    model = make(**{**kwargs, "aux_logits": has_aux or want_aux, "init_weights": False})
    model.load_state_dict(state, strict=has_aux or not want_aux)
    if not want_aux:
        model.drop_aux()
    return model


class IntermediateLayerGetter(nn.ModuleDict):
    """A model's direct children up to the last one named in ``return_layers`` (torchvision's
    state_dict layout); ``forward`` returns those children's outputs under their new names."""

    def __init__(self, model: nn.Module, return_layers: dict[str, str]) -> None:
        wanted = dict(return_layers)
        names = [name for name, _ in model.named_children()]
        missing = set(wanted) - set(names)
        if missing:
            raise ValueError(f"return_layers {sorted(missing)} are not children of the model "
                             f"(children: {names})")
        layers, left = {}, set(wanted)
        for name, module in model.named_children():
            layers[name] = module
            left.discard(name)
            if not left:
                break
        super().__init__(layers)
        self.return_layers = wanted

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {}
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out
