"""The next-token loss of a causal language model on its own tokens."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import optax

from attnjax.masks import key_padding_mask

Array = jax.Array


def next_token_loss(model, tokens, valid: Optional[Array] = None, **call) -> tuple[Array, Array]:
    """Per-token and mean next-token cross-entropy (nats) of `model` on `tokens`.

    `loss_bt = -log softmax(logits_bt)[tokens_b,t+1]` for t = 0..T-2, with
    `logits = model(tokens, **call)` `[B, T, V]` taken in float32; the
    perplexity is `exp(mean)`. With right-padded batches, target t counts only
    when tokens t and t + 1 are both valid, and the model is called with the
    padding mask (`attnjax.key_padding_mask(valid=valid)`) unless `call` gives one.
    Works under `jax.jit` and `nnx.jit`.

    Args:
      model: a causal `attnjax.nn.Transformer` (any callable tokens -> logits `[B, T, V]`).
      tokens: `[B, T]` int, T >= 2.
      valid: `[B, T]` bool, True for real tokens (default: all).
      **call: keywords of the model call (`edits=`, `mask=`, ...).

    Returns:
      (per_token `[B, T - 1]`, 0 where not counted; mean `[]` over the counted targets).
    """
    tokens = jnp.asarray(tokens)
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise TypeError(f"tokens must be integer token ids; got dtype {tokens.dtype}")
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must be [B, T] with T >= 2; got shape {tuple(tokens.shape)}")
    if valid is not None:
        valid = jnp.asarray(valid)
        if valid.dtype != bool:
            raise TypeError(f"valid must be boolean (True: a real token); got dtype {valid.dtype}")
        if valid.shape != tokens.shape:
            raise ValueError(
                f"valid must have the tokens' shape {tuple(tokens.shape)}; got {tuple(valid.shape)}"
            )
        call.setdefault("mask", key_padding_mask(valid=valid))
    logits = model(tokens, **call)
    if logits.shape[:2] != tokens.shape:
        raise ValueError(f"model must return logits [B, T, V]; got {tuple(logits.shape)}")
    per_token = optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :-1].astype(jnp.float32), tokens[:, 1:]
    )
    counted = jnp.ones(per_token.shape, bool) if valid is None else valid[:, :-1] & valid[:, 1:]
    per_token = jnp.where(counted, per_token, 0.0)
    return per_token, jnp.sum(per_token) / jnp.maximum(jnp.sum(counted), 1)
