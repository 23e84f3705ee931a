"""The rank-collapse study's aggregation (`summary.aggregate` and the derived measurements the `dong`
and `noci` sections are built from) on synthetic rows whose axes have distinct sizes (Dong et al.'s
run: 3 seeds, 4 examples, 5 layers; Noci et al.'s sweep: 7 seeds at 4 depths per variant), against
numbers computed here with NumPy from the module docstrings' equations.

With every axis of a different size, an interval over the wrong axis has the wrong `n`; the data are drawn
so that a mean taken for a median (or a median outside log space), a log in another base, a fit over every
pair instead of the windowed ones and a mean taken for a worst case also give other numbers (asserted
below, so the test can tell).
"""

import math

import numpy as np
import pytest

from experiments.rank_collapse import summary
from experiments.rank_collapse.constants import LOCAL_WINDOW, RESOLVED, SATURATED
from tests.intervals import assert_interval, t_interval

SEEDS, EXAMPLES, LAYERS = 3, 4, 5  # Dong et al.'s run: r is [S, B, L + 1] = [3, 4, 6]
NOCI_SEEDS, DEPTHS = 7, (2, 4, 8, 16)
NOCI = {"skip_mlp": "unscaled", "skip_mlp_scaled": "scaled"}  # pre-LN pair of `summary.NOCI_PAIRS`


def lstsq_slope(x, y) -> float:
    """Least-squares slope of y = p x + b."""
    design = np.stack([np.asarray(x, np.float64), np.ones(len(x))], axis=1)
    return float(np.linalg.lstsq(design, np.asarray(y, np.float64), rcond=None)[0][0])


def _spec(sweep: str, architecture: str, depth: int) -> dict:
    return dict(
        sweep=sweep,
        kind="softmax",
        architecture=architecture,
        depth=depth,
        temperature=1.0,
        causal=False,
        embedding_std=None,
        window=None,
    )


def _rows(run: str, spec: dict, metrics: dict) -> list[dict]:
    """One init-phase row per (metric, seed): `metrics` `{name: [S, ...]}`."""
    return [
        {"run": run, **spec, "phase": "init", "step": 0, "metric": name, "values": v.tolist()}
        for name, per_seed in metrics.items()
        for v in per_seed
    ]


def _dong_data(rng) -> dict:
    """Relative residuals falling as r_l = r_(l-1)^p (p ~ 2.3, per example and layer) from r_0 ~ 0.4, so
    that each example crosses the saturated region, Dong's local window and the floor; absolute residuals
    r times a per-example norm."""
    log_r = np.empty((SEEDS, EXAMPLES, LAYERS + 1))
    log_r[..., 0] = np.log(rng.uniform(0.2, 0.6, (SEEDS, EXAMPLES)))
    for layer in range(1, LAYERS + 1):
        power = rng.uniform(1.6, 3.0, (SEEDS, EXAMPLES))
        log_r[..., layer] = power * log_r[..., layer - 1] + rng.normal(0, 0.3, (SEEDS, EXAMPLES))
    rel = np.exp(log_r)
    norm = rng.uniform(1.0, 5.0, (SEEDS, EXAMPLES, 1)) * rng.uniform(0.8, 1.2, rel.shape)
    res_abs = rel * norm
    constant = rng.uniform(0.5, 4.0, (SEEDS, LAYERS))
    bound = constant[:, None, :] * res_abs[..., :-1] ** 3
    return {
        "dong/residual": rel,
        "dong/residual_abs": res_abs,
        "dong/constant": constant,
        "dong/bound": bound,
    }


def _noci_data(rng) -> dict:
    """Per (variant, depth): r_l, the token cosine `[S, L + 1]` and the per-layer gradient norms `[S, L]`.
    The unscaled residual at the last layer falls with depth, the scaled one less."""
    out = {}
    for architecture, variant in NOCI.items():
        fall = 1.0 if variant == "unscaled" else 0.3
        for depth in DEPTHS:
            layers = np.arange(depth + 1)
            r = np.exp(-fall * layers / 4)[None] * rng.uniform(0.5, 1.5, (NOCI_SEEDS, depth + 1))
            cosine = rng.uniform(0.1, 0.9, (NOCI_SEEDS, depth + 1))
            grads = {
                f"layer_grad_norm/{n}": rng.uniform(0.05, 3.0, (NOCI_SEEDS, depth))
                for n in ("query", "key", "value")
            }
            out[architecture, depth] = {"residual_fro": r, "token_cosine": cosine, **grads}
    return out


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    dong, noci = _dong_data(rng), _noci_data(rng)
    rows = _rows("dong", _spec("init", "attention_only", LAYERS), dong)
    for (architecture, depth), metrics in noci.items():
        rows += _rows(f"{architecture}-{depth}", _spec("noci", architecture, depth), metrics)
    aggregate = summary.aggregate(rows)
    view = {"runs": {k: {**run, "id": k} for k, run in aggregate["runs"].items()}}
    return dong, noci, view


def test_the_synthetic_axes_have_distinct_sizes():
    sizes = (SEEDS, EXAMPLES, LAYERS, LAYERS + 1)
    assert len(set(sizes)) == len(sizes) and min(sizes) >= 2
    assert NOCI_SEEDS != len(DEPTHS) and min(NOCI_SEEDS, len(DEPTHS)) >= 2
    assert SEEDS * EXAMPLES % 2 == 0  # an even count: a median in log space differs from one in r


def test_dong_table_is_the_median_over_seeds_and_examples_of_log_r(case):
    dong, _, view = case
    rel = dong["dong/residual"]
    got = summary.log_median_profile(summary.init(view["runs"]["dong"], "dong/residual"))
    points = rel.reshape(SEEDS * EXAMPLES, LAYERS + 1)
    median = np.array(
        [math.exp(np.median(np.log(points[:, layer]))) for layer in range(LAYERS + 1)]
    )
    np.testing.assert_allclose(got["median"], median, rtol=1e-12)
    resolved = median > RESOLVED
    assert resolved[:3].all() and not resolved.all()  # the table has unresolved layers
    logs = [-math.log(m) if ok else None for m, ok in zip(median, resolved)]
    assert got["log_inverse"][:3] == pytest.approx(logs[:3], rel=1e-12)
    assert got["log_inverse"][3:] == logs[3:]
    growth = [None] + [
        logs[k] / logs[k - 1] if logs[k] is not None and logs[k - 1] is not None else None
        for k in range(1, LAYERS + 1)
    ]
    assert [g is None for g in got["growth"]] == [g is None for g in growth]
    assert [g for g in got["growth"] if g is not None] == pytest.approx(
        [g for g in growth if g is not None], rel=1e-12
    )
    # The wrong answers differ beyond the tolerance: the median of r, the mean of log r, log10, per
    # seed only.
    wrong_median = np.median(points, axis=0)
    wrong_mean = np.exp(np.mean(np.log(points), axis=0))
    for wrong in (wrong_median, wrong_mean):
        assert np.all(np.abs(np.log(wrong[:3] / median[:3])) > 1e-6)
    assert abs(math.log10(median[1]) / math.log(median[1]) - 1) > 0.5
    assert len(np.median(np.log(rel.reshape(SEEDS, -1)), axis=0)) != LAYERS + 1


def _pairs(dong, s, lower, upper):
    """The (x, y) = (log ||res_(l-1)||, log ||res_l||) of seed s whose r_(l-1) is in [lower, upper) and above
    the floor, and r_l above it."""
    rel, res_abs = dong["dong/residual"][s], dong["dong/residual_abs"][s]
    xs, ys = [], []
    for b in range(EXAMPLES):
        for layer in range(1, LAYERS + 1):
            before, after = rel[b, layer - 1], rel[b, layer]
            if RESOLVED < before and lower <= before < upper and after > RESOLVED:
                xs.append(math.log(res_abs[b, layer - 1]))
                ys.append(math.log(res_abs[b, layer]))
    return xs, ys


def test_local_exponent_is_a_slope_per_seed_over_the_windowed_pairs(case):
    dong, _, view = case
    run = view["runs"]["dong"]
    for lower, upper in ((0.0, LOCAL_WINDOW), (SATURATED, math.inf)):
        got = summary.dong_exponent(run, lower=lower, upper=upper)
        slopes, pairs = [], []
        for s in range(SEEDS):
            xs, ys = _pairs(dong, s, lower, upper)
            assert len(xs) >= 2
            slopes.append(lstsq_slope(xs, ys))
            pairs.append(len(xs))
        np.testing.assert_allclose(got["slopes"], slopes, rtol=1e-9)
        assert got["pairs"] == pairs
        assert_interval(got, t_interval(slopes))
    # Every pair of a seed, not the windowed ones, gives other slopes; one slope per example instead of
    # per seed another n.
    local = summary.dong_exponent(run)
    unwindowed = [lstsq_slope(*_pairs(dong, s, 0.0, math.inf)) for s in range(SEEDS)]
    assert np.all(np.abs(np.subtract(unwindowed, local["slopes"])) > 1e-3)
    assert EXAMPLES != SEEDS


def test_bound_looseness_worst_is_the_largest_ratio(case):
    dong, _, view = case
    got = summary.dong_looseness(view["runs"]["dong"])
    rel, res_abs, bound = dong["dong/residual"], dong["dong/residual_abs"], dong["dong/bound"]
    maxima, medians = [], []
    for layer in range(1, LAYERS + 1):
        keep = (rel[..., layer - 1] > RESOLVED) & (rel[..., layer] > RESOLVED)
        if keep.any():
            ratio = res_abs[..., layer][keep] / bound[..., layer - 1][keep]
            maxima.append(ratio.max())
            medians.append(np.median(ratio))
    assert len(got["rows"]) == len(maxima) >= 2
    assert got["worst"] == pytest.approx(max(maxima), rel=1e-12)
    assert got["medians"] == pytest.approx([min(medians), max(medians)], rel=1e-12)
    assert max(maxima) > 1.01 * np.mean(maxima)  # the worst, not a mean
    assert summary.dong_constant(view["runs"]["dong"]) == pytest.approx(
        np.median(dong["dong/constant"]), rel=1e-12
    )


def test_noci_trends_are_per_seed_statistics_with_an_interval_over_seeds(case):
    _, noci, view = case
    pairs = summary.noci_pairs(view)
    assert list(pairs) == ["pre-LN"]
    got = summary.depth_trends(*pairs["pre-LN"])
    assert got["depths"] == list(DEPTHS) and got["seeds"] == NOCI_SEEDS
    x = np.log2(DEPTHS)
    stats = {}
    for architecture, variant in NOCI.items():
        runs = [noci[architecture, d] for d in DEPTHS]
        r_last = np.stack([m["residual_fro"][:, -1] for m in runs], axis=1)  # [S, D]
        cosine = np.stack([m["token_cosine"][:, -1] for m in runs], axis=1)
        g = np.stack(
            [
                np.exp(
                    np.mean(
                        np.log(
                            np.sqrt(m["layer_grad_norm/query"] ** 2 + m["layer_grad_norm/key"] ** 2)
                            / m["layer_grad_norm/value"]
                        ),
                        axis=1,
                    )
                )
                for m in runs
            ],
            axis=1,
        )
        stats[variant] = {
            "rank": np.log(r_last[:, -1] / r_last[:, 0]),
            "cosine": np.array([lstsq_slope(x, c) for c in cosine]),
            "gradient": np.array([lstsq_slope(x, np.log(v)) for v in g]),
        }
        np.testing.assert_allclose(got["means"][variant]["residual"], r_last.mean(axis=0))
        np.testing.assert_allclose(got["means"][variant]["g"], g.mean(axis=0))
        # The wrong answers differ: an arithmetic mean over layers, log(depth) for log2(depth).
        arithmetic = np.stack(
            [
                np.mean(
                    np.sqrt(m["layer_grad_norm/query"] ** 2 + m["layer_grad_norm/key"] ** 2)
                    / m["layer_grad_norm/value"],
                    axis=1,
                )
                for m in runs
            ],
            axis=1,
        )
        wrong_gradient = [lstsq_slope(x, np.log(v)) for v in arithmetic]
        assert abs(np.mean(wrong_gradient) - np.mean(stats[variant]["gradient"])) > 1e-6
        natural = np.array([lstsq_slope(np.log(DEPTHS), c) for c in cosine])
        assert np.all(np.abs(natural - stats[variant]["cosine"]) > 1e-6)
        # Over depths instead of seeds: another n.
        assert len(np.log(r_last[-1] / r_last[0])) != NOCI_SEEDS
    for name in ("rank", "cosine", "gradient"):
        assert_interval(got[name]["unscaled"], t_interval(stats["unscaled"][name]))
        assert_interval(got[name]["scaled"], t_interval(stats["scaled"][name]))
        difference = stats["scaled"][name] - stats["unscaled"][name]
        assert_interval(got[name]["difference"], t_interval(difference))
    assert got["rank"]["unscaled"]["mean"] < got["rank"]["scaled"]["mean"] < 0
