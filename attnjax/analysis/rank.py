"""Rank and rank-collapse metrics of a matrix `X [..., T, D]` (tokens × features).

Every function acts on the last two axes and broadcasts over leading axes; all
are pure and work under `jax.jit` and `jax.vmap`. Results keep the input dtype
(float32 or float64; half precision is computed in float32). The relative
residual `‖X - 1 x̄ᵀ‖ / ‖X‖` is defined in `attnjax.analysis.residual`
(`residual_ratio`); `rank_report` includes it.

The spectral metrics all derive from the singular values
`σ_1 ≥ … ≥ σ_r ≥ 0`, `r = min(T, D)`. `rank_report` computes them once and
derives every metric from the same decomposition. Conventions for degenerate
input (documented per function): the all-zero matrix has stable rank, effective
rank, participation ratio, numerical rank and spectral entropy 0, and condition
number `inf`. Any finite `X` is valid input (no stochastic rows needed); NaN or
inf entries are not checked and give NaN.

Corrections to the seed's `analyze_attention_rank`: the rank count uses a
tolerance relative to `σ_1` (an absolute `1e-6` counts every singular value of
a tiny matrix as zero and none of a huge one as zero); the spectral entropy
uses `0·log 0 = 0` instead of `log(p + eps)`, which biases it; and the
condition number is `σ_1/σ_r`, `inf` when `σ_r = 0`, not `σ_1/(σ_r + eps)`,
which reports an arbitrary finite number for singular matrices.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy

from attnjax.analysis._linalg import (
    as_matrix,
    eps,
    rank_one_residual_from_singular_values,
    safe_divide,
    singular_values,
)
from attnjax.analysis.residual import residual_ratio
from attnjax.result_repr import compact_repr


@jax.jit
def token_cosine_similarity(x) -> jax.Array:
    """Mean pairwise cosine similarity between distinct tokens.

    `ρ = 1/(T(T-1)) Σ_{k≠k'} ⟨x_k, x_k'⟩ / (‖x_k‖ ‖x_k'‖)`, the rank-collapse
    measure of Noci et al. (2022), "Signal propagation in transformers:
    theoretical perspectives and the role of rank collapse". Computed in
    `O(TD)` as `(‖Σ_k u_k‖² - Σ_k ‖u_k‖²) / (T(T-1))` with `u_k = x_k/‖x_k‖`;
    a zero token has `u_k = 0` (cosine 0 with every token).

    Args:
      x: `[..., T, D]` with `T >= 2`.

    Returns:
      `[...]` in `[-1/(T-1), 1]`; 1 when all tokens point the same way.
    """
    x = as_matrix(x, "x", min_rows=2)
    t = x.shape[-2]
    norms = jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True))
    u = safe_divide(x, norms)
    total = jnp.sum(jnp.square(jnp.sum(u, axis=-2)), axis=-1)
    diag = jnp.sum(jnp.square(u), axis=(-2, -1))
    return (total - diag) / (t * (t - 1))


# ---- metrics of the singular values `s [..., r]`, descending --------------


def _stable_rank(s):
    return safe_divide(jnp.sum(jnp.square(s), axis=-1), jnp.square(s[..., 0]))


def _spectral_entropy(s):
    p = safe_divide(s, jnp.sum(s, axis=-1, keepdims=True))
    return -jnp.sum(xlogy(p, p), axis=-1)


def _effective_rank(s):
    return jnp.where(s[..., 0] > 0, jnp.exp(_spectral_entropy(s)), 0)


def _participation_ratio(s):
    lam = jnp.square(s)
    return safe_divide(jnp.square(jnp.sum(lam, axis=-1)), jnp.sum(jnp.square(lam), axis=-1))


def _default_rtol(x_shape, dtype) -> float:
    return max(x_shape[-2], x_shape[-1]) * eps(dtype)


def _numerical_rank(s, rtol):
    return jnp.sum(s > rtol * s[..., :1], axis=-1).astype(jnp.int32)


def _condition_number(s):
    return safe_divide(s[..., 0], s[..., -1], fill=jnp.inf)


def _singular_values(x, name="x"):
    return singular_values(as_matrix(x, name))


@jax.jit
def stable_rank(x) -> jax.Array:
    """Stable rank `‖X‖_F² / ‖X‖_2² = Σ σ_i² / σ_1²`, in `[1, rank X]` (0 for X = 0).

    Rudelson & Vershynin (2007), "Sampling from large matrices: an approach
    through geometric functional analysis". `x`: `[..., T, D]` -> `[...]`.
    """
    return _stable_rank(_singular_values(x))


@jax.jit
def spectral_entropy(x) -> jax.Array:
    """Shannon entropy (nats) of the normalised singular values.

    `H = -Σ p_i log p_i`, `p_i = σ_i / Σ_j σ_j`, with `0 log 0 = 0` (no `eps`
    inside the log); 0 for X = 0. Equals `log(effective_rank(x))` otherwise.
    `x`: `[..., T, D]` -> `[...]`, in `[0, log min(T, D)]`.
    """
    return _spectral_entropy(_singular_values(x))


@jax.jit
def effective_rank(x) -> jax.Array:
    """Effective rank `exp(H)` with `H` the spectral entropy (see above).

    Roy & Vetterli (2007), "The effective rank: a measure of effective
    dimensionality". Equals `k` for `k` equal non-zero singular values, e.g. `n`
    for an orthonormal `[n, n]` matrix; 0 for X = 0 (by convention, matching
    the numerical rank). `x`: `[..., T, D]` -> `[...]`.
    """
    return _effective_rank(_singular_values(x))


@jax.jit
def participation_ratio(x) -> jax.Array:
    """Participation ratio `(Σ λ_i)² / Σ λ_i²` of the eigenvalues `λ_i = σ_i²` of `XᵀX`.

    The dimensionality measure of Gao et al. (2017), "A theory of multineuronal
    dimensionality, dynamics and measurement"; in `[1, rank X]`, 0 for X = 0.
    `x`: `[..., T, D]` -> `[...]`.
    """
    return _participation_ratio(_singular_values(x))


@partial(jax.jit, static_argnames=("rtol",))
def numerical_rank(x, rtol: float | None = None) -> jax.Array:
    """Number of singular values `σ_i > rtol · σ_1` (int32).

    The seed counts `σ_i > 1e-6`, an absolute threshold that depends on the
    scale of X. Here the tolerance is relative; the default
    `rtol = max(T, D) · eps(dtype)` is NumPy's `matrix_rank` rule: singular
    values below it are indistinguishable from rounding error in X. The zero
    matrix has rank 0. `x`: `[..., T, D]` -> `[...]` int32.
    """
    x = as_matrix(x, "x")
    if rtol is None:
        rtol = _default_rtol(x.shape, x.dtype)
    return _numerical_rank(singular_values(x), rtol)


@jax.jit
def condition_number(x) -> jax.Array:
    """2-norm condition number `σ_1 / σ_r`, `r = min(T, D)`.

    Returns `inf` when `σ_r = 0` (including X = 0) rather than a finite number
    made up by adding `eps`. In floating point a singular matrix usually has a
    tiny non-zero `σ_r` and so a huge finite condition number; use
    `numerical_rank` to decide rank deficiency. `x`: `[..., T, D]` -> `[...]`.
    """
    return _condition_number(_singular_values(x))


class RankReport(NamedTuple):
    """All rank metrics of one matrix (each `[...]`); see the functions of the same name."""

    residual_ratio: jax.Array
    residual_ratio_l1inf: jax.Array
    token_cosine_similarity: jax.Array
    stable_rank: jax.Array
    effective_rank: jax.Array
    numerical_rank: jax.Array
    participation_ratio: jax.Array
    spectral_entropy: jax.Array
    condition_number: jax.Array
    rank_one_residual: jax.Array
    singular_values: jax.Array

    __repr__ = compact_repr


@partial(jax.jit, static_argnames=("rtol",))
def rank_report(x, rtol: float | None = None) -> RankReport:
    """Every rank metric of `x [..., T, D]` from a single SVD.

    The corrected form of the seed's `analyze_attention_rank` (see the module
    docstring). `rank_one_residual = sqrt(Σ_{i≥2} σ_i² / Σ σ_i²)` is
    `‖X - X_1‖_F / ‖X‖_F` with `X_1` the best rank-one approximation
    (Eckart–Young). `singular_values` is `[..., min(T, D)]`; `T >= 2`.
    """
    x = as_matrix(x, "x", min_rows=2)
    s = singular_values(x)
    if rtol is None:
        rtol = _default_rtol(x.shape, x.dtype)
    return RankReport(
        residual_ratio=residual_ratio(x, "fro"),
        residual_ratio_l1inf=residual_ratio(x, "l1inf"),
        token_cosine_similarity=token_cosine_similarity(x),
        stable_rank=_stable_rank(s),
        effective_rank=_effective_rank(s),
        numerical_rank=_numerical_rank(s, rtol),
        participation_ratio=_participation_ratio(s),
        spectral_entropy=_spectral_entropy(s),
        condition_number=_condition_number(s),
        rank_one_residual=rank_one_residual_from_singular_values(s),
        singular_values=s,
    )
