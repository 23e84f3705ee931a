"""Parameter-free self-attention dynamics, X <- softmax(X X^T / (sqrt(d) tau)) X: the `clusters` runs' measurements.

Each token moves to a convex combination of the tokens, so the convex hull
shrinks and the tokens cluster (Geshkovski, Letrouit, Polyanskiy & Rigollet
2023, "A mathematical perspective on Transformers").
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

import attnjax
from attnjax.analysis import effective_rank, residual_ratio

HIGHEST = lax.Precision.HIGHEST


def self_attention_step(x: jax.Array, temperature: float) -> jax.Array:
    """`X ← softmax(X Xᵀ / (√d τ)) X` for `x [T, d]`: one head with q = k = v = X (Geshkovski et al. 2023)."""
    h = x[:, None, :]
    return attnjax.dot_product_attention(h, h, h, temperature=temperature)[:, 0, :].astype(x.dtype)


def count_clusters(x: jax.Array, radius) -> jax.Array:
    """Number of clusters of the tokens `x [T, d]`: an int32 scalar.

    Tokens i, j are linked when ‖x_i − x_j‖₂ <= `radius`; clusters are the
    connected components of that graph (single linkage). Reachability by
    ⌈log₂ T⌉ boolean squarings of the (reflexive) link matrix; each
    component is counted once, at its smallest token index.
    """
    t = x.shape[0]
    sq = jnp.sum(jnp.square(x[:, None, :] - x[None, :, :]), axis=-1)
    reach = (sq <= jnp.square(radius)).astype(x.dtype)
    for _ in range(max(1, math.ceil(math.log2(t)))):
        reach = (jnp.matmul(reach, reach, precision=HIGHEST) > 0).astype(x.dtype)
    first = jnp.argmax(reach > 0, axis=-1)  # the smallest token index in each token's component
    return jnp.sum(first == jnp.arange(t)).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("temperature", "steps"))
def self_attention_dynamics(x0: jax.Array, threshold, *, temperature: float, steps: int) -> dict[str, jax.Array]:
    """Iterate `self_attention_step` from `x0 [T, d]`; every metric `[steps + 1]` (t = 0..steps).

    `clusters` (see `count_clusters`, radius `threshold` x RMS token norm of
    X_0), `residual` ‖X − 1 x̄ᵀ‖_F / ‖X‖_F (Dong et al. 2021) and
    `effective_rank` of X (Roy & Vetterli 2007).
    """
    radius = threshold * jnp.sqrt(jnp.mean(jnp.sum(jnp.square(x0), axis=-1)))

    def measure(x):
        return {"clusters": count_clusters(x, radius), "residual": residual_ratio(x),
                "effective_rank": effective_rank(x)}

    def step(x, _):
        x = self_attention_step(x, temperature)
        return x, measure(x)

    _, trajectory = lax.scan(step, x0, None, length=steps)
    first = measure(x0)
    return {k: jnp.concatenate([first[k][None], trajectory[k]]) for k in first}
