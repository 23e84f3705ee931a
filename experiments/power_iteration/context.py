"""What the power-iteration study's report quotes: numbers and named booleans, from the summary.

`report(summary)` is the context of `templates/report.md.j2`. Numbers arrive
as floats (the summary may store NaN as "nan"); the template formats them and
owns the wording, the headings and the tables' layout.
"""
from __future__ import annotations

import math

import numpy as np

from experiments.power_iteration.summary import PHASE_LABELS, config_of, phases, product_tolerance


def _fixed(fixed) -> dict:
    matrices = [{"temperature": run["temperature"], **m, "rate": float(m["rate"]), "rel_error": float(m["rel_error"]),
                 "vector_rate": float(m["vector_rate"])} for run in fixed for m in run["matrices"]]
    return {"floor": max((r["floor"] for r in fixed), default=math.nan), "matrices": matrices,
            "worst": max((float(r["worst_rel_error"]) for r in fixed), default=None)}


def _layers(run, phase: str) -> dict:
    """One phase of one products run: per layer, the head-averaged chain's numbers and the per-head ones."""
    mean, head = run["phases"][phase]["mean"], run["phases"][phase]["head"]
    tol = product_tolerance(run)
    rows = []
    for layer in range(len(mean["delta"])):
        per_head = {k: np.asarray(head[k])[:, layer] for k in ("delta", "bound", "tv_to_pi", "absorbing")}
        rows.append({
            "layer": layer + 1, **{k: mean[k][layer] for k in ("tau", "delta", "bound", "tv_to_pi", "absorbing")},
            "bound_holds": bool(mean["bound_excess"][layer] <= tol),
            "head_delta": [float(f(per_head["delta"])) for f in (np.mean, np.min, np.max)],
            "head_bound": float(per_head["bound"].mean()), "head_bound_holds": bool(head["bound_excess"][layer] <= tol),
            "head_tv": float(per_head["tv_to_pi"].mean()), "head_absorbing": float(per_head["absorbing"].mean()),
        })
    return {"architecture": run["spec"]["architecture"], "phase": PHASE_LABELS[phase], "rows": rows}


def _products(products) -> list[dict]:
    return [{"tables": [_layers(run, phase) for phase in phases(run)], "accuracy": run.get("eval_accuracy"),
             "chance": run.get("chance_accuracy")} for run in products]


def _clusters(clusters) -> list[dict]:
    """Each temperature's cluster counts on the grid (`spread`: min and max over seeds differ)."""
    return [{"temperature": r["temperature"], "final_residual": r["final_residual"],
             "final_effective_rank": r["final_effective_rank"],
             "counts": [{"mean": m, "min": lo, "max": hi, "spread": lo != hi}
                        for m, lo, hi in zip(r["clusters_mean"], r["clusters_min"], r["clusters_max"])]}
            for r in clusters]


def report(summary: dict) -> dict:
    """The context of `report.md.j2`."""
    clusters = sorted(summary["clusters"], key=lambda r: r["temperature"])
    return {"config": config_of(summary), "predictions": summary["predictions"], "fixed": _fixed(summary["fixed"]),
            "products": _products(summary["products"]), "clusters": _clusters(clusters),
            "iterations": clusters[0]["iterations"] if clusters else [], "plots": summary["plots"]}
