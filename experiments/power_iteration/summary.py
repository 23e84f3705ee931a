"""The power-iteration study's summary: rows -> the raw aggregate -> every number its readers read.

`aggregate(rows, config)` keeps one list per part, in run order:

* `fixed`: per temperature, each matrix's |lambda_2|, fitted rate and its
  range, the vector iteration's rate, and d(k) up to a few steps past the fit;
* `products`: per model and phase, the head-averaged (`mean`) and per-head
  (`head`) chains' metrics per layer (means over seeds; excesses and gaps:
  their worst over seeds; `delta_min`: its least), the head-averaged chain's
  per-seed metrics (`seeds`), and the trained model's accuracy, mode-of-context
  accuracy and chance per seed;
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
from experiments.lab.stats import interval
from experiments.lab.study import by_metric, distinct, select
from experiments.power_iteration.constants import (
    BRIEFLY_TRAINED,
    CAUSAL_FACTOR,
    MIN_UNITS,
    PHASE_LABELS,
    RESOLVED_FACTOR,
    SLOPE_SPREAD,
    UNIFORM_CAUSAL_SLEM,
)
from experiments.power_iteration.products import uniform_causal_chain
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
PER_SEED = ("delta", "bound", "slem_bound", "log_delta", "log_slem", "log_tau", "delta_min")


def _over_seeds(name: str, values: np.ndarray) -> np.ndarray:
    """A metric `[S, ...]` over seeds: the worst excess or gap (max), the least `delta_min`, else the mean."""
    if name.endswith("excess") or name.endswith("gap"):
        return np.max(values, axis=0)
    return np.min(values, axis=0) if name.endswith("_min") else np.mean(values, axis=0)


def _phase_summary(rows, phase: str) -> dict:
    """Head-averaged and per-head metrics of one phase over seeds (`_over_seeds`); `seeds`: the
    head-averaged chain's `PER_SEED` metrics of each seed."""
    out = {}
    for chain in ("mean", "head"):
        metrics = by_metric(rows, phase=phase, chain=chain)
        out[chain] = {
            name: _over_seeds(name, np.asarray(per_seed, dtype=np.float64)).tolist()
            for name, per_seed in metrics.items()
        }
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
        "time_step": float(times[1]),
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


def rate_window(layers: int) -> list[int]:
    """The layers l (1-based) of the rate hypothesis: the second half, l > L / 2, and l >= 2."""
    return list(range(max(layers // 2, 1) + 1, layers + 1))


def rate_test(seeds: dict, seq_len: int, floor: float) -> Optional[dict]:
    """The rate hypothesis over one causal phase: does each layer contract the product at its own
    |lambda_2| once the transient is over?

    `seeds`: the head-averaged chain's per-seed `log_delta`, `log_slem`, `log_tau` (means over
    examples of the logs) and `delta_min` (the least delta(P_l) over examples), each `[S][L]`.
    Per seed, over the layers of `rate_window`, the mean of
        e_l = log(delta(P_l) / delta(P_(l-1))) - log |lambda_2(A_l)|
    (`excess`, an interval over seeds), beside the same with tau(A_l), Dobrushin's rate, in place
    of |lambda_2| (`tau_excess`), and the uniform causal chain's e_l at the same layers
    (`reference`, `uniform_causal_chain`; `reference_delta`: its delta(U^l) at every layer): the
    transient a chain whose rate tends to |lambda_2| exactly still shows there. The competing
    explanations, measured by the same statistic: `tau_excess` (Dobrushin's rate tau(A_l)) and
    `uniform_excess` (a constant rate `UNIFORM_CAUSAL_SLEM`, U's, at every layer); `slope`
    (`rate_slope`): how the log-rate follows log |lambda_2| from layer to layer.
    `epsilon`, the tolerance, is the largest |e_l| of the reference in the window (derivation:
    the statistic is a mean of e_l over the window, and a chain whose every layer's e_l is within
    U's largest there has its mean within that too; U's own mean, `reference_mean`, is not the
    band: U would sit on its edge, and a chain at its |lambda_2| with U's transient would fail
    half the time); `reference_distance` the largest |mean over seeds of e_l - reference e_l|.
    `resolved`: every example's delta(P_l) above `floor` from the layer before the window on.
    None when there is no window (fewer than two layers).
    """
    log_delta = np.asarray(seeds["log_delta"], np.float64)  # [S, L]
    units, layers = log_delta.shape
    window = rate_window(layers)
    if not window:
        return None
    index = np.asarray(window) - 1  # 0-based layers of the window
    chain = uniform_causal_chain(seq_len, layers, floor)
    ref = [chain["excess"][i] for i in index]
    log_rate = log_delta[:, index] - log_delta[:, index - 1]  # [S, W]
    log_slem = np.asarray(seeds["log_slem"], np.float64)[:, index]
    excess = log_rate - log_slem
    tau_excess = log_rate - np.asarray(seeds["log_tau"], np.float64)[:, index]
    uniform_excess = log_rate - math.log(UNIFORM_CAUSAL_SLEM)
    resolved = bool(np.min(np.asarray(seeds["delta_min"])[:, index[0] - 1 :]) > floor)
    ref_ok = all(r is not None for r in ref)
    layer_excess = excess.mean(axis=0)
    return {
        "window": [window[0], window[-1]],
        "units": units,
        "resolved": resolved and ref_ok,
        "excess": interval(excess.mean(axis=1)),
        "per_seed": excess.mean(axis=1).tolist(),
        "tau_excess": interval(tau_excess.mean(axis=1)),
        "uniform_excess": interval(uniform_excess.mean(axis=1)),
        "slope": rate_slope(log_rate, log_slem),
        "layer_excess": layer_excess.tolist(),
        "reference": ref,
        "reference_delta": chain["delta"],
        "reference_mean": float(np.mean(ref)) if ref_ok else None,
        "epsilon": max(abs(r) for r in ref) if ref_ok else None,
        "reference_distance": (
            float(np.max(np.abs(layer_excess - np.asarray(ref)))) if ref_ok else None
        ),
    }


def rate_slope(log_rate: np.ndarray, log_slem: np.ndarray) -> Optional[dict]:
    """Per seed, the least-squares slope of log-rate on log |lambda_2(A_l)| over the window's layers
    (`[S, W]` each; 1 if every layer contracts at its own |lambda_2|, 0 if the rate ignores it), an
    interval over seeds; None when a seed's log |lambda_2| does not vary over the window (the slope
    is then undefined: the maps cannot tell a rate that follows |lambda_2| from a constant one)."""
    x = log_slem - log_slem.mean(axis=1, keepdims=True)
    var = np.sum(x * x, axis=1)
    if log_rate.shape[1] < 2 or np.min(var) <= SLOPE_SPREAD**2 * log_rate.shape[1]:
        return None
    y = log_rate - log_rate.mean(axis=1, keepdims=True)
    return interval(np.sum(x * y, axis=1) / var)


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


def _chain_numbers(phase: dict, name: str, seq_len: int, tolerance: float) -> dict:
    """One products phase's numbers (see `derive_products`)."""
    mean = phase["mean"]
    bound = monotone = None
    if len(mean["delta"]) >= 2:  # layer 1 is left out of the bound (delta(P_1) = tau(A_1))
        bound = max(max(phase[c]["bound_excess"][1:]) for c in CHAINS)
        monotone = max(max(phase[c]["monotone_excess"]) for c in CHAINS)
    causal = name != "untrained"
    return {
        "label": PHASE_LABELS[name],
        "causal": causal,
        "layers": len(mean["delta"]),
        "bound_excess": bound,
        "monotone_excess": monotone,
        "worst_excess": None if bound is None else max(bound, monotone),
        "pi_first_gap": max(float(np.max(phase[c]["pi_first_gap"])) for c in CHAINS),
        "saturated": max(float(np.max(phase[c]["absorbing"])) for c in CHAINS) > 1,
        "absorbing_max": max(float(np.max(phase[c]["absorbing"])) for c in CHAINS),
        "entropy": [min(mean["entropy"]), max(mean["entropy"])],
        "tau": [min(mean["tau"]), max(mean["tau"])],
        "rate": (
            rate_test(phase["seeds"], seq_len, RESOLVED_FACTOR * tolerance) if causal else None
        ),
        "rows": _layer_rows(phase, tolerance),
    }


def training_numbers(run: dict) -> Optional[dict]:
    """The trained model's held-out accuracy against the baselines (None: the run trained nothing).

    `accuracy` and `mode` (predicting the most frequent value of the context) are intervals over
    seeds, `margin` the interval of their per-seed difference; `chance`: uniform guessing over the
    value tokens; `beats_mode`: the margin's lower end above 0 with at least `MIN_UNITS` seeds.
    """
    if "eval_accuracy" not in run:
        return None
    accuracy = np.asarray(run["eval_accuracy"], np.float64)
    mode = np.asarray(run["mode_accuracy"], np.float64)
    margin = interval(accuracy - mode)
    return {
        "accuracy": interval(accuracy),
        "mode": interval(mode),
        "margin": margin,
        "chance": float(run["chance_accuracy"]),
        "beats_mode": bool(margin["n"] >= MIN_UNITS and margin["low"] > 0),
    }


def derive_products(run: dict) -> dict:
    """A products run with its numbers: `phase_order` (`phases`), `tolerance` (`product_tolerance`),
    `causal_tolerance` (`CAUSAL_FACTOR` T eps, for 1 - pi_l(first token)), `training`
    (`training_numbers`) and per phase `derived`:

    `label` (how the report names the phase: a trained model that does not beat the mode-of-context
    baseline is "briefly trained"); `causal`; `layers`; the worst excesses over both chains of the
    Dobrushin bound (layers >= 2), of monotonicity, and of the two (`bound_excess`,
    `monotone_excess`, `worst_excess`; None with one layer); the worst 1 - pi_l(first token)
    (`pi_first_gap`); whether a chain has more than one absorbing token (`saturated`, and the most
    absorbing tokens of a layer, `absorbing_max`); the head-averaged maps' `entropy` (over the
    keys each row sees) and `tau` spans `[min, max]` over layers; `rate` (`rate_test` above
    `RESOLVED_FACTOR` x `tolerance`, causal phases only, else None); and the per-layer `rows` of
    the report's table.
    """
    tolerance = product_tolerance(run)
    training = training_numbers(run)
    phases_ = {}
    for name, phase in run["phases"].items():
        numbers = _chain_numbers(phase, name, run["seq_len"], tolerance)
        if name == "trained" and training is not None and not training["beats_mode"]:
            numbers["label"] = BRIEFLY_TRAINED
        phases_[name] = {**phase, "derived": numbers}
    return {
        **run,
        "phase_order": phases(run),
        "tolerance": tolerance,
        "causal_tolerance": CAUSAL_FACTOR * run["seq_len"] * eps(run["dtype"]),
        "training": training,
        "phases": phases_,
    }


def censored_times(run: dict) -> list[float]:
    """Each seed's time to one cluster, the horizon for a seed that never got there (then the true
    time is larger), and the first measured time for one that started as one cluster (t = 0)."""
    return [
        run["horizon"] if t is None else max(float(t), run["time_step"]) for t in run["time_to_one"]
    ]


def median_time_to_one(run: dict) -> float:
    """The median over seeds of the time to one cluster, a seed that never got there counted as +inf."""
    return float(np.median([math.inf if t is None else t for t in run["time_to_one"]]))


def metastability(small: dict, large: dict) -> dict:
    """Paired over seeds (the same starts at every beta), the largest beta against the smallest:

    * `count_difference`: interval of the cluster count at the probe time, large minus small;
    * `log_time_ratio`: interval of log(time to one cluster), large minus small, from
      `censored_times`: a lower bound when a seed of the large beta never got there
      (`lower_bound`); `small_censored`: a seed of the small beta never got there (then the
      ratio bounds nothing);
    * `units`: the number of seeds.
    """
    ts, tl = censored_times(small), censored_times(large)
    return {
        "count_difference": interval(np.subtract(large["probe_clusters"], small["probe_clusters"])),
        "log_time_ratio": interval(np.log(tl) - np.log(ts)),
        "lower_bound": any(t is None for t in large["time_to_one"]),
        "small_censored": any(t is None for t in small["time_to_one"]),
        "units": len(ts),
    }


def derive_clusters(clusters: list[dict]) -> dict:
    """`{"clusters": each run with `median_time` (`median_time_to_one`), `probe_mean` and `final_mean`
    (mean cluster count over seeds at the probe time and at the horizon), `probe_interval` (the
    count at the probe time, an interval over seeds) and `final_max` (the most clusters of a seed
    at the horizon); "metastability": `metastability` of the smallest and the largest beta, None
    with fewer than two betas}`."""
    runs = [
        {
            **run,
            "median_time": median_time_to_one(run),
            "probe_mean": float(np.mean(run["probe_clusters"])),
            "probe_interval": interval(run["probe_clusters"]),
            "final_mean": float(np.mean(run["final_clusters"])),
            "final_max": max(run["final_clusters"]),
        }
        for run in clusters
    ]
    by_beta = sorted(runs, key=lambda r: r["beta"])
    return {
        "clusters": runs,
        "metastability": metastability(by_beta[0], by_beta[-1]) if len(by_beta) >= 2 else None,
    }


def derive(summary: dict) -> dict:
    """`summary` (the raw aggregate, or a whole summary.json) with every derived number added:
    `derive_fixed`, `derive_products` of each products run and `derive_clusters`."""
    return {
        **summary,
        **derive_fixed(summary["fixed"]),
        "products": [derive_products(run) for run in summary["products"]],
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
