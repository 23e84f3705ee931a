"""The 95% Student-t interval over units, written from its equation for the aggregation tests
(independent of `experiments.lab.stats.interval`), and a comparison of two interval dicts."""

import math

import numpy as np
from scipy import stats as scipy_stats


def t_interval(values) -> dict:
    """Mean over units and its 95% Student-t interval, mean +- t_{0.975, n-1} s / sqrt(n)."""
    v = np.asarray(values, np.float64)
    n, mean = v.size, float(np.mean(v))
    half = scipy_stats.t.ppf(0.975, n - 1) * np.std(v, ddof=1) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def assert_interval(got: dict, want: dict) -> None:
    """`got` and `want` have the same unit count and agree to 1e-9 relative in mean, low and high."""
    assert got["n"] == want["n"]
    np.testing.assert_allclose(
        [got["mean"], got["low"], got["high"]],
        [want["mean"], want["low"], want["high"]],
        rtol=1e-9,
        atol=1e-12,
    )
