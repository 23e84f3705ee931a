"""Attention maps at initialisation as Naderi, Nait Saada and Tanner (2025) model them, and the layer's values.

* Random Markov model (`markov`): logits G_ij iid N(-s2 / 2, s2) and
  A = softmax_row(G), a row-stochastic matrix with iid rows. With the authors'
  s2 = log 2, E e^G = 1 and Var e^G = e^s2 - 1 = 1.
* Key-query model (`key_query`): A(X) = softmax(X W_Q (X W_K)^T / sqrt(d)) for
  n tokens X `[n, d]` with orthonormal rows (X X^T = I, so d >= n) and W_Q,
  W_K `[d, d]` with iid N(0, std^2) entries. Rows of X orthonormal and W
  Gaussian make X W an `[n, d]` matrix of iid N(0, std^2) entries (the
  Gaussian is invariant under rotations), and X W_Q, X W_K are independent:
  they are drawn directly. The logits then have variance std^4.
* The same with Xavier's initialisation (`key_query_xavier`), the authors'
  default: std^2 = 2 / (d + d) = 1 / d, so the logits have variance 1 / d^2 and
  the map is nearly uniform.
* Values: the layer's output (before any output projection) is A X W_V with
  W_V iid N(0, 1) (the authors' code), and X W_V is likewise iid N(0, 1)
  `[n, d]`: `values` draws it.

The fix the paper proposes removes the outlier: A_perp = A - (1/n) 1 1^T, so
A_perp X W_V = A Z - 1 zbar^T with zbar the column means of Z = X W_V.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import attnjax

MODELS = ("markov", "key_query", "key_query_xavier")


def markov_map(key: jax.Array, length: int, logit_variance) -> jax.Array:
    """softmax_row(G), G `[n, n]` iid N(-s2 / 2, s2), in float64 -> `[n, n]`, rows summing to 1."""
    std = jnp.sqrt(jnp.asarray(logit_variance, jnp.float64))
    logits = std * jax.random.normal(key, (length, length), jnp.float64) - std**2 / 2
    return jax.nn.softmax(logits, axis=-1)


def key_query_map(key: jax.Array, length: int, width: int, weight_std) -> jax.Array:
    """softmax(Q K^T / sqrt(d)) with Q = X W_Q, K = X W_K `[n, d]` iid N(0, std^2) (orthonormal X), through
    `attnjax.attention_weights`, in float64 -> `[n, n]`."""
    kq, kk = jax.random.split(key)
    q, k = (
        weight_std * jax.random.normal(part, (length, 1, width), jnp.float64) for part in (kq, kk)
    )
    return attnjax.attention_weights(q, k)[0]  # [H = 1, n, n] -> [n, n]


def attention_map(
    key: jax.Array, model: str, length: int, width: int, logit_variance, weight_std
) -> jax.Array:
    """The map of `model` (`MODELS`) at `length` tokens of width `width`, `[n, n]` float64."""
    if model == "markov":
        return markov_map(key, length, logit_variance)
    if model == "key_query_xavier":
        return key_query_map(key, length, width, 1 / jnp.sqrt(jnp.asarray(width, jnp.float64)))
    return key_query_map(key, length, width, weight_std)


def values(key: jax.Array, length: int, width: int) -> jax.Array:
    """Z = X W_V `[n, d]`, iid N(0, 1) entries (orthonormal X, Gaussian W_V), float64."""
    return jax.random.normal(key, (length, width), jnp.float64)


def without_outlier(output: jax.Array, values: jax.Array) -> jax.Array:
    """(A - (1/n) 1 1^T) Z from A Z `[n, d]` and Z `[n, d]`: A Z - 1 zbar^T, zbar the column means of Z."""
    return output - jnp.mean(values, axis=0, keepdims=True)
