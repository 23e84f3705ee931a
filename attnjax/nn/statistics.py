"""Per-layer attention statistics inside a model, in memory linear in T.

`Transformer.__call__(..., return_intermediates="statistics", sink_positions=...)`
runs every layer's attention through `core`: from the layer's own q, k, v
(after RoPE; GQA; logits x_ij = q_i . k_j / (sqrt(Dh) tau), the layer's
scale and temperature; its mask and causality)
`attnjax.analysis.attention_statistics(..., value=v)` gives, in one pass
block of queries by chunk of keys, the per-row statistics `[B, H, T]` (lse,
entropy, max weight, sink mass, mean distance, ...) and the layer's output

    o_i = sum_j p_ij v_j      (visible j; 0 in fully masked rows),

so no `[T, S]` array exists: the largest temporary is `[B, H, query block, key chunk]`.
"""

from __future__ import annotations

from typing import Sequence

from attnjax.analysis.streaming import attention_statistics
from attnjax.attention import default_scale


def core(sink_positions: Sequence[int] = (), chunk_size: int = 512):
    """A `MultiHeadAttention` `core` returning (heads `[B, T, H, Dh]`, `AttentionStatistics` `[B, H, T]`
    each): the module's `position` stage, then the streaming statistics in place of `attend`."""

    def run(module, q, k, v, *, mask, is_causal, decode, need_weights, dropout_rng):
        config = module.config
        if config.attention_kind != "softmax" or decode or dropout_rng is not None:
            raise ValueError(
                "attention statistics need softmax attention, a full (not decoding) forward pass and "
                f"no attention dropout (attention_kind={config.attention_kind!r}, decode={decode}, "
                f"dropout={'on' if dropout_rng is not None else 'off'})"
            )
        q, k = module.position(q), module.position(k)
        scale = default_scale(module.head_dim) / config.temperature
        stats, out = attention_statistics(
            q,
            k,
            mask=mask,
            is_causal=is_causal,
            scale=scale,
            sink_positions=sink_positions,
            chunk_size=chunk_size,
            value=v,
        )
        return out, stats

    return run
