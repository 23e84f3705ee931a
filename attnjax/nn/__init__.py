"""Flax NNX modules built from attnjax's pure attention functions.

* `configs`: `AttentionConfig` (one attention layer), `BlockConfig` (one
  transformer layer: width, heads, the skip / MLP / norm / residual-scale
  switches, its attention), `TransformerConfig` (depth, vocabulary,
  positions, embeddings, head, and the `block` of every layer;
  `TransformerConfig.create(**flat)` sorts flat keywords into the three).
* `attention`: `MultiHeadAttention` (separate W_q, W_k, W_v or one fused
  W_qkv, GQA, QK-norm, softmax or linear attention through any function with
  `jax.nn.dot_product_attention`'s signature, RoPE with optional frequency
  scaling, a sliding window, biases on q/k/v only, a decoding cache), a call
  being its public stages `project` -> `position` -> `attend` -> `merge`
  (`decode` when decoding), which extensions recombine through `core=`.
* `block`: `Mlp`, `make_norm`, `Block(config)`.
* `transformer`: `Transformer(config)` (layers scanned over stacked
  parameters), `sinusoidal_positions`; `generate`: its sampling program.
* `sites`: the named activation sites (resid_pre, q, k, v, logits,
  weights, head_out, attn_out, resid_mid, mlp_hidden, mlp_out, resid_post;
  embed, final): `Transformer(..., capture=[...])` returns them stacked over
  layers, `sites.replace` / `sites.affine` in `edits=` change them from data;
  `patching`: the standard sweeps (`ablate_heads`, `patch_heads`,
  `patch_residual`), every layer and head or position in one compiled program.
* `edits`: attention and residual edits (ablate, scale, remove keys,
  replace a pattern; `Transformer(..., edits=)`, `generate(..., edits=)`);
  `statistics`: per-layer attention statistics in memory linear in T
  (`return_intermediates="statistics"`); `sink_cache`: StreamingLLM's
  rolling cache of sinks + a window (`generate(..., sink_cache=)`).
* `spectra`: `attention_spectra(model, tokens)`, every layer's and head's
  leading singular values, received mass and (causal) |lambda_2| from the
  captured q and k, in memory linear in T.
* `forward`: `jit_forward(model, **call)`, the forward pass as one jitted
  function of (inputs, mask), the model split once (no NNX graph walk per call).
* `loss`: `next_token_loss(model, tokens, valid=)`, per-token and mean
  next-token cross-entropy (perplexity: its exp).
* `params`: the one map of parameter names (paths, fused-QKV slicing,
  gradient groups); `initializers`: the default initialisers
  (`POSITION_INIT_STD`, the learned position table's std, exported here).
  The option vocabularies that validate the configs stay in `configs`.

The presets that depth studies compare (attention only, + MLP, + skips, ...)
are the studies' (`experiments.architectures`); this package has the switches.
"""

from attnjax.nn import edits, params, patching, sink_cache, sites, statistics
from attnjax.nn.attention import MultiHeadAttention, RandomProjection, cosine_normalize
from attnjax.nn.block import Block, Mlp, make_norm
from attnjax.nn.configs import AttentionConfig, BlockConfig, TransformerConfig
from attnjax.nn.forward import jit_forward
from attnjax.nn.initializers import POSITION_INIT_STD
from attnjax.nn.loss import next_token_loss
from attnjax.nn.spectra import AttentionSpectra, attention_spectra
from attnjax.nn.tokens import check_tokens
from attnjax.nn.transformer import UNROLL_MAX_LAYERS, Transformer, sinusoidal_positions

__all__ = [
    "POSITION_INIT_STD",
    "UNROLL_MAX_LAYERS",
    "AttentionConfig",
    "AttentionSpectra",
    "Block",
    "BlockConfig",
    "Mlp",
    "MultiHeadAttention",
    "RandomProjection",
    "Transformer",
    "TransformerConfig",
    "attention_spectra",
    "check_tokens",
    "cosine_normalize",
    "edits",
    "jit_forward",
    "make_norm",
    "next_token_loss",
    "params",
    "patching",
    "sink_cache",
    "sites",
    "statistics",
    "sinusoidal_positions",
]
