"""ember.core.nn: attention (scaled_dot_product_attention and the modules built on it)."""

from ember.core.nn import functional
from ember.core.nn.activation import MultiheadAttention
from ember.core.nn.functional import scaled_dot_product_attention
from ember.core.nn.transformer import TransformerEncoderLayer

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "functional",
           "scaled_dot_product_attention"]
