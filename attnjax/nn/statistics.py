"""Per-layer attention statistics inside a model, in memory linear in T.

`Transformer.__call__(..., return_intermediates="statistics", sink_positions=...)`
runs every layer's attention through `core`: from the layer's own q, k, v
(after RoPE; GQA; logits x_ij = q_i . k_j / (sqrt(Dh) tau), the layer's
scale and temperature; its mask and causality)
`attnjax.analysis.attention_statistics(..., value=v)` gives, in one pass
block of queries by chunk of keys, the per-row statistics `[B, H, T]` (lse,
entropy, max weight, sink mass, mean distance, ...) and the layer's output

    o_i = sum_j p_ij v_j      (visible j; 0 in fully masked rows),

so no `[T, S]` array exists: the largest temporary is `[B, H, query block, key chunk]`
(a layer with a sliding window also gets its band as a `[T, S]` boolean mask). The key
chunks a layer's window or causality hides are skipped: in a model with per-layer windows
(`TransformerConfig.layer_windows`, traced in the layer scan) each layer runs the branch of
its own window (`jax.lax.switch` over the model's distinct windows, one compiled pass each).
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp

from attnjax.analysis.streaming import attention_statistics
from attnjax.attention import default_scale
from attnjax.masks import window_bounds


def core(
    sink_positions: Sequence[int] = (),
    chunk_size: int = 512,
    windows: Optional[Sequence[Optional[int]]] = None,
):
    """A `MultiHeadAttention` `core` returning (heads `[B, T, H, Dh]`, `AttentionStatistics` `[B, H, T]`
    each): the module's `position` stage, then the streaming statistics in place of `attend`.

    `windows`: the distinct windows of a model's `layer_windows` (None entries: none); the layer
    reads its own (`MultiHeadAttention.window()`, traced) and runs that window's pass, which skips
    the key chunks outside it. The mask given to the core already holds the band, so every
    branch is exact; the branch only decides what is skipped.
    """

    def run(module, q, k, v, *, mask, is_causal, decode, need_weights, dropout_rng):
        config = module.config
        if config.attention_kind != "softmax" or decode or dropout_rng is not None:
            raise ValueError(
                "attention statistics need softmax attention, a full (not decoding) forward pass and "
                f"no attention dropout (attention_kind={config.attention_kind!r}, decode={decode}, "
                f"dropout={'on' if dropout_rng is not None else 'off'})"
            )
        q, k = module.position(q), module.position(k)
        statistics = functools.partial(
            attention_statistics,
            is_causal=is_causal,
            scale=default_scale(module.head_dim) / config.temperature,
            sink_positions=sink_positions,
            chunk_size=chunk_size,
        )
        window = module.window()
        if windows is None or window is None or isinstance(window, int):
            stats, out = statistics(q, k, mask=mask, value=v, local_window=window_bounds(window))
            return out, stats

        def branch(w):
            return lambda q, k, v, mask: statistics(
                q, k, mask=mask, value=v, local_window=window_bounds(w)
            )

        index = sum(i * (window == (w or 0)) for i, w in enumerate(windows))
        stats, out = jax.lax.switch(
            jnp.asarray(index, jnp.int32), [branch(w) for w in windows], q, k, v, mask
        )
        return out, stats

    return run
