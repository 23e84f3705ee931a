"""The attention matrix as a Markov chain: `A [..., n, n]` row-stochastic.

Row-stochastic means `A ≥ 0` and `A 1 = 1`; the rows are distributions of a
query over keys. By Perron–Frobenius the spectral radius is 1 with right
eigenvector `1`, and a left eigenvector `π ≥ 0`, `π A = π`, `Σ π = 1` (the
stationary distribution). Stacking attention layers multiplies such matrices,
so their products, and how fast `A^k` approaches the rank-one `1 πᵀ`, govern
rank collapse. References: Seneta (2006), "Non-negative Matrices and Markov
Chains"; Dobrushin (1956), "Central limit theorem for nonstationary Markov
chains"; Dong, Cordonnier & Loukas (2021).

All functions act on the last two axes, broadcast over leading axes, and work
under `jax.jit` and `jax.vmap`. Results keep the input dtype (float32 or
float64). Matrix products run at HIGHEST precision. Functions that need the
stationary distribution (`slem`, `spectral_gap`, `stationary_residual`,
`rank_one_residual`, `markov_report`) take an optional `pi` (or compute it
once) and call separately compiled parts, so the solve is compiled once per
shape and shared.

Eigenvalues on accelerators: `jnp.linalg.eigvals` runs on CPU and GPU but not
TPU. `slem` therefore defaults to an iterative method (repeated squaring, on
the device, any backend) whose accuracy matches the eigensolver at float32
rounding; `'eig'` (LAPACK/cuSOLVER) and `'host'` (NumPy via
`jax.pure_callback`, any backend) give the exact reference.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from attnjax.analysis._linalg import (
    as_matrix,
    eps,
    frobenius,
    lift,
    matmul,
    rank_one_residual_from_singular_values,
    safe_divide,
    singular_values,
    spectral_radius_by_squaring,
    vecmat,
    vmap_as_batch,
)
from attnjax.result_repr import compact_repr

SLEM_METHODS = ("iterative", "eig", "host")
# Elements of the `[chunk, ..., T, S]` difference tensor `dobrushin` builds at once (64 MiB in float32).
PAIRWISE_BUDGET = 1 << 24


def _stationary_residual_l1(pi: jax.Array, a: jax.Array) -> jax.Array:
    return jnp.sum(jnp.abs(vecmat(pi, a) - pi), axis=-1)


def _stationary_by_solve(a: jax.Array) -> jax.Array:
    """π from `π (I - A + 1 1ᵀ) = 1ᵀ`, non-singular iff π is unique."""
    n = a.shape[-1]
    m = lift(jnp.eye(n, dtype=a.dtype), a.ndim) - a + 1
    ones = jnp.ones(a.shape[:-1] + (1,), a.dtype)
    return jnp.linalg.solve(jnp.swapaxes(m, -1, -2), ones)[..., 0]


def _stationary_by_squaring(pi: jax.Array, a: jax.Array, num_squarings: int = 64) -> jax.Array:
    """`π L^(2^s)` with `L = (A + I)/2`, squared `s` times (rows renormalised).

    Converges for every chain, reducible or slowly mixing ones included, to the
    limit of the lazy chain from `π`; products of non-negative matrices lose
    no accuracy to cancellation.
    """
    lazy = 0.5 * (a + lift(jnp.eye(a.shape[-1], dtype=a.dtype), a.ndim))

    def square(m, _):
        m = matmul(m, m)
        return m / jnp.sum(m, axis=-1, keepdims=True), None

    m, _ = lax.scan(square, lazy, None, length=num_squarings)
    return vecmat(pi, m)


@partial(jax.jit, static_argnames=("tol", "max_iter"))
def stationary_distribution(a, *, tol: float | None = None, max_iter: int = 100) -> jax.Array:
    """Left Perron vector `π [..., n]` of row-stochastic `a [..., n, n]`.

    `π A = π`, `π ≥ 0`, `Σ π = 1`. Computed by power iteration on the lazy
    chain `L = (A + I)/2`, which has the same stationary distributions but is
    aperiodic, so the iteration also converges for periodic chains such as
    permutations. Starting from the uniform distribution it stops when every
    chain in the batch has `‖π A - π‖_1 <= tol` or after `max_iter` steps.
    Chains that have not converged then fall back to the exact solve of
    `π (I - A + 1 1ᵀ) = 1ᵀ` (non-singular exactly when π is unique), and
    chains where that fails too (several stationary distributions and slow
    mixing) to `π L^(2^64)` by repeated squaring; each chain keeps the
    candidate with the smallest residual. Tiny negative entries are clipped
    and π renormalised. For a reducible chain the result is the limit from
    the uniform start, one of its stationary distributions.

    The default `tol = 4 · sqrt(n) · eps(dtype)` is a few times the rounding
    error of one product `π A`, the best residual any method can reach.
    The error of π itself is about the residual times the condition number
    of the chain, roughly `1/(1 - slem)`.

    Invalid input is not checked (inside jit nothing can raise): for rows not summing to 1 or
    negative entries the result is a normalised non-negative vector without meaning; NaN entries
    give NaN. Validate with `check_stochastic` (raises, outside jit) or `is_row_stochastic`.
    """
    a = as_matrix(a, "a", square=True)
    if tol is None:
        tol = 4 * math.sqrt(a.shape[-1]) * eps(a.dtype)
    # Under vmap the fallbacks' `lax.cond` would become a `select` running both for every lane.
    return vmap_as_batch(partial(_stationary, tol=tol, max_iter=max_iter))(a)


def _stationary(a: jax.Array, *, tol: float, max_iter: int) -> jax.Array:
    """The body of `stationary_distribution` for `a [..., n, n]`, batched over leading axes."""
    n = a.shape[-1]
    pi0 = jnp.full(a.shape[:-1], 1 / n, a.dtype)
    res0 = _stationary_residual_l1(pi0, a)

    def not_done(carry):
        _, res, it = carry
        return jnp.any(res > tol) & (it < max_iter)

    def step(carry):
        pi, _, it = carry
        pi_a = vecmat(pi, a)
        res = jnp.sum(jnp.abs(pi_a - pi), axis=-1)
        pi = 0.5 * (pi + pi_a)
        return pi / jnp.sum(pi, axis=-1, keepdims=True), res, it + 1

    pi, _, _ = lax.while_loop(not_done, step, (pi0, res0, 0))

    def better_of(candidate_fn):
        def pick(pi):
            res = _stationary_residual_l1(pi, a)
            other = candidate_fn(pi)
            better = _stationary_residual_l1(other, a) < res  # False for NaN
            return jnp.where(better[..., None], other, pi)

        return lambda pi: lax.cond(
            jnp.any(_stationary_residual_l1(pi, a) > tol), pick, lambda pi: pi, pi
        )

    pi = better_of(lambda pi: _stationary_by_solve(a))(pi)
    pi = better_of(lambda pi: _stationary_by_squaring(pi, a))(pi)
    pi = jnp.clip(pi, 0, None)
    pi = pi / jnp.sum(pi, axis=-1, keepdims=True)
    # A NaN entry makes the residual NaN, which stops no loop and wins no comparison: without this the
    # chain would keep the uniform start (or whatever its batch's iterations left), not NaN.
    has_nan = jnp.any(jnp.isnan(a), axis=(-2, -1))[..., None]
    return jnp.where(has_nan, jnp.asarray(jnp.nan, pi.dtype), pi)


def _host_spectral_radius(b: jax.Array) -> jax.Array:
    def callback(m):
        m = np.asarray(m)
        return np.max(np.abs(np.linalg.eigvals(m)), axis=-1).astype(m.dtype)

    out = jax.ShapeDtypeStruct(b.shape[:-2], b.dtype)
    return jax.pure_callback(callback, out, b, vmap_method="broadcast_all")


def default_squarings(dtype) -> int:
    """Squarings `slem` uses by default: 24 in float32, 50 in float64 (enough for |lambda_2| to settle)."""
    return 24 if jnp.dtype(dtype) == jnp.float32 else 50


def slem(a, *, method: str = "iterative", pi=None, num_squarings: int | None = None) -> jax.Array:
    """Second-largest eigenvalue modulus `|λ_2|` of row-stochastic `a [..., n, n]`.

    Uses Wielandt deflation: with π the stationary distribution,
    `B = A - 1 πᵀ` has `spec(B) = {0} ∪ spec(A) \\ {1}` (one copy of the
    eigenvalue 1 replaced by 0; exact for any π with `Σ π = 1`, so an
    inaccurate π does not bias the result), and B keeps the right eigenvectors
    of A, so its eigenvalues are no worse conditioned than those of A; e.g. a
    causal (lower-triangular) map stays triangular. Hence `slem(A) = ρ(B)`,
    with no need to locate the eigenvalue 1; a reducible or periodic chain
    gives 1. `|λ_2|` sets the rate `|λ_2|^k` at which `A^k → 1 πᵀ`
    (Seneta 2006, ch. 1).

    A triangular `a` (a causal map, or an anti-causal one) has its
    eigenvalues on the diagonal; whatever the method, the result there is
    `triangular_slem(a)`, exact. Iterative and eigensolver estimates are not
    reliable on such maps: a sink or previous-token causal map is so far
    from normal that its small eigenvalues are ill-conditioned (at T = 33,
    float32, squaring errs by 4e-3 on a sink map and 1e-2 on a
    previous-token map whose exact `|λ_2|` is about 0.01).

    Methods (all jit-able):
      * `'iterative'` (default, any backend, on the device): Gelfand's formula
        with `num_squarings` normalised squarings of B (see
        `spectral_radius_by_squaring`), i.e. the ratio `‖B^(2k)‖_F/‖B^k‖_F`,
        `k = 2^(s-1)`. Exact once a single real eigenvalue dominates `B^k`;
        for complex pairs and ties in modulus the error decays like `2^-s`.
        Defaults: `s = 24` for float32, `s = 50` for float64. Cost: s batched
        matmuls.
      * `'eig'`: `max |eigvals(B)|` by `jnp.linalg.eigvals` (LAPACK on CPU,
        cuSOLVER/LAPACK on GPU; not available on TPU).
      * `'host'`: `numpy.linalg.eigvals` on the host via `jax.pure_callback`;
        any backend, at the cost of a device-host round trip.

    Measured max abs. error of the methods themselves against
    `numpy.linalg.eig` in float64 (the exact diagonal for causal maps) on
    softmax, causal softmax, Dirichlet and sparse chains, n = 4..256:
    `'iterative'` 3e-7 (float32) and 1e-14 (float64); `'eig'` 2e-3
    (float32, worst case a causal map, now read off its diagonal instead)
    and 4e-12 (float64); `'host'` 1e-7 (float32) and 4e-12 (float64). Hence
    the default: the device method is as accurate as any eigensolver here,
    and about 3x faster than LAPACK on CPU for 256 x 256 maps.

    Args:
      a: `[..., n, n]` row-stochastic.
      method: `'iterative'`, `'eig'` or `'host'`.
      pi: `[..., n]` stationary distribution, to share one solve; computed by
        `stationary_distribution` when omitted.
      num_squarings: for `'iterative'`.

    Returns:
      `[...]` in `[0, 1]`; 0 for `n = 1`.

    Invalid input is not checked: for rows not summing to 1 or negative entries the result has
    no meaning and can be NaN; NaN entries give NaN. Validate with `check_stochastic` (raises,
    outside jit) or `is_row_stochastic`.
    """
    a = as_matrix(a, "a", square=True)
    if method not in SLEM_METHODS:
        raise ValueError(
            f"method must be one of {SLEM_METHODS}; got {method!r} (a shape {a.shape})"
        )
    s = default_squarings(a.dtype) if num_squarings is None else int(num_squarings)
    if s < 1:
        raise ValueError(f"num_squarings must be >= 1; got {num_squarings}")
    return _deflated_radius(a, _as_distribution(pi, a), method=method, num_squarings=s)


@partial(jax.jit, static_argnames=("method", "num_squarings"))
def _deflated_radius(a: jax.Array, pi: jax.Array, *, method: str, num_squarings: int) -> jax.Array:
    """`ρ(A - 1 πᵀ)` by `method` (see `slem`); read off the diagonal where `a` is triangular."""
    b = a - pi[..., None, :]
    if method == "eig":
        radius = jnp.max(jnp.abs(jnp.linalg.eigvals(b)), axis=-1).astype(a.dtype)
    elif method == "host":
        radius = _host_spectral_radius(b)
    else:
        radius = spectral_radius_by_squaring(b, num_squarings)
    return jnp.where(is_triangular(a), triangular_slem(a), radius)


def is_triangular(a: jax.Array) -> jax.Array:
    """Whether each square `a [..., n, n]` is lower or upper triangular (exact zeros) -> bool `[...]`."""
    upper = jnp.all(jnp.triu(a, 1) == 0, axis=(-2, -1))
    lower = jnp.all(jnp.tril(a, -1) == 0, axis=(-2, -1))
    return upper | lower


@jax.jit
def triangular_slem(a) -> jax.Array:
    """`|λ_2|` of a triangular row-stochastic `a [..., n, n]`: its second-largest diagonal entry -> `[...]`.

    The eigenvalues of a triangular matrix are its diagonal, all in `[0, 1]`
    for a stochastic one; one of them is the Perron root 1 (`a_11 = 1` in a
    causal map, whose first query sees only itself). Removing that copy
    leaves `|λ_2|`: `max_(i>=2) a_ii` for a causal map. 0 for `n = 1`.

    Invalid input is not checked: for any triangular `a` the result is its second-largest
    diagonal entry; NaN on the diagonal gives NaN.
    """
    a = as_matrix(a, "a", square=True)
    if a.shape[-1] == 1:
        return jnp.zeros(a.shape[:-2], a.dtype)
    return jnp.sort(jnp.diagonal(a, axis1=-2, axis2=-1), axis=-1)[..., -2]


def _as_distribution(pi, a: jax.Array) -> jax.Array:
    """`pi` checked and broadcast to `a.shape[:-1]`, or computed from `a`."""
    if pi is None:
        return stationary_distribution(a)
    pi = jnp.asarray(pi, a.dtype)
    if pi.ndim < 1 or pi.shape[-1:] != a.shape[-1:]:
        raise ValueError(
            f"pi must have shape [..., {a.shape[-1]}]; got {pi.shape} for a shape {a.shape}"
        )
    return jnp.broadcast_to(pi, a.shape[:-1])


def spectral_gap(
    a, *, method: str = "iterative", pi=None, num_squarings: int | None = None
) -> jax.Array:
    """Absolute spectral gap `1 - |λ_2|` of row-stochastic `a [..., n, n]` -> `[...]`.

    Arguments as for `slem`. 0 for periodic or reducible chains, 1 for the
    uniform chain `1 1ᵀ / n`.

    Invalid input: as for `slem`.
    """
    return 1 - slem(a, method=method, pi=pi, num_squarings=num_squarings)


def _pairwise_l1_max(a: jax.Array) -> jax.Array:
    """`max_{i,j} ‖a_i - a_j‖_1` over rows, `[..., T, S] -> [...]`, chunked over i."""
    rows = jnp.moveaxis(a, -2, 0)  # [T, ..., S]

    def farthest(row):  # [..., S] -> [...]
        return jnp.max(jnp.sum(jnp.abs(a - row[..., None, :]), axis=-1), axis=-1)

    chunk = max(1, min(a.shape[-2], PAIRWISE_BUDGET // max(1, a.size)))
    return jnp.max(lax.map(farthest, rows, batch_size=chunk), axis=0)


@jax.jit
def dobrushin(a) -> jax.Array:
    """Dobrushin ergodicity coefficient `τ(A) = ½ max_{i,j} ‖a_i - a_j‖_1`.

    For row-stochastic `a [..., T, S]`, `τ` is the operator norm of `xᵀ ↦ xᵀA`
    on `{x : Σ x = 0}` in ℓ1, so it is sub-multiplicative,
    `τ(AB) ≤ τ(A) τ(B)`, bounds every non-unit eigenvalue, `|λ_2| ≤ τ(A)`,
    and `τ(A) = 0` exactly when all rows are equal (rank one `1 πᵀ`).
    Dobrushin (1956); Seneta (2006), §3.1. Exact `O(T² S)` pairwise
    computation, chunked over rows to bound memory. Returns `[...]` in `[0, 1]`.

    Invalid input is not checked: the formula applies to any `a`, but the bounds above and the
    range `[0, 1]` need stochastic rows; NaN entries give NaN. Validate with `check_stochastic`
    (raises, outside jit) or `is_row_stochastic`.
    """
    a = as_matrix(a, "a")
    # Under vmap `a.size` would be one matrix's: each lane would build its own full chunk.
    return 0.5 * vmap_as_batch(_pairwise_l1_max)(a)


@jax.jit
def path_product(mats) -> jax.Array:
    """Every prefix product across depth: `P_l = A_l ⋯ A_2 A_1`.

    Args:
      mats: `[..., L, n, n]`, layer `l` at index `l - 1` of axis -3.

    Returns:
      `[..., L, n, n]` with `P_l` at index `l - 1` (`P_1 = A_1`), computed by
      `lax.scan` over depth. For attention maps, `P_L` maps the value inputs
      of layer 1 to the outputs of a pure-attention stack (no residuals, no
      MLPs), the object whose rank collapse Dong et al. (2021) study.

    Invalid input is not checked: the products are formed for any matrices (row-stochastic only
    if every factor is); NaN entries propagate.
    """
    mats = as_matrix(mats, "mats", square=True)
    if mats.ndim < 3:
        raise ValueError(f"mats must have shape [..., L, n, n]; got shape {mats.shape}")
    n = mats.shape[-1]
    first = jnp.broadcast_to(jnp.eye(n, dtype=mats.dtype), mats.shape[:-3] + (n, n))

    def step(prod, a):
        prod = matmul(a, prod)
        return prod, prod

    _, prods = lax.scan(step, first, jnp.moveaxis(mats, -3, 0))
    return jnp.moveaxis(prods, 0, -3)


def stationary_residual(p, pi=None) -> jax.Array:
    """Relative distance `‖P - 1 πᵀ‖_F / ‖P‖_F` to the rank-one chain of π.

    `p`: `[..., n, n]` row-stochastic; `pi`: `[..., n]`, by default
    `stationary_distribution(p)` (pass it to share one solve). 0 exactly when
    every row of P equals π, the limit of `A^k` for an ergodic chain.

    Invalid input is not checked: for any `p` the ratio is computed against `pi`; see
    `stationary_distribution` for a computed `pi`; NaN entries give NaN.
    """
    p = as_matrix(p, "p", square=True)
    return _distance_to_rows(p, _as_distribution(pi, p))


@jax.jit
def _distance_to_rows(p: jax.Array, pi: jax.Array) -> jax.Array:
    return safe_divide(frobenius(p - pi[..., None, :]), frobenius(p))


class RankOneResidual(NamedTuple):
    """`best`: distance to the best rank-one matrix; `stationary`: to `1 πᵀ`."""

    best: jax.Array
    stationary: jax.Array

    __repr__ = compact_repr


def rank_one_residual(p, pi=None) -> RankOneResidual:
    """How far `p [..., n, n]` is from rank one, two ways, each `[...]`.

    * `best = ‖P - P_1‖_F / ‖P‖_F = sqrt(Σ_{i≥2} σ_i² / Σ σ_i²)`, `P_1` the best
      rank-one approximation (Eckart–Young).
    * `stationary = ‖P - 1 πᵀ‖_F / ‖P‖_F` (see `stationary_residual`), the
      distance to the specific rank-one limit of a stochastic product.

    `best <= stationary`. For the products `P_l` of `path_product`, both
    decaying to 0 with depth is rank collapse (Dong et al., 2021).

    Invalid input is not checked: `best` is defined for any matrix, `stationary` as in
    `stationary_residual`; NaN entries give NaN.
    """
    p = as_matrix(p, "p", square=True)
    return RankOneResidual(best=_best_rank_one_residual(p), stationary=stationary_residual(p, pi))


@jax.jit
def _best_rank_one_residual(p: jax.Array) -> jax.Array:
    return rank_one_residual_from_singular_values(singular_values(p))


class MarkovReport(NamedTuple):
    """Markov metrics of one chain, sharing one stationary solve; see the functions."""

    stationary: jax.Array
    slem: jax.Array
    spectral_gap: jax.Array
    dobrushin: jax.Array
    stationary_residual: jax.Array

    __repr__ = compact_repr


def markov_report(a, *, method: str = "iterative") -> MarkovReport:
    """`stationary_distribution`, `slem`, `spectral_gap`, `dobrushin` and
    `stationary_residual` of `a [..., n, n]`, with π computed once and shared
    by the deflation in `slem` and the residual. `method` goes to `slem`.

    Invalid input: as for each of those functions (not checked; NaN propagates).
    """
    a = as_matrix(a, "a", square=True)
    pi = stationary_distribution(a)
    lam2 = slem(a, method=method, pi=pi)
    return MarkovReport(
        stationary=pi,
        slem=lam2,
        spectral_gap=1 - lam2,
        dobrushin=dobrushin(a),
        stationary_residual=stationary_residual(a, pi),
    )
