r"""Metrics of inhomogeneous products P_l = A_l ... A_1 of attention maps (the `products` runs).

Dobrushin's coefficient tau(A) = 1/2 max_ij ||a_i - a_j||_1 is
sub-multiplicative (Dobrushin 1956; Seneta 2006, §3.1), so
delta(P_l) := tau(P_l) <= prod_{i<=l} tau(A_i); |lambda_2(A)| <= tau(A) for
each matrix, and prod_i |lambda_2(A_i)| is the rate a homogeneous chain would
have, which bounds nothing for a product of different matrices.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from attnjax.analysis import (
    attention_entropy,
    dobrushin,
    path_product,
    slem,
    stationary_distribution,
)


def product_metrics(mats: jax.Array) -> dict[str, jax.Array]:
    """One chain per leading index: `mats [..., L, T, T]` (layer l at l-1) -> `[..., L]` each.

    * `tau`: τ(A_l), Dobrushin's coefficient of each layer;
    * `delta`: δ(P_l) = τ(A_l ⋯ A_1), of the product;
    * `bound`: ∏_{i<=l} τ(A_i), which bounds δ(P_l) (sub-multiplicativity);
    * `slem`: |λ₂(A_l)| of each layer, and `slem_bound`: ∏_{i<=l} |λ₂(A_i)|,
      the rate a homogeneous chain would have (no bound for a product);
    * `entropy`: the mean over rows of H(a_t) / log T, 0 one-hot, 1 uniform;
    * `tv_to_pi`: ½ ‖p_l − π_l‖₁, p_l the mean row of P_l and π_l the
      stationary distribution of A_l;
    * `pi_first`: π_l of the first token;
    * `absorbing`: the number of absorbing tokens, a_tt = 1 (to rounding).

    A causal A is lower-triangular: every token t either is absorbing or
    moves to an earlier one with positive probability, so the closed classes
    are the absorbing tokens. The first always is (a_11 = 1); if it is the
    only one, π_l = e_1 is the unique stationary distribution. A trained
    float32 softmax can saturate (a_tt = 1, every other weight underflows),
    and then π_l is not unique.
    """
    prods = path_product(mats)
    tau = dobrushin(mats)
    pi = stationary_distribution(mats)
    row = jnp.mean(prods, axis=-2)
    lam = slem(mats, pi=pi)
    return {
        "tau": tau,
        "delta": dobrushin(prods),
        "bound": jnp.cumprod(tau, axis=-1),
        "slem": lam,
        "slem_bound": jnp.cumprod(lam, axis=-1),
        "entropy": jnp.mean(attention_entropy(mats, normalize=True), axis=-1),
        "tv_to_pi": 0.5 * jnp.sum(jnp.abs(row - pi), axis=-1),
        "pi_first": pi[..., 0],
        "absorbing": jnp.sum(jnp.diagonal(mats, axis1=-2, axis2=-1) >= 1, axis=-1).astype(
            mats.dtype
        ),
    }


@functools.partial(jax.jit, static_argnames=("dtype",))
def attention_products(attention: jax.Array, dtype) -> dict[str, dict[str, jax.Array]]:
    """`attention [L, B, H, T, T]` -> `{"mean": head-averaged metrics [B, L], "head": per-head metrics [B, H, L]}`.

    Cast to `dtype` and rows renormalised there, so every matrix is
    stochastic to the rounding of `dtype` and the bound is exact up to it.
    """
    a = attention.astype(dtype)
    a = a / jnp.sum(a, axis=-1, keepdims=True)
    per_head = jnp.transpose(a, (1, 2, 0, 3, 4))  # [B, H, L, T, T]
    head_mean = jnp.mean(per_head, axis=1)  # [B, L, T, T], still stochastic
    return {"mean": product_metrics(head_mean), "head": product_metrics(per_head)}


def worst_cases(m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Worst cases over all but the layer axis (last): the largest violations of
    δ(P_l) <= ∏τ and δ(P_l) <= δ(P_{l-1}), and the largest 1 − π_l(first token)
    among chains whose only absorbing token is the first (0 if there are none)."""
    axes = tuple(range(m["delta"].ndim - 1))
    monotone = np.diff(m["delta"], axis=-1)
    gap = np.where(m["absorbing"] == 1, 1 - m["pi_first"], 0.0)
    return {
        "bound_excess": np.max(m["delta"] - m["bound"], axis=axes),
        "monotone_excess": np.max(monotone, axis=axes) if monotone.shape[-1] else np.zeros((0,)),
        "pi_first_gap": np.max(gap, axis=axes),
    }
