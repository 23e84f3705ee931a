"""The power-iteration study's checks: each prediction's verdict from the summary.

* fixed matrix: the decay rate of A^k -> 1 pi^T is |lambda_2| (Seneta 2006, ch. 1);
* products: delta(P_l) <= prod_i tau(A_i) and delta(P_l) non-increasing
  (sub-multiplicativity of Dobrushin's coefficient; Seneta 2006, §3.1), and
  pi_l = e_1 for causal attention;
* self-attention dynamics: one cluster at high temperature, several
  long-lived ones at low temperature, fewer as the temperature rises
  (Geshkovski, Letrouit, Polyanskiy & Rigollet 2023).
"""
from __future__ import annotations

import numpy as np

from attnjax.study import prediction
from experiments.power_iteration.summary import PHASE_LABELS, config_of, eps, phases, product_tolerance


def _fixed_checks(config, fixed) -> list[dict]:
    checks = []
    tol = config.fixed.tolerance
    for run in fixed:
        worst = float(run["worst_rel_error"])
        failed = sum(not m["passed"] for m in run["matrices"])
        checks.append(prediction(
            f"fixed matrix: A^k -> 1 pi^T at rate |lambda_2| (tau={run['temperature']:g})",
            "Seneta 2006", f"|rate / |lambda_2| - 1| <= {tol:g} for every matrix",
            worst, bool(worst <= tol),
            f"worst of {len(run['matrices'])} matrices; {failed} outside; {run['dtype']}"))
    return checks


def _dobrushin_check(run, phase: str) -> dict:
    """Worst excess of both inequalities; layer 1 is left out of the bound (there delta(P_1) = tau(A_1))."""
    p = run["phases"][phase]
    if len(p["mean"]["delta"]) < 2:
        return prediction(f"Dobrushin bound ({run['spec']['architecture']}, {PHASE_LABELS[phase]})",
                           "Seneta 2006, §3.1", "delta(P_l) <= prod_i tau(A_i)", None, None,
                           "not measured: needs products.num_layers >= 2")
    bound = max(max(p[c]["bound_excess"][1:]) for c in ("mean", "head"))
    monotone = max(max(p[c]["monotone_excess"]) for c in ("mean", "head"))
    worst = max(bound, monotone)
    tol = product_tolerance(run)
    return prediction(
        f"Dobrushin bound ({run['spec']['architecture']}, {PHASE_LABELS[phase]})", "Seneta 2006, §3.1",
        "delta(P_l) <= prod_i tau(A_i) and delta(P_l) <= delta(P_(l-1)), every layer, example and head",
        worst, bool(worst <= tol),
        f"max excess: bound {bound:.2e}, monotonicity {monotone:.2e}; rounding allowance {tol:.1e}")


def _causal_check(run, phase: str) -> dict:
    p = run["phases"][phase]
    worst = max(float(np.max(p[c]["pi_first_gap"])) for c in ("mean", "head"))
    saturated = max(float(np.max(p[c]["absorbing"])) for c in ("mean", "head")) > 1
    tol = 1e3 * run["seq_len"] * eps(run["dtype"])
    note = f"tolerance {tol:.1e}"
    if saturated:
        note += ("; some chains have absorbing tokens besides the first (saturated rows, a_tt = 1): "
                 "their pi_l is not unique and they are left out")
    return prediction(
        f"causal attention: pi_l = e_1 ({run['spec']['architecture']}, {PHASE_LABELS[phase]})",
        "Seneta 2006 (absorbing chains)",
        "1 - pi_l(first token) ~ 0 for every layer whose only absorbing token is the first",
        worst, bool(worst <= tol), note)


def _cluster_checks(clusters) -> list[dict]:
    if not clusters:
        return []
    source = "Geshkovski et al. 2023"
    runs = sorted(clusters, key=lambda r: r["temperature"])
    hot, cold = runs[-1], runs[0]
    steps = hot["iterations"][-1]
    checks = [
        prediction(f"high temperature: one cluster (tau={hot['temperature']:g}, t={steps})", source,
                    "every seed ends with 1 cluster", max(hot["final_clusters"]),
                    bool(max(hot["final_clusters"]) == 1)),
        prediction(f"low temperature: several long-lived clusters (tau={cold['temperature']:g}, t={steps})",
                    source, "every seed still has >= 2 clusters", min(cold["final_clusters"]),
                    bool(min(cold["final_clusters"]) >= 2)),
    ]
    if len(runs) > 1:
        means = [float(np.mean(r["final_clusters"])) for r in runs]
        rise = max(b - a for a, b in zip(means, means[1:]))
        checks.append(prediction(
            f"fewer clusters at higher temperature (t={steps})", source,
            "mean final cluster count non-increasing in tau", rise, bool(rise <= 0),
            "largest increase between neighbouring temperatures; means "
            + ", ".join(f"{r['temperature']:g}: {m:.2f}" for r, m in zip(runs, means))))
    return checks


def predictions(summary: dict) -> list[dict]:
    checks = _fixed_checks(config_of(summary), summary["fixed"])
    for run in summary["products"]:
        for phase in phases(run):
            checks.append(_dobrushin_check(run, phase))
            if phase != "untrained":
                checks.append(_causal_check(run, phase))
    return checks + _cluster_checks(summary["clusters"])
