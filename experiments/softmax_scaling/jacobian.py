"""The softmax Jacobian J = diag(p) - p p^T, its norms, and the saturation statistics of one softmax."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import attnjax

Array = jax.Array


def softmax_jacobian(p: Array) -> Array:
    """J = diag(p) - p p^T, `[T] -> [T, T]`.

    The diagonal p_i (1 - p_i) is computed as p_i * sum_{j != i} p_j, which
    stays accurate when p_i rounds to 1 (a saturated softmax).
    """
    off_diagonal = ~jnp.eye(p.shape[-1], dtype=bool)
    rest = jnp.sum(jnp.where(off_diagonal, p[None, :], jnp.zeros_like(p)[None, :]), axis=-1)
    return jnp.where(off_diagonal, -p[:, None] * p[None, :], jnp.diag(p * rest))


def jacobian_norms(p: Array) -> tuple[Array, Array]:
    """(||J||_2, ||J||_F) of the softmax Jacobian at probabilities p `[T]`.

    J is symmetric positive semi-definite, so ||J||_2 is its largest
    eigenvalue. J is divided by its largest entry first, and a J whose largest
    entry is below the smallest normal float counts as 0: CPUs may flush
    denormals to zero, and 0/0 = NaN would stall the eigensolver.
    """
    jac = softmax_jacobian(p)
    size = jnp.max(jnp.abs(jac))
    nonzero = size > jnp.finfo(jac.dtype).tiny
    unit = jac / jnp.where(nonzero, size, jnp.ones_like(size))
    size = jnp.where(nonzero, size, jnp.zeros_like(size))
    spectral = size * jnp.linalg.eigvalsh(unit)[-1]
    frobenius = size * jnp.sqrt(jnp.sum(unit * unit))
    return spectral, frobenius


def softmax_stats(logits: Array) -> dict[str, Array]:
    """Saturation of softmax(logits) for logits `[T]`: max weight, entropy
    -sum p log p (nats, 0 log 0 = 0) and the Jacobian norms; each a scalar."""
    p = attnjax.softmax_with_temperature(logits)
    plogp = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, jnp.ones_like(p))), jnp.zeros_like(p))
    spectral, frobenius = jacobian_norms(p)
    return {
        "max_weight": jnp.max(p),
        "entropy": -jnp.sum(plogp),
        "jacobian_spectral": spectral,
        "jacobian_frobenius": frobenius,
    }


SECULAR_STEPS = 80  # halvings of log(p_(1) / p_(2)) <= 1500: far below one ulp of the root


def spectral_norm(p: Array) -> Array:
    """||J||_2 of J = diag(p) - p p^T at probabilities p `[T]` (sum 1), without an eigensolver.

    J's eigenvalues other than 0 (J 1 = 0) solve the secular equation
    det(D - p p^T - lambda) = 0, i.e. 1 = sum_i p_i^2 / (p_i - lambda); with
    sum_i p_i = 1 this is lambda h(lambda) = 0 with h(lambda) = sum_i p_i / (p_i - lambda),
    free of the cancellation 1 - p_(1) that the first form has when p_(1)
    rounds to 1. The largest eigenvalue lies in [p_(2), p_(1)] (interlacing),
    where h rises from -inf to +inf; it is found by bisection on log lambda
    (`SECULAR_STEPS` geometric halvings), so it keeps its relative accuracy
    when it is as small as p_(2) ~ 1e-300. p_(1) = p_(2) gives p_(1); p_(2) = 0
    (one token takes all the mass) gives 0. O(T) per step against O(T^3).
    """
    top2 = jax.lax.top_k(p, 2)[0]
    high, low = top2[0], top2[1]

    def halve(_, bounds):
        lo, hi = bounds
        mid = jnp.sqrt(lo) * jnp.sqrt(hi)
        d = p - mid
        h = jnp.sum(
            jnp.where(d == 0, jnp.zeros_like(p), p / jnp.where(d == 0, jnp.ones_like(d), d))
        )
        return jnp.where(h > 0, lo, mid), jnp.where(h > 0, mid, hi)

    lo, hi = jax.lax.fori_loop(0, SECULAR_STEPS, halve, (low, high))
    root = jnp.sqrt(lo) * jnp.sqrt(hi)
    return jnp.where(low > 0, jnp.where(high > low, root, high), jnp.zeros_like(high))
