"""The softmax-scaling study's summary: the rows as one dict of measurements against the predictions.

`summarize(rows, config)` is two steps. `aggregate` keeps, per d_k
(ascending), the variance of the logits (`variance`), the saturation
statistics of both scalings (`saturation`), the scaled case's d_k -> infinity
limit (`limit`), the median gradients through the softmax per input family
and seed (`gradients`), the unscaled Jacobian norm at the rate widths and its
fitted exponent per seed (`rate`), and the named outcomes (`checks`: each a
`pass` and its numbers, e.g. `gradients.gaussian.vanishes.high`). `derive`
adds every number the checks, the figures and the report quote that is not a
measurement itself (`dims`, the largest standard error, the spread of each
gradient over seeds, the rate's reference line, the worst fitted slope).
The outcome functions (`vanishes`, `flat`, `rate_check`) take plain numbers,
so a test can hand them an input where a claim does not hold.
"""

from __future__ import annotations

import math

import numpy as np

from attnjax.serialization import json_form
from experiments.lab.study import distinct, select
from experiments.softmax_scaling.constants import SCALINGS, STATS
from experiments.softmax_scaling.gradients import GRADIENTS, INPUTS
from experiments.softmax_scaling.rate import log_log_slope
from experiments.softmax_scaling.study import relative_standard_error


def _records(rows: list[dict]) -> list[dict]:
    """Per d_k (ascending): `{"d_k", "dtype", "variance": {scaling: value}, "saturation": {scaling: {stat: value}}}`."""
    records = []
    for dim in distinct([r for r in rows if r["d_k"] is not None], "d_k"):
        mine = select(rows, d_k=dim)
        variance = {r["scaling"]: r["value"] for r in select(mine, quantity="variance")}
        saturation = {
            s: {
                r["quantity"]: r["value"] for r in select(mine, scaling=s) if r["quantity"] in STATS
            }
            for s in SCALINGS
        }
        records.append(
            {"d_k": dim, "dtype": mine[0]["dtype"], "variance": variance, "saturation": saturation}
        )
    return records


def _limit(rows: list[dict]) -> dict:
    return {r["quantity"]: r["value"] for r in select(rows, part="limit")}


def _variance_table(records: list[dict], config) -> list[dict]:
    rows = []
    for r in records:
        dim, var = r["d_k"], r["variance"]
        err_u, err_s = var["unscaled"] / dim - 1.0, var["scaled"] - 1.0
        rows.append(
            {
                "d_k": dim,
                "unscaled": var["unscaled"],
                "predicted_unscaled": float(dim),
                "rel_error_unscaled": err_u,
                "scaled": var["scaled"],
                "predicted_scaled": 1.0,
                "rel_error_scaled": err_s,
                "relative_standard_error": relative_standard_error(dim, config.num_samples),
                "pass": bool(
                    abs(err_u) <= config.variance_tolerance
                    and abs(err_s) <= config.variance_tolerance
                ),
            }
        )
    return rows


def _gradients(rows: list[dict], dims: list[int], num_seeds: int) -> dict:
    """`{inputs: {scaling: {gradient: [[median per seed] per d_k]}}}`."""

    def value(**match):
        (row,) = select(rows, **match)
        return row["value"]

    return {
        i: {
            s: {
                g: [
                    [
                        value(d_k=d, inputs=i, scaling=s, quantity=g, seed=seed)
                        for seed in range(num_seeds)
                    ]
                    for d in dims
                ]
                for g in GRADIENTS
            }
            for s in SCALINGS
        }
        for i in INPUTS
    }


def _rate(rows: list[dict], num_seeds: int) -> dict:
    """`{"dims": [d_k], "values": [[E||J||_2 per d_k] per seed], "slopes": [per seed]}`."""
    mine = select(rows, quantity="rate_jacobian_spectral")
    widths = distinct(mine, "width")
    values = [
        [select(mine, width=w, seed=seed)[0]["value"] for w in widths] for seed in range(num_seeds)
    ]
    return {"dims": widths, "values": values, "slopes": [log_log_slope(widths, v) for v in values]}


def vanishes(medians: dict, ratio: float) -> dict:
    """Without the scale, does the median gradient shrink with d_k? `medians`: `{gradient: [[per seed] per d_k]}`.

    Per seed and gradient, m(largest d_k) / m(smallest d_k); pass if every one is <= `ratio`
    (None if a smallest-d_k median is 0: nothing resolved to compare against).
    """
    ratios = [
        m[-1][seed] / m[0][seed] if m[0][seed] > 0 else math.nan
        for m in medians.values()
        for seed in range(len(m[0]))
    ]
    if any(math.isnan(r) for r in ratios):
        return {"pass": None, "low": None, "high": None, "threshold": ratio}
    return {
        "pass": max(ratios) <= ratio,
        "low": min(ratios),
        "high": max(ratios),
        "threshold": ratio,
    }


def flat(
    medians: dict, dims: list[int], min_dim: int, tolerance: float, expect_flat: bool = True
) -> dict:
    """With the scale, does the median gradient stay flat in d_k? Per seed and gradient, the largest
    |m(d_k) / m(largest d_k) - 1| over d_k >= `min_dim`; `expect_flat`: pass if every one is <= `tolerance`,
    else (a family where the scale is predicted not to work) pass if every one is > `tolerance`."""
    keep = [i for i, d in enumerate(dims) if d >= min_dim]
    deviations = []
    for m in medians.values():
        for seed in range(len(m[0])):
            top = m[-1][seed]
            deviations.append(
                max(abs(m[i][seed] / top - 1.0) if top > 0 else math.inf for i in keep)
            )
    low, high = min(deviations), max(deviations)
    return {
        "pass": high <= tolerance if expect_flat else low > tolerance,
        "low": low,
        "high": high,
        "tolerance": tolerance,
        "expect_flat": expect_flat,
    }


def rate_check(slopes: list[float], tolerance: float, predicted: float = -0.5) -> dict:
    """The fitted exponents of E||J||_2, one per seed: pass if every one is within `tolerance` of `predicted`."""
    return {
        "pass": all(abs(x - predicted) <= tolerance for x in slopes),
        "low": min(slopes),
        "high": max(slopes),
        "predicted": predicted,
        "tolerance": tolerance,
    }


def _gradient_checks(grads: dict, dims: list[int], config) -> dict:
    """Per input family: the unscaled gradient vanishes; the scaled one is flat (not flat for low_rank)."""
    return {
        i: {
            "vanishes": vanishes(grads[i]["unscaled"], config.vanish_ratio),
            "flat": flat(
                grads[i]["scaled"],
                dims,
                config.flat_min_dim,
                config.flat_tolerance,
                expect_flat=i != "low_rank",
            ),
        }
        for i in INPUTS
    }


def _checks(records, variance, limit, config) -> dict:
    tol = config.variance_tolerance
    worst = max(abs(r["saturation"]["scaled"][s] / limit[s] - 1.0) for r in records for s in STATS)
    unscaled = [r["saturation"]["unscaled"] for r in records]
    rising = all(b["max_weight"] > a["max_weight"] for a, b in zip(unscaled, unscaled[1:]))
    falling = all(b["entropy"] < a["entropy"] for a, b in zip(unscaled, unscaled[1:]))
    return {
        "variance_unscaled": {
            "pass": all(abs(v["rel_error_unscaled"]) <= tol for v in variance),
            "worst_rel_error": max(abs(v["rel_error_unscaled"]) for v in variance),
            "tolerance": tol,
        },
        "variance_scaled": {
            "pass": all(abs(v["rel_error_scaled"]) <= tol for v in variance),
            "worst_rel_error": max(abs(v["rel_error_scaled"]) for v in variance),
            "tolerance": tol,
        },
        "scaled_saturation_constant": {
            "pass": worst <= config.saturation_tolerance,
            "worst_rel_deviation": worst,
        },
        "unscaled_softmax_saturates": {
            "pass": (rising and falling) if len(records) > 1 else None,
            "max_weight_rises": rising,
            "entropy_falls": falling,
        },
    }


def aggregate(rows: list[dict], config) -> dict:
    """The measurements of every run and their outcomes against the config's thresholds."""
    records, limit = _records(rows), _limit(rows)
    variance = _variance_table(records, config)
    dims_ = [r["d_k"] for r in records]
    grads = _gradients(rows, dims_, config.num_seeds)
    rate = _rate(rows, config.num_seeds)
    checks = _checks(records, variance, limit, config)
    checks["gradients"] = _gradient_checks(grads, dims_, config)
    checks["jacobian_rate"] = rate_check(rate["slopes"], config.rate_tolerance)
    return {
        "dtype": ", ".join(sorted({r["dtype"] for r in records})),
        "num_samples": config.num_samples,
        "num_keys": config.num_keys,
        "log_num_keys": math.log(config.num_keys),
        "variance": variance,
        "saturation": [{"d_k": r["d_k"], **r["saturation"]} for r in records],
        "limit": limit,
        "gradients": grads,
        "rate": rate,
        "checks": checks,
    }


def spread(values) -> dict:
    """`{"median", "low", "high"}` of per-seed values `[seeds]`: their median, min and max."""
    return {"median": float(np.median(values)), "low": min(values), "high": max(values)}


def worst_slope(check: dict) -> float:
    """Of the fitted slopes' extremes (`rate_check`'s `low`, `high`), the one farther from the prediction."""
    far = abs(check["high"] - check["predicted"]) > abs(check["low"] - check["predicted"])
    return check["high"] if far else check["low"]


def derive(summary: dict) -> dict:
    """`summary` (an `aggregate`, or a summary.json) with the numbers its readers quote added:

    * `dims`: `[d_k]`, ascending;
    * `worst_standard_error`: the largest relative standard error of a sample variance, and
      `tolerance_in_standard_errors`: the variance tolerance over it;
    * `uniform_max_weight`: 1 / T, the max weight of a uniform softmax;
    * `gradient_spread`: `{inputs: {scaling: {gradient: [spread over seeds per d_k]}}}`;
    * `rate_reference`: `[rate width]`, c d_k^(-1/2) through the seeds' mean at the smallest width;
    * `worst_slope`: the fitted exponent farthest from -1/2 (`worst_slope`).
    """
    variance, rate = summary["variance"], summary["rate"]
    worst_se = max(r["relative_standard_error"] for r in variance)
    widths = np.array(rate["dims"], float)
    start = np.array(rate["values"])[:, 0].mean()
    return {
        **summary,
        "dims": [r["d_k"] for r in variance],
        "worst_standard_error": worst_se,
        "tolerance_in_standard_errors": summary["checks"]["variance_unscaled"]["tolerance"]
        / worst_se,
        "uniform_max_weight": 1.0 / summary["num_keys"],
        "gradient_spread": {
            family: {
                scaling: {
                    grad: [spread(per_seed) for per_seed in by_dim] for grad, by_dim in g.items()
                }
                for scaling, g in scalings.items()
            }
            for family, scalings in summary["gradients"].items()
        },
        "rate_reference": (start * np.sqrt(widths[0] / widths)).tolist(),
        "worst_slope": worst_slope(summary["checks"]["jacobian_rate"]),
    }


def summarize(rows: list[dict], config) -> dict:
    """The study's summary: `derive` of the `aggregate` in its JSON form (as summary.json holds it, so that
    a committed summary derives the same numbers again)."""
    return derive(json_form(aggregate(rows, config)))
