"""The power-iteration study's checks: each one's verdict from the summary.

Sanity (theorems and identities, listed apart, not counted as predictions):

* fixed matrix: d(k) decays at rate |lambda_2|, since A^k - 1 pi^T = (A - 1 pi^T)^k
  (Seneta 2006, ch. 1): a check of the fit, not of a claim;
* products: delta(P_l) <= prod_i tau(A_i) and delta(P_l) non-increasing
  (sub-multiplicativity of Dobrushin's coefficient; Seneta 2006, §3.1);
  pi_l = e_1 for causal attention (an absorbing chain); and the regime
  condition of the product prediction (attention neither uniform nor one-hot).

Predictions (the data could contradict them):

* products: delta(P_l) follows prod_i |lambda_2(A_i)| within `products.lambda_factor`
  at every resolved layer l >= 2 (the homogeneous chain's rate applied layer by
  layer: this codebase's heuristic, no theorem covers a product of different maps);
* sphere dynamics (Geshkovski et al. 2023): a single cluster at small beta;
  metastability at large beta: the time to reach one cluster and the number of
  clusters at a fixed time grow with beta.
"""

from __future__ import annotations

import math

import numpy as np

from experiments.lab.study import prediction
from experiments.power_iteration.summary import (
    PHASE_LABELS,
    config_of,
    eps,
    phases,
    product_tolerance,
)

GESHKOVSKI = "Geshkovski et al. 2023"
# The product prediction needs a non-degenerate regime: the mean normalised entropy
# of every layer's head-averaged map inside this interval (0: one-hot, 1: uniform).
ENTROPY_RANGE = (0.02, 0.98)
# A delta(P_l) or a product of |lambda_2| at most this many times the Dobrushin
# rounding allowance (`product_tolerance`) is not resolved.
RESOLVED_FACTOR = 100.0


def _fixed_checks(config, fixed) -> list[dict]:
    checks = []
    tol = config.fixed.tolerance
    for run in fixed:
        worst = float(run["worst_rel_error"])
        failed = sum(not m["passed"] for m in run["matrices"])
        checks.append(
            prediction(
                f"fixed matrix: A^k -> 1 pi^T at rate |lambda_2| (tau={run['temperature']:g})",
                "Seneta 2006",
                f"|rate / |lambda_2| - 1| <= {tol:g} for every matrix",
                worst,
                bool(worst <= tol),
                f"worst of {len(run['matrices'])} matrices; {failed} outside; {run['dtype']}; "
                "an identity, (A - 1 pi^T)^k = A^k - 1 pi^T: checks the fit",
                kind="sanity",
            )
        )
    return checks


def _label(run, phase: str) -> str:
    return f"{run['spec']['architecture']}, {PHASE_LABELS[phase]}"


def _dobrushin_check(run, phase: str) -> dict:
    """Worst excess of both inequalities; layer 1 is left out of the bound (there delta(P_1) = tau(A_1))."""
    p = run["phases"][phase]
    name = f"Dobrushin bound ({_label(run, phase)})"
    if len(p["mean"]["delta"]) < 2:
        return prediction(
            name,
            "Seneta 2006, §3.1",
            "delta(P_l) <= prod_i tau(A_i)",
            None,
            None,
            "not measured: needs products.num_layers >= 2",
            kind="sanity",
        )
    bound = max(max(p[c]["bound_excess"][1:]) for c in ("mean", "head"))
    monotone = max(max(p[c]["monotone_excess"]) for c in ("mean", "head"))
    worst = max(bound, monotone)
    tol = product_tolerance(run)
    return prediction(
        name,
        "Seneta 2006, §3.1",
        "delta(P_l) <= prod_i tau(A_i) and delta(P_l) <= delta(P_(l-1)), every layer, example and head",
        worst,
        bool(worst <= tol),
        f"max excess: bound {bound:.2e}, monotonicity {monotone:.2e}; rounding allowance {tol:.1e}",
        kind="sanity",
    )


def _causal_check(run, phase: str) -> dict:
    p = run["phases"][phase]
    worst = max(float(np.max(p[c]["pi_first_gap"])) for c in ("mean", "head"))
    saturated = max(float(np.max(p[c]["absorbing"])) for c in ("mean", "head")) > 1
    tol = 1e3 * run["seq_len"] * eps(run["dtype"])
    note = f"tolerance {tol:.1e}"
    if saturated:
        note += (
            "; some chains have absorbing tokens besides the first (saturated rows, a_tt = 1): "
            "their pi_l is not unique and they are left out"
        )
    return prediction(
        f"causal attention: pi_l = e_1 ({_label(run, phase)})",
        "Seneta 2006 (absorbing chains)",
        "1 - pi_l(first token) ~ 0 for every layer whose only absorbing token is the first",
        worst,
        bool(worst <= tol),
        note,
        kind="sanity",
    )


def regime_holds(run, phase: str) -> bool:
    """Whether every layer's head-averaged map has a mean normalised entropy inside `ENTROPY_RANGE`."""
    entropy = run["phases"][phase]["mean"]["entropy"]
    return bool(all(ENTROPY_RANGE[0] <= h <= ENTROPY_RANGE[1] for h in entropy))


def _regime_check(run, phase: str) -> dict:
    entropy = run["phases"][phase]["mean"]["entropy"]
    tau = run["phases"][phase]["mean"]["tau"]
    return prediction(
        f"non-degenerate regime ({_label(run, phase)})",
        "regime condition of the product prediction",
        f"every layer's mean H(a_t) / log T in [{ENTROPY_RANGE[0]:g}, {ENTROPY_RANGE[1]:g}]",
        min(entropy),
        regime_holds(run, phase),
        f"entropy / log T {min(entropy):.3f}..{max(entropy):.3f}, tau(A_l) {min(tau):.3f}..{max(tau):.3f} "
        "over layers",
        kind="sanity",
    )


def product_ratios(run, phase: str) -> dict:
    """delta(P_l) / prod|lambda_2| and delta(P_l) / prod tau of each seed at resolved layers l >= 2 (flat lists)."""
    seeds = run["phases"][phase]["seeds"]
    floor = RESOLVED_FACTOR * product_tolerance(run)
    lam, tau = [], []
    for delta, slem_bound, bound in zip(seeds["delta"], seeds["slem_bound"], seeds["bound"]):
        for d, s, b in list(zip(delta, slem_bound, bound))[1:]:
            if d > floor and s > floor:
                lam.append(d / s)
                tau.append(d / b)
    return {
        "lambda": lam,
        "tau": tau,
        "layers": len(seeds["delta"][0]) - 1,
        "seeds": len(seeds["delta"]),
    }


def _lambda_check(run, phase: str, factor: float) -> dict:
    name = f"delta(P_l) follows prod |lambda_2| ({_label(run, phase)})"
    source = "this codebase (the homogeneous rate |lambda_2|, Seneta 2006, applied layer by layer)"
    claim = f"1/{factor:g} <= delta(P_l) / prod_(i<=l) |lambda_2(A_i)| <= {factor:g}, every resolved layer l >= 2"
    r = product_ratios(run, phase)
    if not regime_holds(run, phase):
        return prediction(
            name, source, claim, None, None, "not measured: degenerate regime (see the sanity list)"
        )
    if not r["lambda"]:
        return prediction(name, source, claim, None, None, "not measured: no resolved layer l >= 2")
    worst = max(abs(math.log10(x)) for x in r["lambda"])
    closer = sum(abs(math.log(a)) < abs(math.log(b)) for a, b in zip(r["lambda"], r["tau"]))
    note = (
        f"max |log10 ratio| over {len(r['lambda'])} resolved (seed, layer) of {r['seeds'] * r['layers']}; "
        f"ratio to prod |lambda_2| {min(r['lambda']):.3g}..{max(r['lambda']):.3g}, to prod tau "
        f"{min(r['tau']):.3g}..{max(r['tau']):.3g}; closer (in log) to prod |lambda_2| than to prod tau "
        f"at {closer}"
    )
    return prediction(name, source, claim, worst, bool(worst <= math.log10(factor)), note)


def median_time_to_one(run) -> float:
    """The median over seeds of the time to one cluster, a seed that never got there counted as +inf."""
    return float(np.median([math.inf if t is None else t for t in run["time_to_one"]]))


def _cluster_checks(config, clusters) -> list[dict]:
    if not clusters:
        return []
    c = config.clusters
    setting = f"{c.variant}, n={c.num_tokens}, d={c.dim}, dt={c.dt:g}"
    runs = sorted(clusters, key=lambda r: r["beta"])
    small = runs[0]
    checks = [
        prediction(
            f"one cluster at small beta (beta={small['beta']:g}; {setting})",
            f"{GESHKOVSKI}, §4",
            f"every seed reaches a single cluster by t={small['horizon']:g}",
            max(small["final_clusters"]),
            bool(max(small["final_clusters"]) == 1),
            f"times to one cluster {small['time_to_one']}",
        )
    ]
    if len(runs) < 2:
        return checks
    medians = [median_time_to_one(r) for r in runs]
    grows = all(b >= a for a, b in zip(medians, medians[1:])) and medians[-1] > medians[0]
    listing = ", ".join(f"{r['beta']:g}: {m:g}" for r, m in zip(runs, medians))
    largest = min(
        medians[-1], runs[-1]["horizon"]
    )  # a lower bound when the largest beta never got there
    checks.append(
        prediction(
            f"metastability: the time to one cluster grows with beta ({setting})",
            f"{GESHKOVSKI} (metastability)",
            "median time to one cluster non-decreasing in beta, larger at the largest beta than at the smallest",
            largest / medians[0] if 0 < medians[0] < math.inf else None,
            bool(grows),
            f"medians over seeds (inf: not within t={runs[-1]['horizon']:g}) {listing}; measured: largest / smallest"
            + (" (a lower bound: the horizon for inf)" if math.isinf(medians[-1]) else ""),
        )
    )
    means = [float(np.mean(r["probe_clusters"])) for r in runs]
    more = all(b >= a for a, b in zip(means, means[1:])) and means[-1] > 1
    checks.append(
        prediction(
            f"metastability: more clusters at larger beta (t={runs[0]['probe_time']:g}; {setting})",
            f"{GESHKOVSKI} (metastability)",
            "mean cluster count non-decreasing in beta, and above 1 at the largest beta",
            means[-1],
            bool(more),
            "means over seeds " + ", ".join(f"{r['beta']:g}: {m:.2f}" for r, m in zip(runs, means)),
        )
    )
    return checks


def predictions(summary: dict) -> list[dict]:
    config = config_of(summary)
    checks = _fixed_checks(config, summary["fixed"])
    for run in summary["products"]:
        for phase in phases(run):
            checks.append(_dobrushin_check(run, phase))
            if phase != "untrained":
                checks.append(_causal_check(run, phase))
            checks += [
                _regime_check(run, phase),
                _lambda_check(run, phase, config.products.lambda_factor),
            ]
    return checks + _cluster_checks(config, summary["clusters"])
