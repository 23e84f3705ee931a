"""Private helpers shared by the analysis modules: input checks, dtypes, and
the few linear-algebra kernels (singular values, matmul at full precision,
spectral radius by repeated squaring) that several metrics reuse.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

# Analysis favours accuracy over speed: on GPU/TPU the default float32 matmul
# may run in TF32/bfloat16, which would swamp the quantities measured here.
HIGHEST = lax.Precision.HIGHEST


def as_matrix(x, name: str, *, square: bool = False, min_rows: int = 1) -> jax.Array:
    """`x` as a floating array `[..., T, S]`, checked at trace time.

    Raises TypeError for non-floating dtypes and ValueError for fewer than two
    dimensions, a non-square trailing pair when `square`, or fewer than
    `min_rows` rows. float16/bfloat16 are promoted to float32 (LAPACK kernels
    and the small quantities measured here need it); float32 and float64 pass
    through unchanged.
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(
            f"{name} must be a floating array; got dtype {x.dtype} with shape {x.shape}"
        )
    if x.ndim < 2:
        raise ValueError(
            f"{name} must have shape [..., T, S] (at least 2 dimensions); got shape {x.shape}"
        )
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(
            f"{name} must be square in its last two axes [..., n, n]; got shape {x.shape}"
        )
    if x.shape[-2] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows in axis -2; got shape {x.shape}")
    if x.dtype not in (jnp.float32, jnp.float64):
        x = x.astype(jnp.float32)
    return x


def eps(dtype) -> float:
    """Machine epsilon of `dtype` as a Python float (weakly typed in jnp ops)."""
    return float(jnp.finfo(dtype).eps)


def safe_divide(num: jax.Array, den: jax.Array, fill=0.0) -> jax.Array:
    """`num / den`, and `fill` where `den == 0` (no NaN, no division warning)."""
    ok = den != 0
    return jnp.where(ok, num / jnp.where(ok, den, 1), fill)


def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    """Batched matmul at HIGHEST precision."""
    return jnp.matmul(a, b, precision=HIGHEST)


def vecmat(v: jax.Array, a: jax.Array) -> jax.Array:
    """`v A` for `v [..., n]`, `a [..., n, m]`."""
    return jnp.einsum("...i,...ij->...j", v, a, precision=HIGHEST)


def matvec(a: jax.Array, v: jax.Array) -> jax.Array:
    """`A v` for `a [..., m, n]`, `v [..., n]`."""
    return jnp.einsum("...ij,...j->...i", a, v, precision=HIGHEST)


def frobenius(m: jax.Array) -> jax.Array:
    """Frobenius norm over the last two axes: `[..., T, S] -> [...]`."""
    return jnp.sqrt(jnp.sum(jnp.square(m), axis=(-2, -1)))


def singular_values(x: jax.Array) -> jax.Array:
    """Singular values `[..., min(T, S)]`, descending (one batched LAPACK call)."""
    return jnp.linalg.svd(x, compute_uv=False)


def rank_one_residual_from_singular_values(s: jax.Array) -> jax.Array:
    """`‖X - X_1‖_F / ‖X‖_F = sqrt(Σ_{i≥2} σ_i² / Σ σ_i²)` (Eckart–Young), 0 for X = 0."""
    return jnp.sqrt(
        safe_divide(jnp.sum(jnp.square(s[..., 1:]), axis=-1), jnp.sum(jnp.square(s), axis=-1))
    )


def max_column_sum(m: jax.Array) -> jax.Array:
    """`‖M‖_1 = max_j Σ_i |m_ij|`, the operator norm induced by the vector 1-norm: `[..., T, S] -> [...]`."""
    return jnp.max(jnp.sum(jnp.abs(m), axis=-2), axis=-1)


def max_row_sum(m: jax.Array) -> jax.Array:
    """`‖M‖_∞ = max_i Σ_j |m_ij|`, the operator norm induced by the vector ∞-norm: `[..., T, S] -> [...]`."""
    return jnp.max(jnp.sum(jnp.abs(m), axis=-1), axis=-1)


def spectral_radius_by_squaring(b: jax.Array, num_squarings: int) -> jax.Array:
    """Spectral radius of square `b [..., n, n]` by normalised repeated squaring.

    With `M_0 = B/c_0`, `c_0 = ‖B‖_F`, and `M_{j+1} = M_j² / c_{j+1}`,
    `c_{j+1} = ‖M_j²‖_F`, one has `‖B^(2^s)‖ = Π_j c_j^(2^(s-j))`, so Gelfand's
    formula gives `log ρ ≈ Σ_{j=0..s} 2^-j log c_j`. That estimate is biased by
    `κ^(2^-s)` (κ: the condition of the dominant eigenvalue); using the ratio
    `‖B^(2k)‖/‖B^k‖` with `k = 2^(s-1)` instead adds `2^-s log c_s` once more and
    is exact as soon as `B^k` is dominated by a single real eigenvalue. For a
    complex pair, ties in modulus, or Jordan blocks the error decays like
    `1/2^s` (Gelfand's rate). Normalising every step keeps the iterates away
    from overflow and underflow; an exactly nilpotent `B` gives 0.
    """
    c0 = frobenius(b)
    m0 = b / jnp.where(c0 > 0, c0, 1)[..., None, None]
    log0 = jnp.log(c0)

    def step(carry, weight):
        m, log_rho, _ = carry
        m2 = matmul(m, m)
        c = frobenius(m2)
        m = m2 / jnp.where(c > 0, c, 1)[..., None, None]
        log_c = jnp.log(c)
        return (m, log_rho + weight * log_c, log_c), None

    weights = jnp.asarray([2.0 ** -(j + 1) for j in range(num_squarings)], b.dtype)
    (_, log_rho, last_log_c), _ = lax.scan(step, (m0, log0, jnp.zeros_like(log0)), weights)
    log_rho = log_rho + weights[-1] * last_log_c
    return jnp.exp(log_rho)


def vmap_as_batch(fn):
    """`fn(*arrays)` unchanged, except that `jax.vmap` of it calls `fn` once on the batch.

    For functions that already broadcast over leading axes and whose arguments
    share those axes (`a [..., n, n]` with `pi [..., n]`), vmapping the
    function's body is never better than calling it on the stacked batch and
    can be much worse: a `lax.cond` on a batched predicate becomes a `select`
    that computes both branches for every lane, and a chunk size computed from
    `x.size` sees one matrix instead of the batch, so memory grows with the
    vmapped axis. The vmap rule moves nothing (vmapped arguments arrive with
    the vmapped axis first), broadcasts unbatched arguments to that axis and
    calls the function again, so nested vmaps stack their axes in front.

    Differentiation goes through `fn` itself (a `custom_jvp` whose tangent
    rule is `jax.jvp(fn, ...)`), so forward and reverse mode work wherever
    `fn`'s own operations allow them; only the primal call is redirected.
    """

    @custom_vmap
    def batched(*args):
        return fn(*args)

    @batched.def_vmap
    def rule(axis_size, in_batched, *args):
        args = [
            x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
            for x, b in zip(args, in_batched)
        ]
        out = call(*args)
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def call(*args):
        return batched(*args)

    @call.defjvp
    def tangents(primals, tangents_in):
        return jax.jvp(fn, primals, tangents_in)

    return call


def lift(m: jax.Array, ndim: int) -> jax.Array:
    """Prepend unit axes so `m` has `ndim` dimensions (explicit broadcasting)."""
    return m.reshape((1,) * (ndim - m.ndim) + m.shape)


def log_size(n: int) -> float:
    """`log(n)` as a Python float (0 for n <= 1)."""
    return math.log(n) if n > 1 else 0.0
