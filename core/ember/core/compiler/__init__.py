"""Ember's compiler: TorchDynamo capture -> AOTAutograd -> prims -> loop IR -> fused C++.

Stages: ``capture``, ``backend`` (the Dynamo/AOTAutograd entry), ``decompose``, ``lowering``
(+ ``ir``), ``passes``, ``schedule``, ``codegen`` (render only), ``runtime`` (build, cache,
loaders, launchers, autotuning, CUDA graphs); ``pipeline`` drives one graph through them.
"""

from ember.core.compiler.api import ExplainOutput, compile, explain
from ember.core.compiler.backend import ember_backend

__all__ = ["ExplainOutput", "compile", "ember_backend", "explain"]
