"""Sampling helpers of the softmax-scaling study: the float dtype, a full-precision dot product, chunked sampling."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def float_dtype():
    """float64 when jax_enable_x64 is on, else float32."""
    return jax.dtypes.canonicalize_dtype(jnp.float64)


def _dot(a: Array, b: Array) -> Array:
    """a `[..., d]` . b `[d]` -> `[...]`, as an elementwise product and a sum.

    Not a matmul, so the sum is in full precision on every backend (TPU
    matmuls default to reduced-precision passes for float32).
    """
    return jnp.sum(a * jnp.reshape(b, (1,) * (a.ndim - 1) + b.shape), axis=-1)


def map_samples(fn, key: Array, num_samples: int, chunk_size: int):
    """[fn(fold_in(key, i)) for i < num_samples], stacked; `chunk_size` samples
    at a time (vmapped), the chunks in sequence (`lax.map`).

    Sample i's key depends only on i, so results do not depend on `chunk_size`
    (the last chunk is padded with extra samples, then cut).
    """
    chunk_size = min(chunk_size, num_samples)
    num_chunks = -(-num_samples // chunk_size)
    index = jnp.arange(num_chunks * chunk_size, dtype=jnp.uint32).reshape(num_chunks, chunk_size)

    def sample(i):
        return fn(jax.random.fold_in(key, i))

    out = jax.lax.map(jax.vmap(sample), index)
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[:num_samples], out)
