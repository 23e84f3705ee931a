"""Dong et al.'s leading order, layer by layer: the eps-scaling identity with the actual weights.

Write a layer's input as X = 1 x_bar^T + R (x_bar the mean token, R the
residual). In softmax attention the only part of the logits that depends on
both the query and the key is R W_QK R^T / sqrt(d) (the terms 1 x_bar^T W_QK
R^T and R W_QK x_bar 1^T depend on the key only or on the query only, and a
query-only shift cancels in the softmax), so the attention is 1 p^T + Delta
with Delta 1 = 0 and Delta = O(||R||^2), and

    res(attention(X) X W_V) = res(Delta R W_V) = O(||R||^3).

Feeding X_eps = 1 x_bar^T + eps R_hat through the layer, with R_hat the
layer's actual residual rescaled to the size of the shared component
(||R_hat||_F = ||1 x_bar^T||_F, so eps is the input's relative residual),
||res(layer(X_eps))|| therefore scales as eps^3 (1 + a eps + O(eps^2)): the
next-order term is O(eps), from p = softmax of the key-only term eps
x_bar^T W_QK R_hat^T / sqrt(d), whose change with eps moves the weights p by
O(eps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from attnjax.analysis.residual import residual_norm, shared_norm


def scaled_inputs(x: jax.Array, eps) -> jax.Array:
    """`x` `[..., T, D]` -> `[E, ..., T, D]`: 1 x_bar^T + eps R_hat for each eps of `eps` `[E]`.

    R_hat = R ||1 x_bar^T||_F / ||R||_F (0 where R = 0), R = X - 1 x_bar^T.
    """
    mean = jnp.mean(x, axis=-2, keepdims=True)
    r = x - mean
    size = jnp.sqrt(jnp.sum(r * r, axis=(-2, -1)))
    scale = jnp.where(size > 0, shared_norm(x) / jnp.where(size > 0, size, 1), 0)
    unit = r * scale[..., None, None]
    eps = jnp.asarray(eps, x.dtype)
    return mean[None] + eps.reshape((-1,) + (1,) * x.ndim) * unit[None]


def layer_residuals(blocks, hidden: jax.Array, eps, causal: bool = False) -> jax.Array:
    """||res(layer_l(1 x_bar^T + eps R_hat))||_1,inf of every layer's own input, per eps and example.

    Args:
      blocks: the model's stacked layers (`Transformer.blocks`, one leading axis of L).
      hidden: `[L + 1, B, T, D]`, the hidden states of a forward pass (layer l reads hidden[l - 1]).
      eps: `[E]` scales.
      causal: the layers' mask.

    Returns:
      `[E, L, B]`: the composite-norm absolute residual of each layer's output
      (`attnjax.analysis.residual.residual_norm(., 'l1inf')`).
    """
    graphdef, state = nnx.split(blocks)
    inputs = jnp.moveaxis(scaled_inputs(hidden[:-1], eps), 0, 1)  # [L, E, B, T, D]

    def one_layer(params, x):
        out, _ = nnx.merge(graphdef, params)(x, is_causal=causal, deterministic=True)
        return out

    out = jax.vmap(one_layer)(state, inputs)  # [L, E, B, T, D]
    return jnp.moveaxis(residual_norm(out, "l1inf"), 0, 1)
