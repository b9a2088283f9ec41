"""ember.core: the compiler stack behind torch.compile's interface, attention, device kernels."""

from ember.core.logs import configure_from_env as _configure_from_env
from ember.core.logs import get_logger, set_logs

__all__ = ["get_logger", "set_logs"]
__version__ = "0.1.0"

_configure_from_env()
