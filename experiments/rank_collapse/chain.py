"""The exact uniform causal chain: the reference for the causal rate of a measured run.

Uniform causal attention, a_ij = 1/i for j <= i (query i averages the keys it
sees), is lower triangular with diagonal 1, 1/2, ..., 1/T, so its
eigenvalues are 1/i and |lambda_2| = 1/2: the residual of A^l X falls by 1/2
per layer asymptotically. A is strongly non-normal, so a rate fitted over
early layers sits above 1/2 (a transient) before settling. Applied to a
run's own inputs, layer after layer, it tells what part of a measured rate's
distance from |lambda_2| a finite depth window gives even where the rate is
exactly |lambda_2| asymptotically.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from attnjax.analysis.residual import residual_ratio

# |lambda_2| of uniform causal attention: its diagonal 1, 1/2, ..., 1/T are its eigenvalues.
UNIFORM_LAMBDA2 = 0.5


def uniform_causal(length: int, dtype=jnp.float64) -> jax.Array:
    """`[T, T]`: a_ij = 1/i for j <= i (rows counted from 1), 0 above the diagonal."""
    visible = jnp.tril(jnp.ones((length, length), dtype))
    return visible / jnp.sum(visible, axis=-1, keepdims=True)


def chain_residuals(x0: jax.Array, num_layers: int) -> jax.Array:
    """Relative Frobenius residual of A^l X_0, l = 0..L, mean over examples.

    x0 `[B, T, D]` -> `[L + 1]` (as `attnjax.analysis.depth.depth_profile`'s `residual_fro`).
    """
    a = uniform_causal(x0.shape[-2], x0.dtype)

    def step(x, _):
        x = jnp.einsum("ij,bjd->bid", a, x, precision=jax.lax.Precision.HIGHEST)
        return x, x

    _, xs = jax.lax.scan(step, x0, None, length=num_layers)
    hidden = jnp.concatenate([x0[None], xs])
    return jnp.mean(residual_ratio(hidden, "fro"), axis=1)
