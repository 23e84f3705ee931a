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

from experiments.lab.study import config_of, prediction
from experiments.power_iteration.constants import ENTROPY_RANGE, PHASE_LABELS

GESHKOVSKI = "Geshkovski et al. 2023"


def _fixed_checks(config, fixed) -> list[dict]:
    checks = []
    tol = config.fixed.tolerance
    for run in fixed:
        worst = float(run["worst_rel_error"])
        failed = run["failed"]
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
    n = run["phases"][phase]["derived"]
    name = f"Dobrushin bound ({_label(run, phase)})"
    if n["layers"] < 2:
        return prediction(
            name,
            "Seneta 2006, §3.1",
            "delta(P_l) <= prod_i tau(A_i)",
            None,
            None,
            "not measured: needs products.num_layers >= 2",
            kind="sanity",
        )
    bound, monotone, worst = n["bound_excess"], n["monotone_excess"], n["worst_excess"]
    tol = run["tolerance"]
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
    n = run["phases"][phase]["derived"]
    worst, tol = n["pi_first_gap"], run["causal_tolerance"]
    note = f"tolerance {tol:.1e}"
    if n["saturated"]:
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


def _regime_check(run, phase: str) -> dict:
    n = run["phases"][phase]["derived"]
    (low, high), tau = n["entropy"], n["tau"]
    return prediction(
        f"non-degenerate regime ({_label(run, phase)})",
        "regime condition of the product prediction",
        f"every layer's mean H(a_t) / log T in [{ENTROPY_RANGE[0]:g}, {ENTROPY_RANGE[1]:g}]",
        low,
        n["regime"],
        f"entropy / log T {low:.3f}..{high:.3f}, tau(A_l) {tau[0]:.3f}..{tau[1]:.3f} over layers",
        kind="sanity",
    )


def _lambda_check(run, phase: str, factor: float) -> dict:
    name = f"delta(P_l) follows prod |lambda_2| ({_label(run, phase)})"
    source = "this codebase (the homogeneous rate |lambda_2|, Seneta 2006, applied layer by layer)"
    claim = f"1/{factor:g} <= delta(P_l) / prod_(i<=l) |lambda_2(A_i)| <= {factor:g}, every resolved layer l >= 2"
    n = run["phases"][phase]["derived"]
    r = n["ratios"]
    if not n["regime"]:
        return prediction(
            name, source, claim, None, None, "not measured: degenerate regime (see the sanity list)"
        )
    if not r["lambda"]:
        return prediction(name, source, claim, None, None, "not measured: no resolved layer l >= 2")
    worst = r["worst_log10"]
    note = (
        f"max |log10 ratio| over {r['resolved']} resolved (seed, layer) of {r['total']}; "
        f"ratio to prod |lambda_2| {r['lambda_span'][0]:.3g}..{r['lambda_span'][1]:.3g}, to prod tau "
        f"{r['tau_span'][0]:.3g}..{r['tau_span'][1]:.3g}; closer (in log) to prod |lambda_2| than to "
        f"prod tau at {r['closer']}"
    )
    return prediction(name, source, claim, worst, bool(worst <= math.log10(factor)), note)


def _cluster_checks(config, summary: dict) -> list[dict]:
    """Geshkovski et al.'s predictions over `summary`'s `clusters` and `metastability` (`summary.derive_clusters`)."""
    if not summary["clusters"]:
        return []
    c = config.clusters
    setting = f"{c.variant}, n={c.num_tokens}, d={c.dim}, dt={c.dt:g}"
    runs = sorted(summary["clusters"], key=lambda r: r["beta"])
    small = runs[0]
    checks = [
        prediction(
            f"one cluster at small beta (beta={small['beta']:g}; {setting})",
            f"{GESHKOVSKI}, §4",
            f"every seed reaches a single cluster by t={small['horizon']:g}",
            small["final_max"],
            bool(small["final_max"] == 1),
            f"times to one cluster {small['time_to_one']}",
        )
    ]
    if len(runs) < 2:
        return checks
    medians = [float(r["median_time"]) for r in runs]  # inf: never within the horizon
    grows = all(b >= a for a, b in zip(medians, medians[1:])) and medians[-1] > medians[0]
    listing = ", ".join(f"{r['beta']:g}: {m:g}" for r, m in zip(runs, medians))
    ratio = summary["metastability"]
    checks.append(
        prediction(
            f"metastability: the time to one cluster grows with beta ({setting})",
            f"{GESHKOVSKI} (metastability)",
            "median time to one cluster non-decreasing in beta, larger at the largest beta than at the smallest",
            ratio["time_ratio"],
            bool(grows),
            f"medians over seeds (inf: not within t={runs[-1]['horizon']:g}) {listing}; measured: largest / smallest"
            + (" (a lower bound: the horizon for inf)" if ratio["lower_bound"] else ""),
        )
    )
    means = [r["probe_mean"] for r in runs]
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
        for phase in run["phase_order"]:
            checks.append(_dobrushin_check(run, phase))
            if phase != "untrained":
                checks.append(_causal_check(run, phase))
            checks += [
                _regime_check(run, phase),
                _lambda_check(run, phase, config.products.lambda_factor),
            ]
    return checks + _cluster_checks(config, summary)
