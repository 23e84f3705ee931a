"""Benchmark section `analysis`: every attention metric in one jitted call, and under vmap.

Reference: one batched `jnp.linalg.svd(a, compute_uv=False)` of the same batch
of row-stochastic matrices, timed in the same run. Target: computing every
metric of `attnjax.analysis` takes at most `target` (6) times as long, which
requires sharing decompositions (one SVD for all rank metrics, one stationary
solve for `slem` and the residual to `1 πᵀ`). With `parts`, the main parts
are timed too.

Research code vmaps the metrics over heads, layers and seeds, so each public
function with a batched form is also timed as `jit(vmap(f))` over the batch
against `jit(f)` on the batched array (target `vmap_target`, 1.5), and a
bundle of seven common metrics, vmapped in one jit, against the reference SVD
(target `target`). Config: `configs/benchmark.py`, `analysis`.
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


def vmap_cases(a: jax.Array) -> dict[str, tuple]:
    """`name -> (f, x)`: each public function of `attnjax.analysis` with a batched form, as a
    function of one array `x` batched over axis 0 (maps `a [B, n, n]`, or `[B/8, 8, n, n]` for the
    functions of `[..., H, T, S]` or `[..., L, n, n]`)."""
    b, n, _ = a.shape
    grouped = a.reshape(b // HEADS, HEADS, n, n)
    v0 = jnp.linspace(-1.0, 1.0, n, dtype=a.dtype)
    sink = jnp.arange(n) == 0
    maps = {
        name: getattr(an, name)
        for name in (
            "residual_ratio",
            "token_cosine_similarity",
            "stable_rank",
            "effective_rank",
            "numerical_rank",
            "spectral_entropy",
            "participation_ratio",
            "condition_number",
            "rank_report",
            "is_row_stochastic",
            "stationary_distribution",
            "slem",
            "spectral_gap",
            "dobrushin",
            "stationary_residual",
            "rank_one_residual",
            "markov_report",
            "triangular_slem",
            "attention_entropy",
            "mean_attention_distance",
            "pattern_features",
            "classify_pattern",
            "normalized_entropy",
            "distance_to_first",
            "shared_norm",
            "composite_norm",
            "residual_norm",
            "logit_variance",
        )
    }
    cases = {name: (fn, a) for name, fn in maps.items()}
    cases["power_iteration"] = (lambda x: an.power_iteration(x, v0, 32), a)
    cases["sink_mass"] = (lambda x: an.sink_mass(x, sink), a)
    cases["uniform_sink_mass"] = (lambda x: an.uniform_sink_mass(x > 1.0 / n, sink), a)
    cases["head_redundancy"] = (an.head_redundancy, grouped)
    cases["path_product"] = (an.path_product, grouped)
    cases["dong_constant"] = (lambda x: an.dong_constant(x, x, n), grouped)
    return cases


def common_metrics(a):
    """Seven metrics research code computes per head of `a [..., n, n]`, each by its own call,
    sharing the stationary distribution as the API allows."""
    pi = an.stationary_distribution(a)
    return {
        "attention_entropy": an.attention_entropy(a),
        "stable_rank": an.stable_rank(a),
        "effective_rank": an.effective_rank(a),
        "stationary_distribution": pi,
        "slem": an.slem(a, pi=pi),
        "dobrushin": an.dobrushin(a),
        "rank_one_residual": an.rank_one_residual(a, pi),
    }


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
        ratio_row(
            SECTION,
            "all metrics, one jit",
            shape,
            total,
            ref,
            ref_name,
            f"<= {cfg.target:g}",
            seconds=total,
            note="timed alternately with the reference",
        ),
    ]
    rows += vmap_rows(cfg, a, ref, ref_name)
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
        rows.append(
            ratio_row(SECTION, name, shape, seconds, ref, ref_name, seconds=seconds, note="part")
        )
    return rows


def vmap_rows(cfg, a: jax.Array, ref: float, ref_name: str) -> list[dict]:
    """`jit(vmap(f))` against `jit(f)` on the batch for every case, and the vmapped bundle against `ref`."""
    rows = []
    cases = vmap_cases(a)
    unknown = set(cfg.vmap_functions) - set(cases)
    if unknown:
        raise ValueError(
            f"analysis.vmap_functions: unknown {sorted(unknown)}; valid: {sorted(cases)}"
        )
    for name, (fn, x) in cases.items():
        if cfg.vmap_functions and name not in cfg.vmap_functions:
            continue
        shape = f"{list(x.shape)} {x.dtype}"
        vmapped, batched = _interleaved(jax.vmap(fn), fn, x, rounds=cfg.vmap_rounds)
        rows.append(
            ratio_row(
                SECTION,
                f"{name}: vmap / batched",
                shape,
                vmapped,
                batched,
                "same function, batched",
                f"<= {cfg.vmap_target:g}",
                seconds=vmapped,
                note="timed alternately",
            )
        )
    shape = f"[{cfg.batch}, {cfg.n}, {cfg.n}] float32"
    bundle, _ = _interleaved(jax.vmap(common_metrics), common_metrics, a, rounds=cfg.vmap_rounds)
    rows.append(
        ratio_row(
            SECTION,
            "seven common metrics, vmapped, one jit",
            shape,
            bundle,
            ref,
            ref_name,
            f"<= {cfg.target:g}",
            seconds=bundle,
            note="entropy, stable/effective rank, stationary, slem, dobrushin, rank-one residual",
        )
    )
    return rows
