"""Benchmark section `analysis`: every attention metric in one jitted call.

Reference: one batched `jnp.linalg.svd(a, compute_uv=False)` of the same batch
of row-stochastic matrices, timed in the same run. Target: computing every
metric of `attnjax.analysis` takes at most 6 times as long, which requires
sharing decompositions (one SVD for all rank metrics, one stationary solve
for `slem` and the residual to `1 πᵀ`).

    python -m experiments.bench_analysis [--quick]
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from attnjax import analysis as an
from experiments.bench_util import drop_targets, format_table, median_time

SECTION = "analysis"
TARGET = 6.0
COLUMNS = ("section", "name", "shape", "seconds", "reference", "ratio", "target", "ok", "note")
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


def _row(name, shape, seconds, reference=None, ref_seconds=None, target=None, note=""):
    """A timing row; with `reference`, also the ratio to it (checked when `target` is set)."""
    ratio = None if reference is None else seconds / ref_seconds
    ok = None
    if target is not None:
        op, bound = target.split()
        ok = ratio <= float(bound) if op == "<=" else ratio >= float(bound)
    return {"section": SECTION, "name": name, "shape": shape, "seconds": seconds, "reference": reference,
            "ratio": ratio, "target": target, "ok": ok, "note": note}


def _interleaved(fn_a, fn_b, x, rounds: int) -> tuple[float, float]:
    """Median seconds of jitted `fn_a(x)` and `fn_b(x)`, timed alternately so
    that load changes on a shared machine affect both alike."""
    fn_a, fn_b = jax.jit(fn_a), jax.jit(fn_b)
    times_a, times_b = [], []
    for _ in range(rounds):
        times_a.append(median_time(fn_a, x, repeats=1, warmup=1 if not times_a else 0))
        times_b.append(median_time(fn_b, x, repeats=1, warmup=1 if not times_b else 0))
    return sorted(times_a)[rounds // 2], sorted(times_b)[rounds // 2]


def run(quick: bool = False) -> list[dict]:
    """Time the reference SVD and all metrics together (and, unless `quick`, the main parts)."""
    batch, n = (8, 64) if quick else (64, 256)
    a = attention_batch(batch, n)
    shape = f"[{batch}, {n}, {n}] float32"
    ref_name = "svd (compute_uv=False)"
    ref, total = _interleaved(singular_values, all_metrics, a, rounds=3 if quick else 7)
    rows = [
        _row(ref_name, shape, ref, note="reference"),
        _row("all metrics, one jit", shape, total, ref_name, ref, f"<= {TARGET:g}",
             "timed alternately with the reference"),
    ]
    if quick:
        return drop_targets(rows)
    parts = {
        "rank_report (one SVD)": an.rank_report,
        "markov_report (one stationary solve)": an.markov_report,
        "stationary_distribution": an.stationary_distribution,
        "slem iterative (default)": an.slem,
        "slem eig (LAPACK)": lambda x: an.slem(x, method="eig"),
        "dobrushin": an.dobrushin,
    }
    for name, fn in parts.items():
        rows.append(_row(name, shape, median_time(jax.jit(fn), a, repeats=3), ref_name, ref, note="part"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    print(format_table(run(quick=parser.parse_args().quick), COLUMNS))


if __name__ == "__main__":
    main()
