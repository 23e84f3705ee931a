r"""The decay rate of the unscaled softmax Jacobian, E||J||_2 ~ d_k^(-1/2) (derived here, not in Vaswani et al.).

Derivation. For q, K with iid N(0, 1) components, given q the unscaled logits
z = K q `[T]` are iid N(0, |q|^2) (rotational invariance of K), and
|q|^2 ~ chi^2_{d_k}, so z = sigma u with sigma = |q| ~ sqrt(d_k) and u `[T]`
iid N(0, 1), independent of sigma. Let u_(1) > u_(2) be the two largest and
Delta = sigma (u_(1) - u_(2)) their gap in logits. ||J||_2 lies between p_(2)
and p_(1) (eigenvalue interlacing for the rank-one update of diag(p)); when
Delta >> 1 it is about 2 exp(-Delta), exponentially small, and it is O(1)
only when Delta = O(1). The gap u_(1) - u_(2) has a density f(0) > 0 at 0, so
P(Delta < c) ~ f(0) c / sigma, and

    E||J||_2 ~ f(0) (int_0^inf h(x) dx) / sigma ~ d_k^(-1/2),

h(x) the norm when the top two logits differ by x and the rest are far below.
The correction, to first order. When the two largest logits differ by
Delta and the rest are far below, ||J||_2 = 2 s'(Delta), s the logistic
function (the two-way softmax's Jacobian, eigenvalue 2 p (1 - p)). The gap
g = u_(1) - u_(2) has density

    f(g) = T (T - 1) int phi(x) phi(x + g) Phi(x)^(T - 2) dx,

so E||J||_2 = int_0^inf f(g) 2 s'(sigma g) dg = (1 / sigma) int_0^inf
f(x / sigma) 2 s'(x) dx, and with int_0^inf 2 s'(x) dx = 1 and
int_0^inf x 2 s'(x) dx = 2 ln 2,

    E||J||_2 sigma = f(0) (1 - a / sigma) + O(sigma^(-2)),  a = -2 ln 2 f'(0) / f(0),
    f(0) = T (T - 1) int phi(x)^2 Phi(x)^(T - 2) dx,
    f'(0) = -T (T - 1) int x phi(x)^2 Phi(x)^(T - 2) dx

(`gap_density`, by quadrature; a test checks the expansion against a direct
Monte Carlo of E||J||_2). With sigma = sqrt(d_k) (E[1 / |q|] = d_k^(-1/2)
(1 + O(1 / d_k))) the prefactor E||J||_2 sqrt(d_k) rises towards f(0), so a
log-log fit over finite widths is flatter than -1/2 (`derived_slope`).
This run samples z = sigma u exactly (sigma^2 drawn as 2 Gamma(d_k / 2)),
which reaches d_k ~ 10^6 at the cost of T normals, and takes ||J||_2 from the
secular equation (`jacobian.spectral_norm`, O(T) per bisection step) rather
than an eigensolver.
The hypothesis (this codebase's derivation): the least-squares slope of
log E||J||_2 against log d_k, fitted per seed over every width of
`config.rate_dims`, has a 95% interval over seeds that contains
`derived_slope(config.rate_dims, T)`, the slope of
log[f(0) (1 - a / sqrt(d_k)) / sqrt(d_k)] over the same widths (two-sided:
the claim is an equality).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate, special

from experiments.softmax_scaling.jacobian import spectral_norm
from experiments.softmax_scaling.sampling import float_dtype, map_samples

Array = jax.Array


@functools.partial(jax.jit, static_argnames=("num_keys", "num_samples", "chunk_size"))
def unscaled_spectral_norms(
    key: Array, dims: Array, *, num_keys: int, num_samples: int, chunk_size: int
) -> Array:
    """`[len(dims), num_samples]` samples of ||J||_2 at softmax(sigma u): sigma^2 ~ chi^2_{d_k}, u `[num_keys]`
    iid N(0, 1), for each d_k of `dims` `[n]` (the same u at every d_k).

    The same law as the unscaled softmax of K q for q `[d_k]`, K `[num_keys, d_k]` iid N(0, 1).
    """
    half = jnp.asarray(dims, float_dtype()) / 2.0

    def one(k):
        k_sigma, k_u = jax.random.split(k)
        sigma = jnp.sqrt(2.0 * jax.random.gamma(k_sigma, half, half.shape, float_dtype()))
        u = jax.random.normal(k_u, (num_keys,), float_dtype())
        return jax.vmap(lambda s: spectral_norm(jax.nn.softmax(s * u)))(sigma)

    return map_samples(one, key, num_samples, max(1, chunk_size // (num_keys * half.shape[0]))).T


def log_log_slope(dims, values) -> float:
    """Least-squares slope of log values against log dims `[n]`, n >= 2, values > 0 (float64, host)."""
    x, y = np.log(np.asarray(dims, np.float64)), np.log(np.asarray(values, np.float64))
    if x.shape != y.shape or x.size < 2:
        raise ValueError(
            f"dims and values must be two equal-length sequences of >= 2, got {x.shape} and {y.shape}"
        )
    x = x - x.mean()
    return float(np.sum(x * (y - y.mean())) / np.sum(x * x))


def gap_density(num_keys: int) -> tuple[float, float]:
    """(f(0), f'(0)): the density of the gap u_(1) - u_(2) between the two largest of `num_keys` = T >= 2
    iid N(0, 1), and its derivative, at 0, by quadrature:
    f(0) = T (T - 1) int phi(x)^2 Phi(x)^(T - 2) dx, f'(0) = -T (T - 1) int x phi(x)^2 Phi(x)^(T - 2) dx."""
    if isinstance(num_keys, bool) or not isinstance(num_keys, (int, np.integer)) or num_keys < 2:
        raise ValueError(f"num_keys must be an int >= 2, got {num_keys!r}")

    def moment(power: int) -> float:
        def integrand(x):
            # phi(x)^2 Phi(x)^(T - 2) in log space: Phi^(T - 2) underflows far in the left tail.
            return x**power * math.exp(
                -x * x - math.log(2 * math.pi) + (num_keys - 2) * special.log_ndtr(x)
            )

        return integrate.quad(integrand, -np.inf, np.inf, epsabs=0.0, epsrel=1e-12)[0]

    pairs = num_keys * (num_keys - 1)
    return pairs * moment(0), -pairs * moment(1)


def correction(num_keys: int) -> float:
    """a = -2 ln 2 f'(0) / f(0) (`gap_density`): E||J||_2 sigma = f(0) (1 - a / sigma) + O(sigma^(-2))."""
    f0, slope = gap_density(num_keys)
    return -2.0 * math.log(2.0) * slope / f0


def predicted_prefactor(dims, num_keys: int) -> np.ndarray:
    """`[n]`: f(0) (1 - a / sqrt(d_k)) per d_k of `dims` `[n]`, the first-order E||J||_2 sqrt(d_k) of the
    unscaled softmax over T = `num_keys` keys; raises ValueError where it is not positive (d_k <= a^2,
    outside the expansion)."""
    d = np.asarray(dims, np.float64)
    a = correction(num_keys)
    if d.ndim != 1 or np.any(d <= a * a):
        raise ValueError(
            f"dims must be a sequence of widths above a^2 = {a * a:.3g} (T = {num_keys}), got {dims!r}"
        )
    return gap_density(num_keys)[0] * (1.0 - a / np.sqrt(d))


def derived_slope(dims, num_keys: int) -> float:
    """The least-squares slope of log[f(0) (1 - a / sqrt(d_k)) / sqrt(d_k)] against log d_k over `dims`:
    the finite-width exponent the measured fit is compared with (-1/2 only as d_k -> infinity)."""
    d = np.asarray(dims, np.float64)
    return log_log_slope(d, predicted_prefactor(d, num_keys) / np.sqrt(d))
