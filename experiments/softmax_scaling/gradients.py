r"""The gradient that reaches the query and the keys through the softmax, with and without the 1/sqrt(d_k) scale.

Vaswani et al. 2017, §3.2.1: "We suspect that for large values of d_k, the dot
products grow large in magnitude, pushing the softmax function into regions
where it has extremely small gradients", with the footnote: "assume that the
components of q and k are independent random variables with mean 0 and variance
1. Then their dot product, q.k = sum_i q_i k_i, has mean 0 and variance d_k."

One sample: a query q `[d_k]`, T keys K `[T, d_k]`, values V `[T, d_v]` (iid
N(0, 1)) and a cotangent g `[d_v]` (iid N(0, 1)); the loss is the attention
output projected on g,

    L(q, K) = g . (softmax(s K q)^T V),      s = 1 (unscaled) or 1/sqrt(d_k) (scaled),

With p = softmax(s K q) and J = diag(p) - p p^T (chain rule through o = V^T p),

    dL/dq = s K^T J V g `[d_k]`,     dL/dK = s (J V g) q^T `[T, d_k]`,

so both pass through J: where the softmax saturates, both vanish. The study
uses these closed forms (`gradient_norms`; one small program per d_k), and the
tests check them against `jax.grad` of `attention_loss`, which calls
`attnjax.dot_product_attention`. The study
records the median over samples of ||dL/dq|| and ||dL/dK||_F (the typical
query, not the mean, which rare near-ties dominate) for three input families:

* "gaussian": components iid N(0, 1) (the footnote's setting);
* "laplace": components iid Laplace, scaled to variance 1 (heavier tails,
  kurtosis 6; still independent, mean 0, variance 1: the footnote applies);
* "low_rank": q = G x / sqrt(r), k_j = G y_j / sqrt(r) with G `[d_k, r]`,
  x, y_j `[r]` iid N(0, 1): every component has variance 1, but they are not
  independent. Derived here: q.k = x^T G^T G y / r, and G^T G ~ d_k I_r, so
  Var(q.k) ~ d_k^2 / r and Var(q.k / sqrt(d_k)) ~ d_k / r grows with d_k;
  the scale does not stop the saturation.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

import attnjax
from experiments.softmax_scaling.sampling import _dot, float_dtype, map_samples

Array = jax.Array
INPUTS = ("gaussian", "laplace", "low_rank")
GRADIENTS = ("grad_query", "grad_key")


def sample_query_keys(
    key: Array, inputs: str, mask: Array, *, num_keys: int, rank: int
) -> tuple[Array, Array]:
    """(q `[D]`, K `[num_keys, D]`) of one input family (see the module docstring), unit-variance components.

    `mask` `[D]` (1 for the first d_k components, 0 after) sets d_k: every
    d_k shares one program of width D = max d_k. Laplace components have scale 1/sqrt(2) (variance 1).
    """
    if inputs not in INPUTS:
        raise ValueError(f"inputs must be one of {INPUTS}, got {inputs!r}")
    (width,), dtype = mask.shape, mask.dtype
    kq, kk, kg = jax.random.split(key, 3)
    if inputs == "low_rank":
        basis = mask[:, None] * jax.random.normal(kg, (width, rank), dtype) / math.sqrt(rank)
        return basis @ jax.random.normal(kq, (rank,), dtype), jax.random.normal(
            kk, (num_keys, rank), dtype
        ) @ basis.T

    def components(k, shape):
        z = (
            jax.random.laplace(k, shape, dtype) / math.sqrt(2.0)
            if inputs == "laplace"
            else jax.random.normal(k, shape, dtype)
        )
        return jnp.reshape(mask, (1,) * (len(shape) - 1) + mask.shape) * z

    return components(kq, (width,)), components(kk, (num_keys, width))


def attention_loss(query: Array, keys: Array, values: Array, cotangent: Array, scale) -> Array:
    """g . (softmax(scale K q)^T V) for one query `[d_k]`, keys `[T, d_k]`, values `[T, d_v]`, g `[d_v]`."""
    out = attnjax.dot_product_attention(
        query[None, None, :], keys[:, None, :], values[:, None, :], scale=scale
    )
    return jnp.sum(out[0, 0] * cotangent)


def gradients(
    query: Array, keys: Array, values: Array, cotangent: Array, scale
) -> tuple[Array, Array]:
    """(dL/dq `[d_k]`, dL/dK `[T, d_k]`) of `attention_loss`, in closed form: s K^T J V g and s (J V g) q^T."""
    p = attnjax.softmax_with_temperature(scale * _dot(keys, query))
    u = _dot(values, cotangent)  # V g `[T]`
    ju = p * (u - jnp.sum(p * u))  # J u = diag(p) u - p (p . u)
    return scale * _dot(keys.T, ju), scale * ju[:, None] * query[None, :]


def gradient_norms(
    query: Array, keys: Array, values: Array, cotangent: Array, scale
) -> dict[str, Array]:
    """{"grad_query": ||dL/dq||, "grad_key": ||dL/dK||_F} of `attention_loss` (scalars)."""
    dq, dk = gradients(query, keys, values, cotangent, scale)
    return {"grad_query": jnp.sqrt(jnp.sum(dq * dq)), "grad_key": jnp.sqrt(jnp.sum(dk * dk))}


@functools.partial(
    jax.jit, static_argnames=("width", "num_keys", "value_dim", "rank", "num_samples", "chunk_size")
)
def gradient_samples(
    key: Array,
    dim: Array,
    *,
    width: int,
    num_keys: int,
    value_dim: int,
    rank: int,
    num_samples: int,
    chunk_size: int,
) -> dict:
    """Per-sample gradient norms `{inputs: {scaling: {gradient: [num_samples]}}}` at key width `dim` <= `width`
    (an int array: one compiled program serves every d_k); both scalings on the same (q, K, V, g)."""
    dtype = float_dtype()
    mask = (jnp.arange(width) < dim).astype(dtype)
    scale = 1.0 / jnp.sqrt(jnp.asarray(dim, dtype))

    def one(k):
        k_qk, kv, kg = jax.random.split(k, 3)
        values = jax.random.normal(kv, (num_keys, value_dim), dtype)
        g = jax.random.normal(kg, (value_dim,), dtype)
        out = {}
        for index, inputs in enumerate(INPUTS):
            q, keys = sample_query_keys(
                jax.random.fold_in(k_qk, index), inputs, mask, num_keys=num_keys, rank=rank
            )
            out[inputs] = {
                "unscaled": gradient_norms(q, keys, values, g, 1.0),
                "scaled": gradient_norms(q, keys, values, g, scale),
            }
        return out

    return map_samples(one, key, num_samples, max(1, chunk_size // num_keys))
