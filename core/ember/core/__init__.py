"""ember.core: the compiler stack behind torch.compile's interface, attention, device kernels."""

from ember.core.logs import configure_from_env as _configure_from_env
from ember.core.logs import get_logger, set_logs

__all__ = ["compile", "explain", "aot_compile", "aot_load", "get_logger", "set_logs"]
__version__ = "0.1.0"

_configure_from_env()


def __getattr__(name: str):
    # compile/explain pull in torch._dynamo: import on first use (keeps `import ember.core` light)
    if name in ("compile", "explain"):
        from ember.core import compiler

        return getattr(compiler, name)
    if name in ("aot_compile", "aot_load"):  # ahead-of-time packages (ember.core.aot)
        from ember.core import aot

        return getattr(aot, name)
    raise AttributeError(f"module 'ember.core' has no attribute {name!r}")
