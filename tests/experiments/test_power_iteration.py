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
    # The five kinds are listed apart, each under a heading that says which it is, with its count.
    headings = [
        "## Predictions: a paper's own claim, in the paper's setting (0)",
        "## Replications: a paper's own number, measured the same way (0)",
        "## Hypotheses: claims of this codebase, not evidence about any paper (3)",
        "## Sanity checks: identities, and theorems whose hypotheses hold; they fail only on a bug (8)",
        "## Not applicable: the paper's setting differs from what the run offers (0)",
    ]
    positions = [report.index(h) for h in headings]
    assert positions == sorted(positions)
    assert "| sanity | 8 | 0 | 0 | 0 |" in report and "| hypothesis | 2 | 0 | 1 | 0 |" in report


# Every check of the test run and its verdict: the stored ones, and the checks re-run on the summary.
# One products seed: the rate hypothesis is not measured (a verdict needs 10), and the trained model,
# which cannot beat the mode-of-context baseline with one seed, is named briefly trained. The
# untrained attention-only model's causal maps are U: its row is a sanity check of the measurement.
EXPECTED = {
    "fixed matrix: A^k -> 1 pi^T at rate |lambda_2| (tau=1)": ("sanity", "pass"),
    "Dobrushin bound (attention_only, untrained, bidirectional)": ("sanity", "pass"),
    "Dobrushin bound (attention_only, untrained, causal)": ("sanity", "pass"),
    "causal attention: pi_l = e_1 (attention_only, untrained, causal)": ("sanity", "pass"),
    "the products of U repeat the reference's rates (attention_only, untrained, causal)": (
        "sanity",
        "pass",
    ),
    "Dobrushin bound (attention_only, causal, briefly trained)": ("sanity", "pass"),
    "causal attention: pi_l = e_1 (attention_only, causal, briefly trained)": ("sanity", "pass"),
    "delta(P_l) / delta(P_(l-1)) = |lambda_2(A_l)| after the transient "
    "(attention_only, causal, briefly trained)": ("hypothesis", "not measured"),
    "one cluster at small beta (beta=1; SA, n=8, d=3, dt=0.1)": ("sanity", "pass"),
    "metastability: more clusters at larger beta (t=20; SA, n=8, d=3, dt=0.1)": (
        "hypothesis",
        "pass",
    ),
    "metastability: the time to one cluster grows with beta (SA, n=8, d=3, dt=0.1)": (
        "hypothesis",
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
    assert clusters["clusters-b1"]["final_clusters"] == [1.0] * 10
    assert min(clusters["clusters-b8"]["final_clusters"]) >= 2
    assert clusters["clusters-b8"]["time_to_one"] == [None] * 10
    assert len(clusters["clusters-b1"]["clusters_curve"]) == 51  # steps / measure_every + 1
    products_runs = _by_run("products", run)
    trained = products_runs["products-trained-causal-attention_only"]
    assert len(trained["eval_accuracy"]) == 1 and trained["chance_accuracy"] > 0
    assert 0 < trained["mode_accuracy"][0] <= 1 and trained["training"]["beats_mode"] is False
    seeds = trained["phases"]["trained"]["seeds"]
    assert np.asarray(seeds["delta"]).shape == (1, 2)  # [seeds, layers]
    np.testing.assert_allclose(
        np.mean(seeds["slem_bound"], axis=0), trained["phases"]["trained"]["mean"]["slem_bound"]
    )
    # The untrained model is measured without and with the mask, 4 layers deep, with the same
    # parameters: uniform attention over the visible keys scores entropy 1 in both.
    untrained = products_runs["products-untrained-attention_only"]
    assert untrained["phase_order"] == ["untrained", "init"]
    for phase in ("untrained", "init"):
        assert len(untrained["phases"][phase]["mean"]["delta"]) == 4
        assert 0.99 < untrained["phases"][phase]["derived"]["entropy"][0] <= 1 + 1e-12
    assert untrained["phases"]["init"]["derived"]["rate"]["window"] == [3, 4]
    assert untrained["phases"]["untrained"]["derived"]["rate"] is None  # bidirectional


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
    assert "metastability" not in old and "phase_order" not in old["products"][0]
    assert summary_lib.add_derived(old) == run.summary
    assert summary_lib.add_derived(run.summary) == run.summary


def test_config_variants():
    assert config_lib.get_config().fixed.tolerance == 0.1
    # Every interval of the default run is over at least 10 seeds (the protocol's minimum).
    assert config_lib.get_config().products.num_seeds >= 10
    assert config_lib.get_config().clusters.num_seeds >= 10
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
        out = jax.tree.map(
            np.asarray, products.attention_products(weights, jnp.float64, mask is not None)
        )
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
        # Entropy over the keys each row sees: log t for row t of a causal map (row 1 left out).
        h = -np.sum(np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0), axis=-1)
        if mask is None:
            want = (h / np.log(6)).mean(axis=-1)
        else:
            want = (h[..., 1:] / np.log(np.arange(2, 7))).mean(axis=-1)
        np.testing.assert_allclose(out["mean"]["entropy"], want, rtol=1e-10)
        np.testing.assert_allclose(
            np.exp(out["mean"]["log_delta"]), out["mean"]["delta"], rtol=1e-12, atol=1e-300
        )


def test_uniform_attention_over_the_visible_keys_has_entropy_one():
    """Exactly uniform causal attention scores 1 (not mean_t log t / log T = 0.72 at T = 24), as does
    uniform bidirectional attention; one-hot rows score 0."""
    t = 24
    causal = np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]
    full = np.full((t, t), 1 / t)
    one_hot = np.eye(t)
    for mats, is_causal, want in ((causal, True, 1.0), (full, False, 1.0), (one_hot, True, 0.0)):
        attention = jnp.asarray(np.broadcast_to(mats, (3, 1, 1, t, t)))  # [L, B, H, T, T]
        out = products.attention_products(attention, jnp.float64, is_causal)
        np.testing.assert_allclose(np.asarray(out["mean"]["entropy"]), want, atol=1e-12)


def test_the_uniform_causal_chain_leaves_a_transient_and_has_a_prefactor():
    """U (u_ij = 1/i, j <= i) has |lambda_2| = 1/2, but delta(U^l) / delta(U^(l-1)) is 0.88 at l = 2
    and reaches 1/2 only slowly; delta(U^l) / 2^-l tends to T - 1 (23 at T = 24), a prefactor."""
    chain = products.uniform_causal_chain(24, 40, floor=1e-13)
    excess = chain["excess"]
    assert excess[0] is None and excess[1] == pytest.approx(math.log(0.8793 / 0.5), abs=1e-3)
    early = excess[1:30]  # delta(U^30) ~ 2e-8, far above rounding
    assert all(b < a for a, b in zip(early, early[1:])) and early[-1] > 0  # decreasing to 0
    assert early[-1] == pytest.approx(0.0, abs=1e-4)
    assert chain["delta"][29] * 2**30 == pytest.approx(23.0, rel=1e-3)
    # The second half of 24 layers starts at l = 13, where U's excess is still 0.023.
    assert summary_lib.rate_window(24) == list(range(13, 25))
    assert max(abs(e) for e in excess[12:24]) == pytest.approx(0.0229, abs=5e-4)
    with pytest.raises(ValueError, match="seq_len must be >= 2"):
        products.uniform_causal_chain(1, 3)


def test_mode_accuracy_predicts_the_most_frequent_value_of_the_context():
    # Two pairs with value 7, one with 5 (N = 3); queries ask for all three keys.
    inputs = np.array([[0, 7, 1, 5, 2, 7, 2, 1, 0], [0, 4, 1, 5, 2, 6, 0, 1, 2]])
    targets = np.array([[0] * 6 + [7, 5, 7], [0] * 6 + [4, 5, 6]])
    weights = np.array([[0] * 6 + [1] * 3] * 2, np.float32)
    acc = study.mode_accuracy(inputs, targets, weights, num_pairs=3)
    # Example 2 is a three-way tie, broken toward the smallest id (4): one answer of three.
    np.testing.assert_allclose(acc, [2 / 3, 1 / 3])


# --------------------------------------------------------------------------
# Each hypothesis and prediction fails where its claim does not hold, and passes where it does
# (synthetic summaries)

T, L, SEEDS = 8, 8, 10


def _seeds(
    log_rate, log_slem=math.log(0.5), noise=1e-3, delta_min=None, seeds=SEEDS, log_tau=math.log(0.9)
):
    """Per-seed head-averaged metrics of a chain whose log delta(P_l) grows by `log_rate[l]` per layer
    (`[L]`), with |lambda_2| = exp(`log_slem`) and tau = exp(`log_tau`) (scalars: at every layer,
    or `[L]`), plus seed noise."""
    rng = np.random.default_rng(0)
    log_rate = np.asarray(log_rate, np.float64)
    log_delta = np.cumsum(log_rate)[None] + noise * rng.standard_normal((seeds, len(log_rate)))
    shape = (seeds, len(log_rate))
    return {
        "log_delta": log_delta.tolist(),
        "log_slem": np.broadcast_to(log_slem, shape).tolist(),
        "log_tau": np.broadcast_to(log_tau, shape).tolist(),
        "delta_min": (
            np.exp(log_delta) if delta_min is None else np.full(shape, delta_min)
        ).tolist(),
    }


def _reference_rates():
    """log(delta(U^l) / delta(U^(l-1))) of the uniform causal chain: a chain on which the hypothesis holds."""
    delta = products.uniform_causal_chain(T, L)["delta"]
    return [math.log(delta[0])] + [math.log(b / a) for a, b in zip(delta, delta[1:])]


def _rate_run(seeds, phase="trained", architecture="skip_mlp"):
    """A causal products phase with `seeds` and the derived rate test, as `checks._rate_check` reads it."""
    rate = summary_lib.rate_test(seeds, T, floor=1e-11)
    derived = {"label": "toy", "layers": L, "entropy": [0.5, 0.6], "rate": rate}
    return {"spec": {"architecture": architecture}, "phases": {phase: {"derived": derived}}}


def _rate_verdict(seeds):
    return checks._rate_check(_rate_run(seeds), "trained")["verdict"]


# A chain that contracts at its own |lambda_2| (0.3) from layer 2, far from tau (0.9) and from U's 1/2.
AT_LAMBDA_2 = ([math.log(0.9)] + [math.log(0.3)] * (L - 1), math.log(0.3))


def test_rate_hypothesis_passes_on_a_chain_at_its_lambda_2_that_excludes_the_competitors():
    # Every layer contracts at its own |lambda_2| (0.3), from layer 2: tau (0.9) and U's 1/2 are
    # both outside the band.
    record = checks._rate_check(_rate_run(_seeds(*AT_LAMBDA_2)), "trained")
    assert record["verdict"] == "pass" and record["kind"] == "hypothesis"
    assert abs(record["measured"]) < 1e-3
    # |lambda_2| varying from layer to layer (0.2, 0.4), the rate following it: slope 1.
    slem = np.log([0.9] + [0.2, 0.4] * (L // 2))[:L]
    varying = checks._rate_check(_rate_run(_seeds(slem, slem)), "trained")
    assert varying["verdict"] == "pass"
    assert summary_lib.rate_test(_seeds(slem, slem), T, 1e-11)["slope"]["mean"] == pytest.approx(
        1.0, abs=0.02
    )


def test_rate_hypothesis_is_not_measured_when_a_competitor_fits_as_well():
    # The uniform causal chain: |lambda_2| = 1/2 at every layer is also U's constant rate 1/2.
    record = checks._rate_check(_rate_run(_seeds(_reference_rates())), "trained")
    assert record["verdict"] == "not measured"
    assert "cannot resolve |lambda_2| from U's rate 1/2 at every layer (excess" in record["note"]
    # Dobrushin's tau (0.31) as close to the rate as |lambda_2| (0.3): not resolved either.
    close_tau = _seeds(*AT_LAMBDA_2, log_tau=math.log(0.31))
    record = checks._rate_check(_rate_run(close_tau), "trained")
    assert record["verdict"] == "not measured"
    assert "from tau(A_l), Dobrushin's rate (excess" in record["note"]
    # A constant |lambda_2| leaves the slope undefined; a rate that ignores a varying one: slope 0.
    assert summary_lib.rate_test(_seeds(*AT_LAMBDA_2), T, 1e-11)["slope"] is None
    slem = np.log([0.9] + [0.2, 0.4] * (L // 2))[:L]
    ignoring = summary_lib.rate_test(_seeds([math.log(0.3)] * L, slem), T, 1e-11)
    assert ignoring["slope"]["mean"] == pytest.approx(0.0, abs=0.02)


def test_the_untrained_attention_only_row_checks_the_measurement_against_u():
    # Its maps are U: the row is a sanity check, passing where the chain is U's ...
    run = _rate_run(_seeds(_reference_rates()), "init", "attention_only")
    record = checks._rate_check(run, "init")
    assert record["kind"] == "sanity" and record["verdict"] == "pass"
    assert record["measured"] < 0.01
    # ... and failing where the measured chain is not U's (a mismeasured delta or |lambda_2|).
    off = checks._rate_check(_rate_run(_seeds(*AT_LAMBDA_2), "init", "attention_only"), "init")
    assert off["kind"] == "sanity" and off["verdict"] == "fail"
    # The same chain of a model with skips, or of a trained attention-only model, is a hypothesis row.
    assert checks._rate_check(_rate_run(_seeds(*AT_LAMBDA_2), "init"), "init")["kind"] == (
        "hypothesis"
    )
    trained = _rate_run(_seeds(*AT_LAMBDA_2), "trained", "attention_only")
    assert checks._rate_check(trained, "trained")["kind"] == "hypothesis"


def test_rate_hypothesis_ignores_the_transient_of_the_first_half():
    # Slow (rate 0.9) in layers 2-4, at |lambda_2| = 0.3 from layer 5 on: the window is l = 5..8.
    rates = [math.log(0.9)] * 4 + [math.log(0.3)] * 4
    assert summary_lib.rate_window(L) == [5, 6, 7, 8]
    assert _rate_verdict(_seeds(rates, math.log(0.3))) == "pass"


def test_rate_hypothesis_fails_at_dobrushins_rate_and_faster_than_lambda_2():
    # The product contracts at tau = 0.9 while |lambda_2| = 1/2: excess log 1.8 >> eps.
    slow = checks._rate_check(_rate_run(_seeds([math.log(0.9)] * L)), "trained")
    assert slow["verdict"] == "fail" and slow["measured"] == pytest.approx(math.log(1.8), abs=1e-3)
    # Faster than |lambda_2| (0.2 against 0.5): the test is two-sided.
    assert _rate_verdict(_seeds([math.log(0.2)] * L)) == "fail"
    # Noise over seeds wider than eps: the interval leaves the band, the hypothesis is not shown.
    assert _rate_verdict(_seeds(_reference_rates(), noise=0.3)) == "fail"


def test_rate_hypothesis_is_not_measured_unresolved_or_with_too_few_seeds():
    resolved = _seeds(_reference_rates())
    assert _rate_verdict({**resolved, "delta_min": np.full((SEEDS, L), 1e-14).tolist()}) == (
        "not measured"
    )
    one_seed = _seeds(_reference_rates(), seeds=1)
    assert _rate_verdict(one_seed) == "not measured"
    assert summary_lib.rate_test({**one_seed, "log_delta": [[0.0]]}, T, 1e-11) is None


def test_training_numbers_call_a_model_below_the_mode_baseline_briefly_trained():
    run = {"eval_accuracy": [0.30 + 0.01 * i for i in range(10)], "chance_accuracy": 1 / 16}
    above = summary_lib.training_numbers({**run, "mode_accuracy": [0.26] * 10})
    assert above["beats_mode"] and above["mode"]["mean"] == pytest.approx(0.26)
    below = summary_lib.training_numbers({**run, "mode_accuracy": [0.40] * 10})
    assert not below["beats_mode"]
    few = {"eval_accuracy": [0.9, 0.95], "mode_accuracy": [0.26, 0.26], "chance_accuracy": 0.1}
    assert not summary_lib.training_numbers(few)["beats_mode"]  # 2 seeds: no verdict
    assert summary_lib.training_numbers({"phases": {}}) is None


def _cluster_run(beta, final, time_to_one, probe, horizon=100.0):
    return {
        "beta": beta,
        "final_clusters": final,
        "time_to_one": time_to_one,
        "probe_clusters": probe,
        "horizon": horizon,
        "time_step": 1.0,
        "probe_time": 10.0,
    }


def _cluster_verdicts(runs):
    config = ConfigDict({"clusters": {"variant": "SA", "num_tokens": 8, "dim": 3, "dt": 0.1}})
    records = checks._cluster_checks(config, summary_lib.derive_clusters(runs))
    return [(r["kind"], r["verdict"]) for r in records]


def _spread(values, n=SEEDS):
    return [values[i % len(values)] for i in range(n)]


PAPER = [
    _cluster_run(1.0, [1] * 10, _spread([5.0, 7.0, 6.0]), [1] * 10),
    _cluster_run(4.0, [1] * 10, _spread([50.0, 60.0]), _spread([2, 3])),
    _cluster_run(8.0, _spread([2, 1]), _spread([None, 90.0]), _spread([4, 3, 5])),
]


def test_cluster_rows_pass_where_the_claims_hold():
    assert _cluster_verdicts(PAPER) == [
        ("sanity", "pass"),
        ("hypothesis", "pass"),
        ("hypothesis", "pass"),
    ]


def test_cluster_rows_fail_where_the_claims_do_not_hold():
    # No single cluster at small beta by the horizon: the sanity row fails, and the time ratio
    # bounds nothing (a seed at the smallest beta never got there).
    stuck = [_cluster_run(1.0, _spread([2, 1]), _spread([None, 7.0]), _spread([2, 1]))] + PAPER[1:]
    assert _cluster_verdicts(stuck)[0] == ("sanity", "fail")
    assert _cluster_verdicts(stuck)[2] == ("hypothesis", "not measured")
    # The time to one cluster falls with beta, and so does the count at the probe time.
    falling = [
        _cluster_run(1.0, [1] * 10, _spread([80.0, 90.0]), _spread([4, 3])),
        _cluster_run(8.0, [1] * 10, _spread([5.0, 6.0]), [1] * 10),
    ]
    assert _cluster_verdicts(falling)[1:] == [("hypothesis", "fail")] * 2
    # Every beta merges at once: no metastable state, one cluster at the probe time everywhere.
    flat = [_cluster_run(b, [1] * 10, [5.0] * 10, [1] * 10) for b in (1.0, 4.0, 8.0)]
    assert _cluster_verdicts(flat) == [("sanity", "pass")] + [("hypothesis", "fail")] * 2
    # One seed of ten with a second cluster: the interval of the count difference reaches 0.
    once = [PAPER[0], dict(PAPER[2], probe_clusters=[1] * 9 + [2])]
    assert _cluster_verdicts(once)[1] == ("hypothesis", "fail")
    # Fewer than 10 seeds: the metastability rows are not measured.
    short = [
        dict(r, **{k: r[k][:4] for k in ("final_clusters", "time_to_one", "probe_clusters")})
        for r in PAPER
    ]
    assert _cluster_verdicts(short)[1:] == [("hypothesis", "not measured")] * 2
