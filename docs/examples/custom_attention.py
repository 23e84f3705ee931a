"""A research variant of attention in an attnjax Transformer, no library code changed: softmax with
one extra zero logit ("softmax off by one", Miller 2023), so a head may attend to nothing."""

import jax
import jax.numpy as jnp

from attnjax import nn


def softmax_one_attention(q, k, v, mask=None, *, scale, is_causal=False, return_weights=False):
    """q `[B, T, H, D]`, k, v `[B, S, K, D]` (K divides H) -> out `[B, T, H, D]` (and weights
    `[B, H, T, S]`): p_ts = exp(x_ts) / (1 + sum_s' exp(x_ts')), x_ts = scale q_t . k_s, visible s."""
    groups = q.shape[-2] // k.shape[-2]  # grouped-query heads: query head h reads h // groups
    k, v = jnp.repeat(k, groups, axis=-2), jnp.repeat(v, groups, axis=-2)
    logits = jnp.einsum("...thd,...shd->...hts", q, k) * scale
    visible = jnp.broadcast_to(True if mask is None else mask, logits.shape)
    if is_causal:  # query t sees keys s <= t
        visible = jnp.tril(visible)
    logits = jnp.where(visible, logits, -jnp.inf)
    zero = jnp.zeros(logits.shape[:-1] + (1,), logits.dtype)  # the extra logit
    weights = jax.nn.softmax(jnp.concatenate([logits, zero], axis=-1), axis=-1)[..., :-1]
    out = jnp.einsum("...hts,...shd->...thd", weights, v)
    return (out, weights) if return_weights else out


def build_model(rngs, **options):
    """A causal `nn.Transformer` (`TransformerConfig.create` keywords) attending with the variant."""
    config = nn.TransformerConfig.create(causal=True, attention_fn=softmax_one_attention, **options)
    return nn.Transformer(config, rngs=rngs)
