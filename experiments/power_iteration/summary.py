"""The power-iteration study's summary: rows -> one dict of numbers, one list per part, in run order.

* `fixed`: per temperature, each matrix's |lambda_2|, fitted rate and its
  range, the vector iteration's rate, and d(k) up to a few steps past the fit;
* `products`: per model and phase, the head-averaged (`mean`) and per-head
  (`head`) chains' metrics per layer (means over seeds; excesses and gaps:
  their worst over seeds), and the trained model's accuracy;
* `clusters`: per beta, the cluster count at the times of `CLUSTER_GRID`
  (mean, min, max over seeds), each seed's count at `probe_time` and at the
  horizon, its time to reach one cluster (None: not within the horizon), and
  the mean count over time.

The readers below (`config_of`, `phases`, `product_tolerance`) are the one
definition of what the checks, the report and the figures share.
"""

from __future__ import annotations

import math

import numpy as np
from ml_collections import ConfigDict

from experiments.lab import models
from experiments.lab.study import by_metric, distinct, select
from experiments.power_iteration.study import dtype_of, rounding_floor

# Times at which the report tabulates the cluster count.
CLUSTER_GRID = (0, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000)
PHASE_LABELS = {
    "untrained": "untrained, bidirectional",
    "init": "causal, at initialisation",
    "trained": "causal, trained",
}
# Steps past the last fitted one shown in the fixed-matrix figure.
PLOT_MARGIN = 5


def config_of(summary: dict) -> ConfigDict:
    """The study's config, from the dict the runner stored in the summary."""
    return ConfigDict(summary["config"])


def eps(dtype_name: str) -> float:
    """Machine epsilon of a dtype named as the summary stores it ('float32', 'float64')."""
    return float(np.finfo(np.dtype(dtype_name)).eps)


def phases(run) -> list[str]:
    """The phases a products run measured, in the order they happen."""
    return [p for p in PHASE_LABELS if p in run["phases"]]


def product_tolerance(run) -> float:
    """Rounding allowance of the Dobrushin checks: 2 L T eps (each product adds <= T eps per row, in l1)."""
    layers = len(run["phases"][phases(run)[0]]["mean"]["delta"])
    return 2 * layers * run["seq_len"] * eps(run["dtype"])


# --------------------------------------------------------------------------
# Rows -> summary


def _fixed_summary(config, rows) -> dict:
    tolerance = config.fixed.tolerance
    matrices = []
    for i in range(config.fixed.num_matrices):
        m = {k: v[0] for k, v in by_metric(rows, matrix=i).items() if k != "distance"}
        slem, rate, vector_rate = (
            float(m["slem"]),
            float(m["rate"]),
            float(m["vector_rate"]),
        )  # "nan" -> nan
        rel = rate / slem - 1 if slem > 0 else math.nan
        matrices.append(
            {
                "matrix": i,
                "slem": slem,
                "rate": rate,
                "rel_error": rel,
                "passed": bool(math.isfinite(rel) and abs(rel) <= tolerance),
                "fit_start": m["fit_start"],
                "fit_end": m["fit_end"],
                "floor_reached": m["floor_reached"],
                "vector_rate": vector_rate,
                "vector_rel_error": vector_rate / slem - 1 if slem > 0 else math.nan,
            }
        )
    errors = [abs(m["rel_error"]) if math.isfinite(m["rel_error"]) else math.inf for m in matrices]
    end = max(m["fit_end"] for m in matrices) + PLOT_MARGIN
    curves = [
        np.asarray(d, dtype=np.float64)[: end + 1]
        for d in by_metric(rows, metric="distance")["distance"]
    ]
    return {
        "run": rows[0]["run"],
        "temperature": rows[0]["temperature"],
        "dtype": np.dtype(dtype_of(config)).name,
        "floor": rounding_floor(config),
        "matrices": matrices,
        "worst_rel_error": max(errors),
        "distance": curves,
    }


# The head-averaged chain's metrics that the summary also keeps per seed (`[seeds][L]`).
PER_SEED = ("delta", "bound", "slem_bound")


def _phase_summary(rows, phase: str) -> dict:
    """Head-averaged and per-head metrics of one phase: means over seeds, worst excesses over seeds;
    `seeds`: the head-averaged chain's `PER_SEED` metrics of each seed."""
    out = {}
    for chain in ("mean", "head"):
        metrics = by_metric(rows, phase=phase, chain=chain)
        summary = {}
        for name, per_seed in metrics.items():
            values = np.asarray(per_seed, dtype=np.float64)
            worst = name.endswith("excess") or name.endswith("gap")
            summary[name] = (np.max(values, axis=0) if worst else np.mean(values, axis=0)).tolist()
        out[chain] = summary
    mean = by_metric(rows, phase=phase, chain="mean")
    out["seeds"] = {name: np.asarray(mean[name], dtype=np.float64).tolist() for name in PER_SEED}
    return out


def _products_summary(config, rows) -> dict:
    spec = {k: rows[0][k] for k in ("part", "temperature", "architecture", "trained")}
    out = {
        "run": rows[0]["run"],
        "spec": spec,
        "seq_len": models.make_task(config.products.task).seq_len,
        "dtype": np.dtype(dtype_of(config)).name,
        "phases": {p: _phase_summary(rows, p) for p in distinct(rows, "phase")},
    }
    final = by_metric([r for r in rows if "chain" not in r], phase="trained")
    if final:
        out.update(final, chance_accuracy=final["chance_accuracy"][0])
    return out


def time_to_one(counts, times) -> float | None:
    """The first of `times [M]` at which `counts [M]` is 1 and stays 1 after; None if the last count is not 1."""
    counts = np.asarray(counts)
    if counts[-1] != 1:
        return None
    above = np.nonzero(counts != 1)[0]
    return float(times[above[-1] + 1]) if above.size else float(times[0])


def _clusters_summary(config, rows) -> dict:
    c = config.clusters
    counts = np.asarray(by_metric(rows)["clusters"], dtype=np.float64)  # [seeds, measures + 1]
    times = np.arange(counts.shape[1]) * c.measure_every * c.dt
    grid = sorted(
        {int(np.argmin(np.abs(times - t))) for t in CLUSTER_GRID if t <= times[-1]}
        | {len(times) - 1}
    )
    probe = int(np.argmin(np.abs(times - c.probe_time)))
    return {
        "run": rows[0]["run"],
        "beta": rows[0]["beta"],
        "times": times[grid].tolist(),
        "clusters_mean": counts[:, grid].mean(axis=0).tolist(),
        "clusters_min": counts[:, grid].min(axis=0).tolist(),
        "clusters_max": counts[:, grid].max(axis=0).tolist(),
        "probe_time": float(times[probe]),
        "probe_clusters": counts[:, probe].tolist(),
        "final_clusters": counts[:, -1].tolist(),
        "horizon": float(times[-1]),
        "time_to_one": [time_to_one(row, times) for row in counts],
        "clusters_curve": counts.mean(axis=0),  # [measures + 1]
    }


SUMMARIES = {"fixed": _fixed_summary, "products": _products_summary, "clusters": _clusters_summary}


def summarize(rows: list[dict], config) -> dict:
    """`{part: [one dict per run of that part, in run order]}` for the parts in `SUMMARIES`."""
    summary = {part: [] for part in SUMMARIES}
    for run_id in distinct(rows, "run"):
        run_rows = select(rows, run=run_id)
        part = run_rows[0]["part"]
        summary[part].append(SUMMARIES[part](config, run_rows))
    return summary
