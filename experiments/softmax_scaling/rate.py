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
The correction is O(1 / sigma) relative, so the exponent is resolved only
where sigma is large: this run samples z = sigma u exactly (sigma^2 drawn as
2 Gamma(d_k / 2)), which reaches d_k ~ 10^6 at the cost of T normals, and
takes ||J||_2 from the secular equation (`jacobian.spectral_norm`, O(T) per
bisection step) rather than an eigensolver.
The hypothesis (this codebase's derivation): the least-squares slope of
log E||J||_2 against log d_k, fitted per seed over the upper half of
`config.rate_dims` (`summary.rate_window`: the correction is O(1/sigma)
relative), has a 95% interval over seeds that contains -1/2 (two-sided: the
claim is an equality).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

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
