r"""Self-attention dynamics on the unit sphere (Geshkovski, Letrouit, Polyanskiy & Rigollet 2023,
"A mathematical perspective on Transformers"): the `clusters` runs' measurements.

n tokens x_i on the unit sphere S^{d-1}, Q = K = V = I, inverse temperature beta:

    (SA)   dx_i/dt = P_{x_i}( (1/Z_i) sum_j exp(beta <x_i, x_j>) x_j ),  Z_i = sum_k exp(beta <x_i, x_k>)
    (USA)  dx_i/dt = P_{x_i}( (1/n)   sum_j exp(beta <x_i, x_j>) x_j )

with P_x y = y - <x, y> x, the projection onto the tangent space at x (the
continuous-time limit of a Transformer whose tokens a layer norm keeps on the
sphere). SA is softmax attention; USA ("unnormalised") replaces Z_i by n.

Integration (chosen here; the paper states the ODE): projected explicit
Euler with a fixed step dt, x_i <- (x_i + dt v_i) / ||x_i + dt v_i||, which
keeps every token on the sphere. The SA velocity is a tangent projection of
a convex combination of unit vectors, so ||v_i|| <= 1 and dt = 0.1 moves a
token by at most 0.1 per step; USA's velocity grows like exp(beta) / n.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

HIGHEST = lax.Precision.HIGHEST
VARIANTS = ("SA", "USA")


def _check_tokens(x) -> None:
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 2:
        raise ValueError(f"x must be [n, d] with n >= 1 tokens and d >= 2, got shape {x.shape}")


def sphere_velocity(x: jax.Array, beta, variant: str = "SA") -> jax.Array:
    """The right-hand side of (SA) or (USA) for unit tokens `x [n, d]` -> `[n, d]` (tangent at each x_i).

    `v_i = P_{x_i}(sum_j w_ij x_j)` with `w = softmax_j(beta <x_i, x_j>)` (SA) or
    `w_ij = exp(beta <x_i, x_j>) / n` (USA).
    """
    _check_tokens(x)
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    logits = beta * jnp.matmul(x, x.T, precision=HIGHEST)
    weights = jax.nn.softmax(logits, axis=-1) if variant == "SA" else jnp.exp(logits) / x.shape[0]
    v = jnp.matmul(weights, x, precision=HIGHEST)
    return v - jnp.sum(x * v, axis=-1, keepdims=True) * x


def sphere_step(x: jax.Array, beta, dt, variant: str = "SA") -> jax.Array:
    """One projected Euler step: `(x + dt v) / ||x + dt v||` per token, `x [n, d]` -> `[n, d]`."""
    y = x + dt * sphere_velocity(x, beta, variant)
    return y / jnp.linalg.norm(y, axis=-1, keepdims=True)


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


def unit_tokens(key, num_tokens: int, dim: int, dtype) -> jax.Array:
    """`[n, d]` tokens uniform on S^{d-1} (normalised iid N(0, 1) vectors)."""
    x = jax.random.normal(key, (num_tokens, dim), dtype)
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


@functools.partial(jax.jit, static_argnames=("variant", "num_measures", "measure_every"))
def sphere_dynamics(
    x0: jax.Array, beta, dt, radius, *, variant: str, num_measures: int, measure_every: int
) -> dict[str, jax.Array]:
    """Integrate from unit `x0 [n, d]`; the cluster count (radius `radius`, see `count_clusters`) and
    the smallest <x_i, x_j> every `measure_every` steps: `[num_measures + 1]` each (t = 0 first)."""

    def measure(x):
        return {
            "clusters": count_clusters(x, radius),
            "min_cosine": jnp.min(jnp.matmul(x, x.T, precision=HIGHEST)),
        }

    def block(x, _):
        x = lax.fori_loop(0, measure_every, lambda _, y: sphere_step(y, beta, dt, variant), x)
        return x, measure(x)

    _, trajectory = lax.scan(block, x0, None, length=num_measures)
    first = measure(x0)
    return {k: jnp.concatenate([first[k][None], trajectory[k]]) for k in first}
