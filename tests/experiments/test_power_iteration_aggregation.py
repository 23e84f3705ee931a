"""The power-iteration study's aggregation (`summary.aggregate`, `summary.derive`) on synthetic rows whose
axes have distinct sizes (2 temperatures of 7 matrices; 5 seeds, 6 heads, 8 layers and a rate window of 4
layers; 3 betas of 11 seeds and 9 tabulated times), against numbers computed here with NumPy from the
module docstrings' equations.

With every axis of a different size, a mean over the wrong axis has the wrong length and an interval over
the wrong axis the wrong `n`; the data are drawn so that a mean taken for a worst case (or the reverse), a
median taken as a mean and a log in another base also give other numbers (asserted below, so the test
can tell).
"""

import math

import numpy as np
import pytest

from configs import power_iteration as power_iteration_config
from experiments.lab import models
from experiments.power_iteration import summary
from experiments.power_iteration.constants import BRIEFLY_TRAINED, UNIFORM_CAUSAL_SLEM
from experiments.power_iteration.products import uniform_causal_chain
from tests.intervals import assert_interval, t_interval

TEMPERATURES, MATRICES, STEPS = (0.5, 2.0), 7, 60
SEEDS, HEADS, LAYERS = 5, 6, 8
WINDOW = list(range(LAYERS // 2 + 1, LAYERS + 1))  # layers 5..8 (1-based)
BETAS, CLUSTER_SEEDS = (2.0, 1.0, 4.0), 11  # run order is not beta order
MEASURE_EVERY, DT, CLUSTER_STEPS, PROBE = 10, 0.1, 15_000, 20.0  # times 0, 1, ..., 1500
GRID = [0, 1, 3, 10, 30, 100, 300, 1000, 1500]  # CLUSTER_GRID up to the horizon, and the horizon
METRICS = ("tau", "delta", "bound", "slem", "slem_bound", "log_delta", "log_slem", "log_tau")
METRICS += ("entropy", "tv_to_pi", "pi_first", "absorbing")
WORST = ("bound_excess", "monotone_excess", "pi_first_gap", "delta_min")
PHASES = {"untrained": ("untrained", "init"), "trained": ("trained",)}


def _config():
    config = power_iteration_config.get_config("smoke")
    config.fixed.update(temperatures=TEMPERATURES, num_matrices=MATRICES, steps=STEPS)
    config.products.update(num_layers=LAYERS, num_seeds=SEEDS)
    config.clusters.update(
        betas=BETAS,
        num_seeds=CLUSTER_SEEDS,
        steps=CLUSTER_STEPS,
        measure_every=MEASURE_EVERY,
        dt=DT,
        probe_time=PROBE,
    )
    return config


def _chain(rng, shape) -> dict:
    """Per-seed metrics of one chain, `shape + [L]` each, with log_delta = log delta etc."""
    m = {k: rng.uniform(0.05, 0.95, (*shape, LAYERS)) for k in METRICS}
    for k in ("delta", "slem", "tau"):
        m[f"log_{k}"] = np.log(m[k])
    m["absorbing"] = rng.integers(1, 3, (*shape, LAYERS)).astype(np.float64)
    return m


def _worst(rng) -> dict:
    """The worst cases of one chain, `[S, L]` (`[S, L - 1]` for monotonicity)."""
    return {
        "bound_excess": rng.normal(-0.1, 0.1, (SEEDS, LAYERS)),
        "monotone_excess": rng.normal(-0.1, 0.1, (SEEDS, LAYERS - 1)),
        "pi_first_gap": rng.exponential(1e-12, (SEEDS, LAYERS)),
        "delta_min": rng.uniform(0.01, 0.5, (SEEDS, LAYERS)),
    }


def _phase(rng) -> dict:
    return {
        "mean": {**_chain(rng, (SEEDS,)), **_worst(rng)},
        "head": {**_chain(rng, (SEEDS, HEADS)), **_worst(rng)},
    }


def _counts(first) -> np.ndarray:
    """Cluster counts `[seeds, 1501]`: 2 + (k - t) // 50 before the first time k at one cluster, then
    1 (a `first` past the horizon: never one cluster)."""
    t = np.arange(CLUSTER_STEPS // MEASURE_EVERY + 1)
    return np.stack([np.where(t >= k, 1, 2 + (k - t) // 50) for k in first]).astype(np.float64)


def _data(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    fixed = []
    for _ in TEMPERATURES:
        slem = rng.uniform(0.2, 0.8, MATRICES)
        fixed.append(
            {
                "slem": slem,
                "rate": slem * (1 + rng.normal(0, 0.08, MATRICES)),
                "vector_rate": slem * (1 + rng.normal(0, 0.01, MATRICES)),
                "fit_end": rng.integers(10, 30, MATRICES),
                "distance": rng.uniform(0, 1, (MATRICES, STEPS + 1)),
            }
        )
    products = {run: {p: _phase(rng) for p in phases} for run, phases in PHASES.items()}
    accuracy = rng.uniform(0.2, 0.6, SEEDS)
    final = {
        "eval_accuracy": accuracy,
        "eval_loss": rng.uniform(1, 3, SEEDS),
        "mode_accuracy": accuracy - rng.uniform(-0.05, 0.2, SEEDS),
        "chance_accuracy": np.full(SEEDS, 0.125),
        "diverged": np.zeros(SEEDS),
    }
    # Times to one cluster (index = time): skewed; at the largest beta two seeds never get there.
    first = {
        1.0: rng.integers(5, 40, CLUSTER_SEEDS),
        2.0: rng.integers(20, 200, CLUSTER_SEEDS),
        4.0: np.concatenate([rng.integers(50, 300, CLUSTER_SEEDS - 2), [9999, 9999]]),
    }
    first[4.0][0] = 1490  # a long tail: the mean time is far from the median
    return {"fixed": fixed, "products": products, "final": final, "first": first}


def _rows(d: dict) -> list[dict]:
    rows = []
    for temperature, f in zip(TEMPERATURES, d["fixed"]):
        base = {"run": f"fixed-{temperature}", "part": "fixed", "temperature": temperature}
        for i in range(MATRICES):
            values = {
                "slem": f["slem"][i],
                "rate": f["rate"][i],
                "fit_start": 2,
                "fit_end": int(f["fit_end"][i]),
                "floor_reached": bool(i % 2),
                "vector_rate": f["vector_rate"][i],
            }
            rows += [{**base, "matrix": i, "metric": k, "value": v} for k, v in values.items()]
            rows.append({**base, "matrix": i, "metric": "distance", "values": f["distance"][i]})
    for run, phases in d["products"].items():
        trained = run == "trained"
        base = {"run": run, "part": "products", "temperature": 1.0}
        base |= {"architecture": "skip_mlp", "trained": trained}
        for phase, chains in phases.items():
            for seed in range(SEEDS):
                for chain, metrics in chains.items():
                    rows += [
                        {**base, "phase": phase, "seed": seed, "chain": chain, "metric": k}
                        | {"values": v[seed]}
                        for k, v in metrics.items()
                    ]
        if trained:
            rows += [
                {**base, "phase": "trained", "seed": seed, "metric": k, "value": v[seed]}
                for k, v in d["final"].items()
                for seed in range(SEEDS)
            ]
    for beta in BETAS:
        base = {"run": f"clusters-{beta}", "part": "clusters", "beta": beta}
        counts = _counts(d["first"][beta])
        rows += [
            {**base, "seed": s, "metric": k, "values": v}
            for s in range(CLUSTER_SEEDS)
            for k, v in (("clusters", counts[s]), ("min_cosine", np.zeros(counts.shape[1])))
        ]
    return rows


@pytest.fixture(scope="module")
def case():
    d = _data()
    return d, summary.summarize(_rows(d), _config())


def test_the_synthetic_axes_have_distinct_sizes():
    sizes = (len(TEMPERATURES), len(BETAS), len(WINDOW), SEEDS, HEADS, MATRICES, LAYERS)
    sizes += (len(GRID), CLUSTER_SEEDS)
    assert len(set(sizes)) == len(sizes) and min(sizes) >= 2


def test_fixed_runs_keep_each_matrix_and_the_worst_relative_error(case):
    d, s = case
    assert [run["temperature"] for run in s["fixed"]] == list(TEMPERATURES)
    worst = []
    for run, f in zip(s["fixed"], d["fixed"]):
        rel = f["rate"] / f["slem"] - 1
        assert len(run["matrices"]) == MATRICES
        np.testing.assert_allclose([m["rel_error"] for m in run["matrices"]], rel, rtol=1e-12)
        assert [m["passed"] for m in run["matrices"]] == list(np.abs(rel) <= 0.1)
        assert run["failed"] == int(np.sum(np.abs(rel) > 0.1))
        assert run["worst_rel_error"] == pytest.approx(np.max(np.abs(rel)), rel=1e-12)
        assert np.max(np.abs(rel)) > 1.5 * np.mean(np.abs(rel))  # a mean would differ
        end = int(np.max(f["fit_end"])) + summary.PLOT_MARGIN
        np.testing.assert_array_equal(run["distance"], f["distance"][:, : end + 1])
        worst.append(np.max(np.abs(rel)))
    assert s["fixed_worst"] == pytest.approx(max(worst), rel=1e-12)


def test_products_means_over_seeds_and_worst_cases_over_seeds(case):
    d, s = case
    runs = {run["run"]: run for run in s["products"]}
    assert runs.keys() == PHASES.keys()
    for name, phases in d["products"].items():
        run = runs[name]
        assert run["phase_order"] == list(PHASES[name])
        assert run["seq_len"] == models.make_task(_config().products.task).seq_len
        for phase, chains in phases.items():
            got = run["phases"][phase]
            for chain, metrics in chains.items():
                for k in METRICS:  # means over seeds: [L] head-averaged, [H, L] per head
                    np.testing.assert_allclose(got[chain][k], metrics[k].mean(0), rtol=1e-12)
                for k in ("bound_excess", "monotone_excess", "pi_first_gap"):  # the worst seed
                    np.testing.assert_allclose(got[chain][k], metrics[k].max(0), rtol=1e-12)
                    assert np.all(metrics[k].max(0) > metrics[k].mean(0))
                np.testing.assert_allclose(
                    got[chain]["delta_min"], metrics["delta_min"].min(0), rtol=1e-12
                )
            for k in summary.PER_SEED:  # the head-averaged chain of every seed
                np.testing.assert_allclose(got["seeds"][k], chains["mean"][k], rtol=1e-12)


def test_phase_numbers_take_the_worst_over_chains_and_layers(case):
    d, s = case
    for name, phases in d["products"].items():
        (run,) = [r for r in s["products"] if r["run"] == name]
        for phase, chains in phases.items():
            derived = run["phases"][phase]["derived"]
            assert derived["layers"] == LAYERS
            worst = {
                k: max(
                    np.max(c[k].max(0)[1 if k == "bound_excess" else 0 :]) for c in chains.values()
                )
                for k in ("bound_excess", "monotone_excess", "pi_first_gap")
            }
            for k, v in worst.items():
                assert derived[k] == pytest.approx(v, rel=1e-12)
            layer_means = max(np.mean(c["pi_first_gap"].max(0)) for c in chains.values())
            assert worst["pi_first_gap"] > 1.2 * layer_means  # the worst layer, not a mean
            absorbing = max(np.max(c["absorbing"].mean(0)) for c in chains.values())
            assert derived["absorbing_max"] == pytest.approx(absorbing, rel=1e-12)
            entropy = chains["mean"]["entropy"].mean(0)
            np.testing.assert_allclose(derived["entropy"], [entropy.min(), entropy.max()])
            head = chains["head"]
            assert len(derived["rows"]) == LAYERS
            for layer, row in enumerate(derived["rows"]):
                delta = head["delta"].mean(0)[:, layer]  # [H]: each head's mean over seeds
                np.testing.assert_allclose(
                    row["head_delta"], [delta.mean(), delta.min(), delta.max()], rtol=1e-12
                )
                for key, metric in (
                    ("head_bound", "bound"),
                    ("head_tv", "tv_to_pi"),
                    ("head_absorbing", "absorbing"),
                ):
                    want = head[metric].mean(0)[:, layer].mean()
                    assert row[key] == pytest.approx(want, rel=1e-12)


def test_rate_hypothesis_is_an_interval_over_seeds_of_means_over_the_window(case):
    d, s = case
    (run,) = [r for r in s["products"] if r["run"] == "trained"]
    mean = d["products"]["trained"]["trained"]["mean"]
    rate = run["phases"]["trained"]["derived"]["rate"]
    idx = np.asarray(WINDOW) - 1
    log_rate = mean["log_delta"][:, idx] - mean["log_delta"][:, idx - 1]  # [S, W]
    excess = log_rate - mean["log_slem"][:, idx]
    assert rate["window"] == [WINDOW[0], WINDOW[-1]] and rate["units"] == SEEDS
    assert_interval(rate["excess"], t_interval(excess.mean(1)))
    np.testing.assert_allclose(rate["per_seed"], excess.mean(1), rtol=1e-12)
    np.testing.assert_allclose(rate["layer_excess"], excess.mean(0), rtol=1e-12)
    assert_interval(rate["tau_excess"], t_interval((log_rate - mean["log_tau"][:, idx]).mean(1)))
    uniform = log_rate - math.log(UNIFORM_CAUSAL_SLEM)
    assert_interval(rate["uniform_excess"], t_interval(uniform.mean(1)))
    x = mean["log_slem"][:, idx] - mean["log_slem"][:, idx].mean(1, keepdims=True)
    y = log_rate - log_rate.mean(1, keepdims=True)
    assert_interval(rate["slope"], t_interval(np.sum(x * y, 1) / np.sum(x * x, 1)))
    chain = uniform_causal_chain(run["seq_len"], LAYERS, 100 * run["tolerance"])
    ref = [chain["excess"][i] for i in idx]
    assert rate["epsilon"] == pytest.approx(max(abs(r) for r in ref), rel=1e-12)
    distance = np.max(np.abs(excess.mean(0) - np.asarray(ref)))
    assert rate["reference_distance"] == pytest.approx(distance, rel=1e-12)
    assert rate["resolved"] == bool(
        np.min(mean["delta_min"][:, idx[0] - 1 :]) > 100 * run["tolerance"]
    )


def test_training_numbers_are_intervals_over_seeds(case):
    d, s = case
    (run,) = [r for r in s["products"] if r["run"] == "trained"]
    f, t = d["final"], run["training"]
    assert_interval(t["accuracy"], t_interval(f["eval_accuracy"]))
    assert_interval(t["mode"], t_interval(f["mode_accuracy"]))
    assert_interval(t["margin"], t_interval(f["eval_accuracy"] - f["mode_accuracy"]))
    assert t["chance"] == 0.125
    # Fewer than MIN_UNITS seeds: no verdict that the model beats the baseline.
    assert t["beats_mode"] is False
    assert run["phases"]["trained"]["derived"]["label"] == BRIEFLY_TRAINED


def test_clusters_are_summarised_over_seeds_per_beta(case):
    d, s = case
    runs = s["clusters"]
    assert [r["beta"] for r in runs] == list(BETAS)
    for run in runs:
        first = d["first"][run["beta"]]
        counts = _counts(first)
        np.testing.assert_allclose(run["times"], GRID, rtol=1e-12)
        np.testing.assert_allclose(run["clusters_mean"], counts[:, GRID].mean(0), rtol=1e-12)
        np.testing.assert_array_equal(run["clusters_min"], counts[:, GRID].min(0))
        np.testing.assert_array_equal(run["clusters_max"], counts[:, GRID].max(0))
        np.testing.assert_allclose(run["clusters_curve"], counts.mean(0), rtol=1e-12)
        assert run["probe_time"] == pytest.approx(PROBE, rel=1e-12)
        assert run["probe_clusters"] == counts[:, 20].tolist()
        assert run["probe_mean"] == pytest.approx(np.mean(counts[:, 20]), rel=1e-12)
        assert_interval(run["probe_interval"], t_interval(counts[:, 20]))
        assert run["final_mean"] == pytest.approx(np.mean(counts[:, -1]), rel=1e-12)
        assert run["final_max"] == np.max(counts[:, -1])
        horizon = CLUSTER_STEPS // MEASURE_EVERY
        times = [float(k) if k <= horizon else None for k in first]
        assert [t is None for t in run["time_to_one"]] == [t is None for t in times]
        got = [t for t in run["time_to_one"] if t is not None]
        np.testing.assert_allclose(got, [t for t in times if t is not None], rtol=1e-12)
        median = np.median([math.inf if t is None else t for t in times])
        assert run["median_time"] == pytest.approx(median, rel=1e-12)
    # Where the counts tell a median from a mean (skewed times) and a worst from a mean.
    curve = _counts(d["first"][4.0])
    assert not np.allclose(np.median(curve, 0), curve.mean(0))
    assert np.max(curve[:, -1]) > np.mean(curve[:, -1])
    finite = d["first"][1.0]
    assert abs(np.median(finite) - np.mean(finite)) > 0.5


def test_metastability_pairs_the_smallest_and_largest_beta_in_natural_logs(case):
    d, s = case
    small, large = d["first"][1.0], d["first"][4.0]
    horizon = CLUSTER_STEPS // MEASURE_EVERY
    ts = np.maximum(np.minimum(small, horizon), 1).astype(np.float64)
    tl = np.where(large > horizon, horizon, np.maximum(large, 1)).astype(np.float64)
    m = s["metastability"]
    assert m["units"] == CLUSTER_SEEDS and m["lower_bound"] and not m["small_censored"]
    assert_interval(m["log_time_ratio"], t_interval(np.log(tl) - np.log(ts)))
    count = _counts(large)[:, 20] - _counts(small)[:, 20]
    assert_interval(m["count_difference"], t_interval(count))
    # The middle beta in place of the largest would give another interval.
    middle = np.maximum(d["first"][2.0], 1).astype(np.float64)
    assert abs(np.mean(np.log(middle) - np.log(ts)) - m["log_time_ratio"]["mean"]) > 0.1
