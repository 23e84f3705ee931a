"""The power-iteration study: its measurements and their pieces (the contract: test_studies.py)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import power_iteration as config_lib
from experiments.power_iteration import dynamics, study
from tests.test_studies import finished


@pytest.fixture(scope="module")
def run():
    return finished("power_iteration")


def _by_run(part, run):
    return {r["run"]: r for r in run.summary[part]}


def test_plots_and_report_sections(run):
    assert run.summary["plots"] == ["clusters.png", "fixed_matrix_rate.png", "products_dobrushin.png"]
    report = (run.workdir / "report.md").read_text()
    assert "## (a)" in report and "## (b)" in report and "## (c)" in report


def test_fixed_matrix_rate_matches_slem(run):
    check = next(p for p in run.summary["predictions"] if p["name"].startswith("fixed matrix"))
    assert check["verdict"] == "pass" and check["measured"] <= 0.1
    fixed = _by_run("fixed", run)["fixed-t1"]
    for m in fixed["matrices"]:
        assert m["floor_reached"] and abs(m["rate"] / m["slem"] - 1) <= 0.1
    # The figure's curves: d(k) up to a few steps past the last fitted one.
    assert len(fixed["distance"]) == 2
    assert all(len(d) == max(m["fit_end"] for m in fixed["matrices"]) + 6 for d in fixed["distance"])


def test_dobrushin_and_cluster_checks_pass(run):
    dobrushin = [p for p in run.summary["predictions"] if p["name"].startswith("Dobrushin bound")]
    assert len(dobrushin) == 3 and all(p["verdict"] == "pass" for p in dobrushin)  # untrained, init, trained
    clusters = _by_run("clusters", run)
    assert clusters["clusters-t4"]["final_clusters"] == [1.0, 1.0]
    assert min(clusters["clusters-t0.05"]["final_clusters"]) >= 2
    assert len(clusters["clusters-t4"]["clusters_curve"]) == 31  # steps + 1
    trained = _by_run("products", run)["products-trained-causal-attention_only"]
    assert len(trained["eval_accuracy"]) == 1 and trained["chance_accuracy"] > 0


def test_config_variants():
    assert config_lib.get_config().fixed.tolerance == 0.1
    assert config_lib.get_config("smoke").products.train.steps < config_lib.get_config().products.train.steps


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
    want = [0.5 * np.max(np.abs(np.linalg.matrix_power(a, k) - pi[None, :]).sum(axis=1)) for k in range(7)]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-14)


def test_self_attention_step_matches_reference():
    x = np.random.default_rng(1).normal(size=(6, 3))
    logits = x @ x.T / np.sqrt(3) / 0.5
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    want = (weights / weights.sum(axis=1, keepdims=True)) @ x
    np.testing.assert_allclose(np.asarray(dynamics.self_attention_step(jnp.asarray(x), 0.5)), want, rtol=1e-10)


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
        weights = jax.nn.softmax(logits if mask is None else jnp.where(mask, logits, -jnp.inf), axis=-1)
        out = jax.tree.map(np.asarray, study.attention_products(weights, jnp.float64))
        assert out["mean"]["delta"].shape == (2, 4) and out["head"]["delta"].shape == (2, 3, 4)
        for chain in ("mean", "head"):
            assert np.all(out[chain]["delta"] <= out[chain]["bound"] + 1e-12)
            assert np.all(np.diff(out[chain]["delta"], axis=-1) <= 1e-12)
        if mask is not None:
            assert np.all(out["mean"]["absorbing"] == 1)
            np.testing.assert_allclose(out["mean"]["pi_first"], 1.0, atol=1e-10)
