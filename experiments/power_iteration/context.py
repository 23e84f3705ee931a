"""What the power-iteration study's report quotes: numbers and named booleans, from the summary.

`report(summary)` is the context of `templates/report.md.j2`. Numbers arrive
as floats (the summary may store NaN as "nan"); the template formats them and
owns the wording, the headings and the tables' layout.
"""

from __future__ import annotations

import math

import numpy as np

from experiments.power_iteration import checks
from experiments.power_iteration.summary import PHASE_LABELS, config_of, phases, product_tolerance


def _fixed(fixed) -> dict:
    matrices = [
        {
            "temperature": run["temperature"],
            **m,
            "rate": float(m["rate"]),
            "rel_error": float(m["rel_error"]),
            "vector_rate": float(m["vector_rate"]),
        }
        for run in fixed
        for m in run["matrices"]
    ]
    return {
        "floor": max((r["floor"] for r in fixed), default=math.nan),
        "matrices": matrices,
        "worst": max((float(r["worst_rel_error"]) for r in fixed), default=None),
    }


def _layers(run, phase: str) -> dict:
    """One phase of one products run: per layer, the head-averaged chain's numbers and the per-head ones."""
    mean, head = run["phases"][phase]["mean"], run["phases"][phase]["head"]
    tol = product_tolerance(run)
    rows = []
    for layer in range(len(mean["delta"])):
        per_head = {
            k: np.asarray(head[k])[:, layer] for k in ("delta", "bound", "tv_to_pi", "absorbing")
        }
        rows.append(
            {
                "layer": layer + 1,
                **{
                    k: mean[k][layer]
                    for k in (
                        "tau",
                        "entropy",
                        "slem",
                        "delta",
                        "bound",
                        "slem_bound",
                        "tv_to_pi",
                        "absorbing",
                    )
                },
                "bound_holds": bool(mean["bound_excess"][layer] <= tol),
                "head_delta": [float(f(per_head["delta"])) for f in (np.mean, np.min, np.max)],
                "head_bound": float(per_head["bound"].mean()),
                "head_bound_holds": bool(head["bound_excess"][layer] <= tol),
                "head_tv": float(per_head["tv_to_pi"].mean()),
                "head_absorbing": float(per_head["absorbing"].mean()),
            }
        )
    return {"architecture": run["spec"]["architecture"], "phase": PHASE_LABELS[phase], "rows": rows}


def _products(products) -> list[dict]:
    return [
        {
            "tables": [_layers(run, phase) for phase in phases(run)],
            "accuracy": run.get("eval_accuracy"),
            "chance": run.get("chance_accuracy"),
        }
        for run in products
    ]


def _clusters(clusters) -> list[dict]:
    """Each beta's cluster counts on the grid (`spread`: min and max over seeds differ)."""
    return [
        {
            "beta": r["beta"],
            "final": r["final_clusters"],
            "probe": r["probe_clusters"],
            "time_to_one": r["time_to_one"],
            "median_time": checks.median_time_to_one(r),
            "counts": [
                {"mean": m, "min": lo, "max": hi, "spread": lo != hi}
                for m, lo, hi in zip(r["clusters_mean"], r["clusters_min"], r["clusters_max"])
            ],
        }
        for r in clusters
    ]


def report(summary: dict) -> dict:
    """The context of `report.md.j2`."""
    clusters = sorted(summary["clusters"], key=lambda r: r["beta"])
    records = summary["predictions"]
    return {
        "config": config_of(summary),
        "fixed": _fixed(summary["fixed"]),
        "predictions": [p for p in records if p.get("kind", "prediction") == "prediction"],
        "sanity": [p for p in records if p.get("kind") == "sanity"],
        "products": _products(summary["products"]),
        "clusters": _clusters(clusters),
        "times": clusters[0]["times"] if clusters else [],
        "horizon": clusters[0]["horizon"] if clusters else None,
        "probe_time": clusters[0]["probe_time"] if clusters else None,
        "plots": summary["plots"],
        "entropy_range": checks.ENTROPY_RANGE,
        "resolved_factor": checks.RESOLVED_FACTOR,
    }


def _ratio_rows(summary) -> list[dict]:
    """Per products run and phase: the ranges of delta(P_l) / prod |lambda_2| and delta(P_l) / prod tau."""
    rows = []
    for run in summary["products"]:
        for phase in phases(run):
            r = checks.product_ratios(run, phase)
            mean = run["phases"][phase]["mean"]
            rows.append(
                {
                    "architecture": run["spec"]["architecture"],
                    "phase": PHASE_LABELS[phase],
                    "entropy": [min(mean["entropy"]), max(mean["entropy"])],
                    "tau": [min(mean["tau"]), max(mean["tau"])],
                    "regime": checks.regime_holds(run, phase),
                    "lambda": [min(r["lambda"]), max(r["lambda"])] if r["lambda"] else None,
                    "by_tau": [min(r["tau"]), max(r["tau"])] if r["tau"] else None,
                    "resolved": len(r["lambda"]),
                    "total": r["seeds"] * r["layers"],
                }
            )
    return rows


def readme(summary: dict, times: dict) -> dict:
    """The context of `readme.md.j2`: `report`'s, the products' ratio ranges and the run's `timing.json`."""
    return {
        **report(summary),
        "ratios": _ratio_rows(summary),
        "timing": times,
        "runs": len(summary["fixed"]) + len(summary["products"]) + len(summary["clusters"]),
    }
