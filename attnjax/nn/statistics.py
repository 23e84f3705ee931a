"""Per-layer attention statistics inside a model, in memory linear in T.

`Transformer.__call__(..., return_intermediates="statistics", sink_positions=...)`
runs every layer's attention through `core`: from the layer's own q and k
(after RoPE; GQA; logits x_ij = q_i . k_j / (sqrt(Dh) tau), the layer's
scale and temperature; its mask and causality)
`attnjax.analysis.attention_statistics` gives the per-row statistics
`[B, H, T]` (lse, entropy, max weight, sink mass, mean distance, ...), and
the layer's output is computed chunk by chunk over keys with that lse,

    o_i = sum_j exp(x_ij - lse_i) v_j      (visible j; 0 in fully masked rows),

so no `[T, S]` array exists: the largest temporary is `[B, H, T, chunk]`.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import jax.numpy as jnp

from attnjax import attention as attention_lib
from attnjax.analysis.streaming import attention_statistics
from attnjax.softmax import clip_logits

Array = jax.Array


def _lift(x: Array, rank: int) -> Array:
    return jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


def chunked_attention(query: Array, key: Array, value: Array, lse: Array, *, mask: Optional[Array] = None,
                      is_causal: bool = False, scale: float, chunk_size: int = 512) -> Array:
    """o_i = sum_j exp(x_ij - lse_i) v_j over visible keys, one key chunk at a time.

    Args:
      query: `[B, T, H, D]`; key `[B, S, K, D]`, value `[B, S, K, Dv]` (K divides H).
      lse: `[B, H, T]` log-sum-exp of the same logits (`AttentionStatistics.lse`).
      mask: boolean (or 0/1) broadcastable to `[B, H, T, S]`, True = attend.
      is_causal: keys j <= i only.
      scale: logits scale (x = clip(q . k * scale)).
    Returns:
      `[B, T, H, Dv]` in value's dtype: softmax attention, never holding more
      than `[B, H, T, chunk]` logits.
    """
    batch, q_len, heads, _ = query.shape
    kv_len, kv_heads, dv = key.shape[1], key.shape[2], value.shape[-1]
    size = min(chunk_size, kv_len)
    num_chunks = -(-kv_len // size)
    pad = num_chunks * size - kv_len
    key, value = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (key, value))
    if mask is not None:
        mask = _lift(jnp.asarray(mask) != 0, 4)
        if mask.shape[-1] != 1:
            mask = jnp.pad(mask, ((0, 0),) * 3 + ((0, pad),))
    dtype = jnp.promote_types(query.dtype, jnp.float32)
    lse = lse.astype(dtype)[..., None]

    def step(acc, start):
        k = jax.lax.dynamic_slice_in_dim(key, start, size, axis=1)
        v = jax.lax.dynamic_slice_in_dim(value, start, size, axis=1)
        x = clip_logits(attention_lib.grouped_logits(query, k, scale=scale))  # [B, H, T, C]
        i, j = jnp.arange(q_len)[:, None], start + jnp.arange(size)[None, :]
        visible = j < kv_len
        if is_causal:
            visible = visible & (j <= i)
        visible = _lift(visible, 4)
        if mask is not None:
            visible = visible & (mask if mask.shape[-1] == 1 else jax.lax.dynamic_slice_in_dim(mask, start, size, 3))
        p = jnp.where(visible, jnp.exp(jnp.where(visible, x - lse, 0)), 0)
        p = jnp.reshape(p, (batch, kv_heads, heads // kv_heads, q_len, size))
        out = jnp.einsum("bkgts,bskd->btkgd", p, v.astype(dtype), precision=jax.lax.Precision.HIGHEST)
        return acc + jnp.reshape(out, acc.shape), None

    init = jnp.zeros((batch, q_len, heads, dv), dtype)
    starts = jnp.arange(num_chunks, dtype=jnp.int32) * size
    out, _ = jax.lax.scan(jax.checkpoint(step), init, starts)
    return out.astype(value.dtype)


def core(sink_positions: Sequence[int] = (), chunk_size: int = 512):
    """A `MultiHeadAttention` core returning (heads `[B, T, H, Dh]`, `AttentionStatistics` `[B, H, T]` each)."""

    def run(module, q, k, v, *, mask, is_causal, decode, need_weights, dropout_rng):
        config = module.config
        if config.attention_kind != "softmax" or decode or dropout_rng is not None:
            raise ValueError("attention statistics need softmax attention, a full (not decoding) forward pass and "
                             f"no attention dropout (attention_kind={config.attention_kind!r}, decode={decode}, "
                             f"dropout={'on' if dropout_rng is not None else 'off'})")
        q, k = module._rotate(q, k, 0)
        scale = 1.0 / (math.sqrt(module.head_dim) * config.temperature)
        stats = attention_statistics(q, k, mask=mask, is_causal=is_causal, scale=scale,
                                     sink_positions=sink_positions, chunk_size=chunk_size)
        out = chunked_attention(q, k, v, stats.lse, mask=mask, is_causal=is_causal, scale=scale,
                                chunk_size=chunk_size)
        return out, stats

    return run
