"""ember.core.nn: attention (scaled_dot_product_attention and the modules built on it)."""

from ember.core.nn import functional
from ember.core.nn.functional import scaled_dot_product_attention

__all__ = ["functional", "scaled_dot_product_attention"]
