"""Streaming decoding with attention sinks (Xiao et al. 2023, "Efficient streaming language models with
attention sinks"): a rolling K/V cache of the first `n_sink` tokens plus the last `window`.

The cache has n_sink + W slots (`Transformer.init_cache(B, n_sink + W)`);
`cache_index` counts every token seen, so decoding runs past the cache
length. The token at absolute position p goes to slot

    slot(p) = p                              for p < n_sink + W
    slot(p) = n_sink + (p - n_sink) mod W    after (the oldest window token is overwritten).

Positions are assigned within the cache, as StreamingLLM does: after the
token at p, sink slot s has position s, and window slot s holds the token
(p - ((p - s) mod W)) at position min(p, n_sink + W - 1) - ((p - s) mod W),
i.e. the window tokens sit at n_sink, ..., n_sink + W - 1, oldest first, and
the query at the newest position min(p, n_sink + W - 1). Before the cache is
full this is the plain cache (position = slot = p).

RoPE: keys are stored un-rotated and rotated by their slot's cache position
at every read (`MultiHeadAttention.position`, so the layer's own rotary
options apply). Re-rotating stored keys would also work, but every window
key's position drops by one at each step once the cache is full, so it
would rotate all W keys every step anyway and accumulate rounding; rotating
un-rotated keys at read is exact (StreamingLLM's implementation does the same).

A layer with a sliding window of its own (`AttentionConfig.window`, or its entry of
`TransformerConfig.layer_windows`, as Gemma 3's local layers) applies it over the cache
positions: the query at position q sees the slots at positions k > q - W_layer. The
cache then equals running the model on the tokens it keeps, at positions 0, 1, ....

A chunk of C > 1 positions must fit without eviction (index + C <= n_sink + W,
e.g. the prefill); after that one token at a time. Checked when the index is
concrete; under a trace a chunk that does not fit gives NaN outputs.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def check_sink_cache(sink_cache) -> tuple[int, int]:
    """`(n_sink, window)` as two ints, n_sink >= 0 and window >= 1, else `ValueError`."""
    ok = (
        isinstance(sink_cache, (tuple, list))
        and len(sink_cache) == 2
        and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in sink_cache)
    )
    if not ok or sink_cache[0] < 0 or sink_cache[1] < 1:
        raise ValueError(
            f"sink_cache must be (n_sink, window) with ints n_sink >= 0, window >= 1, got {sink_cache!r}"
        )
    return int(sink_cache[0]), int(sink_cache[1])


def cache_positions(
    index: Array, chunk: int, n_sink: int, window: int
) -> tuple[Array, Array, Array, Array]:
    """For a chunk of `chunk` tokens at absolute positions index..index+chunk-1:

    slots `[C]` they are written to, query positions `[C]`, key positions
    `[n_sink + W]` (after the chunk is written) and the visible mask `[C, n_sink + W]`.
    """
    slots_total = n_sink + window
    p = index + jnp.arange(chunk, dtype=index.dtype)
    slots = jnp.where(p < slots_total, p, n_sink + (p - n_sink) % window)
    last = index + chunk - 1
    s = jnp.arange(slots_total, dtype=index.dtype)
    newest = jnp.minimum(last, slots_total - 1)
    key_positions = jnp.where(s < n_sink, s, newest - (last - s) % window)
    query_positions = jnp.minimum(p, slots_total - 1)
    visible = s[None, :] <= p[:, None]
    return slots, query_positions, key_positions, visible


def core(n_sink: int, window: int, attend=None):
    """A `MultiHeadAttention` `core` decoding with the sink cache, from the module's public stages
    (`position`, `attend`) and cache (`cached_key`, `cached_value`, `cache_index`).

    `attend(module)` -> a callable with `MultiHeadAttention.attend`'s signature (e.g.
    `attnjax.nn.edits.attend_fn`) or None; default (or None) the module's own `attend`.
    """

    def run(module, q, k, v, *, mask, is_causal, decode, need_weights, dropout_rng):
        if module.config.attention_kind != "softmax" or mask is not None:
            raise ValueError(
                "the sink cache needs softmax attention and no mask "
                f"(attention_kind={module.config.attention_kind!r}, mask given: {mask is not None})"
            )
        index, chunk = module.cache_index[...], q.shape[-3]
        slots, q_pos, k_pos, visible = cache_positions(index, chunk, n_sink, window)
        own = module.window()  # the layer's sliding window, over cache positions
        if own is not None:
            visible = visible & ((k_pos[None, :] > q_pos[:, None] - own) | (own == 0))
        keys = module.cached_key[...].at[:, slots].set(k.astype(module.cached_key.dtype))
        values = module.cached_value[...].at[:, slots].set(v.astype(module.cached_value.dtype))
        module.cached_key[...], module.cached_value[...] = keys, values
        keys, values = keys.astype(k.dtype), values.astype(v.dtype)
        fn: Optional[object] = None if attend is None else attend(module)
        fn = module.attend if fn is None else fn
        out, weights = fn(
            module.position(q, q_pos),
            module.position(keys, k_pos),
            values,
            mask=visible[None, None],
            is_causal=False,
            need_weights=need_weights,
            dropout_rng=dropout_rng,
        )
        module.cache_index[...] = index + chunk
        fits = (chunk == 1) | (index + chunk <= n_sink + window)
        return jnp.where(fits, out, jnp.nan), weights

    run.handles_window = True  # the layer's window applies over cache positions (above)
    return run
