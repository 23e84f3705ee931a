"""The power-iteration study: its measurements and their pieces (the contract: test_studies.py)."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ml_collections import ConfigDict

from attnjax.serialization import json_form
from configs import power_iteration as config_lib
from experiments.power_iteration import checks, dynamics, products, study
from experiments.power_iteration import summary as summary_lib
from tests.experiments.lab.test_studies import finished, power_iteration_test_config


@pytest.fixture(scope="module")
def run():
    return finished("power_iteration")


def _by_run(part, run):
    return {r["run"]: r for r in run.summary[part]}


def test_plots_and_report_sections(run):
    assert run.summary["plots"] == [
        "clusters.png",
        "fixed_matrix_rate.png",
        "products_dobrushin.png",
    ]
    report = (run.workdir / "report.md").read_text()
    assert "## (a)" in report and "## (b)" in report and "## (c)" in report
    # Predictions and sanity checks are listed apart, each under its own tally.
    assert report.index("## Predictions: 5 pass, 0 fail, 1 not measured") < report.index(
        "## Sanity checks: 8 pass, 1 fail, 0 not measured"
    )


# Every check of the test run and its verdict: the stored ones, and the checks re-run on the summary.
EXPECTED = {
    "fixed matrix: A^k -> 1 pi^T at rate |lambda_2| (tau=1)": ("sanity", "pass"),
    "Dobrushin bound (attention_only, untrained, bidirectional)": ("sanity", "pass"),
    # Attention of the untrained bidirectional model is uniform to 1e-3: the regime check fails and
    # the product prediction is not measured.
    "non-degenerate regime (attention_only, untrained, bidirectional)": ("sanity", "fail"),
    "delta(P_l) follows prod |lambda_2| (attention_only, untrained, bidirectional)": (
        "prediction",
        "not measured",
    ),
    "Dobrushin bound (attention_only, causal, at initialisation)": ("sanity", "pass"),
    "causal attention: pi_l = e_1 (attention_only, causal, at initialisation)": ("sanity", "pass"),
    "non-degenerate regime (attention_only, causal, at initialisation)": ("sanity", "pass"),
    "delta(P_l) follows prod |lambda_2| (attention_only, causal, at initialisation)": (
        "prediction",
        "pass",
    ),
    "Dobrushin bound (attention_only, causal, trained)": ("sanity", "pass"),
    "causal attention: pi_l = e_1 (attention_only, causal, trained)": ("sanity", "pass"),
    "non-degenerate regime (attention_only, causal, trained)": ("sanity", "pass"),
    "delta(P_l) follows prod |lambda_2| (attention_only, causal, trained)": ("prediction", "pass"),
    "one cluster at small beta (beta=1; SA, n=8, d=3, dt=0.1)": ("prediction", "pass"),
    "metastability: the time to one cluster grows with beta (SA, n=8, d=3, dt=0.1)": (
        "prediction",
        "pass",
    ),
    "metastability: more clusters at larger beta (t=20; SA, n=8, d=3, dt=0.1)": (
        "prediction",
        "pass",
    ),
}


def test_every_check_has_its_expected_verdict(run):
    for records in (run.summary["predictions"], json_form(checks.predictions(run.summary))):
        assert {p["name"]: (p["kind"], p["verdict"]) for p in records} == EXPECTED


def test_fixed_matrix_rate_matches_slem(run):
    check = next(p for p in run.summary["predictions"] if p["name"].startswith("fixed matrix"))
    assert check["verdict"] == "pass" and check["measured"] <= 0.1
    fixed = _by_run("fixed", run)["fixed-t1"]
    for m in fixed["matrices"]:
        assert m["floor_reached"] and abs(m["rate"] / m["slem"] - 1) <= 0.1
    # The figure's curves: d(k) up to a few steps past the last fitted one.
    assert len(fixed["distance"]) == 2
    assert all(
        len(d) == max(m["fit_end"] for m in fixed["matrices"]) + 6 for d in fixed["distance"]
    )


def test_products_and_clusters_summaries(run):
    clusters = _by_run("clusters", run)
    assert clusters["clusters-b1"]["final_clusters"] == [1.0, 1.0]
    assert min(clusters["clusters-b8"]["final_clusters"]) >= 2
    assert clusters["clusters-b8"]["time_to_one"] == [None, None]
    assert len(clusters["clusters-b1"]["clusters_curve"]) == 51  # steps / measure_every + 1
    trained = _by_run("products", run)["products-trained-causal-attention_only"]
    assert len(trained["eval_accuracy"]) == 1 and trained["chance_accuracy"] > 0
    seeds = trained["phases"]["trained"]["seeds"]
    assert np.asarray(seeds["delta"]).shape == (1, 2)  # [seeds, layers]
    np.testing.assert_allclose(
        np.mean(seeds["slem_bound"], axis=0), trained["phases"]["trained"]["mean"]["slem_bound"]
    )


def test_a_summary_written_before_derive_is_completed_to_the_runners(run):
    """`add_derived` of a summary.json written before `derive` existed (the raw aggregate of the rows, with
    the runner's config, predictions and plots) gives the summary the runner writes now."""
    config = power_iteration_test_config()
    rows = [json.loads(line) for line in (run.workdir / "metrics.jsonl").read_text().splitlines()]
    in_spec_order = [
        row for spec in study.specs(config) for row in rows if row["run"] == spec.run_id
    ]
    runner = {k: run.summary[k] for k in ("config", "predictions", "plots")}
    old = json_form({**summary_lib.aggregate(in_spec_order, config), **runner})
    assert "ratio_span" not in old and "phase_order" not in old["products"][0]
    assert summary_lib.add_derived(old) == run.summary
    assert summary_lib.add_derived(run.summary) == run.summary


def test_config_variants():
    assert config_lib.get_config().fixed.tolerance == 0.1
    assert (
        config_lib.get_config("smoke").products.train.steps
        < config_lib.get_config().products.train.steps
    )


# --------------------------------------------------------------------------
# The pieces, against float64 NumPy references


def test_fit_rate_recovers_a_geometric_rate():
    k = np.arange(120, dtype=np.float64)
    fit = study.fit_rate(3.0 * 0.7**k + 0.5 * 0.2**k, floor=1e-12)
    # 3 * 0.7^k first falls below 1e-12 at k = 81: the fit spans k = 40..80.
    assert fit["floor_reached"] and (fit["fit_start"], fit["fit_end"]) == (40, 80)
    assert abs(fit["rate"] - 0.7) < 1e-6
    assert math.isnan(study.fit_rate(np.array([1.0, 1e-20, 0.0]), floor=1e-12)["rate"])


def test_distance_to_limit_matches_matrix_powers():
    rng = np.random.default_rng(0)
    a = rng.random((5, 5))
    a /= a.sum(axis=1, keepdims=True)
    w, v = np.linalg.eig(a.T)
    pi = np.real(v[:, np.argmax(np.real(w))])
    pi /= pi.sum()
    got = study.distance_to_limit(jnp.asarray(a), jnp.asarray(pi), 6)
    want = [
        0.5 * np.max(np.abs(np.linalg.matrix_power(a, k) - pi[None, :]).sum(axis=1))
        for k in range(7)
    ]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-14)


def _sphere_velocity_reference(x, beta, variant):
    w = np.exp(beta * x @ x.T)
    w = w / w.sum(axis=1, keepdims=True) if variant == "SA" else w / len(x)
    v = w @ x
    return v - np.sum(x * v, axis=1, keepdims=True) * x


@pytest.mark.parametrize("variant", dynamics.VARIANTS)
def test_sphere_velocity_matches_reference(variant):
    x = np.random.default_rng(1).normal(size=(6, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    want = _sphere_velocity_reference(x, 2.5, variant)
    got = np.asarray(dynamics.sphere_velocity(jnp.asarray(x), 2.5, variant))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.sum(got * x, axis=1), 0.0, atol=1e-14)  # tangent to the sphere
    step = np.asarray(dynamics.sphere_step(jnp.asarray(x), 2.5, 0.1, variant))
    y = x + 0.1 * want
    np.testing.assert_allclose(step, y / np.linalg.norm(y, axis=1, keepdims=True), rtol=1e-12)


def test_sphere_dynamics_two_tokens_merge_and_bad_input_raises():
    # Two tokens at angle theta: by symmetry theta' = -2 w sin(theta), w = e^(b cos) / (e^b + e^(b cos)) (SA);
    # they merge, the smallest cosine rises to 1 and the count drops from 2 to 1.
    theta = 2.0
    x0 = jnp.asarray([[1.0, 0.0, 0.0], [np.cos(theta), np.sin(theta), 0.0]])
    out = jax.tree.map(
        np.asarray,
        dynamics.sphere_dynamics(
            x0, 1.0, 0.01, 1e-2, variant="SA", num_measures=40, measure_every=100
        ),
    )
    assert out["clusters"][0] == 2 and out["clusters"][-1] == 1
    assert np.all(np.diff(out["min_cosine"]) >= -1e-12) and out["min_cosine"][-1] > 1 - 1e-4
    with pytest.raises(ValueError, match=r"x must be \[n, d\].*shape \(4,\)"):
        dynamics.sphere_velocity(jnp.ones((4,)), 1.0)
    with pytest.raises(ValueError, match="variant must be one of"):
        dynamics.sphere_velocity(x0, 1.0, "sa")


def test_time_to_one_cluster():
    times = np.arange(5) * 2.0
    assert summary_lib.time_to_one([3, 2, 1, 1, 1], times) == 4.0
    assert summary_lib.time_to_one([3, 1, 2, 1, 1], times) == 6.0  # from the last time it was not 1
    assert summary_lib.time_to_one([3, 2, 2, 1, 2], times) is None


def test_count_clusters_uses_single_linkage():
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = np.repeat(centres, 3, axis=0) + 1e-3 * np.arange(9, dtype=np.float64)[:, None]
    assert int(dynamics.count_clusters(jnp.asarray(x), 0.1)) == 3
    chain = np.array([[0.0], [0.5], [1.0], [1.5], [5.0]])  # 0-1.5 linked step by step, 5 alone
    assert int(dynamics.count_clusters(jnp.asarray(chain), 0.6)) == 2
    assert int(dynamics.count_clusters(jnp.asarray(chain), 0.4)) == 5


def test_attention_products_bound_and_causal_limit():
    key = jax.random.key(0)
    logits = 3.0 * jax.random.normal(key, (4, 2, 3, 6, 6), jnp.float64)  # [L, B, H, T, T]
    causal = jnp.tril(jnp.ones((6, 6), bool))
    for mask in (None, causal):
        weights = jax.nn.softmax(
            logits if mask is None else jnp.where(mask, logits, -jnp.inf), axis=-1
        )
        out = jax.tree.map(np.asarray, products.attention_products(weights, jnp.float64))
        assert out["mean"]["delta"].shape == (2, 4) and out["head"]["delta"].shape == (2, 3, 4)
        for chain in ("mean", "head"):
            assert np.all(out[chain]["delta"] <= out[chain]["bound"] + 1e-12)
            assert np.all(np.diff(out[chain]["delta"], axis=-1) <= 1e-12)
        if mask is not None:
            assert np.all(out["mean"]["absorbing"] == 1)
            np.testing.assert_allclose(out["mean"]["pi_first"], 1.0, atol=1e-10)
        a = (
            np.asarray(weights, np.float64).mean(axis=2).transpose(1, 0, 2, 3)
        )  # head-averaged [B, L, T, T]
        lam = np.sort(np.abs(np.linalg.eigvals(a)), axis=-1)[..., -2]
        np.testing.assert_allclose(out["mean"]["slem"], lam, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(
            out["mean"]["slem_bound"], np.cumprod(lam, axis=-1), rtol=1e-8, atol=1e-12
        )
        entropy = -np.sum(
            np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0), axis=-1
        ) / np.log(6)
        np.testing.assert_allclose(out["mean"]["entropy"], entropy.mean(axis=-1), rtol=1e-10)


# --------------------------------------------------------------------------
# Each prediction fails where its claim does not hold (synthetic summaries)


def _products_run(delta, slem_bound, bound, entropy=(0.5, 0.5, 0.5)):
    """A products run with one phase ('trained'), one seed and one head, layers as given, with its
    derived numbers (`summary.derive_products`)."""
    layers = len(delta)
    zeros = [0.0] * layers
    chain = {
        "entropy": list(entropy),
        "tau": [0.9] * layers,
        "delta": list(delta),
        "bound": list(bound),
        "slem_bound": list(slem_bound),
        "tv_to_pi": zeros,
        "absorbing": [1.0] * layers,
        "bound_excess": zeros,
        "monotone_excess": zeros[1:],
        "pi_first_gap": zeros,
    }
    per_head = {
        k: [v] if k in ("delta", "bound", "tv_to_pi", "absorbing") else v for k, v in chain.items()
    }
    raw = {
        "spec": {"architecture": "toy"},
        "seq_len": 8,
        "dtype": "float64",
        "phases": {
            "trained": {
                "mean": chain,
                "head": per_head,
                "seeds": {"delta": [delta], "slem_bound": [slem_bound], "bound": [bound]},
            }
        },
    }
    return summary_lib.derive_products(raw)


def _verdict(record):
    return record["verdict"]


def test_product_prediction_fails_when_delta_leaves_the_lambda_product():
    follows = _products_run([0.9, 0.3, 0.1], [0.5, 0.1, 0.02], [0.9, 0.8, 0.7])  # ratios 3, 5
    assert _verdict(checks._lambda_check(follows, "trained", 10.0)) == "pass"
    # delta follows prod tau instead: 0.5 / 0.02 = 25 > 10 at layer 3.
    leaves = _products_run([0.9, 0.6, 0.5], [0.5, 0.1, 0.02], [0.9, 0.8, 0.7])
    record = checks._lambda_check(leaves, "trained", 10.0)
    assert _verdict(record) == "fail" and record["measured"] == pytest.approx(np.log10(25))
    below = _products_run(
        [0.9, 0.01, 0.001], [0.5, 0.3, 0.2], [0.9, 0.8, 0.7]
    )  # 0.001 / 0.2 = 1/200
    assert _verdict(checks._lambda_check(below, "trained", 10.0)) == "fail"
    # Layer 1 is left out (delta(P_1) = tau(A_1) is no product), and so are unresolved layers.
    assert (
        _verdict(
            checks._lambda_check(
                _products_run([0.9, 1e-14, 0.0], [0.01, 1e-3, 0.0], [0.9] * 3), "trained", 10.0
            )
        )
        == "not measured"
    )
    # A degenerate regime (uniform attention) is not evaluated, and the regime check says so.
    uniform = _products_run(
        [0.9, 0.3, 0.1], [0.5, 0.1, 0.02], [0.9, 0.8, 0.7], entropy=(0.999, 0.999, 0.999)
    )
    assert _verdict(checks._lambda_check(uniform, "trained", 10.0)) == "not measured"
    assert _verdict(checks._regime_check(uniform, "trained")) == "fail"
    assert _verdict(checks._regime_check(follows, "trained")) == "pass"


def _cluster_run(beta, final, time_to_one, probe, horizon=100.0):
    return {
        "beta": beta,
        "final_clusters": final,
        "time_to_one": time_to_one,
        "probe_clusters": probe,
        "horizon": horizon,
        "probe_time": 10.0,
    }


def _cluster_verdicts(runs):
    config = ConfigDict({"clusters": {"variant": "SA", "num_tokens": 8, "dim": 3, "dt": 0.1}})
    return [_verdict(r) for r in checks._cluster_checks(config, summary_lib.derive_clusters(runs))]


def test_cluster_predictions_fail_where_the_claims_do_not_hold():
    paper = [
        _cluster_run(1.0, [1, 1], [5.0, 7.0], [1, 1]),
        _cluster_run(4.0, [1, 1], [50.0, 60.0], [2, 3]),
        _cluster_run(8.0, [2, 1], [None, 90.0], [4, 4]),
    ]
    assert _cluster_verdicts(paper) == ["pass", "pass", "pass"]
    # No single cluster at small beta by the horizon.
    stuck = [_cluster_run(1.0, [2, 1], [None, 7.0], [2, 1])] + paper[1:]
    assert _cluster_verdicts(stuck)[0] == "fail"
    # The time to one cluster falls with beta, and so does the count at the probe time.
    reversed_betas = [dict(r, beta=b) for r, b in zip(paper, (8.0, 4.0, 1.0))]
    assert _cluster_verdicts(reversed_betas)[1:] == ["fail", "fail"]
    # Every beta merges at once: no metastable state, one cluster at the probe time everywhere.
    flat = [_cluster_run(b, [1, 1], [5.0, 5.0], [1, 1]) for b in (1.0, 4.0, 8.0)]
    assert _cluster_verdicts(flat) == ["pass", "fail", "fail"]
