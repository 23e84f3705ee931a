"""Per-layer attention statistics inside a model, in memory linear in T.

`Transformer.__call__(..., return_intermediates="statistics", sink_positions=...)`
runs every layer's attention through `core`: from the layer's own q and k
(after RoPE; GQA; logits x_ij = q_i . k_j / (sqrt(Dh) tau), the layer's
scale and temperature; its mask and causality)
`attnjax.analysis.attention_statistics` gives the per-row statistics
`[B, H, T]` (lse, entropy, max weight, sink mass, mean distance, ...), and
the layer's output is computed chunk by chunk over keys with that lse,

    o_i = sum_j exp(x_ij - lse_i) v_j      (visible j; 0 in fully masked rows),

so no `[T, S]` array exists: both run block of queries by chunk of keys, and the largest
temporary is `[B, H, query block, key chunk]`.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import jax.numpy as jnp

from attnjax import attention as attention_lib
from attnjax.analysis.streaming import attention_statistics, map_query_blocks
from attnjax.softmax import clip_logits

Array = jax.Array


def _lift(x: Array, rank: int) -> Array:
    return jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


def chunked_attention(query: Array, key: Array, value: Array, lse: Array, *, mask: Optional[Array] = None,
                      is_causal: bool = False, scale: float, chunk_size: int = 512,
                      query_chunk_size: int = 128) -> Array:
    """o_i = sum_j exp(x_ij - lse_i) v_j over visible keys, block of queries by chunk of keys.

    Args:
      query: `[B, T, H, D]`; key `[B, S, K, D]`, value `[B, S, K, Dv]` (K divides H).
      lse: `[B, H, T]` log-sum-exp of the same logits (`AttentionStatistics.lse`).
      mask: boolean (or 0/1) broadcastable to `[B, H, T, S]`, True = attend.
      is_causal: keys j <= i only (a block of queries skips the key chunks after its last query).
      scale: logits scale (x = clip(q . k * scale)).
      chunk_size, query_chunk_size: keys per step, queries per block.
    Returns:
      `[B, T, H, Dv]` in value's dtype: softmax attention, never holding more
      than `[B, H, query_chunk_size, chunk_size]` logits.
    """
    batch, q_len, heads, _ = query.shape
    kv_len, kv_heads, dv = key.shape[1], key.shape[2], value.shape[-1]
    size, block = min(chunk_size, kv_len), min(query_chunk_size, q_len)
    num_chunks = -(-kv_len // size)
    pad, q_pad = num_chunks * size - kv_len, -(-q_len // block) * block - q_len
    key, value = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (key, value))
    query = jnp.pad(query, ((0, 0), (0, q_pad), (0, 0), (0, 0)))
    if mask is not None:
        mask = _lift(jnp.asarray(mask) != 0, 4)
        mask = jnp.pad(mask, ((0, 0), (0, 0), (0, q_pad if mask.shape[-2] != 1 else 0),
                              (0, pad if mask.shape[-1] != 1 else 0)))
    dtype = jnp.promote_types(query.dtype, jnp.float32)
    lse = jnp.pad(lse.astype(dtype), ((0, 0), (0, 0), (0, q_pad)))[..., None]  # [B, H, T, 1]

    def block_attention(q_start):
        """The output of queries q_start .. q_start + block - 1, `[B, block, H, Dv]`."""
        q = jax.lax.dynamic_slice_in_dim(query, q_start, block, axis=1)
        block_lse = jax.lax.dynamic_slice_in_dim(lse, q_start, block, axis=2)
        block_mask = mask
        if mask is not None and mask.shape[-2] != 1:
            block_mask = jax.lax.dynamic_slice_in_dim(mask, q_start, block, axis=2)

        def accumulate(acc, start, visible):
            k = jax.lax.dynamic_slice_in_dim(key, start, size, axis=1)
            v = jax.lax.dynamic_slice_in_dim(value, start, size, axis=1)
            x = clip_logits(attention_lib.grouped_logits(q, k, scale=scale))  # [B, H, Tq, C]
            visible = _lift(visible, 4)
            if block_mask is not None:
                visible = visible & (block_mask if block_mask.shape[-1] == 1
                                     else jax.lax.dynamic_slice_in_dim(block_mask, start, size, 3))
            p = jnp.where(visible, jnp.exp(jnp.where(visible, x - block_lse, 0)), 0)
            p = jnp.reshape(p, (batch, kv_heads, heads // kv_heads, block, size))
            out = jnp.einsum("bkgts,bskd->btkgd", p, v.astype(dtype), precision=jax.lax.Precision.HIGHEST)
            return acc + jnp.reshape(out, acc.shape)

        def step(acc, start):
            i, j = q_start + jnp.arange(block)[:, None], start + jnp.arange(size)[None, :]
            visible = j < kv_len
            if is_causal:
                visible = visible & (j <= i)
            # A chunk hidden from the whole block by the positions adds nothing: skipped.
            return jax.lax.cond(jnp.any(visible), accumulate, lambda acc, *_: acc, acc, start, visible), None

        init = jnp.zeros((batch, block, heads, dv), dtype)
        starts = jnp.arange(num_chunks, dtype=jnp.int32) * size
        out, _ = jax.lax.scan(jax.checkpoint(step), init, starts)
        return out

    return map_query_blocks(block_attention, q_len, block, -3).astype(value.dtype)


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
