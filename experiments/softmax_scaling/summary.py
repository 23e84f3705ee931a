"""The softmax-scaling study's summary: the rows as one dict of measurements against the predictions.

`summarize(rows, config)` is two steps. `aggregate` keeps, per d_k
(ascending), the variance of the logits (`variance`), the saturation
statistics of both scalings (`saturation`), the scaled case's d_k -> infinity
limit (`limit`), the gradients through the softmax per input family, scaling
and seed as their mean, median and share above tau (`gradients`, `tau`; see
`gradient_statistics`), the unscaled Jacobian norm at the rate widths and its
fitted exponent per seed with the exponent derived for the same widths
(`rate`), and the named outcomes (`checks`: each a
`pass` and its numbers, e.g. `gradients.gaussian.vanishes.high`). `derive`
adds every number the checks, the figures and the report quote that is not a
measurement itself (`dims`, the largest standard error, the intervals over
seeds of each gradient statistic, the rate's reference line, the headline
numbers of the mean and the median, the derived prefactor of the rate). The
outcome functions (`falls`, `remedy`, `first_below`, `rate_check`) take plain
numbers, so a test can hand them an input where a claim does not hold.

Every verdict needs `MIN_UNITS` seeds (with fewer, `pass` is None).
"""

from __future__ import annotations

import math

import numpy as np

from attnjax.serialization import json_form
from experiments.lab.stats import contains, interval, log_interval
from experiments.lab.study import distinct, select
from experiments.softmax_scaling.constants import MIN_UNITS, SCALINGS, STATS
from experiments.softmax_scaling.gradients import GRADIENTS, INPUTS
from experiments.softmax_scaling.rate import (
    correction,
    derived_slope,
    gap_density,
    log_log_slope,
    predicted_prefactor,
)
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


def _samples(rows: list[dict], dims: list[int], num_seeds: int) -> dict:
    """`{inputs: {scaling: {gradient: [[[norm per sample] per seed] per d_k]}}}`."""

    def values(**match):
        (row,) = select(rows, **match)
        return row["values"]

    return {
        i: {
            s: {
                g: [
                    [
                        values(d_k=d, inputs=i, scaling=s, quantity=g, seed=seed)
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


def gradient_tau(samples: dict) -> dict:
    """tau per gradient: the median, over every sample of every seed, of the scaled softmax's
    gradient norm in the footnote's setting (gaussian) at the largest d_k, i.e. the typical
    gradient that the remedy gives (`samples`: `_samples`' layout)."""
    return {
        g: float(np.median(np.concatenate(by_dim[-1])))
        for g, by_dim in samples["gaussian"]["scaled"].items()
    }


NORM_STATISTICS = ("mean", "median", "above")


def norm_statistics(norms, tau: float) -> dict:
    """`{"mean", "median", "above"}` of gradient norms `[n]`: `above` the share with norm > `tau`."""
    v = np.asarray(norms, np.float64)
    return {
        "mean": float(np.mean(v)),
        "median": float(np.median(v)),
        "above": float(np.mean(v > tau)),
    }


def _per_family(samples: dict, fn) -> dict:
    """`{inputs: {scaling: {gradient: fn(by_dim, gradient)}}}` over `samples` (`_samples`' layout)."""
    return {
        i: {s: {g: fn(by_dim, g) for g, by_dim in grads.items()} for s, grads in sc.items()}
        for i, sc in samples.items()
    }


def gradient_statistics(samples: dict, tau: dict) -> dict:
    """Per seed, over its samples (`norm_statistics`, tau per gradient): `{inputs: {scaling:
    {gradient: {"mean", "median", "above": [[per seed] per d_k]}}}}`."""

    def per_seed(by_dim, g):
        stats = [[norm_statistics(v, tau[g]) for v in seeds] for seeds in by_dim]
        return {k: [[x[k] for x in seeds] for seeds in stats] for k in NORM_STATISTICS}

    return _per_family(samples, per_seed)


def pooled_statistics(samples: dict, tau: dict) -> dict:
    """`norm_statistics` over every sample of every seed at once: `{inputs: {scaling: {gradient:
    {"mean", "median", "above": [per d_k]}}}}`."""

    def pooled(by_dim, g):
        stats = [norm_statistics(np.concatenate(seeds), tau[g]) for seeds in by_dim]
        return {k: [x[k] for x in stats] for k in NORM_STATISTICS}

    return _per_family(samples, pooled)


def rate_fit(rows: list[dict], num_seeds: int, num_keys: int) -> dict:
    """`{"dims": [d_k], "values": [[E||J||_2 per d_k] per seed], "slopes": [slope over every width
    per seed], "derived_slope": the slope of the first-order law over the same widths
    (`rate.derived_slope`, T = `num_keys`), "gap_density": f(0), "correction": a (`rate.py`)}`."""
    mine = select(rows, quantity="rate_jacobian_spectral")
    widths = distinct(mine, "width")
    values = [
        [select(mine, width=w, seed=seed)[0]["value"] for w in widths] for seed in range(num_seeds)
    ]
    return {
        "dims": widths,
        "values": values,
        "slopes": [log_log_slope(widths, v) for v in values],
        "derived_slope": derived_slope(widths, num_keys),
        "gap_density": gap_density(num_keys)[0],
        "correction": correction(num_keys),
    }


def falls(above: dict) -> dict:
    """Does the share of gradients above tau fall from the smallest to the largest d_k?
    `above`: `{gradient: [[share per seed] per d_k]}`.

    Per gradient, the interval over seeds of the paired difference share(largest d_k) -
    share(smallest d_k); pass (one-sided, the claim is a fall) if every upper end is below 0,
    None with fewer than `MIN_UNITS` seeds. `high`: the largest upper end.
    """
    differences = {g: interval(np.subtract(by_dim[-1], by_dim[0])) for g, by_dim in above.items()}
    units = min(d["n"] for d in differences.values())
    high = max(d["high"] for d in differences.values())
    return {
        "differences": differences,
        "high": high,
        "units": units,
        "pass": None if units < MIN_UNITS else bool(high < 0),
    }


def remedy(scaled: dict, unscaled: dict) -> dict:
    """Does the scale stop the fall? Per gradient, the interval over seeds of the scaled fall minus
    the unscaled one, (s(largest) - s(smallest)) - (u(largest) - u(smallest)) of the shares above
    tau (the unscaled case is the baseline), and of the scaled change s(largest) - s(smallest)
    alone. Pass if every lower end of the first is above 0 and every upper end of the second is
    at least 0 (the scaled share does not fall: a smaller fall than the baseline's is not enough),
    None with fewer than `MIN_UNITS` seeds. `low`: the smallest lower end of the first;
    `scaled_high`: the smallest upper end of the second."""
    differences = {
        g: interval(
            np.subtract(scaled[g][-1], scaled[g][0]) - np.subtract(unscaled[g][-1], unscaled[g][0])
        )
        for g in scaled
    }
    changes = {g: interval(np.subtract(scaled[g][-1], scaled[g][0])) for g in scaled}
    units = min(d["n"] for d in [*differences.values(), *changes.values()])
    low = min(d["low"] for d in differences.values())
    scaled_high = min(d["high"] for d in changes.values())
    return {
        "differences": differences,
        "scaled_changes": changes,
        "low": low,
        "scaled_high": scaled_high,
        "units": units,
        "pass": None if units < MIN_UNITS else bool(low > 0 and scaled_high >= 0),
    }


def first_below(scaled: dict, unscaled: dict, dims: list) -> dict:
    """The smallest d_k at which the unscaled share above tau is below the scaled one. Per gradient
    and d_k of `dims` `[n]`, the interval over seeds of the paired difference unscaled - scaled
    (`scaled`, `unscaled`: `{gradient: [[share per seed] per d_k]}`); `d_k`: the first d_k at which
    every gradient's upper end is below 0 (None if there is none, or with fewer than `MIN_UNITS`
    seeds)."""
    differences = {
        g: [interval(np.subtract(u, s)) for u, s in zip(unscaled[g], scaled[g])] for g in scaled
    }
    units = min(x["n"] for by_dim in differences.values() for x in by_dim)
    below = [
        all(by_dim[k]["high"] < 0 for by_dim in differences.values()) for k in range(len(dims))
    ]
    first = next((d for d, b in zip(dims, below) if b), None)
    return {
        "differences": differences,
        "dims": list(dims),
        "units": units,
        "d_k": None if units < MIN_UNITS else first,
    }


def rate_check(slopes: list[float], predicted: float) -> dict:
    """The fitted exponents of E||J||_2, one per seed: pass (two-sided) if their 95% interval contains
    `predicted` (`rate.derived_slope` over the same widths), None with fewer than `MIN_UNITS` seeds."""
    x = interval(slopes)
    return {
        **x,
        "predicted": predicted,
        "pass": None if x["n"] < MIN_UNITS else contains(x, predicted),
    }


def _gradient_checks(stats: dict, dims: list) -> dict:
    """Per input family: the unscaled share above tau falls (`falls`), the scale stops that
    (`remedy`), the scaled share falls (`falls`: by construction for low_rank), and the smallest
    d_k at which the unscaled share is below the scaled one (`first_below`)."""

    def above(family, scaling):
        return {g: st["above"] for g, st in stats[family][scaling].items()}

    return {
        i: {
            "vanishes": falls(above(i, "unscaled")),
            "remedy": remedy(above(i, "scaled"), above(i, "unscaled")),
            "scaled_vanishes": falls(above(i, "scaled")),
            "unscaled_below_scaled": first_below(above(i, "scaled"), above(i, "unscaled"), dims),
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
    samples = _samples(rows, dims_, config.num_seeds)
    tau = gradient_tau(samples)
    grads = gradient_statistics(samples, tau)
    rate = rate_fit(rows, config.num_seeds, config.num_keys)
    checks = _checks(records, variance, limit, config)
    checks["gradients"] = _gradient_checks(grads, dims_)
    checks["jacobian_rate"] = rate_check(rate["slopes"], rate["derived_slope"])
    return {
        "dtype": ", ".join(sorted({r["dtype"] for r in records})),
        "num_samples": config.num_samples,
        "num_keys": config.num_keys,
        "log_num_keys": math.log(config.num_keys),
        "variance": variance,
        "saturation": [{"d_k": r["d_k"], **r["saturation"]} for r in records],
        "limit": limit,
        "gradients": grads,
        "tau": tau,
        "pooled": pooled_statistics(samples, tau),
        "rate": rate,
        "checks": checks,
    }


def derive(summary: dict) -> dict:
    """`summary` (an `aggregate`, or a summary.json) with the numbers its readers quote added:

    * `dims`: `[d_k]`, ascending;
    * `worst_standard_error`: the largest relative standard error of a sample variance, and
      `tolerance_in_standard_errors`: the variance tolerance over it;
    * `uniform_max_weight`: 1 / T, the max weight of a uniform softmax;
    * `gradient_intervals`: `{inputs: {scaling: {gradient: {"mean", "median": [log_interval per
      d_k], "above": [interval per d_k]}}}}` over seeds;
    * `headline`: the unscaled gradient to q in the footnote's setting at the smallest and the
      largest d_k, over every sample of every seed: its mean, its median and its share above tau;
    * `rate_reference`: `[rate width]`, c d_k^(-1/2) through the seeds' mean at the smallest width;
    * `rate_prefactor`: `[rate width]`, the seeds' mean E||J||_2 times sqrt(d_k), and
      `rate_predicted_prefactor`: `[rate width]`, f(0) (1 - a / sqrt(d_k)) (`rate.predicted_prefactor`),
      `rate_predicted`: `[rate width]`, the latter over sqrt(d_k) (the first-order E||J||_2).
    """
    variance, rate = summary["variance"], summary["rate"]
    worst_se = max(r["relative_standard_error"] for r in variance)
    widths = np.array(rate["dims"], float)
    start = np.array(rate["values"])[:, 0].mean()
    predicted = predicted_prefactor(widths, summary["num_keys"])
    intervals = {
        family: {
            scaling: {
                grad: {
                    "mean": [log_interval(v) for v in st["mean"]],
                    "median": [log_interval(v) for v in st["median"]],
                    "above": [interval(v) for v in st["above"]],
                }
                for grad, st in g.items()
            }
            for scaling, g in scalings.items()
        }
        for family, scalings in summary["gradients"].items()
    }
    pooled = summary["pooled"]["gaussian"]["unscaled"]["grad_query"]
    return {
        **summary,
        "dims": [r["d_k"] for r in variance],
        "worst_standard_error": worst_se,
        "tolerance_in_standard_errors": summary["checks"]["variance_unscaled"]["tolerance"]
        / worst_se,
        "uniform_max_weight": 1.0 / summary["num_keys"],
        "gradient_intervals": intervals,
        "headline": {k: [v[0], v[-1]] for k, v in pooled.items()},
        "rate_reference": (start * np.sqrt(widths[0] / widths)).tolist(),
        "rate_prefactor": (np.array(rate["values"]).mean(axis=0) * np.sqrt(widths)).tolist(),
        "rate_predicted_prefactor": predicted.tolist(),
        "rate_predicted": (predicted / np.sqrt(widths)).tolist(),
    }


def summarize(rows: list[dict], config) -> dict:
    """The study's summary: `derive` of the `aggregate` in its JSON form (as summary.json holds it, so that
    a committed summary derives the same numbers again)."""
    return derive(json_form(aggregate(rows, config)))
