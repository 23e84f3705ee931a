"""The softmax-scaling study's aggregation (`summary.aggregate`, `summary.derive`) on synthetic rows whose
axes have distinct sizes (5 widths d_k, 11 seeds, 7 gradient samples per seed, 6 rate widths, beside the
study's 4 saturation statistics, 3 input families and 2 scalings and gradients), against numbers computed
here with NumPy from the module docstring's equations.

With every axis of a different size, an interval over the wrong axis has the wrong `n` and a mean over
the wrong axis the wrong length; the gradient norms are skewed (log-normal) so that a median taken as a
mean, a geometric mean taken as an arithmetic one or in another base, and a worst case taken as a mean
all give other numbers (asserted below, so the test can tell).
"""

import math

import numpy as np
import pytest

from configs import softmax_scaling as softmax_scaling_config
from experiments.softmax_scaling import summary
from experiments.softmax_scaling.constants import SCALINGS, STATS
from experiments.softmax_scaling.gradients import GRADIENTS, INPUTS
from experiments.softmax_scaling.rate import derived_slope, predicted_prefactor
from experiments.softmax_scaling.study import relative_standard_error
from tests.intervals import assert_interval, t_interval

DIMS, SEEDS, SAMPLES = (4, 16, 64, 256, 1024), 11, 7
RATE_DIMS = (256, 1024, 4096, 16384, 65536, 262144)
NUM_KEYS, NUM_SAMPLES = 64, 50_000


def geometric_interval(values) -> dict:
    """`t_interval` of the natural logs, its three numbers exponentiated."""
    x = t_interval(np.log(values))
    return {**{k: math.exp(x[k]) for k in ("mean", "low", "high")}, "n": x["n"]}


def _config():
    config = softmax_scaling_config.get_config("smoke")
    config.dims, config.num_seeds, config.gradient_samples = DIMS, SEEDS, SAMPLES
    config.rate_dims, config.num_keys, config.num_samples = RATE_DIMS, NUM_KEYS, NUM_SAMPLES
    return config


def _data(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    dims = np.asarray(DIMS, np.float64)
    variance = {
        "unscaled": dims * (1 + rng.normal(0, 0.03, len(DIMS))),
        "scaled": 1 + rng.normal(0, 0.03, len(DIMS)),
    }
    limit = {stat: rng.uniform(0.2, 0.8) for stat in STATS}
    saturation = {
        "scaled": {stat: limit[stat] * (1 + rng.normal(0, 0.05, len(DIMS))) for stat in STATS},
        "unscaled": {stat: rng.uniform(0.1, 2, len(DIMS)) for stat in STATS},
    }
    saturation["unscaled"]["max_weight"] = np.linspace(0.2, 0.9, len(DIMS))
    saturation["unscaled"]["entropy"] = np.linspace(3.5, 0.5, len(DIMS))
    # Gradient norms [D, S, N], log-normal: the unscaled ones shrink with d_k, the scaled ones not.
    shift = {"unscaled": -0.6 * np.log(dims / dims[0]), "scaled": np.zeros(len(DIMS))}
    norms = {
        i: {
            s: {
                g: np.exp(
                    shift[s][:, None, None]
                    + rng.normal(0, 0.3, (1, SEEDS, 1))
                    + rng.normal(0, 1.0, (len(DIMS), SEEDS, SAMPLES))
                )
                for g in GRADIENTS
            }
            for s in SCALINGS
        }
        for i in INPUTS
    }
    widths = np.asarray(RATE_DIMS, np.float64)
    slopes = -0.48 + rng.normal(0, 0.01, SEEDS)
    rate = 2.0 * widths[None, :] ** slopes[:, None] * (1 + rng.normal(0, 0.01, (SEEDS, 1)))
    return {
        "variance": variance,
        "limit": limit,
        "saturation": saturation,
        "norms": norms,
        "rate": rate,
    }


def _rows(d: dict) -> list[dict]:
    dtype = {"dtype": "float32"}
    base = {"run": "limit", "part": "limit", "d_k": None}
    rows = [
        {**base, "quantity": stat, "scaling": "scaled", "value": v} | dtype
        for stat, v in d["limit"].items()
    ]
    for k, dim in enumerate(DIMS):
        base = {"run": f"d_k={dim:05d}", "part": "dim", "d_k": dim}
        rows += [
            {**base, "quantity": "variance", "scaling": s, "value": d["variance"][s][k]}
            | {"predicted": float(dim) if s == "unscaled" else 1.0}
            | dtype
            for s in SCALINGS
        ]
        rows += [
            {**base, "quantity": stat, "scaling": s, "value": d["saturation"][s][stat][k]} | dtype
            for stat in STATS
            for s in SCALINGS
        ]
        rows += [
            {**base, "quantity": g, "scaling": s, "inputs": i, "seed": seed}
            | {"values": d["norms"][i][s][g][k, seed].tolist()}
            | dtype
            for seed in range(SEEDS)
            for i in INPUTS
            for g in GRADIENTS
            for s in SCALINGS
        ]
    base = {"run": "rate", "part": "rate", "d_k": None, "scaling": "unscaled"}
    rows += [
        {**base, "quantity": "rate_jacobian_spectral", "width": w, "seed": seed}
        | {"value": float(d["rate"][seed, j])}
        | dtype
        for seed in range(SEEDS)
        for j, w in enumerate(RATE_DIMS)
    ]
    return rows


@pytest.fixture(scope="module")
def case():
    d = _data()
    return d, summary.summarize(_rows(d), _config())


def _tau(d: dict) -> dict:
    """Per gradient: the median over every sample of every seed, scaled gaussian, largest d_k."""
    return {g: float(np.median(d["norms"]["gaussian"]["scaled"][g][-1])) for g in GRADIENTS}


def test_the_synthetic_axes_have_distinct_sizes():
    sizes = (len(DIMS), SEEDS, SAMPLES, len(RATE_DIMS), len(STATS), len(INPUTS), len(SCALINGS))
    assert len(set(sizes)) == len(sizes) and min(sizes) >= 2


def test_variance_and_saturation_keep_each_width_and_the_worst_deviation(case):
    d, s = case
    assert s["dims"] == list(DIMS)
    var = d["variance"]
    err_u, err_s = var["unscaled"] / np.asarray(DIMS) - 1, var["scaled"] - 1
    for k, row in enumerate(s["variance"]):
        assert row["d_k"] == DIMS[k]
        assert row["rel_error_unscaled"] == pytest.approx(err_u[k], rel=1e-12)
        assert row["rel_error_scaled"] == pytest.approx(err_s[k], rel=1e-12)
    checks = s["checks"]
    assert checks["variance_unscaled"]["worst_rel_error"] == pytest.approx(np.max(np.abs(err_u)))
    assert checks["variance_scaled"]["worst_rel_error"] == pytest.approx(np.max(np.abs(err_s)))
    se = [relative_standard_error(dim, NUM_SAMPLES) for dim in DIMS]
    assert s["worst_standard_error"] == pytest.approx(max(se), rel=1e-12)
    deviation = np.array(
        [d["saturation"]["scaled"][st] / d["limit"][st] - 1 for st in STATS]
    )  # [stats, D]
    worst = checks["scaled_saturation_constant"]["worst_rel_deviation"]
    assert worst == pytest.approx(np.max(np.abs(deviation)), rel=1e-12)
    assert np.max(np.abs(deviation)) > 1.5 * np.mean(np.abs(deviation))  # a mean would differ
    assert checks["unscaled_softmax_saturates"]["pass"] is True
    assert s["uniform_max_weight"] == 1 / NUM_KEYS


def test_tau_is_the_median_of_the_scaled_gaussian_gradients_at_the_largest_width(case):
    d, s = case
    tau = _tau(d)
    for g in GRADIENTS:
        assert s["tau"][g] == pytest.approx(tau[g], rel=1e-12)
        x = d["norms"]["gaussian"]["scaled"][g]
        assert abs(np.mean(x[-1]) - tau[g]) > 0.1 * tau[g]  # a mean would differ
        assert abs(np.median(x[0]) - tau[g]) > 0.01 * tau[g]  # so would the smallest width


def test_gradient_statistics_per_seed_over_samples_and_intervals_over_seeds(case):
    d, s = case
    tau = _tau(d)
    for i in INPUTS:
        for sc in SCALINGS:
            for g in GRADIENTS:
                x = d["norms"][i][sc][g]  # [D, S, N]
                want = {
                    "mean": x.mean(-1),
                    "median": np.median(x, -1),
                    "above": (x > tau[g]).mean(-1),
                }
                got = s["gradients"][i][sc][g]
                intervals = s["gradient_intervals"][i][sc][g]
                for k, v in want.items():  # [D][S]
                    np.testing.assert_allclose(got[k], v, rtol=1e-12)
                    assert len(intervals[k]) == len(DIMS)
                for k in ("mean", "median"):  # geometric over seeds, natural logs
                    for got_k, v in zip(intervals[k], want[k]):
                        assert_interval(got_k, geometric_interval(v))
                for got_k, v in zip(intervals["above"], want["above"]):
                    assert_interval(got_k, t_interval(v))
                assert np.mean(np.abs(want["median"] - want["mean"])) > 0.1 * np.mean(want["mean"])
                pooled = s["pooled"][i][sc][g]
                flat = x.reshape(len(DIMS), -1)
                np.testing.assert_allclose(pooled["mean"], flat.mean(-1), rtol=1e-12)
                np.testing.assert_allclose(pooled["median"], np.median(flat, -1), rtol=1e-12)
                np.testing.assert_allclose(pooled["above"], (flat > tau[g]).mean(-1))
    x = d["norms"]["gaussian"]["unscaled"]["grad_query"].reshape(len(DIMS), -1)
    headline = {"mean": x.mean(-1), "median": np.median(x, -1), "above": (x > tau["grad_query"])}
    headline["above"] = headline["above"].mean(-1)
    for k, v in headline.items():
        np.testing.assert_allclose(s["headline"][k], [v[0], v[-1]], rtol=1e-12)
    # A geometric mean is not the arithmetic one, nor one taken in base 10.
    v = d["norms"]["gaussian"]["unscaled"]["grad_query"].mean(-1)[0]
    geometric = math.exp(np.mean(np.log(v)))
    assert abs(geometric - np.mean(v)) > 1e-3 * geometric
    assert abs(10 ** np.mean(np.log(v)) - geometric) > 1e-3 * geometric


def test_gradient_checks_are_paired_intervals_over_seeds(case):
    d, s = case
    tau = _tau(d)

    def above(i, sc, g):  # [D, S]
        return (d["norms"][i][sc][g] > tau[g]).mean(-1)

    for i in INPUTS:
        c = s["checks"]["gradients"][i]
        for name, sc in (("vanishes", "unscaled"), ("scaled_vanishes", "scaled")):
            want = {g: t_interval(above(i, sc, g)[-1] - above(i, sc, g)[0]) for g in GRADIENTS}
            for g in GRADIENTS:
                assert_interval(c[name]["differences"][g], want[g])
            assert c[name]["units"] == SEEDS
            assert c[name]["high"] == pytest.approx(max(w["high"] for w in want.values()))
            assert c[name]["pass"] == bool(max(w["high"] for w in want.values()) < 0)
        fall = {g: above(i, "scaled", g)[-1] - above(i, "scaled", g)[0] for g in GRADIENTS}
        base = {g: above(i, "unscaled", g)[-1] - above(i, "unscaled", g)[0] for g in GRADIENTS}
        diffs = {g: t_interval(fall[g] - base[g]) for g in GRADIENTS}
        for g in GRADIENTS:
            assert_interval(c["remedy"]["differences"][g], diffs[g])
            assert_interval(c["remedy"]["scaled_changes"][g], t_interval(fall[g]))
        assert c["remedy"]["low"] == pytest.approx(min(x["low"] for x in diffs.values()))
        below = c["unscaled_below_scaled"]
        assert below["units"] == SEEDS and below["dims"] == list(DIMS)
        for g in GRADIENTS:
            for k in range(len(DIMS)):
                diff = above(i, "unscaled", g)[k] - above(i, "scaled", g)[k]
                assert_interval(below["differences"][g][k], t_interval(diff))


def test_rate_slopes_per_seed_and_the_reference_lines(case):
    d, s = case
    rate, widths = d["rate"], np.asarray(RATE_DIMS, np.float64)
    assert s["rate"]["dims"] == list(RATE_DIMS)
    x = np.log(widths) - np.log(widths).mean()
    slopes = [np.sum(x * (np.log(v) - np.log(v).mean())) / np.sum(x * x) for v in rate]
    np.testing.assert_allclose(s["rate"]["slopes"], slopes, rtol=1e-9)
    check = s["checks"]["jacobian_rate"]
    assert_interval(check, t_interval(slopes))
    predicted = derived_slope(widths, NUM_KEYS)
    assert check["predicted"] == pytest.approx(predicted, rel=1e-12)
    assert check["pass"] == bool(check["low"] <= predicted <= check["high"])
    start = rate[:, 0].mean()
    np.testing.assert_allclose(s["rate_reference"], start * np.sqrt(widths[0] / widths))
    np.testing.assert_allclose(s["rate_prefactor"], rate.mean(0) * np.sqrt(widths), rtol=1e-12)
    prefactor = predicted_prefactor(widths, NUM_KEYS)
    np.testing.assert_allclose(s["rate_predicted"], prefactor / np.sqrt(widths), rtol=1e-12)
    assert abs(rate[0].mean() - start) > 0.1 * start  # the first seed's mean over widths differs
