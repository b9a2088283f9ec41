"""Model registry: ``get_model(name, **kw)``, ``list_models()``; weights from local files only."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch
from torch import nn

from ember.vision.models._weights import entry_of, resolve

_MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(name: str | None = None, *, backbone: str | None = None) -> Callable:
    """Decorator adding a builder ``fn(**kw) -> nn.Module`` under ``name`` (default: its name).
    The registered builder also takes ``weights=`` as an entry of the model's weights enum, its
    name or ``"DEFAULT"`` (loaded from ``weights_dir=`` or ``$EMBER_WEIGHTS_DIR``); with
    ``backbone`` (a classification builder's name) ``weights_backbone=`` likewise takes an
    entry of that builder's enum, and is dropped when ``weights`` is given (as in torchvision)."""
    def decorate(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        key = name or fn.__name__
        if key in _MODELS:
            raise ValueError(f"model {key!r} is already registered")

        @functools.wraps(fn)
        def builder(*args, weights=None, weights_dir=None, **kwargs) -> nn.Module:
            if backbone is not None:
                given = kwargs.get("weights_backbone")
                if weights is not None or given is None:
                    kwargs["weights_backbone"] = None
                elif entry_of(backbone, given) is not None:
                    kwargs["weights_backbone"] = resolve(backbone, given, weights_dir)
                    weights_dir = None   # used by the backbone's entry
            weights = resolve(key, weights, weights_dir, kwargs)
            return fn(*args, weights=weights, **kwargs)

        builder.__name__ = builder.__qualname__ = key
        builder._ember_model_name = key
        _MODELS[key] = builder
        return builder
    return decorate


def list_models(module=None) -> list[str]:
    """Names of the registered models, sorted; ``module`` (e.g.
    ``ember.vision.models.segmentation``) keeps those whose builder is defined inside it."""
    if module is None:
        return sorted(_MODELS)
    prefix = getattr(module, "__name__", module)
    if not isinstance(prefix, str):
        raise TypeError(f"module must be a module or its name, got {type(module).__name__}")
    return sorted(k for k, fn in _MODELS.items()
                  if fn.__module__ == prefix or fn.__module__.startswith(prefix + "."))


def get_model(name: str, **kwargs) -> nn.Module:
    """Build model ``name``; ``weights=`` takes a local state_dict file, or a weights enum
    entry / its name / ``"DEFAULT"`` (file looked up in ``weights_dir=`` or
    ``$EMBER_WEIGHTS_DIR``)."""
    if name not in _MODELS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(list_models())}")
    return _MODELS[name](**kwargs)


def load_weights(model: nn.Module, weights: str | os.PathLike | dict | None) -> nn.Module:
    """Load a state_dict (a dict, or a local file saved with ``torch.save``); never downloads."""
    if weights is None:
        return model
    if isinstance(weights, dict):
        state = weights
    elif isinstance(weights, (str, os.PathLike)):
        if not os.path.isfile(weights):
            raise ValueError(f"weights must be a local state_dict file (nothing is downloaded), "
                             f"got {str(weights)!r}, which does not exist")
        state = torch.load(weights, map_location="cpu", weights_only=True)
    else:
        raise TypeError(f"weights must be a path or a state_dict, got {type(weights).__name__}")
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    model.load_state_dict(state)
    return model
