"""What the power-iteration study's report quotes: numbers and named booleans, from the summary.

`report(summary)` is the context of `templates/report.md.j2`. Numbers arrive
as floats (the summary may store NaN as "nan"); the template formats them and
owns the wording, the headings and the tables' layout.
"""

from __future__ import annotations

from experiments.lab.study import config_of
from experiments.power_iteration.constants import ENTROPY_RANGE, PHASE_LABELS, RESOLVED_FACTOR


def _fixed(summary) -> dict:
    matrices = [
        {
            "temperature": run["temperature"],
            **m,
            "rate": float(m["rate"]),
            "rel_error": float(m["rel_error"]),
            "vector_rate": float(m["vector_rate"]),
        }
        for run in summary["fixed"]
        for m in run["matrices"]
    ]
    return {
        "floor": float(summary["fixed_floor"]),
        "matrices": matrices,
        "worst": summary["fixed_worst"],
    }


def _layers(run, phase: str) -> dict:
    """One phase of one products run: per layer, the head-averaged chain's numbers and the per-head ones."""
    mean = run["phases"][phase]["mean"]
    keys = ("tau", "entropy", "slem", "delta", "bound", "slem_bound", "tv_to_pi", "absorbing")
    rows = [
        {"layer": layer + 1, **{k: mean[k][layer] for k in keys}, **numbers}
        for layer, numbers in enumerate(run["phases"][phase]["derived"]["rows"])
    ]
    return {"architecture": run["spec"]["architecture"], "phase": PHASE_LABELS[phase], "rows": rows}


def _products(products) -> list[dict]:
    return [
        {
            "tables": [_layers(run, phase) for phase in run["phase_order"]],
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
            "time_to_one": r["time_to_one"],
            "median_time": float(r["median_time"]),
            "probe_mean": r["probe_mean"],
            "final_mean": r["final_mean"],
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
        "fixed": _fixed(summary),
        "predictions": [p for p in records if p.get("kind", "prediction") == "prediction"],
        "sanity": [p for p in records if p.get("kind") == "sanity"],
        "products": _products(summary["products"]),
        "clusters": _clusters(clusters),
        "times": clusters[0]["times"] if clusters else [],
        "horizon": clusters[0]["horizon"] if clusters else None,
        "probe_time": clusters[0]["probe_time"] if clusters else None,
        "plots": summary["plots"],
        "entropy_range": ENTROPY_RANGE,
        "resolved_factor": RESOLVED_FACTOR,
    }


def _ratio_rows(summary) -> list[dict]:
    """Per products run and phase: the entropy and tau spans over layers, whether the regime holds, and the
    spans of delta(P_l) / prod |lambda_2| and delta(P_l) / prod tau."""
    rows = []
    for run in summary["products"]:
        for phase in run["phase_order"]:
            n = run["phases"][phase]["derived"]
            r = n["ratios"]
            rows.append(
                {
                    "architecture": run["spec"]["architecture"],
                    "phase": PHASE_LABELS[phase],
                    "entropy": n["entropy"],
                    "tau": n["tau"],
                    "regime": n["regime"],
                    "lambda": r["lambda_span"],
                    "by_tau": r["tau_span"],
                    "resolved": r["resolved"],
                    "total": r["total"],
                }
            )
    return rows


def readme(summary: dict, times: dict) -> dict:
    """The context of `readme.md.j2`: `report`'s, the products' ratio ranges and the run's `timing.json`."""
    return {
        **report(summary),
        "ratios": _ratio_rows(summary),
        "ratio_span": summary["ratio_span"],
        "timing": times,
        "runs": len(summary["fixed"]) + len(summary["products"]) + len(summary["clusters"]),
    }
