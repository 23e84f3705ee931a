"""Benchmark section `analysis`: every attention metric in one jitted call.

Reference: one batched `jnp.linalg.svd(a, compute_uv=False)` of the same batch
of row-stochastic matrices, timed in the same run. Target: computing every
metric of `attnjax.analysis` takes at most `target` (6) times as long, which
requires sharing decompositions (one SVD for all rank metrics, one stationary
solve for `slem` and the residual to `1 πᵀ`). With `parts`, the main parts
are timed too. Config: `configs/benchmark.py`, `analysis`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from attnjax import analysis as an
from experiments.benchmark.util import median_time, ratio_row

SECTION = "analysis"
HEADS = 8  # the batch is read as [batch / 8, 8 heads] and as [batch / 8, 8 layers]


def attention_batch(batch: int, n: int, key=None) -> jax.Array:
    """`[batch, n, n]` float32 row-stochastic maps, softmax of scores ~ N(0, 4)."""
    key = jax.random.PRNGKey(0) if key is None else key
    scores = 2.0 * jax.random.normal(key, (batch, n, n), jnp.float32)
    return jax.nn.softmax(scores, axis=-1)


def singular_values(a):
    return jnp.linalg.svd(a, compute_uv=False)


def all_metrics(a, slem_method: str = "iterative"):
    """Every metric of `attnjax.analysis` on `a [B, n, n]` (B divisible by 8)."""
    b, n, _ = a.shape
    grouped = a.reshape(b // HEADS, HEADS, n, n)
    out = {}
    out.update(an.rank_report(a)._asdict())  # one SVD
    out.update(an.markov_report(a, method=slem_method)._asdict())  # one stationary solve
    out["row_stochastic"] = an.is_row_stochastic(a)
    out["entropy"] = an.attention_entropy(a)
    out["distance"] = an.mean_attention_distance(a)
    out["pattern"] = an.classify_pattern(a)
    out["redundancy"] = an.head_redundancy(grouped)
    out["path_product"] = an.path_product(grouped)
    out["power_iteration"] = an.power_iteration(a, jnp.linspace(-1.0, 1.0, n, dtype=a.dtype), 32)
    return out


def _interleaved(fn_a, fn_b, x, rounds: int) -> tuple[float, float]:
    """Median seconds of jitted `fn_a(x)` and `fn_b(x)`, timed alternately so
    that load changes on a shared machine affect both alike."""
    fn_a, fn_b = jax.jit(fn_a), jax.jit(fn_b)
    times_a, times_b = [], []
    for _ in range(rounds):
        times_a.append(median_time(fn_a, x, repeats=1, warmup=1 if not times_a else 0))
        times_b.append(median_time(fn_b, x, repeats=1, warmup=1 if not times_b else 0))
    return sorted(times_a)[rounds // 2], sorted(times_b)[rounds // 2]


def run(cfg) -> list[dict]:
    """Time the reference SVD and all metrics together (and, with `cfg.parts`, the main parts)."""
    a = attention_batch(cfg.batch, cfg.n)
    shape = f"[{cfg.batch}, {cfg.n}, {cfg.n}] float32"
    ref_name = "svd (compute_uv=False)"
    ref, total = _interleaved(singular_values, all_metrics, a, rounds=cfg.rounds)
    rows = [
        {"section": SECTION, "name": ref_name, "shape": shape, "seconds": ref, "note": "reference"},
        ratio_row(SECTION, "all metrics, one jit", shape, total, ref, ref_name, f"<= {cfg.target:g}",
                  seconds=total, note="timed alternately with the reference"),
    ]
    if not cfg.parts:
        return rows
    parts = {
        "rank_report (one SVD)": an.rank_report,
        "markov_report (one stationary solve)": an.markov_report,
        "stationary_distribution": an.stationary_distribution,
        "slem iterative (default)": an.slem,
        "slem eig (LAPACK)": lambda x: an.slem(x, method="eig"),
        "dobrushin": an.dobrushin,
    }
    for name, fn in parts.items():
        seconds = median_time(jax.jit(fn), a, repeats=3)
        rows.append(ratio_row(SECTION, name, shape, seconds, ref, ref_name, seconds=seconds, note="part"))
    return rows
