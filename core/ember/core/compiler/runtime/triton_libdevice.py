"""``libdevice`` for generated Triton kernels: Triton's own on a GPU, numpy under the interpreter.

Triton's interpreter (``TRITON_INTERPRET=1``, how CI runs Triton kernels on CPU) cannot call
libdevice: its functions are stubs there. Under the interpreter this module supplies the same
names, computed with numpy on the interpreter's tensors, so one generated source runs both ways.
"""

from __future__ import annotations

import math
import os
import types

import numpy as np


def interpreted() -> bool:
    """Triton kernels run in Triton's CPU interpreter (set before triton is imported)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _vec(fn):
    return np.vectorize(fn, otypes=[np.float64])


_NUMPY = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "erf": _vec(math.erf), "erfc": _vec(math.erfc),
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "nearbyint": np.rint,
    "pow": np.power, "atan2": np.arctan2, "fmod": np.fmod,
}


def _numpy_libdevice() -> types.SimpleNamespace:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def make(fn):
        def call(*args):
            args = tl.broadcast(*args) if len(args) > 1 else args
            data = [a.handle.data for a in args]
            with np.errstate(all="ignore"):
                out = np.asarray(fn(*data)).astype(data[0].dtype, copy=False)
            return tl.tensor(TensorHandle(out, args[0].handle.dtype.scalar), args[0].type)
        return call

    return types.SimpleNamespace(**{name: make(fn) for name, fn in _NUMPY.items()})


def get():
    """The ``libdevice`` namespace generated kernels call."""
    if interpreted():
        return _numpy_libdevice()
    from triton.language.extra import libdevice

    return libdevice
