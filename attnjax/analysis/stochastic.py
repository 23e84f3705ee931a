"""Whether an array is a row-stochastic map `A [..., T, S]`: `A ≥ 0`, `A 1 = 1`.

The Markov and head metrics assume such maps and do not check them inside
`jit` (a check there could only return a flag, or NaN): `is_row_stochastic`
is that flag, jit-able; `check_stochastic` raises, outside `jit`, with the
offending rows, for a user to call once on the maps they analyse.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from attnjax.analysis._linalg import as_matrix, eps

MAX_REPORTED_ROWS = 3


def _default_atol(a: jax.Array) -> float:
    """`S · eps(dtype)`: the worst-case rounding error of a sum of `S` terms of size at most 1."""
    return a.shape[-1] * eps(a.dtype)


@partial(jax.jit, static_argnames=("atol",))
def is_row_stochastic(a, *, atol: float | None = None) -> jax.Array:
    """Whether `a [..., T, S]` is row-stochastic up to rounding: `[...]` bool.

    Checks `a_ij >= -atol` and `|Σ_j a_ij - 1| <= atol`. The default
    `atol = S · eps(dtype)` is the worst-case rounding error of a sum of `S`
    terms of size at most 1, so any correctly normalised softmax passes.
    Invalid input: False for any row with NaN or inf.
    """
    a = as_matrix(a, "a")
    atol = _default_atol(a) if atol is None else atol
    nonneg = jnp.all(a >= -atol, axis=(-2, -1))
    sums_to_one = jnp.all(jnp.abs(jnp.sum(a, axis=-1) - 1) <= atol, axis=-1)
    return nonneg & sums_to_one


def check_stochastic(a, *, atol: float | None = None, name: str = "a") -> None:
    """Raise `ValueError` unless every row of concrete `a [..., T, S]` is a distribution.

    A row `i` passes when its entries are `>= -atol`, finite, and
    `|Σ_j a_ij - 1| <= atol` (default `atol = S · eps(dtype)`, as in
    `is_row_stochastic`; sums are taken in float64). The message gives the
    number of bad rows and, for the first few, the row's index (leading axes
    included), its sum and its smallest entry. For concrete arrays only (it
    reads the values): inside `jax.jit` use `is_row_stochastic`, whose result
    is a traced flag; a traced `a` raises `TypeError`.
    """
    if isinstance(a, jax.core.Tracer):
        raise TypeError(
            f"check_stochastic reads values, so {name} must be concrete (called outside jax.jit); "
            f"got a tracer of shape {a.shape}: use is_row_stochastic inside jit"
        )
    a = as_matrix(a, name)
    atol = _default_atol(a) if atol is None else float(atol)
    x = np.asarray(a, np.float64)
    sums, mins = x.sum(axis=-1), x.min(axis=-1, initial=np.inf)
    bad = ~(np.isfinite(sums) & (np.abs(sums - 1) <= atol) & (mins >= -atol))
    if not bad.any():
        return
    rows = np.argwhere(bad)[:MAX_REPORTED_ROWS]
    details = "; ".join(
        f"row {tuple(int(i) for i in r)} sums to {sums[tuple(r)]:.6g}, min entry "
        f"{mins[tuple(r)]:.6g}"
        for r in rows
    )
    raise ValueError(
        f"{name} must be row-stochastic (entries >= -{atol:.3g}, rows summing to 1 within "
        f"{atol:.3g}); {int(bad.sum())} of {bad.size} rows of {name} (shape {x.shape}) are not: "
        f"{details}"
    )
