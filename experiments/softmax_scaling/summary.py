"""The softmax-scaling study's summary: the rows as one dict of measurements against the predictions.

`summarize` keeps, per d_k (ascending), the variance of the logits
(`variance`), the saturation statistics of both scalings (`saturation`), the
scaled case's d_k -> infinity limit (`limit`), and the named outcomes the
checks and the report read (`checks`: each a `pass` and its numbers, e.g.
`unscaled_softmax_saturates.max_weight_rises`).
"""
from __future__ import annotations

import math

import numpy as np
from ml_collections import ConfigDict

from attnjax.study import distinct, select
from experiments.softmax_scaling.study import SCALINGS, STATS, relative_standard_error


def config_of(summary: dict) -> ConfigDict:
    """The study's config, from the dict the runner stored in the summary."""
    return ConfigDict(summary["config"])


def _records(rows: list[dict]) -> list[dict]:
    """Per d_k (ascending): `{"d_k", "dtype", "variance": {scaling: value}, "saturation": {scaling: {stat: value}}}`."""
    records = []
    for dim in distinct([r for r in rows if r["d_k"] is not None], "d_k"):
        mine = select(rows, d_k=dim)
        variance = {r["scaling"]: r["value"] for r in select(mine, quantity="variance")}
        saturation = {s: {r["quantity"]: r["value"] for r in select(mine, scaling=s) if r["quantity"] in STATS}
                      for s in SCALINGS}
        records.append({"d_k": dim, "dtype": mine[0]["dtype"], "variance": variance, "saturation": saturation})
    return records


def _limit(rows: list[dict]) -> dict:
    return {r["quantity"]: r["value"] for r in select(rows, d_k=None)}


def _variance_table(records: list[dict], config) -> list[dict]:
    rows = []
    for r in records:
        dim, var = r["d_k"], r["variance"]
        err_u, err_s = var["unscaled"] / dim - 1.0, var["scaled"] - 1.0
        rows.append({
            "d_k": dim, "unscaled": var["unscaled"], "predicted_unscaled": float(dim), "rel_error_unscaled": err_u,
            "scaled": var["scaled"], "predicted_scaled": 1.0, "rel_error_scaled": err_s,
            "relative_standard_error": relative_standard_error(dim, config.num_samples),
            "pass": bool(abs(err_u) <= config.variance_tolerance and abs(err_s) <= config.variance_tolerance),
        })
    return rows


def decay_slope(records: list[dict], min_dim: int):
    """Least-squares slope of log E||J||_2 (unscaled) against log d_k over d_k >= min_dim (None if < 2 points)."""
    points = [(r["d_k"], r["saturation"]["unscaled"]["jacobian_spectral"]) for r in records if r["d_k"] >= min_dim]
    if len(points) < 2:
        return None
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def last_step_slope(records: list[dict]):
    """Local log-log slope of the unscaled E||J||_2 between the two largest d_k (None if < 2)."""
    if len(records) < 2:
        return None
    (d0, j0), (d1, j1) = [(r["d_k"], r["saturation"]["unscaled"]["jacobian_spectral"]) for r in records[-2:]]
    return float(np.log(j1 / j0) / np.log(d1 / d0))


def _checks(records, variance, limit, slope, config) -> dict:
    tol = config.variance_tolerance
    worst = max(abs(r["saturation"]["scaled"][s] / limit[s] - 1.0) for r in records for s in STATS)
    unscaled = [r["saturation"]["unscaled"] for r in records]
    rising = all(b["max_weight"] > a["max_weight"] for a, b in zip(unscaled, unscaled[1:]))
    falling = all(b["entropy"] < a["entropy"] for a, b in zip(unscaled, unscaled[1:]))
    return {
        "variance_unscaled": {"pass": all(abs(v["rel_error_unscaled"]) <= tol for v in variance),
                              "worst_rel_error": max(abs(v["rel_error_unscaled"]) for v in variance),
                              "tolerance": tol},
        "variance_scaled": {"pass": all(abs(v["rel_error_scaled"]) <= tol for v in variance),
                            "worst_rel_error": max(abs(v["rel_error_scaled"]) for v in variance),
                            "tolerance": tol},
        "scaled_saturation_constant": {"pass": worst <= config.saturation_tolerance, "worst_rel_deviation": worst},
        "unscaled_softmax_saturates": {"pass": (rising and falling) if len(records) > 1 else None,
                                       "max_weight_rises": rising,
                                       "entropy_falls": falling},
        "unscaled_jacobian_vanishes": {"pass": None if slope is None else abs(slope + 0.5) <= 0.25,
                                       "slope": slope, "last_step_slope": last_step_slope(records),
                                       "predicted_slope": -0.5, "fit_min_dim": config.decay_fit_min_dim},
    }


def summarize(rows: list[dict], config) -> dict:
    records, limit = _records(rows), _limit(rows)
    variance = _variance_table(records, config)
    slope = decay_slope(records, config.decay_fit_min_dim)
    return {
        "dtype": ", ".join(sorted({r["dtype"] for r in records})),
        "num_samples": config.num_samples,
        "num_keys": config.num_keys,
        "log_num_keys": math.log(config.num_keys),
        "variance": variance,
        "saturation": [{"d_k": r["d_k"], **r["saturation"]} for r in records],
        "limit": limit,
        "unscaled_jacobian_slope": slope,
        "checks": _checks(records, variance, limit, slope, config),
    }


def dims(summary: dict) -> np.ndarray:
    """`[d_k]` of the saturation rows, as floats (a plot's x)."""
    return np.array([r["d_k"] for r in summary["saturation"]], float)


def series(summary: dict, scaling: str, stat: str) -> np.ndarray:
    """`[d_k]`: one saturation statistic of one scaling."""
    return np.array([row[scaling][stat] for row in summary["saturation"]])
