"""What the power-iteration study's report quotes: numbers and named booleans, from the summary.

`report(summary)` is the context of `templates/report.md.j2`. Numbers arrive
as floats (the summary may store NaN as "nan"); the template formats them and
owns the wording, the headings and the tables' layout.
"""

from __future__ import annotations

from experiments.lab.render import rows_by_kind
from experiments.lab.study import config_of
from experiments.power_iteration.constants import MIN_UNITS, RESOLVED_FACTOR


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
    """One phase of one products run: per depth l (P_l = A_l ... A_1, A_l the map of layer l - 1), the
    head-averaged chain's numbers and the per-head ones."""
    mean = run["phases"][phase]["mean"]
    keys = ("tau", "entropy", "slem", "delta", "bound", "slem_bound", "tv_to_pi", "absorbing")
    rows = [
        {"depth": layer + 1, **{k: mean[k][layer] for k in keys}, **numbers}
        for layer, numbers in enumerate(run["phases"][phase]["derived"]["rows"])
    ]
    derived = run["phases"][phase]["derived"]
    return {
        "architecture": run["spec"]["architecture"],
        "phase": derived["label"],
        "layers": derived["layers"],
        "rows": rows,
    }


def _products(products) -> list[dict]:
    return [
        {
            "architecture": run["spec"]["architecture"],
            "tables": [_layers(run, phase) for phase in run["phase_order"]],
            "training": run["training"],
        }
        for run in products
    ]


def _rates(products) -> list[dict]:
    """Per causal phase of each products run: the rate hypothesis's numbers (`summary.rate_test`)."""
    return [
        {
            "architecture": run["spec"]["architecture"],
            "phase": n["label"],
            "layers": n["layers"],
            "entropy": n["entropy"],
            **n["rate"],
        }
        for run in products
        for n in (run["phases"][p]["derived"] for p in run["phase_order"])
        if n["rate"] is not None
    ]


def _clusters(clusters) -> list[dict]:
    """Each beta's cluster counts on the grid (`spread`: min and max over seeds differ)."""
    return [
        {
            "beta": r["beta"],
            "time_to_one": r["time_to_one"],
            "median_time": float(r["median_time"]),
            "probe_mean": r["probe_mean"],
            "probe_interval": r["probe_interval"],
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
    return {
        "config": config_of(summary),
        "fixed": _fixed(summary),
        "kinds": rows_by_kind(summary["predictions"]),
        "products": _products(summary["products"]),
        "rates": _rates(summary["products"]),
        "clusters": _clusters(clusters),
        "metastability": summary["metastability"],
        "times": clusters[0]["times"] if clusters else [],
        "horizon": clusters[0]["horizon"] if clusters else None,
        "probe_time": clusters[0]["probe_time"] if clusters else None,
        "plots": summary["plots"],
        "resolved_factor": RESOLVED_FACTOR,
        "min_units": MIN_UNITS,
    }


def readme(summary: dict, times: dict) -> dict:
    """The context of `readme.md.j2`: `report`'s and the run's `timing.json`."""
    return {
        **report(summary),
        "timing": times,
        "runs": len(summary["fixed"]) + len(summary["products"]) + len(summary["clusters"]),
    }
