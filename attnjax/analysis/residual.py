"""The mean-centred residual of hidden states `X [..., T, D]`, and its size.

`res(X) = X - 1 x̄ᵀ`, `x̄ = (1/T) Σ_t X_t` the mean token: what is left of
the tokens once the component they share is removed; it is 0 exactly when
every token is the same (rank one with identical rows). Dong, Cordonnier &
Loukas (2021), "Attention is not all you need: pure attention loses rank
doubly exponentially with depth", define `res(X) = X - 1 xᵀ` with
`x = argmin_x ‖X - 1 xᵀ‖`; like their plotting code, this module uses the
mean token, which bounds that minimum from above (and attains it in the
Frobenius norm).

Sizes, named by `norm` (`NORMS`):

* `'fro'`: the Frobenius norm `‖M‖_F`.
* `'l1inf'`: Dong et al.'s "composite norm" `‖M‖_{1,∞} = sqrt(‖M‖_1 ‖M‖_∞)`
  (`composite_norm`; not a norm, see there).

Functions (each acts on the last two axes, broadcasts over leading ones, is
pure and jit-able):

* `residual_norm(x, norm)`: `‖res(X)‖`, the absolute residual;
* `residual_ratio(x, norm)`: `‖res(X)‖ / ‖X‖`, the relative one;
* `shared_norm(x)`: `‖1 x̄ᵀ‖_F`, the size of the shared component. In the
  Frobenius norm the two parts are orthogonal, `‖X‖_F² = ‖res(X)‖_F² +
  ‖1 x̄ᵀ‖_F²`, so a falling ratio is rank collapse only when `‖res(X)‖`
  shrinks; when `‖1 x̄ᵀ‖` grows instead (one token's massive activation,
  Sun et al. 2024, "Massive activations in large language models", or a
  growing skip-connection stream) the token differences may not have
  shrunk at all;
* `composite_norm(m)`.

Every function defaults to `norm='fro'`; pass `'l1inf'` for Dong et al.'s
quantity.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp

from attnjax.analysis._linalg import as_matrix, frobenius, max_column_sum, max_row_sum, safe_divide

NORMS = ("fro", "l1inf")


def _centred(x: jax.Array) -> jax.Array:
    """`res(X) = X - 1 x̄ᵀ` with `x̄` the mean token: `(I - 11ᵀ/T) X`, `[..., T, D]`."""
    return x - jnp.mean(x, axis=-2, keepdims=True)


def _composite(m: jax.Array) -> jax.Array:
    return jnp.sqrt(max_column_sum(m) * max_row_sum(m))


def _size(m: jax.Array, norm: str) -> jax.Array:
    """`‖m‖` in `norm` (one of `NORMS`, checked by the caller): `[..., T, D] -> [...]`."""
    return frobenius(m) if norm == "fro" else _composite(m)


def _check_norm(norm, x: jax.Array) -> None:
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}; got {norm!r} (x shape {x.shape})")


@jax.jit
def composite_norm(m) -> jax.Array:
    """Dong et al.'s `‖M‖_{1,∞} = sqrt(‖M‖_1 ‖M‖_∞)`: `[..., T, D] -> [...]`.

    `‖M‖_1 = max_j Σ_i |m_ij|` (largest column abs-sum) and `‖M‖_∞ = max_i
    Σ_j |m_ij|` (largest row abs-sum) are the operator norms induced by the
    vector 1- and ∞-norms. Their geometric mean, which Dong et al. (2021)
    call the composite norm, is not a norm: it is positive for `M != 0`,
    absolutely homogeneous and sub-multiplicative (`‖AB‖_1 <= ‖A‖_1 ‖B‖_1` and
    likewise for `∞`), but it does NOT satisfy the triangle inequality. For
    `A = [[1, 0], [1, 0]]` and `B = [[1, 1], [0, 0]]`, both have value
    `sqrt(2)` while `A + B = [[2, 1], [1, 0]]` has 3 > 2 sqrt(2). Bounds on a
    sum (of heads, of branches) therefore go through `‖·‖_1` and `‖·‖_∞`
    separately, never through this quantity. It bounds the spectral norm:
    `‖M‖_2 <= sqrt(‖M‖_1 ‖M‖_∞)`.
    """
    return _composite(as_matrix(m, "m"))


@partial(jax.jit, static_argnames=("norm",))
def residual_norm(x, norm: str = "fro") -> jax.Array:
    """Absolute residual `‖X - 1 x̄ᵀ‖` of hidden states `x [..., T, D]` -> `[...]`.

    `x̄` the mean token (see the module docstring). `norm`: `'fro'` (default)
    or `'l1inf'` (Dong et al.'s `sqrt(‖·‖_1 ‖·‖_∞)`, see `composite_norm`).
    Unlike `residual_ratio`, this does not fall when a component shared by
    every token grows (as in networks with skip connections).
    """
    x = as_matrix(x, "x")
    _check_norm(norm, x)
    return _size(_centred(x), norm)


@partial(jax.jit, static_argnames=("norm",))
def residual_ratio(x, norm: str = "fro") -> jax.Array:
    """Relative distance of `X` from rank one with identical rows: `‖X - 1 x̄ᵀ‖ / ‖X‖`.

    `residual_norm(x, norm)` over `‖X‖` in the same `norm` (0 for the zero
    matrix). Dong, Cordonnier & Loukas (2021) show that the residual of pure
    self-attention decays doubly exponentially with depth.

    Args:
      x: `[..., T, D]` hidden states.
      norm: `'fro'` (default; `x̄` is then the exact minimiser over `x` of
        `‖X - 1 xᵀ‖_F`, and the ratio lies in `[0, 1]`) or `'l1inf'` (Dong et
        al.'s `sqrt(‖·‖_1 ‖·‖_∞)`; the mean token bounds their minimum over
        `x` from above).

    Returns:
      `[...]`.
    """
    x = as_matrix(x, "x")
    _check_norm(norm, x)
    return safe_divide(_size(_centred(x), norm), _size(x, norm))


@jax.jit
def shared_norm(x) -> jax.Array:
    """Size of the component every token shares: `‖1 x̄ᵀ‖_F = sqrt(T) ‖x̄‖_2`, `[..., T, D] -> [...]`.

    The complement of `residual_norm(x, 'fro')`: `‖X‖_F² = ‖X - 1 x̄ᵀ‖_F² +
    ‖1 x̄ᵀ‖_F²` (the two parts are orthogonal; in no other norm does this hold,
    hence Frobenius only).
    """
    x = as_matrix(x, "x")
    return math.sqrt(x.shape[-2]) * jnp.sqrt(jnp.sum(jnp.square(jnp.mean(x, axis=-2)), axis=-1))
