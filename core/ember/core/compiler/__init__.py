"""Ember's compiler: TorchDynamo capture -> AOTAutograd -> prims -> loop IR -> fused C++.

Stages, one module each: ``capture``, ``backend`` (aot), ``decompose``, ``lower`` (+ ``ir``),
``schedule``, ``codegen.cpp`` / ``codegen.wrapper``, ``runtime.build`` / ``runtime.cache``.
"""

from ember.core.compiler.api import ExplainOutput, compile, explain
from ember.core.compiler.backend import ember_backend

__all__ = ["ExplainOutput", "compile", "ember_backend", "explain"]
