"""The power-iteration study's summary: rows -> the raw aggregate -> every number its readers read.

`aggregate(rows, config)` keeps one list per part, in run order:

* `fixed`: per temperature, each matrix's |lambda_2|, fitted rate and its
  range, the vector iteration's rate, and d(k) up to a few steps past the fit;
* `products`: per model and phase, the head-averaged (`mean`) and per-head
  (`head`) chains' metrics per layer (means over seeds; excesses and gaps:
  their worst over seeds), and the trained model's accuracy;
* `clusters`: per beta, the cluster count at the times of `CLUSTER_GRID`
  (mean, min, max over seeds), each seed's count at `probe_time` and at the
  horizon, its time to reach one cluster (None: not within the horizon), and
  the mean count over time.

`derive(summary)` adds every number that the checks, the figures and the
report read, each computed here once (`derive_fixed`, `derive_products`,
`derive_clusters`); `summarize`, what the runner calls, is the two in turn,
and `add_derived` completes a summary.json written before `derive` existed.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from attnjax.serialization import json_form
from experiments.lab import models
from experiments.lab.study import by_metric, distinct, select
from experiments.power_iteration.constants import (
    CAUSAL_FACTOR,
    ENTROPY_RANGE,
    PHASE_LABELS,
    RESOLVED_FACTOR,
)
from experiments.power_iteration.study import dtype_of, rounding_floor

# Times at which the report tabulates the cluster count.
CLUSTER_GRID = (0, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000)
# Steps past the last fitted one shown in the fixed-matrix figure.
PLOT_MARGIN = 5
# The two chains of a products phase: head-averaged, and each head's own.
CHAINS = ("mean", "head")


def eps(dtype_name: str) -> float:
    """Machine epsilon of a dtype named as the summary stores it ('float32', 'float64')."""
    return float(np.finfo(np.dtype(dtype_name)).eps)


# --------------------------------------------------------------------------
# Rows -> the raw aggregate


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


def aggregate(rows: list[dict], config) -> dict:
    """`{part: [one dict per run of that part, in run order]}` for the parts in `SUMMARIES`."""
    summary = {part: [] for part in SUMMARIES}
    for run_id in distinct(rows, "run"):
        run_rows = select(rows, run=run_id)
        part = run_rows[0]["part"]
        summary[part].append(SUMMARIES[part](config, run_rows))
    return summary


# --------------------------------------------------------------------------
# The raw aggregate -> the numbers the checks, figures and report read


def derive_fixed(fixed: list[dict]) -> dict:
    """`{"fixed": each run with "failed" (its matrices outside the tolerance), "fixed_worst": the worst
    relative error over every run (None: no run), "fixed_floor": the highest rounding floor (NaN: no run)}`."""
    return {
        "fixed": [
            {**run, "failed": sum(not m["passed"] for m in run["matrices"])} for run in fixed
        ],
        "fixed_worst": max((float(run["worst_rel_error"]) for run in fixed), default=None),
        "fixed_floor": max((run["floor"] for run in fixed), default=math.nan),
    }


def phases(run: dict) -> list[str]:
    """The phases a products run measured, in the order they happen (`PHASE_LABELS`)."""
    return [p for p in PHASE_LABELS if p in run["phases"]]


def product_tolerance(run: dict) -> float:
    """Rounding allowance of the Dobrushin checks: 2 L T eps (each product adds <= T eps per row, in l1)."""
    layers = len(run["phases"][phases(run)[0]]["mean"]["delta"])
    return 2 * layers * run["seq_len"] * eps(run["dtype"])


def regime_holds(entropy) -> bool:
    """Whether every layer's mean normalised entropy `[L]` lies inside `ENTROPY_RANGE` (neither one-hot
    nor uniform): the regime the product prediction is evaluated in."""
    return bool(all(ENTROPY_RANGE[0] <= h <= ENTROPY_RANGE[1] for h in entropy))


def product_ratios(seeds: dict, floor: float) -> dict:
    """delta(P_l) / prod_(i<=l) |lambda_2(A_i)| and delta(P_l) / prod_(i<=l) tau(A_i) of each seed at the
    layers l >= 2 where delta(P_l) and the |lambda_2| product are above `floor`.

    `seeds`: the head-averaged chain's `delta`, `slem_bound`, `bound`, each `[S][L]`. Returns the ratios
    as flat lists (`lambda`, `tau`), how many there are (`resolved`) of `total` = S (L - 1), their
    spans `[min, max]` (None: none resolved), the worst |log10| of the |lambda_2| ratios
    (`worst_log10`) and at how many (seed, layer) delta is closer in log to the |lambda_2| product
    than to the tau product (`closer`).
    """
    lam, tau = [], []
    for delta, slem_bound, bound in zip(seeds["delta"], seeds["slem_bound"], seeds["bound"]):
        for d, s, b in list(zip(delta, slem_bound, bound))[1:]:
            if d > floor and s > floor:
                lam.append(d / s)
                tau.append(d / b)
    return {
        "lambda": lam,
        "tau": tau,
        "resolved": len(lam),
        "total": len(seeds["delta"]) * (len(seeds["delta"][0]) - 1),
        "lambda_span": [min(lam), max(lam)] if lam else None,
        "tau_span": [min(tau), max(tau)] if tau else None,
        "worst_log10": max(abs(math.log10(x)) for x in lam) if lam else None,
        "closer": sum(abs(math.log(a)) < abs(math.log(b)) for a, b in zip(lam, tau)),
    }


def _layer_rows(phase: dict, tolerance: float) -> list[dict]:
    """Per layer: whether both chains' Dobrushin bounds hold within `tolerance`, and the per-head chains'
    delta(P_l) (mean, min, max over heads), prod tau, TV(p_l, pi_l) and absorbing tokens (means over heads)."""
    mean, head = phase["mean"], phase["head"]
    rows = []
    for layer in range(len(mean["delta"])):
        per_head = {
            k: np.asarray(head[k])[:, layer] for k in ("delta", "bound", "tv_to_pi", "absorbing")
        }
        rows.append(
            {
                "bound_holds": bool(mean["bound_excess"][layer] <= tolerance),
                "head_delta": [float(f(per_head["delta"])) for f in (np.mean, np.min, np.max)],
                "head_bound": float(per_head["bound"].mean()),
                "head_bound_holds": bool(head["bound_excess"][layer] <= tolerance),
                "head_tv": float(per_head["tv_to_pi"].mean()),
                "head_absorbing": float(per_head["absorbing"].mean()),
            }
        )
    return rows


def _chain_numbers(phase: dict, tolerance: float) -> dict:
    """One products phase's numbers (see `derive_products`)."""
    mean = phase["mean"]
    bound = monotone = None
    if len(mean["delta"]) >= 2:  # layer 1 is left out of the bound (delta(P_1) = tau(A_1))
        bound = max(max(phase[c]["bound_excess"][1:]) for c in CHAINS)
        monotone = max(max(phase[c]["monotone_excess"]) for c in CHAINS)
    return {
        "layers": len(mean["delta"]),
        "bound_excess": bound,
        "monotone_excess": monotone,
        "worst_excess": None if bound is None else max(bound, monotone),
        "pi_first_gap": max(float(np.max(phase[c]["pi_first_gap"])) for c in CHAINS),
        "saturated": max(float(np.max(phase[c]["absorbing"])) for c in CHAINS) > 1,
        "entropy": [min(mean["entropy"]), max(mean["entropy"])],
        "tau": [min(mean["tau"]), max(mean["tau"])],
        "regime": regime_holds(mean["entropy"]),
        "ratios": product_ratios(phase["seeds"], RESOLVED_FACTOR * tolerance),
        "rows": _layer_rows(phase, tolerance),
    }


def derive_products(run: dict) -> dict:
    """A products run with its numbers: `phase_order` (`phases`), `tolerance` (`product_tolerance`),
    `causal_tolerance` (`CAUSAL_FACTOR` T eps, for 1 - pi_l(first token)), and per phase `derived`:

    `layers`; the worst excesses over both chains of the Dobrushin bound (layers >= 2), of
    monotonicity, and of the two (`bound_excess`, `monotone_excess`, `worst_excess`; None with one
    layer); the worst 1 - pi_l(first token) (`pi_first_gap`); whether a chain has more than one
    absorbing token (`saturated`); the head-averaged maps' `entropy` and `tau` spans `[min, max]`
    over layers and whether the regime holds (`regime_holds`); `ratios` (`product_ratios` above
    `RESOLVED_FACTOR` x `tolerance`); and the per-layer `rows` of the report's table.
    """
    tolerance = product_tolerance(run)
    return {
        **run,
        "phase_order": phases(run),
        "tolerance": tolerance,
        "causal_tolerance": CAUSAL_FACTOR * run["seq_len"] * eps(run["dtype"]),
        "phases": {
            name: {**phase, "derived": _chain_numbers(phase, tolerance)}
            for name, phase in run["phases"].items()
        },
    }


def ratio_span(products: list[dict]) -> Optional[dict]:
    """`{"lambda": [min, max], "tau": [min, max]}` of the ratio spans over every products phase whose regime
    holds and that has resolved layers (None: no such phase); `products`: runs of `derive_products`."""
    ok = [
        n["ratios"]
        for run in products
        for n in (run["phases"][p]["derived"] for p in run["phase_order"])
        if n["regime"] and n["ratios"]["lambda"]
    ]
    if not ok:
        return None
    return {
        key: [min(r[f"{key}_span"][0] for r in ok), max(r[f"{key}_span"][1] for r in ok)]
        for key in ("lambda", "tau")
    }


def median_time_to_one(run: dict) -> float:
    """The median over seeds of the time to one cluster, a seed that never got there counted as +inf."""
    return float(np.median([math.inf if t is None else t for t in run["time_to_one"]]))


def derive_clusters(clusters: list[dict]) -> dict:
    """`{"clusters": each run with `median_time` (`median_time_to_one`), `probe_mean` and `final_mean`
    (mean cluster count over seeds at the probe time and at the horizon) and `final_max` (the most
    clusters of a seed at the horizon); "metastability": {"time_ratio", "lower_bound"} or None}`.

    `time_ratio`: the median time to one cluster at the largest beta over that at the smallest
    (None unless the latter is finite and > 0), the horizon standing for a median of +inf
    (`lower_bound`: True then). None with fewer than two betas.
    """
    runs = [
        {
            **run,
            "median_time": median_time_to_one(run),
            "probe_mean": float(np.mean(run["probe_clusters"])),
            "final_mean": float(np.mean(run["final_clusters"])),
            "final_max": max(run["final_clusters"]),
        }
        for run in clusters
    ]
    by_beta = sorted(runs, key=lambda r: r["beta"])
    metastability = None
    if len(by_beta) >= 2:
        first, last = by_beta[0]["median_time"], by_beta[-1]["median_time"]
        largest = min(
            last, by_beta[-1]["horizon"]
        )  # a lower bound when the largest beta never got there
        metastability = {
            "time_ratio": largest / first if 0 < first < math.inf else None,
            "lower_bound": math.isinf(last),
        }
    return {"clusters": runs, "metastability": metastability}


def derive(summary: dict) -> dict:
    """`summary` (the raw aggregate, or a whole summary.json) with every derived number added:
    `derive_fixed`, `derive_products` of each products run, `derive_clusters`, and the products'
    `ratio_span`."""
    products = [derive_products(run) for run in summary["products"]]
    return {
        **summary,
        **derive_fixed(summary["fixed"]),
        "products": products,
        "ratio_span": ratio_span(products),
        **derive_clusters(summary["clusters"]),
    }


def summarize(rows: list[dict], config) -> dict:
    """The study's summary: the raw aggregate of every run's rows (`aggregate`) with its derived numbers
    (`derive`)."""
    return derive(aggregate(rows, config))


def add_derived(summary: dict) -> dict:
    """A summary.json written before `derive` existed (raw aggregate, config, predictions, plots), with the
    derived numbers added; a summary that has them is returned unchanged (up to its JSON form)."""
    return json_form(derive(summary))
