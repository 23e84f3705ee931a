"""Flax NNX modules built from attnjax's pure attention functions.

* `configs`: `AttentionConfig` (one attention layer), `BlockConfig` (one
  transformer layer: width, heads, the skip / MLP / norm / residual-scale
  switches, its attention), `TransformerConfig` (depth, vocabulary,
  positions, embeddings, head, and the `block` of every layer;
  `TransformerConfig.create(**flat)` sorts flat keywords into the three).
* `attention`: `MultiHeadAttention` (separate W_q, W_k, W_v or one fused
  W_qkv, GQA, QK-norm, softmax or linear attention through any function with
  `jax.nn.dot_product_attention`'s signature, RoPE with optional frequency
  scaling, a sliding window, biases on q/k/v only, a decoding cache).
* `block`: `Mlp`, `make_norm`, `Block(config)`.
* `transformer`: `Transformer(config)` (layers scanned over stacked
  parameters), `sinusoidal_positions`; `generate`: its sampling program.
* `edits`: attention and residual edits (ablate, scale, remove keys,
  replace a pattern; `Transformer(..., edits=)`, `generate(..., edits=)`);
  `statistics`: per-layer attention statistics in memory linear in T
  (`return_intermediates="statistics"`); `sink_cache`: StreamingLLM's
  rolling cache of sinks + a window (`generate(..., sink_cache=)`).
* `params`: the one map of parameter names (paths, fused-QKV slicing,
  gradient groups); `initializers`: the default initialisers.

The presets that depth studies compare (attention only, + MLP, + skips, ...)
are the studies' (`experiments.architectures`); this package has the switches.
"""

from attnjax.nn import edits, params, sink_cache, statistics
from attnjax.nn.attention import MultiHeadAttention, RandomProjection, cosine_normalize
from attnjax.nn.block import Block, Mlp, make_norm
from attnjax.nn.configs import (
    ATTENTION_KINDS,
    ATTENTION_OPTIONS,
    BLOCK_OPTIONS,
    FIXED_FEATURE_MAPS,
    HEAD_CHOICES,
    INV_SQRT_DEPTH,
    MLP_ACTIVATIONS,
    MODEL_OPTIONS,
    NORM_CHOICES,
    NORM_KINDS,
    POSITION_CHOICES,
    QK_NORM_CHOICES,
    RANDOM_FEATURE_MAPS,
    AttentionConfig,
    BlockConfig,
    TransformerConfig,
)
from attnjax.nn.initializers import (
    DEFAULT_BIAS_INIT,
    DEFAULT_EMBED_INIT,
    DEFAULT_KERNEL_INIT,
    DEFAULT_POSITION_INIT,
    POSITION_INIT_STD,
)
from attnjax.nn.tokens import check_tokens
from attnjax.nn.transformer import UNROLL_MAX_LAYERS, Transformer, sinusoidal_positions

__all__ = [
    "ATTENTION_KINDS",
    "ATTENTION_OPTIONS",
    "BLOCK_OPTIONS",
    "DEFAULT_BIAS_INIT",
    "DEFAULT_EMBED_INIT",
    "DEFAULT_KERNEL_INIT",
    "DEFAULT_POSITION_INIT",
    "FIXED_FEATURE_MAPS",
    "HEAD_CHOICES",
    "INV_SQRT_DEPTH",
    "MLP_ACTIVATIONS",
    "MODEL_OPTIONS",
    "NORM_CHOICES",
    "NORM_KINDS",
    "POSITION_CHOICES",
    "POSITION_INIT_STD",
    "QK_NORM_CHOICES",
    "RANDOM_FEATURE_MAPS",
    "UNROLL_MAX_LAYERS",
    "AttentionConfig",
    "Block",
    "BlockConfig",
    "Mlp",
    "MultiHeadAttention",
    "RandomProjection",
    "Transformer",
    "TransformerConfig",
    "check_tokens",
    "cosine_normalize",
    "edits",
    "make_norm",
    "params",
    "sink_cache",
    "statistics",
    "sinusoidal_positions",
]
