"""The statistics the studies share: a mean and its Student-t interval over independent units.

A unit is whatever the study replicates: seeds of a toy model, text segments
of one checkpoint. The interval is the mean's two-sided Student-t interval,
mean +- t_(1 - (1 - c)/2, n - 1) * s / sqrt(n), with s the sample standard
deviation (ddof = 1); its ends are NaN when it is undefined (fewer than two
units, or a value that is not finite), never a made-up width.

A summary reaches checks, figures and templates in its JSON form, where NaN
and inf are the strings 'nan', 'inf' and '-inf' (`attnjax.serialization`);
`number` reads such a value back as a float.
"""

from __future__ import annotations

import math

import numpy as np


def interval(values, confidence: float = 0.95) -> dict:
    """Mean of per-unit `values` `[n]` and its Student-t interval at `confidence`.

    Returns `{"mean", "low", "high", "n"}`; `low` and `high` are NaN when `n < 2`
    or any value is not finite.
    """
    # Imported here, not with the module: scipy.stats is ~0.7 s of every study command's start.
    from scipy import stats

    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError("interval: values is empty; need at least one unit")
    n, mean = int(v.size), float(np.mean(v))
    if n < 2 or not np.all(np.isfinite(v)):
        return {"mean": mean, "low": math.nan, "high": math.nan, "n": n}
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * np.std(v, ddof=1) / math.sqrt(n))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def log_interval(values, confidence: float = 0.95) -> dict:
    """A positive quantity's interval on the log scale: `interval` of the logs of `values` `[n]`, its three
    numbers exponentiated (a geometric mean and its interval, never below 0); NaN ends when a value is 0."""
    with np.errstate(divide="ignore"):
        x = interval(np.log(np.asarray(values, np.float64)), confidence)
    return {**{k: float(np.exp(x[k])) for k in ("mean", "low", "high")}, "n": x["n"]}


def within(iv: dict | None, low: float, high: float) -> bool | None:
    """Where an interval (`interval`, `log_interval`, or their JSON form) lies against [low, high] (an end
    may be infinite, for a one-sided claim): True when inside it, False when disjoint from it, None (not
    resolved) when it straddles an end, or when it is None or an end is NaN."""
    if iv is None:
        return None
    a, b = number(iv["low"]), number(iv["high"])
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    if low <= a and b <= high:
        return True
    return False if (b < low or a > high) else None


def contains(iv: dict | None, value: float) -> bool | None:
    """A two-sided claim (an equality, "the exponent is 3"): True when the interval contains `value`, False
    when it excludes it, None (not resolved) when it is None or an end is NaN."""
    if iv is None:
        return None
    a, b = number(iv["low"]), number(iv["high"])
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    return a <= value <= b


NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def number(value) -> float:
    """A number as a summary's JSON form holds it, as a float: an int or float, or 'nan', 'inf', '-inf'
    (how `attnjax.serialization.to_json` writes NaN and inf). Anything else raises TypeError."""
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(
        f"value must be a number or one of {sorted(NON_FINITE)} (a JSON number), got {value!r}"
    )


def numbers(value):
    """A part of a summary's JSON form with its non-finite numbers as floats (`number`): nested dicts and
    lists are read through; other strings and values are returned as they are."""
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers(v) for v in value]
    return NON_FINITE.get(value, value) if isinstance(value, str) else value
