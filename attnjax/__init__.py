"""attnjax: attention through linear algebra, in JAX and Flax NNX.

Pure functions (`dot_product_attention`, `linear_attention`, masks, feature
maps) compose with `jax.jit`, `jax.vmap`, `jax.grad` and sharding; `attnjax.nn`
holds Flax NNX modules built from them; `attnjax.analysis` reads attention
matrices and hidden states as linear-algebra objects.
"""

from importlib import metadata as _metadata

from attnjax import analysis, features, masks, nn
from attnjax.attention import attention_weights, dot_product_attention, softmax_with_temperature
from attnjax.linear import linear_attention, linear_attention_step, linear_attention_weights
from attnjax.masks import causal_mask, combine_masks, key_padding_mask, local_window_mask

try:  # the version pyproject.toml declares, as installed
    __version__ = _metadata.version("attnjax")
except _metadata.PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "unknown"

__all__ = [
    "__version__",
    "analysis",
    "attention_weights",
    "causal_mask",
    "combine_masks",
    "dot_product_attention",
    "features",
    "key_padding_mask",
    "linear_attention",
    "linear_attention_step",
    "linear_attention_weights",
    "local_window_mask",
    "masks",
    "nn",
    "softmax_with_temperature",
]
