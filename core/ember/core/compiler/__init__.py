"""Ember's compiler: TorchDynamo capture -> AOTAutograd -> prims -> loop IR -> fused C++.

Stages: ``capture``, ``backend`` (the Dynamo/AOTAutograd entry), ``decompose``, ``lowering``
(+ ``ir``), ``passes``, ``schedule``, ``codegen`` (render only), ``runtime`` (build, cache,
loaders, launchers, autotuning, CUDA graphs); ``pipeline`` drives one graph through them.
"""

__all__ = ["ExplainOutput", "compile", "ember_backend", "explain"]


def __getattr__(name: str):
    # the entry points pull in torch._dynamo: imported on first use, so the stages (and the
    # ahead-of-time loader, which needs none of Dynamo) import light
    if name in ("ExplainOutput", "compile", "explain"):
        from ember.core.compiler import api

        return getattr(api, name)
    if name == "ember_backend":
        from ember.core.compiler.backend import ember_backend

        return ember_backend
    raise AttributeError(f"module 'ember.core.compiler' has no attribute {name!r}")
