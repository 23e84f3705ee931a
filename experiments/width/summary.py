"""The width study's summary: per model, every metric per length and seed, then the statistics the rows read.

`aggregate(rows, config)` gathers the measurements, `{model: {metric: [n][seed]}}`;
`derive` adds the intervals over seeds (each a `lab.stats` interval; on the
log scale for positive quantities) and the per-seed slopes of log quantities
against log n (least squares). `summarize` is `derive` of the aggregate's JSON
form, so that a committed summary derives the same numbers again.

Tail slopes are fitted over the largest `TAIL` lengths: the random-matrix
limits these rows compare with are leading order in n, and the smallest
lengths carry its finite-size corrections (at n = 64 the bulk is 16 values).
"""

from __future__ import annotations

import numpy as np

from attnjax.serialization import json_form
from experiments.lab import stats
from experiments.lab.study import select
from experiments.width.constants import TAIL
from experiments.width.study import METRICS

# Positive quantities per length, each a function of a seed's metrics at that length.
RATIOS = {
    "gap_ratio": lambda m, n: m["sigma_2"] / m["sigma_1"],
    "scaled_sigma_2": lambda m, n: m["sigma_2"] * np.sqrt(n),
    "stable_rank_map": lambda m, n: m["stable_rank_map"],
    "stable_rank_output": lambda m, n: m["stable_rank_output"],
    "stable_rank_fixed": lambda m, n: m["stable_rank_fixed"],
    "stable_rank_values": lambda m, n: m["stable_rank_values"],
    "output_rank_share": lambda m, n: m["stable_rank_output"] / m["stable_rank_values"],
    "fix_gain": lambda m, n: m["stable_rank_fixed"] / m["stable_rank_output"],
    "fixed_rank_share": lambda m, n: m["stable_rank_fixed"] / m["stable_rank_values"],
    "fixed_rank_per_length": lambda m, n: m["stable_rank_fixed"] / n,
}
# Slopes of log quantity against log n, per seed: (quantity, over the tail only).
SLOPES = {
    "gap_ratio": ("gap_ratio", False),
    "output_rank_share": ("output_rank_share", False),
    "fixed_rank_share": ("fixed_rank_share", False),
    "sigma_2_tail": ("sigma_2", True),
    "fixed_tail": ("stable_rank_fixed", True),
}


def aggregate(rows: list[dict], config) -> dict:
    """`{"models", "lengths", "seeds", "values": {model: {metric: [n][seed]}}}` from the runs' rows."""
    lengths = sorted(config.lengths)
    values = {}
    for model in config.models:
        per = {metric: [] for metric in METRICS}
        for n in lengths:
            run = select(rows, model=model, length=n)
            for metric in METRICS:
                by_seed = {r["seed"]: r["value"] for r in run if r["metric"] == metric}
                per[metric].append([by_seed[s] for s in sorted(by_seed)])
        values[model] = per
    return {
        "models": list(config.models),
        "lengths": lengths,
        "seeds": config.num_seeds,
        "values": values,
    }


def log_slopes(lengths, values) -> np.ndarray:
    """Per seed, the least-squares slope of log values `[n, seed]` against log n -> `[seed]`."""
    x = np.log(np.asarray(lengths, np.float64))
    y = np.log(np.asarray(values, np.float64))
    x = x - x.mean()
    return (x @ (y - y.mean(axis=0))) / (x @ x)


def _model_statistics(values: dict, lengths: list) -> dict:
    """Intervals per length, slopes, and the fix's gain at the largest length, for one model."""
    metrics = {k: np.asarray(v, np.float64) for k, v in values.items()}  # [n, seed] each
    n = np.asarray(lengths, np.float64)[:, None]
    ratios = {name: f(metrics, n) for name, f in RATIOS.items()}
    quantities = {**ratios, "sigma_2": metrics["sigma_2"]}
    slopes = {}
    for name, (quantity, tail) in SLOPES.items():
        part = slice(-TAIL, None) if tail else slice(None)
        slopes[name] = stats.interval(log_slopes(lengths[part], quantities[quantity][part]))
    v = float(np.mean(metrics["logit_variance"][-1]))
    return {
        "per_length": {
            name: [stats.log_interval(row) for row in ratio] for name, ratio in ratios.items()
        },
        "residual_output": [stats.interval(row) for row in metrics["residual_output"]],
        "logit_variance": [stats.interval(row) for row in metrics["logit_variance"]],
        "slopes": slopes,
        "fix_gain_largest": stats.log_interval(ratios["fix_gain"][-1]),
        # Per seed: how much less steeply the fixed output's share of its input's rank falls with n.
        "fix_slope_gain": stats.interval(
            log_slopes(lengths, ratios["fixed_rank_share"])
            - log_slopes(lengths, ratios["output_rank_share"])
        ),
        "row_sum_error": float(np.max(metrics["row_sum_error"])),
        "sigma_1_min": float(np.min(metrics["sigma_1"])),
        # sqrt(1 - e^(-v)) at the realised logit variance v of the largest length (derived in this codebase,
        # the report's findings): the relative residual that iid rows give as n grows.
        "residual_limit": float(np.sqrt(1 - np.exp(-v))),
        # Leading order for a map 1 1^T / n + Delta with Delta's entries independent of variance
        # (e^v - 1) / n^2 (derived in this codebase; the paper's constants were not retrieved): the bulk
        # edge sigma_2 sqrt(n) -> 2 sqrt(e^v - 1), sr(A Z) -> e^v, sr((A - 1 1^T / n) Z) / n -> 4 / 27
        # (a product of two independent square Gaussian-like matrices) and sr(Z) / n -> 1 / 4.
        "leading_order": {
            "scaled_sigma_2": float(2 * np.sqrt(np.expm1(v))),
            "stable_rank_output": float(np.exp(v)),
            "fixed_rank_per_length": 4 / 27,
        },
    }


def derive(aggregated: dict) -> dict:
    """The aggregate (JSON form) with `statistics` per model."""
    lengths = aggregated["lengths"]
    return {
        **aggregated,
        "statistics": {
            model: _model_statistics(stats.numbers(values), lengths)
            for model, values in aggregated["values"].items()
        },
        "float64_eps": float(np.finfo(np.float64).eps),
    }


def summarize(rows: list[dict], config) -> dict:
    """`derive` of the aggregate in its JSON form (as summary.json holds it)."""
    return derive(json_form(aggregate(rows, config)))
