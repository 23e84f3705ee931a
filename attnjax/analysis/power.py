"""Power iteration with a row-stochastic `A [..., n, n]`: the iterates and their measured rate.

`v ← A v` is what a stack of attention layers does to one value column
(consensus); `v ← v A` propagates a distribution towards the stationary π.
The measured contraction rate tends to `|λ_2|` (`attnjax.analysis.slem`).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from attnjax.analysis._linalg import as_matrix, eps, matvec, safe_divide, vecmat
from attnjax.result_repr import compact_repr


class PowerIteration(NamedTuple):
    """`iterates [..., steps + 1, n]` (`v_0` first) and measured `rate [...]`."""

    iterates: jax.Array
    rate: jax.Array

    __repr__ = compact_repr


@partial(jax.jit, static_argnames=("steps", "side"))
def power_iteration(a, v0, steps: int, *, side: str = "right") -> PowerIteration:
    """Iterate a row-stochastic `a [..., n, n]`: `v_{t+1} = A v_t` (or `v_t A`).

    `side='right'` is the seed's `v ← A v`: every layer averages values, and
    `v_t → (π·v_0) 1` (consensus). `side='left'` propagates a distribution,
    `v_t → π` for `v_0` a distribution. No normalisation: for stochastic A
    the right iterates stay bounded and the left ones keep their sum.

    The measured rate is the geometric-mean contraction of the increments
    `r_t = ‖v_{t+1} - v_t‖_2` over the second half of the informative run:
    with `t_1` the last step whose increment is above rounding level
    (`n · eps · max_t ‖v_t‖`) and `t_0 = ⌊t_1/2⌋`, `rate = (r_{t_1}/r_{t_0})^(1/(t_1 - t_0))`
    (0 if fewer than two increments are informative, i.e. converged at
    once). The increments are `(A - I) A^t v_0`, so the rate tends to `|λ_2|`
    (`slem`) for a generic `v_0`, exactly so for a two-state chain; a complex
    `λ_2` makes them oscillate, with an error that shrinks like `1/t_1`.

    Args:
      a: `[..., n, n]`.
      v0: `[..., n]`, broadcast against `a.shape[:-1]`.
      steps: number of products, `>= 2`.
      side: `'right'` or `'left'`.

    Invalid input is not checked: the iterates are formed for any `a`; the rate tends to `|λ_2|`
    only for a stochastic one, and NaN entries give NaN iterates and rate.
    """
    a = as_matrix(a, "a", square=True)
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left'; got {side!r}")
    if int(steps) < 2:
        raise ValueError(f"steps must be >= 2 to measure a rate; got {steps}")
    v0 = jnp.asarray(v0, a.dtype)
    if v0.ndim < 1 or v0.shape[-1] != a.shape[-1]:
        raise ValueError(
            f"v0 must have shape [..., {a.shape[-1]}]; got {v0.shape} for a shape {a.shape}"
        )
    batch = jnp.broadcast_shapes(a.shape[:-2], v0.shape[:-1])
    v0 = jnp.broadcast_to(v0, batch + a.shape[-1:])
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    apply = (lambda v: matvec(a, v)) if side == "right" else (lambda v: vecmat(v, a))

    def step(v, _):
        v = apply(v)
        return v, v

    _, vs = lax.scan(step, v0, None, length=int(steps))
    iterates = jnp.concatenate([v0[None], vs], axis=0)  # [K+1, ..., n]
    return PowerIteration(iterates=jnp.moveaxis(iterates, 0, -2), rate=_contraction_rate(iterates))


def _contraction_rate(iterates: jax.Array) -> jax.Array:
    """Rate of `power_iteration` from `iterates [K+1, ..., n]` -> `[...]`."""
    n = iterates.shape[-1]
    norms = jnp.sqrt(jnp.sum(jnp.square(iterates), axis=-1))  # [K+1, ...]
    incr = jnp.sqrt(jnp.sum(jnp.square(jnp.diff(iterates, axis=0)), axis=-1))  # [K, ...]
    floor = n * eps(iterates.dtype) * jnp.max(norms, axis=0)
    steps = lax.broadcasted_iota(jnp.int32, incr.shape, 0)
    t1 = jnp.max(jnp.where(incr > floor[None], steps, -1), axis=0)  # last informative step
    t0 = t1 // 2
    r1 = jnp.take_along_axis(incr, jnp.maximum(t1, 0)[None], axis=0)[0]
    r0 = jnp.take_along_axis(incr, jnp.maximum(t0, 0)[None], axis=0)[0]
    span = jnp.maximum(t1 - t0, 1).astype(iterates.dtype)
    return jnp.where(t1 >= 1, safe_divide(r1, r0) ** (1 / span), 0)
