"""Benchmark rows of section 'streaming': the leading singular values of causal attention maps at length,
without the T x T matrix (`attnjax.analysis.leading_singular_values`), against a dense SVD where the
dense maps fit.

Config: `configs/benchmark.py`, `streaming` (`spectra_*`). Batch 1, float32,
causal, `heads` query and `kv_heads` key heads of `head_dim` (one
SmolLM2-135M layer). At each of `spectra_lengths`: the time of one compiled
call (the rows' lse by `attention_statistics`, then `spectra_iterations`
rounds of subspace iteration, each one A^T u and one A v pass over the keys)
and its compiled temporary bytes against one dense `[H, T, T]` float32 array;
at lengths up to `spectra_dense_max`, the dense maps' SVD
(`jnp.linalg.svd` of `dot_product_attention`'s weights) timed beside it, with
the largest relative difference of sigma_1 and sigma_2.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import attnjax
from attnjax.analysis import attention_statistics, leading_singular_values
from experiments.benchmark.util import ratio_row, temp_bytes

SECTION = "streaming"
MIB = 2**20


def _inputs(cfg, length: int):
    keys = jax.random.split(jax.random.key(1), 2)
    q = jax.random.normal(keys[0], (1, length, cfg.heads, cfg.head_dim), jnp.float32)
    k = jax.random.normal(keys[1], (1, length, cfg.kv_heads, cfg.head_dim), jnp.float32)
    return q, k


def _timed(fn, *args) -> tuple[float, object, int | None]:
    """(seconds of one call after compiling, its result, compiled temporary bytes)."""
    compiled = jax.jit(fn).lower(*args).compile()
    start = time.perf_counter()
    result = jax.block_until_ready(compiled(*args))
    return time.perf_counter() - start, result, temp_bytes(compiled)


def spectra_rows(cfg) -> list[dict]:
    """Time and memory of the streaming spectra over T; the dense SVD beside them where it fits."""

    def streaming(q, k):
        lse = attention_statistics(q, k, is_causal=True, chunk_size=cfg.chunk_size).lse
        return leading_singular_values(
            q, k, lse, num_values=2, iterations=cfg.spectra_iterations, is_causal=True
        ).values

    def dense(q, k):
        _, weights = attnjax.dot_product_attention(q, k, k, is_causal=True, return_weights=True)
        return jnp.linalg.svd(weights, compute_uv=False)[..., :2]

    rows = []
    for length in cfg.spectra_lengths:
        q, k = _inputs(cfg, length)
        shape = f"B=1 T={length} H={cfg.heads} K={cfg.kv_heads} D={cfg.head_dim} float32 causal"
        seconds, values, temp = _timed(streaming, q, k)
        weights_mb = cfg.heads * length * length * 4 / MIB
        name = "leading_singular_values (streaming)"
        rows.append(
            {
                "section": SECTION,
                "name": name,
                "shape": shape,
                "seconds": seconds,
                "temp_mb": None if temp is None else temp / MIB,
                "note": f"sigma_1, sigma_2 of every head, {cfg.spectra_iterations} rounds, lse "
                f"included; one [H, T, T] float32 array {weights_mb:.4g} MiB",
            }
        )
        if length > cfg.spectra_dense_max:
            continue
        dense_seconds, dense_values, _ = _timed(dense, q, k)
        difference = np.max(
            np.abs(np.asarray(values) - np.asarray(dense_values)) / np.asarray(dense_values)
        )
        rows.append(
            ratio_row(
                SECTION,
                "dense SVD / streaming",
                shape,
                dense_seconds,
                seconds,
                name,
                seconds=dense_seconds,
                max_relative_difference=float(difference),
                note="jnp.linalg.svd of the dense weights; the largest relative difference of "
                "sigma_1, sigma_2",
            )
        )
    return rows
