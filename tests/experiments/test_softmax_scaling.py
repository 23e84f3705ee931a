"""The softmax-scaling study: its measurements and their pieces (the contract: test_studies.py)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax.serialization import json_form
from configs import softmax_scaling as config_lib
from experiments.softmax_scaling import checks, gradients, jacobian, rate, report, study
from experiments.softmax_scaling import summary as summary_lib
from experiments.softmax_scaling.constants import SCALINGS, STATS
from tests.experiments.lab.test_studies import finished, softmax_scaling_test_config
from tests.paths import REPO, link_from, study_page
from tests.summaries import assert_same_summary

DIMS = softmax_scaling_test_config().dims


@pytest.fixture(scope="module")
def run():
    return finished("softmax_scaling")


def test_rows_plots_and_report(run):
    assert run.summary["plots"] == [
        "gradient.png",
        "jacobian.png",
        "saturation.png",
        "variance.png",
    ]
    rows = [json.loads(line) for line in open(run.workdir / "metrics.jsonl")]
    config = softmax_scaling_test_config()
    seeds, families = config.num_seeds, len(gradients.INPUTS)
    per_dim = 2 * (1 + len(STATS)) + seeds * families * 2 * 2  # variance + stats, gradients
    assert len(rows) == len(DIMS) * per_dim + len(STATS) + seeds * len(config.rate_dims)
    assert {
        (r["d_k"], r["quantity"], r["scaling"])
        for r in rows
        if "inputs" not in r and r["part"] == "dim"
    } == {(d, q, s) for d in DIMS for q in ("variance",) + STATS for s in SCALINGS}
    assert {(r["quantity"], r["scaling"]) for r in rows if r["part"] == "limit"} == {
        (q, "scaled") for q in STATS
    }
    assert {(r["width"], r["seed"]) for r in rows if r["part"] == "rate"} == {
        (w, s) for w in config.rate_dims for s in range(seeds)
    }
    # A gradient row holds every sample's norm, so the summary can take any statistic of them.
    grad_rows = [r for r in rows if "inputs" in r]
    assert {len(r["values"]) for r in grad_rows} == {config.gradient_samples}
    report = (run.workdir / "report.md").read_text()
    assert "| 1024 |" in report and "PASS" in report and "plots/variance.png" in report


def test_report_tables_are_aligned_markdown(run):
    from experiments.lab.render import markdown_table

    assert markdown_table(["a", "b"], [[1, ""], ["x|y", 2]], align="rc", pad_empty=False) == [
        "| a | b |",
        "|---:|:---:|",
        "| 1 | |",
        "| x\\|y | 2 |",
    ]
    assert markdown_table(["a", "b"], [[1, ""]]) == ["| a | b |", "|---|---|", "| 1 |  |"]
    with pytest.raises(
        ValueError, match="align must give one of l, r, c for each of the 2 columns"
    ):
        markdown_table(["a", "b"], [], align="rx")
    report = (run.workdir / "report.md").read_text()
    assert "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|" in report
    limit = run.summary["limit"]
    assert (
        f"| ∞ (scaled) | | {limit['max_weight']:.4f} | | {limit['entropy']:.4f} | | "
        f"{limit['jacobian_spectral']:.4g} | | {limit['jacobian_frobenius']:.4g} |"
    ) in report


def test_smoke_variances_match_the_predictions(run):
    summary = run.summary
    assert summary["checks"]["variance_unscaled"]["pass"]
    assert summary["checks"]["variance_scaled"]["pass"]
    assert [row["d_k"] for row in summary["variance"]] == list(DIMS)
    for row in summary["variance"]:
        assert row["unscaled"] == pytest.approx(row["d_k"], rel=0.05)
        assert row["scaled"] == pytest.approx(1.0, rel=0.05)
        assert row["pass"]


def test_smoke_saturation_follows_the_predictions(run):
    summary = run.summary
    checks = summary["checks"]
    assert checks["scaled_saturation_constant"]["pass"]
    assert checks["unscaled_softmax_saturates"]["pass"]
    rows = {r["d_k"]: r for r in summary["saturation"]}
    log_t = np.log(summary["num_keys"])
    for row in rows.values():
        assert 0 < row["scaled"]["entropy"] < log_t
        assert row["scaled"]["jacobian_spectral"] <= row["scaled"]["jacobian_frobenius"] + 1e-12
    # By d_k = 1024 the unscaled softmax passes back less gradient than the scaled one.
    assert rows[1024]["unscaled"]["jacobian_spectral"] < rows[1024]["scaled"]["jacobian_spectral"]
    assert rows[1024]["unscaled"]["max_weight"] > 5 * rows[1024]["scaled"]["max_weight"]


def test_softmax_jacobian_and_norms_against_numpy():
    p = jax.nn.softmax(jnp.asarray([2.0, -1.0, 0.5, 0.0, 3.0], jnp.float64))
    jac = np.asarray(jacobian.softmax_jacobian(p))
    reference = np.asarray(jax.jacobian(jax.nn.softmax)(jnp.log(p)))
    np.testing.assert_allclose(jac, reference, atol=1e-12)
    spectral, frobenius = jacobian.jacobian_norms(p)
    assert float(spectral) == pytest.approx(np.linalg.norm(jac, 2), rel=1e-10)
    assert float(frobenius) == pytest.approx(np.linalg.norm(jac), rel=1e-10)
    # Saturated: p = (1 - e, e) has ||J||_2 = 2 e (1 - e), even when 1 - e rounds to 1.
    eps = 1e-20
    spectral, _ = jacobian.jacobian_norms(jnp.asarray([1.0, eps], jnp.float64))
    assert float(spectral) == pytest.approx(2 * eps, rel=1e-10)
    spectral, frobenius = jacobian.jacobian_norms(jnp.asarray([1.0, 0.0, 0.0], jnp.float64))
    assert float(spectral) == 0.0 and float(frobenius) == 0.0


@pytest.mark.parametrize("sigma", [0.1, 1.0, 10.0, 100.0, 1000.0])
def test_secular_spectral_norm_equals_numpys_on_the_jacobian(sigma):
    """||J||_2 by bisection on the secular equation against NumPy's 2-norm of J = diag(p) - p p^T,
    from moderate to saturated softmaxes (||J||_2 down to ~1e-37); ties and a one-hot p."""
    from experiments.softmax_scaling.jacobian import spectral_norm

    rng = np.random.default_rng(int(sigma * 10))
    for _ in range(8):
        p = np.asarray(jax.nn.softmax(jnp.asarray(sigma * rng.standard_normal(64), jnp.float64)))
        rest = np.array(
            [np.sum(np.delete(p, i)) for i in range(64)]
        )  # 1 - p_i without cancellation
        jac = np.diag(p * rest) - np.outer(p, p) * (1 - np.eye(64))
        want = np.linalg.norm(jac, 2)
        assert float(spectral_norm(jnp.asarray(p))) == pytest.approx(want, rel=1e-12, abs=1e-300)
    tie = jnp.asarray([0.4, 0.4, 0.2], jnp.float64)
    assert float(spectral_norm(tie)) == pytest.approx(
        np.linalg.norm(np.diag(tie) - np.outer(tie, tie), 2), rel=1e-12
    )
    assert float(spectral_norm(jnp.asarray([1.0, 0.0, 0.0], jnp.float64))) == 0.0


def test_results_do_not_depend_on_chunk_size():
    key = jax.random.key(3)
    a = study.dot_products(key, dim=8, num_samples=100, chunk_size=7)
    b = study.dot_products(key, dim=8, num_samples=100, chunk_size=100)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)


def test_config_variants():
    default, smoke = config_lib.get_config(), config_lib.get_config("smoke")
    study.specs(default)
    study.specs(smoke)
    assert min(default.dims) == 4 and max(default.dims) == 1024
    # 5% must be at least 5 standard errors of the sample variance at every d_k.
    for config in (default, smoke):
        assert all(
            config.variance_tolerance >= 5 * study.relative_standard_error(d, config.num_samples)
            for d in config.dims
        )


# The kind and verdict of every row on the test run. Flipping any one comparison in summary.py (or a
# record's verdict in checks.py) changes one of these.
EXPECTED = {
    "Var(q.k) = d_k": ("sanity", "pass"),
    "Var(q.k / sqrt(d_k)) = 1": ("sanity", "pass"),
    "scaled saturation tends to its d_k -> infinity limit": ("sanity", "pass"),
    "without the scale the softmax saturates": ("sanity", "pass"),
    "with the scale the gradient to q, K does not vanish (gaussian)": ("sanity", "pass"),
    "with the scale the gradient to q, K does not vanish (laplace)": ("sanity", "pass"),
    "without the scale the typical gradient to q, K vanishes (gaussian)": ("sanity", "pass"),
    "without the scale the typical gradient to q, K vanishes (laplace)": ("sanity", "pass"),
    "with the scale the typical gradient still vanishes when q, k share a low-rank subspace": (
        "sanity",
        "pass",
    ),
    "E||J||_2 of the unscaled softmax ~ f(0) (1 - a / sqrt(d_k)) / sqrt(d_k)": (
        "hypothesis",
        "pass",
    ),
    "without the scale, large d_k gives extremely small gradients in training": (
        "not applicable",
        "not applicable",
    ),
}


def test_every_check_has_its_expected_verdict(run):
    assert {p["name"]: (p["kind"], p["verdict"]) for p in run.summary["predictions"]} == EXPECTED
    report_text = (run.workdir / "report.md").read_text()
    headings = [
        "## Predictions: a paper's own claim, in the paper's setting (0)",
        "## Replications: a paper's own number, measured the same way (0)",
        "## Hypotheses: claims of this codebase, not evidence about any paper (1)",
        "## Sanity checks: identities and constructions; they fail only on a bug (9)",
        "## Not applicable: the paper's setting differs from what the run offers (1)",
    ]
    positions = [report_text.index(h) for h in headings]
    assert positions == sorted(positions)
    assert "| prediction | 0 | 0 | 0 | 0 |" in report_text
    assert "| not applicable | 0 | 0 | 0 | 1 |" in report_text
    # The constructions quote the footnote as an illustration; the suspicion names its evidence.
    records = {p["name"]: p for p in run.summary["predictions"]}
    vanishes = records["without the scale the typical gradient to q, K vanishes (gaussian)"]
    assert '"To illustrate why the dot products get large' in vanishes["source"]
    assert "first at d_k = 1024" in vanishes["note"]
    suspicion = records["without the scale, large d_k gives extremely small gradients in training"]
    assert "Britz et al. 2017" in suspicion["note"] and "trains none" in suspicion["note"]


def test_the_summary_reports_mean_median_and_share_above_tau(run):
    """tau is the scaled softmax's median gradient (gaussian, largest d_k) over every sample, so the
    pooled share above it there is 1/2; without the scale the median falls far below tau by
    d_k = 1024 while the mean does not fall."""
    summary = run.summary
    pooled = summary["pooled"]["gaussian"]
    assert pooled["scaled"]["grad_query"]["above"][-1] == pytest.approx(0.5, abs=0.02)
    unscaled = pooled["unscaled"]["grad_query"]
    assert summary["headline"] == {k: [v[0], v[-1]] for k, v in unscaled.items()}
    assert unscaled["median"][-1] < 0.1 * summary["tau"]["grad_query"] < unscaled["median"][0]
    assert unscaled["mean"][-1] > unscaled["mean"][0]
    stats = summary["gradient_intervals"]["gaussian"]["unscaled"]["grad_query"]
    assert set(stats) == {"mean", "median", "above"}
    assert all(x["n"] == 10 for x in stats["above"])


# Each prediction and hypothesis fails on an input where its claim does not hold, and passes where
# it does (synthetic per-seed shares above tau, `[[share per seed] per d_k]`).

SEEDS = 10


def _shares(start, end, noise=0.02):
    """Two gradients' shares above tau at the smallest and the largest d_k, per seed."""
    rng = np.random.default_rng(0)
    return {
        g: [
            list(start + noise * rng.standard_normal(SEEDS)),
            list(end + noise * rng.standard_normal(SEEDS)),
        ]
        for g in ("grad_query", "grad_key")
    }


def test_falls_passes_when_the_share_above_tau_falls_and_fails_otherwise():
    assert summary_lib.falls(_shares(0.8, 0.1))["pass"] is True
    flat = summary_lib.falls(_shares(0.5, 0.5))
    assert flat["pass"] is False and flat["high"] > 0
    assert summary_lib.falls(_shares(0.2, 0.6))["pass"] is False  # rises
    # One gradient falls, the other does not: the row needs both.
    mixed = {
        "grad_query": _shares(0.8, 0.1)["grad_query"],
        "grad_key": _shares(0.5, 0.5)["grad_key"],
    }
    assert summary_lib.falls(mixed)["pass"] is False
    # Noise wider than the fall: the interval reaches 0.
    assert summary_lib.falls(_shares(0.5, 0.45, noise=0.3))["pass"] is False
    few = {g: [v[:3] for v in by_dim] for g, by_dim in _shares(0.8, 0.1).items()}
    assert summary_lib.falls(few)["pass"] is None  # 3 seeds: not measured


def test_remedy_passes_when_the_scale_stops_the_fall_and_fails_otherwise():
    unscaled = _shares(0.8, 0.1)
    assert summary_lib.remedy(_shares(0.45, 0.5), unscaled)["pass"] is True
    # The scaled share falls as much as the unscaled one: the scale did nothing.
    same = summary_lib.remedy(_shares(0.8, 0.1), unscaled)
    assert same["pass"] is False and same["low"] == 0
    # The scaled share falls by 0.3, less than the unscaled one's 0.7: the relative rule alone
    # would pass, but the scaled gradient still vanishes.
    smaller = summary_lib.remedy(_shares(0.8, 0.5), unscaled)
    assert smaller["low"] > 0 and smaller["scaled_high"] < 0 and smaller["pass"] is False
    few = {g: [v[:3] for v in by_dim] for g, by_dim in _shares(0.45, 0.5).items()}
    assert (
        summary_lib.remedy(few, {g: [v[:3] for v in b] for g, b in unscaled.items()})["pass"]
        is None
    )


def test_first_below_finds_the_smallest_d_k_where_the_unscaled_share_is_below_the_scaled():
    """Shares per d_k (three widths): the unscaled one above the scaled at the first, about equal at
    the second and below at the third, so the crossing is the third; with the unscaled share above
    everywhere there is none."""
    rng = np.random.default_rng(2)

    def shares(*means):
        return {
            g: [list(m + 0.02 * rng.standard_normal(SEEDS)) for m in means]
            for g in ("grad_query", "grad_key")
        }

    scaled = shares(0.48, 0.49, 0.5)
    found = summary_lib.first_below(scaled, shares(0.73, 0.5, 0.3), [64, 256, 1024])
    assert found["d_k"] == 1024
    assert found["differences"]["grad_query"][0]["low"] > 0  # above at d_k = 64
    assert summary_lib.first_below(scaled, shares(0.73, 0.3, 0.3), [64, 256, 1024])["d_k"] == 256
    assert summary_lib.first_below(scaled, shares(0.73, 0.6, 0.55), [64, 256, 1024])["d_k"] is None
    # Below on average at d_k = 256 but within the seeds' spread: not yet below.
    noisy = shares(0.73, 0.5, 0.3)  # paired differences at d_k = 256: -0.25, 0.2, ... (mean -0.025)
    for g in noisy:
        noisy[g][1] = list(np.add(scaled[g][1], [-0.25, 0.2] * (SEEDS // 2)))
    wide = summary_lib.first_below(scaled, noisy, [64, 256, 1024])
    assert all(by_dim[1]["mean"] < 0 < by_dim[1]["high"] for by_dim in wide["differences"].values())
    assert wide["d_k"] == 1024
    few = {g: [v[:3] for v in by_dim] for g, by_dim in scaled.items()}
    low = {g: [[0.0] * 3 for _ in by_dim] for g, by_dim in scaled.items()}
    assert summary_lib.first_below(few, low, [64, 256, 1024])["d_k"] is None  # 3 seeds


RATE_KEYS = 64  # T of the default config


def _rate_slopes(law, noise, seed=1):
    """Per-seed slopes over the default rate widths of E||J||_2 = law(d_k) times log-normal noise."""
    widths = np.asarray(config_lib.get_config().rate_dims, np.float64)
    rng = np.random.default_rng(seed)
    return [
        rate.log_log_slope(widths, law(widths) * np.exp(noise * rng.standard_normal(widths.size)))
        for _ in range(SEEDS)
    ]


def test_rate_check_is_two_sided_around_the_derived_slope():
    """The derived law f(0) (1 - a / sqrt(d_k)) / sqrt(d_k) passes; an exact d_k^(-1/2) fails (its
    tight interval excludes the derived slope, resolved from -1/2), and so do a flat and a steeper
    law."""
    widths = config_lib.get_config().rate_dims
    predicted = rate.derived_slope(widths, RATE_KEYS)
    assert predicted - (-0.5) > 0.015  # the correction is resolved at these widths

    def derived(d):
        return rate.predicted_prefactor(d, RATE_KEYS) / np.sqrt(d)

    passing = summary_lib.rate_check(_rate_slopes(derived, 0.03), predicted)
    assert passing["pass"] is True and passing["predicted"] == predicted
    exact = summary_lib.rate_check(_rate_slopes(lambda d: d**-0.5, 0.003), predicted)
    assert exact["pass"] is False and exact["high"] < predicted
    flat = summary_lib.rate_check(_rate_slopes(lambda d: 0.1 + 0 * d, 0.03), predicted)
    assert flat["pass"] is False and flat["low"] > predicted
    assert summary_lib.rate_check(_rate_slopes(lambda d: d**-0.6, 0.03), predicted)["pass"] is False
    assert summary_lib.rate_check(_rate_slopes(derived, 0.03)[:3], predicted)["pass"] is None
    assert rate.log_log_slope([1, 10, 100], [1.0, 0.1, 0.01]) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="dims and values must be two equal-length sequences"):
        rate.log_log_slope([1, 10], [1.0])


def test_the_summary_fits_every_rate_width_against_the_derived_slope():
    """`rate_fit` reads the slope over every width of the rate rows and the derived slope for the same
    widths and T (here the smoke widths, whose derived slope differs from the default's)."""
    widths = config_lib.get_config("smoke").rate_dims
    rng = np.random.default_rng(4)
    values = rate.predicted_prefactor(widths, RATE_KEYS) / np.sqrt(widths)
    rows = [
        {"quantity": "rate_jacobian_spectral", "width": w, "seed": seed, "value": v * noise}
        for seed in range(SEEDS)
        for w, v, noise in zip(widths, values, np.exp(0.03 * rng.standard_normal(len(widths))))
    ]
    got = summary_lib.rate_fit(rows, SEEDS, RATE_KEYS)
    assert got["dims"] == list(widths)
    assert got["derived_slope"] == rate.derived_slope(widths, RATE_KEYS)
    assert got["derived_slope"] != rate.derived_slope(config_lib.get_config().rate_dims, RATE_KEYS)
    assert got["slopes"][0] == rate.log_log_slope(widths, [r["value"] for r in rows[: len(widths)]])
    assert summary_lib.rate_check(got["slopes"], got["derived_slope"])["pass"] is True
    f0, a = got["gap_density"], got["correction"]
    np.testing.assert_allclose(f0 * (1 - a / np.sqrt(widths)) / np.sqrt(widths), values)


def _spectral_norms(logits):
    """||J||_2 of softmax(logits) `[n, T] -> [n]` by bisection on the secular equation
    1 = sum_i p_i^2 / (p_i - lambda), whose largest root lies in (p_(2), p_(1))."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = z / z.sum(axis=1, keepdims=True)
    top = -np.sort(-p, axis=1)[:, :2]
    low, high = top[:, 1].copy(), top[:, 0].copy()
    for _ in range(60):
        mid = 0.5 * (low + high)
        with np.errstate(divide="ignore", invalid="ignore"):
            above = 1 - np.sum(p * p / (p - mid[:, None]), axis=1) > 0
        low, high = np.where(above, mid, low), np.where(above, high, mid)
    return 0.5 * (low + high)


@pytest.mark.parametrize("num_keys", [8, 64])
def test_the_first_order_law_matches_a_direct_monte_carlo_of_the_jacobian_norm(num_keys):
    """E||J||_2 sigma at softmax(sigma u), u `[T]` iid N(0, 1), sigma = 32, by a direct NumPy Monte
    Carlo, is within 3 standard errors of f(0) (1 - a / sigma) (f(0), a by quadrature) and many
    standard errors from the leading order f(0): the correction that sets the derived slope is
    resolved, and it is the derived one."""
    rng = np.random.default_rng(num_keys)
    sigma, n = 32.0, 60_000
    check = rng.standard_normal((64, num_keys)) * 4
    p = np.exp(check - check.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    jac = p[:, :, None] * (np.eye(num_keys) - p[:, None, :])
    np.testing.assert_allclose(_spectral_norms(check), np.linalg.eigvalsh(jac)[:, -1], rtol=1e-10)
    norms = sigma * _spectral_norms(sigma * rng.standard_normal((n, num_keys)))
    mean, se = norms.mean(), norms.std(ddof=1) / np.sqrt(n)
    f0 = rate.gap_density(num_keys)[0]
    first_order = float(rate.predicted_prefactor([sigma**2], num_keys)[0])
    assert first_order == pytest.approx(f0 * (1 - rate.correction(num_keys) / sigma))
    assert abs(mean - first_order) < 3 * se, (mean, first_order, se)
    assert abs(mean - f0) > 5 * se, (mean, f0, se)


def test_gap_density_and_predicted_prefactor_reject_bad_input():
    with pytest.raises(ValueError, match="num_keys must be an int >= 2"):
        rate.gap_density(1)
    with pytest.raises(ValueError, match="dims must be a sequence of widths above a"):
        rate.predicted_prefactor([4, 256], RATE_KEYS)  # 4 < a^2 ~ 7.7
    config = config_lib.get_config("smoke")
    config.rate_dims = (4, 256)
    with pytest.raises(ValueError, match="config.rate_dims: every width must be above a"):
        study.specs(config)


def test_tau_is_the_scaled_gaussian_median_at_the_largest_d_k_and_shares_count_above_it():
    samples = {
        family: {
            scaling: {
                g: [[[9.0, 9.0, 9.0]], [[1.0, 2.0, 3.0]]]  # [d_k][seed][sample]
                for g in ("grad_query", "grad_key")
            }
            for scaling in ("scaled", "unscaled")
        }
        for family in ("gaussian", "low_rank")
    }
    tau = summary_lib.gradient_tau(samples)
    assert tau == {"grad_query": 2.0, "grad_key": 2.0}
    stats = summary_lib.gradient_statistics(samples, tau)["gaussian"]["unscaled"]["grad_query"]
    assert stats == {"mean": [[9.0], [2.0]], "median": [[9.0], [2.0]], "above": [[1.0], [1 / 3]]}
    pooled = summary_lib.pooled_statistics(samples, tau)["low_rank"]["scaled"]["grad_key"]
    assert pooled["above"] == [1.0, 1 / 3]


def test_a_failing_outcome_reaches_the_report_as_fail(run):
    broken = json.loads(json.dumps(run.summary))
    broken["checks"]["gradients"]["gaussian"]["vanishes"].update({"pass": False, "high": 0.1})
    broken["checks"]["jacobian_rate"].update({"pass": False, "mean": -0.2})
    records = {p["name"]: p for p in checks.predictions(broken)}
    assert (
        records["without the scale the typical gradient to q, K vanishes (gaussian)"]["verdict"]
        == "fail"
    )
    rate_row = "E||J||_2 of the unscaled softmax ~ f(0) (1 - a / sqrt(d_k)) / sqrt(d_k)"
    assert records[rate_row]["verdict"] == "fail"
    broken["predictions"] = checks.predictions(broken)
    text = report.markdown(broken)
    assert "| sanity | 8 | 1 | 0 | 0 |" in text and "| hypothesis | 0 | 1 | 0 | 0 |" in text


def test_closed_form_gradients_match_jax_grad_of_the_library_attention():
    key = jax.random.key(1)
    kq, kk, kv, kg = jax.random.split(key, 4)
    q, keys = jax.random.normal(kq, (8,), jnp.float64), jax.random.normal(kk, (5, 8), jnp.float64)
    values, g = jax.random.normal(kv, (5, 3), jnp.float64), jax.random.normal(kg, (3,), jnp.float64)
    for scale in (1.0, 8**-0.5):
        dq, dk = jax.grad(gradients.attention_loss, argnums=(0, 1))(q, keys, values, g, scale)
        cq, ck = gradients.gradients(q, keys, values, g, scale)
        np.testing.assert_allclose(np.asarray(cq), np.asarray(dq), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(ck), np.asarray(dk), rtol=1e-10, atol=1e-12)


def test_input_families_have_unit_variance_and_low_rank_breaks_the_footnote():
    mask = jnp.ones((64,), jnp.float64)
    sample = jax.jit(
        jax.vmap(
            lambda k, inputs: gradients.sample_query_keys(k, inputs, mask, num_keys=4, rank=2),
            in_axes=(0, None),
        ),
        static_argnums=1,
    )
    keys = jax.random.split(jax.random.key(0), 2000)
    for inputs in gradients.INPUTS:
        q, k = sample(keys, inputs)
        assert float(jnp.var(q)) == pytest.approx(1.0, rel=0.05), inputs
        logit_var = float(jnp.var(jnp.einsum("nd,nd->n", q, k[:, 0])))
        # Var(q.k): d_k = 64 for independent components; ~ d_k^2 / r = 2048 for the rank-2 family.
        expected = 64**2 / 2 if inputs == "low_rank" else 64
        assert logit_var == pytest.approx(expected, rel=0.2), inputs
    with pytest.raises(ValueError, match="inputs must be one of"):
        gradients.sample_query_keys(keys[0], "cauchy", mask, num_keys=4, rank=2)


def test_committed_results_are_their_summary_rendered():
    """The committed report and the results section that ends the study's documentation page (its links
    relative to the page) are the committed summary rendered; its checks give its verdicts."""

    repo = REPO
    results = repo / report.README_RESULTS
    committed = json.loads((results / "summary.json").read_text())
    timing = json.loads((results / "timing.json").read_text())
    assert_same_summary(json_form(summary_lib.derive(committed)), committed)  # its derived numbers
    assert json_form(checks.predictions(committed)) == committed["predictions"]
    assert (results / "report.md").read_text() == report.markdown(committed)
    assert sorted(p.name for p in (results / "plots").iterdir()) == committed["plots"]
    page = study_page("softmax_scaling")
    text = page.read_text()
    section = text[text.index("## Results: softmax scaling\n") :]  # to the end of the page
    links = link_from(page, report.README_RESULTS)
    assert section == report.readme_section(committed, timing, results=links) + "\n"


def test_the_report_quotes_the_base_models_d_k_only_when_the_run_has_it():
    """The shares at Vaswani et al.'s d_k = 64 are quoted when the widths include it; a run over
    other widths renders without that sentence (it once indexed the third width blindly)."""
    committed = json.loads((REPO / report.README_RESULTS / "summary.json").read_text())
    assert "at d_k = 64 the unscaled share above tau is" in report.markdown(committed)
    other = {**committed, "dims": [d if d != 64 else 65 for d in committed["dims"]][:2]}
    text = report.markdown(other)
    assert "the unscaled softmax is not yet saturated there" not in text
    assert "the smallest d_k at which the unscaled share is below the scaled one" in text
