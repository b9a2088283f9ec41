"""ember.vision: tensor-native image/video I/O, transforms and models (torchvision's API).

Submodules load on first use, so ``import ember.vision`` stays cheap.
"""

import importlib

_SUBMODULES = ("io", "models", "ops", "transforms", "tv_tensors", "video")
__all__ = list(_SUBMODULES)


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"ember.vision.{name}")
    raise AttributeError(f"module 'ember.vision' has no attribute {name!r}")
