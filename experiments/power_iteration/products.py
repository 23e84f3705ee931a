r"""Metrics of inhomogeneous products P_l = A_l ... A_1 of attention maps (the `products` runs).

Dobrushin's coefficient tau(A) = 1/2 max_ij ||a_i - a_j||_1 is
sub-multiplicative (Dobrushin 1956; Seneta 2006, §3.1), so
delta(P_l) := tau(P_l) <= prod_{i<=l} tau(A_i); |lambda_2(A)| <= tau(A) for
each matrix, and prod_i |lambda_2(A_i)| is the rate a homogeneous chain would
have, which bounds nothing for a product of different matrices.

The reference of the rate hypothesis is the exactly uniform causal chain
U (u_ij = 1/i for j <= i): lower-triangular, so its eigenvalues are its
diagonal 1, 1/2, ..., 1/T and |lambda_2(U)| = 1/2; but U is far from normal,
and delta(U^l) / delta(U^(l-1)) approaches 1/2 only after a transient of
about 15 layers at T = 24 (0.88 at l = 2, 0.56 at l = 7, 0.504 at l = 15):
`uniform_causal_chain`.
"""

from __future__ import annotations

import functools
import math

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


def visible_keys(seq_len: int, causal: bool) -> np.ndarray:
    """`[T]`: how many keys row t of a causal (t + 1) or bidirectional (T) attention map sees."""
    return np.arange(1, seq_len + 1) if causal else np.full(seq_len, seq_len)


def product_metrics(mats: jax.Array, keys: jax.Array) -> dict[str, jax.Array]:
    """One chain per leading index: `mats [..., L, T, T]` (layer l at l-1) -> `[..., L]` each;
    `keys [T]`: how many keys each row sees (`visible_keys`).

    * `tau`: τ(A_l), Dobrushin's coefficient of each layer;
    * `delta`: δ(P_l) = τ(A_l ⋯ A_1), of the product;
    * `bound`: ∏_{i<=l} τ(A_i), which bounds δ(P_l) (sub-multiplicativity);
    * `slem`: |λ₂(A_l)| of each layer, and `slem_bound`: ∏_{i<=l} |λ₂(A_i)|,
      the rate a homogeneous chain would have (no bound for a product);
    * `entropy`: the mean over rows of H(a_t) / log n_t, n_t the keys row t sees
      (`visible_keys`; rows that see one key left out): 0 one-hot, 1 uniform over
      what the row sees, so exactly uniform causal attention scores 1;
    * `log_delta`, `log_slem`, `log_tau`: log δ(P_l), log |λ₂(A_l)|, log τ(A_l)
      (a zero at the smallest positive float), whose means over examples give
      the mean log-rate log(δ(P_l) / δ(P_(l-1))) of the rate hypothesis;
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
    delta = dobrushin(prods)
    h = attention_entropy(mats)  # [..., L, T]
    keys = jnp.broadcast_to(keys, h.shape)
    rows = keys > 1
    entropy = jnp.where(rows, h / jnp.log(jnp.where(rows, keys, 2)), 0)
    tiny = jnp.finfo(mats.dtype).tiny
    return {
        "tau": tau,
        "delta": delta,
        "bound": jnp.cumprod(tau, axis=-1),
        "slem": lam,
        "slem_bound": jnp.cumprod(lam, axis=-1),
        "log_delta": jnp.log(jnp.maximum(delta, tiny)),
        "log_slem": jnp.log(jnp.maximum(lam, tiny)),
        "log_tau": jnp.log(jnp.maximum(tau, tiny)),
        "entropy": jnp.sum(entropy, axis=-1) / jnp.sum(rows, axis=-1),
        "tv_to_pi": 0.5 * jnp.sum(jnp.abs(row - pi), axis=-1),
        "pi_first": pi[..., 0],
        "absorbing": jnp.sum(jnp.diagonal(mats, axis1=-2, axis2=-1) >= 1, axis=-1).astype(
            mats.dtype
        ),
    }


def attention_products(
    attention: jax.Array, dtype, causal: bool
) -> dict[str, dict[str, jax.Array]]:
    """`attention [L, B, H, T, T]` -> `{"mean": head-averaged metrics [B, L], "head": per-head metrics [B, H, L]}`
    (`causal`: whether the maps are causal, for `product_metrics`' entropy; one compiled program
    serves both).

    Cast to `dtype` and rows renormalised there, so every matrix is
    stochastic to the rounding of `dtype` and the bound is exact up to it.
    """
    keys = jnp.asarray(visible_keys(attention.shape[-1], causal), dtype)
    return _attention_products(attention, keys, dtype=dtype)


@functools.partial(jax.jit, static_argnames=("dtype",))
def _attention_products(attention: jax.Array, keys: jax.Array, *, dtype) -> dict:
    a = attention.astype(dtype)
    a = a / jnp.sum(a, axis=-1, keepdims=True)
    per_head = jnp.transpose(a, (1, 2, 0, 3, 4))  # [B, H, L, T, T]
    head_mean = jnp.mean(per_head, axis=1)  # [B, L, T, T], still stochastic
    return {"mean": product_metrics(head_mean, keys), "head": product_metrics(per_head, keys)}


def worst_cases(m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Worst cases over all but the layer axis (last): the largest violations of
    δ(P_l) <= ∏τ and δ(P_l) <= δ(P_{l-1}), the largest 1 − π_l(first token)
    among chains whose only absorbing token is the first (0 if there are none),
    and the smallest δ(P_l) (`delta_min`: whether every chain is resolved)."""
    axes = tuple(range(m["delta"].ndim - 1))
    monotone = np.diff(m["delta"], axis=-1)
    gap = np.where(m["absorbing"] == 1, 1 - m["pi_first"], 0.0)
    return {
        "bound_excess": np.max(m["delta"] - m["bound"], axis=axes),
        "monotone_excess": np.max(monotone, axis=axes) if monotone.shape[-1] else np.zeros((0,)),
        "pi_first_gap": np.max(gap, axis=axes),
        "delta_min": np.min(m["delta"], axis=axes),
    }


def uniform_causal_chain(seq_len: int, num_layers: int, floor: float = 0.0) -> dict[str, list]:
    """The exactly uniform causal chain U `[T, T]` (u_ij = 1/i for j <= i) iterated, in float64:
    `delta` = δ(U^l) for l = 1..L, and `excess` = log(δ(U^l) / δ(U^(l-1))) − log |λ₂(U)| for
    l = 2..L (|λ₂(U)| = 1/2: U is lower-triangular with diagonal 1, 1/2, ..., 1/T), the
    transient of a chain whose rate tends to |λ₂| exactly (None at l = 1, and where δ(U^l)
    is at or below `floor`, i.e. not resolved)."""
    if seq_len < 2 or num_layers < 1:
        raise ValueError(
            f"seq_len must be >= 2 and num_layers >= 1, got {seq_len} and {num_layers}"
        )
    u = np.tril(np.ones((seq_len, seq_len))) / np.arange(1, seq_len + 1)[:, None]
    power, delta = np.eye(seq_len), []
    for _ in range(num_layers):
        power = u @ power
        delta.append(0.5 * float(np.max(np.abs(power[:, None] - power[None]).sum(axis=-1))))
    excess = [None] + [
        math.log(b / a) - math.log(0.5) if min(a, b) > floor else None
        for a, b in zip(delta, delta[1:])
    ]
    return {"delta": delta, "excess": excess}
