"""The rank-collapse rows on synthetic summaries: each prediction, hypothesis and sanity row fails on an input
where its claim is false and passes where it holds, and a verdict over an interval needs >= 10 seeds."""

import numpy as np
import pytest

from attnjax import nn
from attnjax.serialization import json_form
from experiments.lab.render import interval_text
from experiments.rank_collapse import checks
from experiments.rank_collapse import summary as summary_lib
from tests.experiments.lab.test_studies import rank_collapse_test_config

CONFIG = rank_collapse_test_config()
# The Dong run of the test config: attention only at this embedding std.
DONG_STD = CONFIG.dong_embedding_std
SEEDS = 10


# --------------------------------------------------------------------------
# Synthetic runs


HIDDEN_METRICS = (
    "residual_fro",
    "residual_l1inf",
    "residual_abs_fro",
    "mean_token_norm",
    "token_cosine",
)
ATTENTION_METRICS = ("attention_entropy_normalized", "dobrushin", "logit_variance", "slem")


def _measured(metrics, depth, seeds, dong=False, examples=2):
    """`metrics` with the other init-phase metrics of a measured run filled in, as the study records them:
    hidden-state profiles `[seeds, L + 1]` halving per layer, attention statistics `[seeds, L]` at 0.5, and,
    with `dong`, Dong et al.'s per-example metrics of an attention-only network (`summary.derive` reads
    every one; a row under test reads only those given)."""
    r = np.tile(0.5 ** np.arange(depth + 1.0), (seeds, 1))
    per_example = np.tile(r[:, None], (1, examples, 1))  # [seeds, examples, L + 1]
    filled = {m: r.tolist() for m in HIDDEN_METRICS}
    filled.update({m: np.full((seeds, depth), 0.5).tolist() for m in ATTENTION_METRICS})
    if dong:
        filled.update(
            {
                "dong/residual": per_example.tolist(),
                "dong/residual_abs": per_example.tolist(),
                "dong/bound": (10 * per_example[..., 1:]).tolist(),
                "dong/constant": np.ones((seeds, depth)).tolist(),
            }
        )
    return {**filled, **metrics}


def run_record(sweep, architecture, depth, metrics, causal=False, std=DONG_STD, window=None):
    spec = {
        "sweep": sweep,
        "kind": "softmax",
        "architecture": architecture,
        "depth": depth,
        "temperature": 1.0,
        "causal": causal,
        "embedding_std": std,
        "window": window,
    }
    if sweep != "layernorm":  # Wu et al.'s constructions record only their own metrics
        seeds = len(next(iter(metrics.values())))
        metrics = _measured(metrics, depth, seeds, dong=architecture == "attention_only")
    return {"spec": spec, "phases": [{"phase": "init", "step": 0, "metrics": metrics}]}


def trained_record(spec, phases, seeds):
    """A train-sweep run of `spec` whose logged and final `phases` follow its initial profile (`_measured`)."""
    init = {"phase": "init", "step": 0, "metrics": _measured({}, spec["depth"], seeds)}
    return {"spec": {"window": None, **spec}, "phases": [init, *phases]}


def summary_of(*records):
    """The summary of the runs `records` with its sections (`summary.derive`), in its JSON form: what the
    runner hands the rows."""
    raw = {"runs": {f"r{i}": r for i, r in enumerate(records)}}
    return json_form({"config": CONFIG.to_dict(), **summary_lib.derive(raw, CONFIG)})


def verdicts(rows) -> dict:
    """`{name without its setting: verdict}` of rows."""
    return {row["name"].split(" (")[0]: row["verdict"] for row in rows}


# --------------------------------------------------------------------------
# Dong et al.: the local exponent


def power_map(exponent, k, num_layers, seeds=SEEDS, examples=6, noise=0.05, seed=0, saturate=None):
    """Noisy maps r_(l+1) = k r_l^exponent e^(noise N(0, 1)) from starts spread over [0.1, 0.9],
    `[seeds, examples, L + 1]`; with `saturate` = (p, r_s) the exponent is p at r >= r_s (continuous there)."""
    rng = np.random.default_rng(seed)
    r = [np.tile(np.geomspace(0.9, 0.1, examples), (seeds, 1))]
    for _ in range(num_layers):
        x = r[-1]
        y = k * x**exponent
        if saturate is not None:
            p, r_s = saturate
            y = np.where(x >= r_s, k * r_s**exponent * (x / r_s) ** p, y)
        r.append(y * np.exp(noise * rng.standard_normal(x.shape)))
    return np.stack(r, axis=-1)


def noisy(profile, seeds=SEEDS, examples=4, noise=0.05, seed=0):
    """`[L + 1]` -> `[seeds, examples, L + 1]` with log-normal noise on every point."""
    rng = np.random.default_rng(seed)
    return np.asarray(profile)[None, None] * np.exp(
        noise * rng.standard_normal((seeds, examples, len(profile)))
    )


def exponent_verdict(r):
    local = summary_lib.cubic_exponent(r, r, upper=checks.LOCAL_WINDOW)
    saturated = summary_lib.cubic_exponent(r, r, lower=checks.SATURATED)
    return checks.exponent_check(local, saturated, "synthetic")


@pytest.mark.parametrize(
    "r",
    [
        noisy(0.05 ** np.arange(8.0)),
        noisy(np.exp(-1.0 * np.arange(6.0) ** 2)),
        power_map(2.8, 1.0, 6),
        power_map(3.4, 1.0, 5),
    ],
    ids=["geometric", "exp(-l^2)", "saturating-everywhere", "super-cubic"],
)
def test_dong_exponent_fails_on_decay_that_is_not_cubic_at_leading_order(r):
    row = exponent_verdict(r)
    assert row["verdict"] == "fail", row["note"]


@pytest.mark.parametrize("k", [0.15, 0.5, 3.0, 20.0])
def test_dong_exponent_passes_on_noisy_cubic_maps(k):
    # A 95% interval misses the true exponent in 5% of noise draws: this draw (seed 1) is fixed.
    row = exponent_verdict(power_map(3.0, k, 5, seed=1))
    assert row["verdict"] == "pass", row["note"]
    assert row["kind"] == "sanity" and "not a test of Dong et al.'s experiments" in row["note"]
    assert abs(row["measured"] - 3) < 0.05


def test_the_local_exponent_ignores_the_saturated_pairs():
    """Cubic below r = 0.1, exponent 2.5 above: the window's slope is 3, every pair's slope is not."""
    r = power_map(3.0, 1.0, 6, saturate=(2.5, 0.1), seed=1)  # a fixed draw, as above
    assert exponent_verdict(r)["verdict"] == "pass"
    pooled = summary_lib.cubic_exponent(r, r)
    assert pooled["high"] < 3  # pooling the saturated pairs biases the slope below 3
    saturated = summary_lib.cubic_exponent(r, r, lower=checks.SATURATED)
    assert abs(saturated["mean"] - 2.5) < 0.05


def test_dong_exponent_is_not_measured_with_fewer_than_ten_seeds():
    assert exponent_verdict(power_map(3.0, 1.0, 5, seeds=9))["verdict"] == "not measured"


def test_cubic_exponent_matches_an_independent_regression_over_the_window():
    r = power_map(3.0, 0.5, 5)
    rel = r.copy()
    got = summary_lib.cubic_exponent(r, rel, lower=1e-9, upper=1e-2)
    for seed in range(r.shape[0]):
        x, y = [], []
        for b in range(r.shape[1]):
            for layer in range(1, r.shape[2]):
                before, after = rel[seed, b, layer - 1], rel[seed, b, layer]
                if 1e-9 <= before < 1e-2 and before > 1e-13 and after > 1e-13:
                    x.append(np.log(r[seed, b, layer - 1]))
                    y.append(np.log(r[seed, b, layer]))
        x, y = np.array(x), np.array(y)
        slope = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2)
        np.testing.assert_allclose(got["slopes"][seed], slope, rtol=1e-10)
        assert got["pairs"][seed] == x.size
        np.testing.assert_allclose(got["intercepts"][seed], y.mean() - slope * x.mean(), rtol=1e-8)
    slopes = np.array(got["slopes"])
    from scipy import stats

    half = stats.t.ppf(0.975, len(slopes) - 1) * slopes.std(ddof=1) / np.sqrt(len(slopes))
    np.testing.assert_allclose(
        [got["low"], got["high"]], [slopes.mean() - half, slopes.mean() + half]
    )


def test_cubic_exponent_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"res_abs and rel .*\(2, 3, 4\).*\(2, 3, 5\)"):
        summary_lib.cubic_exponent(np.ones((2, 3, 4)), np.ones((2, 3, 5)))


def test_log_median_profile_takes_medians_in_log_space_and_leaves_unresolved_layers_empty():
    # Three examples per layer; the mean of r would be set by the largest, the median is the middle one.
    rel = np.array([[[0.9, 1e-2, 1e-6, 1e-16], [0.8, 1e-3, 1e-9, 1e-16], [0.7, 0.5, 1e-12, 1e-16]]])
    got = summary_lib.log_median_profile(rel)
    np.testing.assert_allclose(got["median"], [0.8, 1e-2, 1e-9, 1e-16])
    assert got["log_inverse"][3] is None and got["growth"][3] is None and got["growth"][0] is None
    np.testing.assert_allclose(got["growth"][2], np.log(1e9) / np.log(1e2))


def dong_rows(r, bound_factor=10.0, identity=None):
    """The Dong rows of an attention-only run whose per-example residuals are `r` `[S, B, L + 1]` (absolute =
    relative), bound `bound_factor` x the measured residual, and eps-identity residuals `identity`."""
    depth = r.shape[-1] - 1
    metrics = {
        "dong/residual": r.tolist(),
        "dong/residual_abs": r.tolist(),
        "dong/bound": (bound_factor * r[..., 1:]).tolist(),
        "dong/constant": np.full((r.shape[0], depth), 2.0).tolist(),
    }
    if identity is not None:
        metrics["identity/residual"] = identity.tolist()
    return checks.dong_checks(summary_of(run_record("init", "attention_only", depth, metrics)))


WINDOW = "Dong's local window is resolved"
EXPONENT = "Dong's local exponent is 3"
IDENTITY = "the eps-scaling identity holds at every layer"
EDGE = "Dong's local window is in the leading order"
BOUND = "residual <= Dong's bound c_l ||res(X_(l-1))||^3"


def test_dong_window_condition_fails_when_the_profile_skips_the_window():
    assert verdicts(dong_rows(power_map(3.0, 1.0, 5)))[WINDOW] == "pass"
    exponent = summary_lib.cubic_exponent(
        power_map(3.0, 1.0, 5), power_map(3.0, 1.0, 5), upper=checks.LOCAL_WINDOW
    )
    # Starts 0.9..0.1 cubed per layer: 0.1 -> 1e-3 -> 1e-9 -> 1e-27: pairs from layers 1, 2 and 3 enter the
    # window, and the ones whose r_l is at rounding (1e-27) are left out and counted.
    assert min(exponent["transitions"]) >= 2 and min(exponent["unresolved"]) >= 1
    # Every example jumps from r >= 0.05 to below 1e-13 in one layer: no pair in the window.
    skips = noisy(np.array([0.5, 0.1, 1e-15, 1e-16]))
    assert verdicts(dong_rows(skips))[WINDOW] == "fail"
    assert verdicts(dong_rows(skips))[EXPONENT] == "not measured"


def identity_residuals(exponent=3.0, a=0.5, seeds=SEEDS, layers=3, examples=2):
    """`[S, E, L, B]` residuals c eps^exponent (1 + a eps) at `checks`' EPS, c varying over points."""
    eps = np.asarray(summary_lib.EPS)
    c = np.geomspace(0.1, 10, seeds * layers * examples).reshape(seeds, 1, layers, examples)
    return c * (eps**exponent * (1 + a * eps))[None, :, None, None]


@pytest.mark.parametrize(
    "exponent,a,verdict",
    [
        (3.0, 0.5, "pass"),
        (3.0, -2.0, "pass"),
        (3.0, 0.0, "pass"),
        (2.0, 0.5, "fail"),
        (3.1, 0.0, "fail"),
    ],
    ids=["cubic", "cubic-negative-next-order", "exactly-cubic", "quadratic", "exponent-3.1"],
)
def test_the_identity_row_needs_slope_3_up_to_a_shrinking_next_order_term(exponent, a, verdict):
    rows = verdicts(dong_rows(power_map(3.0, 1.0, 3), identity=identity_residuals(exponent, a)))
    assert rows[IDENTITY] == verdict


def test_identity_slopes_are_the_decade_slopes():
    eps = np.asarray(summary_lib.EPS)
    res = identity_residuals(3.0, 0.5)
    got = summary_lib.identity_slopes(res)
    expected = np.log((eps[:-1] ** 3 * (1 + 0.5 * eps[:-1])) / (eps[1:] ** 3 * (1 + 0.5 * eps[1:])))
    expected /= np.log(eps[:-1] / eps[1:])
    for row in got["layers"]:
        np.testing.assert_allclose(row["slope"], expected, rtol=1e-12)
        np.testing.assert_allclose(row["deviation"], np.abs(expected - 3), rtol=1e-9)
    assert got["edge"] == pytest.approx(abs(expected[-1] - 3))
    with pytest.raises(ValueError, match="residuals must be"):
        summary_lib.identity_slopes(res[:, :2])


def test_the_edge_row_fails_when_the_next_order_term_exceeds_the_exponent_resolution():
    r = power_map(3.0, 1.0, 5)
    assert verdicts(dong_rows(r, identity=identity_residuals(3.0, 0.5)))[EDGE] == "pass"
    # A next-order coefficient of 300: |slope - 3| ~ 0.6 at the window's top decade.
    assert verdicts(dong_rows(r, identity=identity_residuals(3.0, 300.0)))[EDGE] == "fail"


def test_the_bound_row_has_no_verdict_and_reports_its_slack_as_a_function_of_gamma():
    rows = {row["name"].split(" (")[0]: row for row in dong_rows(power_map(3.0, 1.0, 4))}
    bound = rows[BOUND]
    assert bound["kind"] == "not applicable" and bound["verdict"] == "not applicable"
    assert (
        "gamma" in bound["note"] and "not retrieved" in bound["note"] and "slack" in bound["note"]
    )


def test_bound_looseness_reads_only_resolved_layers_and_reports_the_slack():
    rel = np.array([[[0.5, 1e-3, 1e-9, 1e-15]]])  # [S, B, L + 1]; layer 3 is rounding
    res_abs = 2 * rel
    bound = np.array([[[1.0, 4e-3, 1e-9]]])  # [S, B, L]
    constant = np.array([[3.0, 5.0, 7.0]])  # [S, L]
    looseness = summary_lib.bound_looseness(bound, res_abs, rel, constant)
    rows = looseness["rows"]
    assert [row["depth"] for row in rows] == [1, 2]
    np.testing.assert_allclose([row["max"] for row in rows], [2e-3 / 1.0, 2e-9 / 4e-3])
    np.testing.assert_allclose([row["slack"] for row in rows], [3.0 * 1.0**2, 5.0 * 2e-3**2])
    assert looseness["worst"] == max(row["max"] for row in rows)
    unresolved = summary_lib.bound_looseness(bound, res_abs, np.full_like(rel, 1e-15), constant)
    assert unresolved["rows"] == [] and unresolved["worst"] is None


def regime_verdict(logit_variance):
    def layers(v):
        return [[v] * 4] * 2

    metrics = {
        "attention_entropy_normalized": layers(0.5),
        "dobrushin": layers(0.9),
        "logit_variance": layers(logit_variance),
    }
    return checks.regime_checks(summary_of(run_record("init", "attention_only", 4, metrics)))[0]


def test_the_logit_variance_row_allows_sqrt_dk_and_fails_at_a_scaling_error():
    predicted = (DONG_STD**2 + nn.POSITION_INIT_STD**2) ** 2
    head_dim = CONFIG.model.features // CONFIG.model.num_heads
    assert regime_verdict(predicted)["verdict"] == "pass"
    assert regime_verdict(predicted * 0.9 * np.sqrt(head_dim))["verdict"] == "pass"
    # 1/d_k for 1/sqrt(d_k) scales the logit variance by 1/d_k; the other way by d_k.
    assert regime_verdict(predicted / head_dim)["verdict"] == "fail"
    assert regime_verdict(predicted * head_dim)["verdict"] == "fail"


# --------------------------------------------------------------------------
# Noci et al.: depth trends


def noci_record(architecture, depth, residual, cosine, g, seeds=SEEDS, noise=0.02, seed=0):
    """A Noci-sweep run whose r_L, token cosine at L and g(L) are `residual`, `cosine`, `g` (times noise
    per seed)."""
    rng = np.random.default_rng(seed + depth)

    def jitter(v):
        return v * np.exp(noise * rng.standard_normal(seeds))

    value = np.ones((seeds, depth))
    qk = jitter(g)[:, None] * value / np.sqrt(2)
    r = np.tile(0.99 ** np.arange(depth + 1.0), (seeds, 1))
    r[:, -1] = jitter(residual)
    cos = np.full((seeds, depth + 1), 0.1)
    cos[:, -1] = np.minimum(jitter(cosine), 1.0)
    metrics = {
        "residual_fro": r.tolist(),
        "token_cosine": cos.tolist(),
        "layer_grad_norm/query": qk.tolist(),
        "layer_grad_norm/key": qk.tolist(),
        "layer_grad_norm/value": value.tolist(),
    }
    return run_record("noci", architecture, depth, metrics)


DEPTHS = (4, 8, 16, 32)
# Per depth: r_L, cosine, g of a network whose collapse deepens with depth, and of one that keeps its rank.
COLLAPSING = ((0.7, 0.3, 0.4), (0.3, 0.6, 0.2), (0.05, 0.9, 0.05), (2e-4, 1.0, 3e-4))
KEEPING = ((0.9, 0.15, 0.6), (0.9, 0.15, 0.6), (0.9, 0.16, 0.59), (0.9, 0.16, 0.58))
# No trend at all, and a network that recovers with depth (r_L and g rise, the cosine falls).
FLAT = ((0.9, 0.15, 0.6),) * 4
RECOVERING = ((0.5, 0.5, 0.2), (0.7, 0.3, 0.3), (0.8, 0.2, 0.45), (0.9, 0.15, 0.6))


def noci_verdicts(unscaled, scaled, placement=("post_ln", "post_ln_scaled"), seeds=SEEDS):
    records = [
        noci_record(arch, depth, *values, seeds=seeds)
        for arch, profile in zip(placement, (unscaled, scaled))
        for depth, values in zip(DEPTHS, profile)
    ]
    rows = checks.noci_checks(summary_of(*records))
    return {row["name"].split(" unless")[0]: (row["kind"], row["verdict"]) for row in rows}


ALIGNMENT, GRADIENTS = (
    "token alignment grows and rank collapse deepens with depth",
    "query/key gradients vanish with depth",
)


def test_noci_trends_pass_when_only_the_unscaled_network_collapses_with_depth():
    got = noci_verdicts(COLLAPSING, KEEPING)
    assert got == {name: ("prediction", "pass") for name in (ALIGNMENT, GRADIENTS)}
    # Pre-LN is not Figure 1's placement: the same rows are hypotheses.
    pre = noci_verdicts(COLLAPSING, KEEPING, placement=("skip_mlp", "skip_mlp_scaled"))
    assert pre == {name: ("hypothesis", "pass") for name in (ALIGNMENT, GRADIENTS)}


# The unscaled network's r_L falls with depth while its cosine stays put, and the converse.
RANK_ONLY = tuple((r, 0.15, g) for r, _, g in COLLAPSING)
COSINE_ONLY = tuple((0.9, c, g) for _, c, g in COLLAPSING)


# The scaled network keeping its rank, but with the unscaled network's r_L, or its cosine, at every depth.
SCALED_RANK_FALLS = tuple((c[0], k[1], k[2]) for c, k in zip(COLLAPSING, KEEPING))
SCALED_COSINE_GROWS = tuple((k[0], c[1], k[2]) for c, k in zip(COLLAPSING, KEEPING))


@pytest.mark.parametrize(
    "unscaled,scaled",
    [
        (RANK_ONLY, KEEPING),
        (COSINE_ONLY, KEEPING),
        (COLLAPSING, SCALED_RANK_FALLS),
        (COLLAPSING, SCALED_COSINE_GROWS),
    ],
    ids=[
        "rank-only",
        "cosine-only",
        "scaling-leaves-the-rank-trend",
        "scaling-leaves-the-cosine-trend",
    ],
)
def test_the_alignment_row_needs_both_of_its_statistics(unscaled, scaled):
    got = noci_verdicts(unscaled, scaled)
    assert got == {ALIGNMENT: ("prediction", "fail"), GRADIENTS: ("prediction", "pass")}


def noci_notes(unscaled, scaled, **kw):
    records = [
        noci_record(arch, depth, *values, **kw)
        for arch, profile in zip(("post_ln", "post_ln_scaled"), (unscaled, scaled))
        for depth, values in zip(DEPTHS, profile)
    ]
    return {
        row["name"].split(" unless")[0]: row["note"]
        for row in checks.noci_checks(summary_of(*records))
    }


def test_the_noci_notes_say_when_the_scaled_network_still_trends():
    # Scaled: r_L falls 0.9 -> 0.5, the cosine rises 0.15 -> 0.3, g falls 0.6 -> 0.3 (slower than unscaled).
    trending = ((0.9, 0.15, 0.6), (0.8, 0.2, 0.5), (0.65, 0.25, 0.4), (0.5, 0.3, 0.3))
    notes = noci_notes(COLLAPSING, trending)
    assert notes[ALIGNMENT].count(checks.STILL_TRENDS) == 2
    assert checks.STILL_TRENDS in notes[GRADIENTS]
    notes = noci_notes(COLLAPSING, FLAT)  # no trend: each interval holds 0
    assert not any(checks.STILL_TRENDS in note for note in notes.values())


def test_the_gradient_note_says_when_a_ratio_is_below_the_precision():
    tiny = COLLAPSING[:-1] + ((2e-4, 1.0, 5e-8),)  # float32 (the Noci sweep's): epsilon 1.2e-7
    assert "below the run's machine epsilon" in noci_notes(tiny, KEEPING)[GRADIENTS]
    assert "machine epsilon" not in noci_notes(COLLAPSING, KEEPING)[GRADIENTS]


@pytest.mark.parametrize(
    "unscaled,scaled",
    [(KEEPING, KEEPING), (COLLAPSING, COLLAPSING), (KEEPING, COLLAPSING), (FLAT, RECOVERING)],
    ids=["neither-collapses", "both-collapse", "reversed", "unscaled-flat-scaled-recovers"],
)
def test_noci_trends_fail_unless_the_scaling_is_what_removes_the_trend(unscaled, scaled):
    got = noci_verdicts(unscaled, scaled)
    assert {verdict for _, verdict in got.values()} == {"fail"}, got


def test_noci_trends_are_not_measured_with_fewer_than_ten_seeds():
    got = noci_verdicts(COLLAPSING, KEEPING, seeds=5)
    assert {verdict for _, verdict in got.values()} == {"not measured"}


def test_depth_trends_are_per_seed_regressions_on_log2_depth():
    records = [
        noci_record(arch, depth, *values, noise=0.0)
        for arch, profile in (("post_ln", COLLAPSING), ("post_ln_scaled", KEEPING))
        for depth, values in zip(DEPTHS, profile)
    ]
    trend = summary_of(*records)["noci"][0]
    x = np.log2(DEPTHS)
    cos_u = [v[1] for v in COLLAPSING]
    g_u, g_s = np.log([v[2] for v in COLLAPSING]), np.log([v[2] for v in KEEPING])
    np.testing.assert_allclose(trend["cosine"]["unscaled"]["mean"], np.polyfit(x, cos_u, 1)[0])
    np.testing.assert_allclose(
        trend["gradient"]["difference"]["mean"],
        np.polyfit(x, g_s, 1)[0] - np.polyfit(x, g_u, 1)[0],
    )
    np.testing.assert_allclose(trend["rank"]["unscaled"]["mean"], np.log(2e-4 / 0.7))
    assert trend["depths"] == list(DEPTHS) and trend["seeds"] == SEEDS


def test_gradient_ratio_is_the_geometric_mean_over_layers():
    run = noci_record("skip_mlp", 3, 0.5, 0.5, 1.0, seeds=1, noise=0.0)
    run["phases"][0]["metrics"]["layer_grad_norm/query"] = [[3.0, 0.3, 0.03]]  # key: 1/sqrt(2) each
    ratio = np.sqrt(np.array([3.0, 0.3, 0.03]) ** 2 + 0.5)
    np.testing.assert_allclose(summary_lib.qk_value_ratio(run), [ratio])
    np.testing.assert_allclose(summary_lib.gradient_ratio(run), [np.prod(ratio) ** (1 / 3)])


# --------------------------------------------------------------------------
# Wu et al.: causal and local masks


LAYERS = np.arange(17.0)


def causal_summary(causal_profile, slem=0.5, seeds=SEEDS, noise=0.02, chain=None, local=None):
    """A causal attention-only run with relative residuals `causal_profile` (`[L + 1]`, or `[seeds, L + 1]`;
    times noise), maps of |lambda_2| `slem`, the uniform chain's profile `chain` (default 2^-l), and local
    runs `{width: profile}`, beside a bidirectional twin falling 100x per layer."""
    rng = np.random.default_rng(0)

    def per_seed(profile):
        r = np.asarray(profile, np.float64)
        r = np.broadcast_to(r, (seeds, r.shape[-1]))
        return r * np.exp(noise * rng.standard_normal(r.shape))

    r = per_seed(causal_profile)
    depth = r.shape[-1] - 1
    causal = {
        "residual_fro": r.tolist(),
        "slem": np.full((seeds, depth), slem).tolist(),
        "dobrushin": np.full((seeds, depth), 0.9).tolist(),
        "attention_entropy_normalized": np.full((seeds, depth), 0.99).tolist(),
        "chain/residual_fro": per_seed(
            0.5 ** np.arange(depth + 1.0) if chain is None else chain
        ).tolist(),
    }
    bidir = {"residual_fro": [list(0.01 ** np.arange(depth + 1.0))] * 2}
    records = [
        run_record("mask", "attention_only", depth, causal, causal=True, std=1.0),
        run_record("init", "attention_only", depth, bidir, std=1.0),
    ]
    for width, profile in (local or {}).items():
        metrics = {"residual_fro": per_seed(profile).tolist()}
        records.append(
            run_record(
                "local", "attention_only", depth, metrics, causal=True, std=1.0, window=width
            )
        )
    return summary_of(*records)


def mask_verdicts(causal_profile, **kw):
    return verdicts(checks.mask_checks(causal_summary(causal_profile, **kw)))


EXPONENTIAL = "causal pure attention collapses exponentially"
LAMBDA2 = "the causal collapse rate is the maps' |lambda_2|"


@pytest.mark.parametrize(
    "profile",
    [
        0.5**LAYERS,
        np.exp(
            -0.05 * 3.0 ** (LAYERS / 4)
        ),  # doubly exponential: faster than the bound, consistent
        np.exp(-0.02 * LAYERS**2),  # super-geometric: consistent
    ],
    ids=["geometric", "doubly-exponential", "gaussian"],
)
def test_the_exponential_row_passes_on_collapse_at_least_exponential(profile):
    assert mask_verdicts(profile)[EXPONENTIAL] == "pass"


@pytest.mark.parametrize(
    "profile",
    [
        np.full(17, 0.8),  # no collapse
        1.02**LAYERS * 0.3,  # growth
        (1 + LAYERS) ** -3.0,  # a power law: the rate rises toward 1
    ],
    ids=["flat", "growing", "power-law"],
)
def test_the_exponential_row_fails_on_no_collapse_or_sub_exponential_decay(profile):
    assert mask_verdicts(profile)[EXPONENTIAL] == "fail"


def test_the_exponential_row_fails_when_the_interval_over_seeds_reaches_one():
    # Half the seeds collapse at 0.8 per layer, half grow at 1.05: the mean rate is below 1, its interval not.
    r = np.concatenate([np.tile(0.3 * 0.8**LAYERS, (5, 1)), np.tile(0.3 * 1.05**LAYERS, (5, 1))])
    assert mask_verdicts(r)[EXPONENTIAL] == "fail"


def test_the_lambda_2_hypothesis_compares_with_the_uniform_chain_in_the_late_window():
    # The run falls at 0.5 (its maps' |lambda_2|) like the chain: the excess over the chain is 0.
    assert mask_verdicts(0.5**LAYERS)[LAMBDA2] == "pass"
    # A transient the chain does not have (0.6 per layer early, then 0.5): only the late window is tested.
    transient = np.concatenate([0.6 ** np.arange(9.0), 0.6**8 * 0.5 ** np.arange(1.0, 9.0)])
    windows = causal_summary(transient)["mask"][0]["collapse"]["windows"]
    assert windows[0]["excess"]["low"] > 0.1  # early: 0.6 / 0.5 against the chain's 1
    assert mask_verdicts(transient)[LAMBDA2] == "pass"
    # Rates 0.3 and 0.6 against |lambda_2| = 0.5 and the chain at 0.5: the hypothesis fails.
    assert mask_verdicts(0.3**LAYERS)[LAMBDA2] == "fail"
    assert mask_verdicts(0.6**LAYERS)[LAMBDA2] == "fail"
    # The chain's own late rate of 0.55 makes a run at 0.55 consistent with its maps at 0.5.
    assert mask_verdicts(0.55**LAYERS, chain=0.55**LAYERS)[LAMBDA2] == "pass"
    # The note gives the early window's difference beside the late one the rule reads.
    (row,) = [r for r in checks.mask_checks(causal_summary(transient)) if LAMBDA2 in r["name"]]
    early = interval_text(windows[0]["excess"])
    assert f"in the early window (depths 0-8, not the rule's) {early}" in row["note"]


def test_the_lambda_2_hypothesis_is_not_measured_without_the_chain():
    summary = causal_summary(0.5**LAYERS)
    for window in summary["mask"][0]["collapse"]["windows"]:
        for key in ("chain_rate", "chain_ratio", "excess"):
            window.pop(key)
    assert verdicts(checks.mask_checks(summary))[LAMBDA2] == "not measured"


def test_causal_windows_split_the_resolved_layers_and_regress_each_half():
    r = np.stack([0.5**LAYERS, 0.25**LAYERS])
    r[:, 13:] = 1e-16  # unresolved from depth 13: the windows are depths 0-6 and 6-12
    slem = np.stack([np.full(16, 0.5), np.full(16, 0.25)])
    windows = summary_lib.window_rates(
        r, slem, np.ones((2, 16)), reference=0.5 ** np.tile(LAYERS, (2, 1))
    )
    assert [w["layers"] for w in windows] == [[0, 6], [6, 12]]
    for w in windows:
        np.testing.assert_allclose(w["rate"]["mean"], 0.375)
        np.testing.assert_allclose(w["ratio"]["mean"], 1.0)
        np.testing.assert_allclose(w["chain_ratio"]["mean"], 1.0)
        np.testing.assert_allclose(w["excess"]["mean"], 0.0, atol=1e-12)
        assert w["rate"]["n"] == 2
    assert summary_lib.window_rates(r[:, :3], slem[:, :2], np.ones((2, 2)))[0]["layers"] == [0, 1]
    assert summary_lib.window_rates(r[:, :2], slem[:, :1], np.ones((2, 1))) == []


def local_verdicts(local_profiles, causal=0.5**LAYERS):
    rows = checks.mask_checks(causal_summary(causal, local=local_profiles))
    return {row["name"].split(" (")[0]: row["verdict"] for row in rows if "local" in row["name"]}


def test_a_local_mask_row_passes_when_the_collapse_is_slower_and_fails_otherwise():
    got = local_verdicts({2: 0.9**LAYERS, 4: 0.7**LAYERS, 8: 0.5**LAYERS, 16: 0.4**LAYERS})
    assert got == {
        "a local mask of width 2 slows the collapse": "pass",
        "a local mask of width 4 slows the collapse": "pass",
        "a local mask of width 8 slows the collapse": "fail",  # as collapsed as the full mask at K
        "a local mask of width 16 slows the collapse": "fail",  # more collapsed
    }


# A delay: 0.8 per layer for 4 layers, then the full mask's 0.5 (the same late rate, r_K 2^4 x 0.8^4 above);
# and a mask that starts slower but catches up: 0.8 per layer, then 0.2 until r_K is the full mask's.
DELAYED = np.concatenate([0.8 ** np.arange(5.0), 0.8**4 * 0.5 ** np.arange(1.0, 13.0)])
CAUGHT_UP = np.minimum(0.8**LAYERS, np.maximum(0.5**LAYERS, 0.8**6 * 0.2 ** (LAYERS - 6)))


def test_the_local_mask_row_reads_the_finite_depth_delay_not_the_late_rate():
    assert local_verdicts({4: DELAYED})["a local mask of width 4 slows the collapse"] == "pass"
    local = causal_summary(0.5**LAYERS, local={4: DELAYED})["local"][0]["rates"]
    np.testing.assert_allclose(local["late"]["rate"]["mean"], 0.5, rtol=0.02)  # the same late rate
    np.testing.assert_allclose(local["difference"]["mean"], np.log(1.6**4), rtol=0.05)
    # Slower early, faster later, as collapsed as the full mask at K: no delay left, the row fails.
    assert local_verdicts({4: CAUGHT_UP})["a local mask of width 4 slows the collapse"] == "fail"


def test_local_rates_read_the_layers_resolved_in_both_runs():
    causal = 0.1**LAYERS  # resolved to layer 12 (1e-12), 1e-13 at layer 13
    local = causal_summary(causal, local={2: 0.8**LAYERS})["local"][0]
    rates = local["rates"]
    assert (
        rates["layers"] == [0, 12] and rates["late"]["layers"] == [6, 12] and local["window"] == 2
    )
    np.testing.assert_allclose(rates["reference_rate"]["mean"], 0.1, rtol=0.02)
    np.testing.assert_allclose(rates["rate_difference"]["mean"], np.log(8), rtol=0.02)
    np.testing.assert_allclose(rates["difference"]["mean"], 12 * np.log(8), rtol=0.02)
    np.testing.assert_allclose(rates["reference_residual"]["mean"], 1e-12, rtol=0.05)


# --------------------------------------------------------------------------
# Wu et al.'s LayerNorm rows


def layernorm_summary(orthogonal=None, full_rank=None, postln=None, float32_last=None):
    """Wu et al.'s LayerNorm runs: `orthogonal` a consensus profile `[L + 1]`; `full_rank` (with LN, without LN,
    rank) at the last layer; `postln` the r_l profile `[L + 1]` of the post-LN attention-only run (times
    noise per seed, with pure attention at 0.5 per layer beside it), and its float32 twin's r_L per seed
    `float32_last`."""
    records = []
    if orthogonal is not None:
        records.append(
            run_record(
                "layernorm",
                "orthogonal",
                len(orthogonal) - 1,
                {
                    "consensus_ln": np.tile(orthogonal, (SEEDS, 1)).tolist(),
                    "consensus_plain": np.tile(orthogonal, (SEEDS, 1)).tolist(),
                    "rank_ln": [1] * SEEDS,
                },
                causal=True,
                std=None,
            )
        )
    if full_rank is not None:
        with_ln, plain, rank = full_rank
        records.append(
            run_record(
                "layernorm",
                "full_rank",
                48,
                {
                    "consensus_ln": [[0.9] + [with_ln] * 48] * SEEDS,
                    "consensus_plain": [[0.9] + [plain] * 48] * SEEDS,
                    "rank_ln": [rank] * SEEDS,
                },
                causal=True,
                std=None,
            )
        )
    rng = np.random.default_rng(0)
    if postln is not None:
        profile = np.asarray(postln) * np.exp(0.02 * rng.standard_normal((SEEDS, len(postln))))
        pure = np.tile(0.5 ** np.arange(len(postln), dtype=float), (SEEDS, 1))
        for architecture, r in (("attention_only_postln", profile), ("attention_only", pure)):
            records.append(
                run_record(
                    "mask",
                    architecture,
                    len(postln) - 1,
                    {"residual_fro": r.tolist()},
                    causal=True,
                    std=1.0,
                )
            )
    if float32_last is not None:
        records.append(
            run_record(
                "float32",
                "attention_only_postln",
                len(postln) - 1,
                {"residual_fro": [[0.9] * (len(postln) - 1) + [v] for v in float32_last]},
                causal=True,
                std=1.0,
            )
        )
    return summary_of(*records)


def layernorm_verdicts(**kw):
    return [c["verdict"] for c in checks.layernorm_checks(layernorm_summary(**kw))]


def test_layernorm_exponential_row_passes_on_a_geometric_profile_and_fails_on_a_flat_one():
    (row,) = checks.layernorm_checks(layernorm_summary(orthogonal=0.5 ** np.arange(41.0)))
    assert row["source"].startswith("this codebase's construction")
    assert layernorm_verdicts(orthogonal=0.5 ** np.arange(41.0)) == ["pass"]
    assert layernorm_verdicts(orthogonal=np.full(41, 0.3)) == ["fail"]
    assert layernorm_verdicts(orthogonal=(1 + np.arange(41.0)) ** -2.0) == ["fail"]


@pytest.mark.parametrize(
    "with_ln,plain,rank,verdict",
    [
        (0.96, 1e-15, 2, "pass"),
        (1e-15, 1e-15, 2, "fail"),
        (0.96, 0.5, 2, "fail"),
        (0.96, 1e-10, 2, "fail"),
        (1.0, 1e-15, 1, "fail"),
    ],
    ids=["ln-keeps", "ln-collapses-too", "plain-keeps-too", "plain-not-at-rounding", "rank-one"],
)
def test_layernorm_construction_row_needs_ln_to_be_what_keeps_a_full_rank_equilibrium(
    with_ln, plain, rank, verdict
):
    assert layernorm_verdicts(full_rank=(with_ln, plain, rank)) == [verdict]


def random_layernorm_row(postln, float32_last=None):
    rows = checks.layernorm_checks(layernorm_summary(postln=postln, float32_last=float32_last))
    (row,) = [r for r in rows if "random initialisation" in r["name"]]
    return row


def test_the_random_init_layernorm_hypothesis_fails_when_r_l_collapses_and_passes_when_it_does_not():
    collapsing = random_layernorm_row(0.5 ** np.arange(17.0), float32_last=[3e-7] * SEEDS)
    assert (collapsing["kind"], collapsing["verdict"]) == ("hypothesis", "fail")
    assert "float32 3e-07" in collapsing["note"] and "not retrieved" in collapsing["note"]
    assert "pure attention of the same depth: late rate 0.5" in collapsing["note"]
    assert "not evidence against Wu et al." in collapsing["note"]
    kept = random_layernorm_row(np.full(17, 0.6))  # r_l stays put: no collapse
    assert (kept["kind"], kept["verdict"]) == ("hypothesis", "pass")
    # Falling toward a floor of 0.3 (rate -> 1 late): not a geometric collapse.
    assert random_layernorm_row(0.3 + 0.6 * 0.5 ** np.arange(17.0))["verdict"] == "pass"


# --------------------------------------------------------------------------
# Training: the mode-of-context baseline


def trained_summary(architecture, accuracy, mode_accuracy, not_mode_accuracy, chance=1 / 16):
    """A trained run whose held-out counts give `accuracy`, `mode_accuracy` and `not_mode_accuracy` per seed
    (1000 queries, half of them with an answer that is not a context mode)."""
    seeds = len(accuracy)
    queries, not_mode = np.full(seeds, 1000), np.full(seeds, 500)
    final = {
        "eval_accuracy": list(accuracy),
        "chance_accuracy": [chance] * seeds,
        "recall/queries": queries.tolist(),
        "recall/correct": np.round(np.asarray(accuracy) * queries).tolist(),
        "recall/mode_correct": np.round(np.asarray(mode_accuracy) * queries).tolist(),
        "recall/not_mode_queries": not_mode.tolist(),
        "recall/not_mode_correct": np.round(np.asarray(not_mode_accuracy) * not_mode).tolist(),
    }
    phases = [
        {"phase": "train", "step": 100, "metrics": {"accuracy": [0.2] * seeds}},
        {"phase": "final", "step": 100, "metrics": final},
    ]
    spec = {
        "sweep": "train",
        "kind": "softmax",
        "architecture": architecture,
        "depth": 4,
        "temperature": 1.0,
        "causal": True,
        "embedding_std": None,
    }
    return summary_of(trained_record(spec, phases, seeds))


def training_verdict(*args, **kw):
    (row,) = checks.training_checks(trained_summary(*args, **kw))
    return row["kind"], row["verdict"]


def test_the_recall_sanity_row_needs_every_seed_above_the_mode_baseline():
    assert training_verdict("skip_mlp", [1.0] * 5, [0.26] * 5, [1.0] * 5) == ("sanity", "pass")
    # One seed on the plateau, at the mode baseline: fails (the mean, 0.85, would not).
    accs = [1.0, 1.0, 1.0, 1.0, 0.26]
    assert training_verdict("skip_mlp", accs, [0.26] * 5, [1.0] * 4 + [0.0]) == ("sanity", "fail")


def test_the_attention_only_hypothesis_passes_when_it_predicts_the_mode():
    rng = np.random.default_rng(0)
    mode = 0.26 + 0.005 * rng.standard_normal(SEEDS)
    got = training_verdict("attention_only", mode - 0.003, mode, [0.0] * SEEDS)
    assert got == ("hypothesis", "pass")
    (row,) = checks.training_checks(
        trained_summary("attention_only", mode - 0.003, mode, [0.0] * SEEDS)
    )
    assert "the mode strategy scores 0" in row["note"] and "below the mode strategy" in row["note"]


@pytest.mark.parametrize(
    "gain,not_mode",
    [(0.34, 0.5), (0.0, 0.1), (0.09, 0.0)],
    ids=["learns-recall", "retrieves-above-uniform-guessing", "beats-the-mode-without-retrieval"],
)
def test_the_attention_only_hypothesis_fails_when_it_does_more_than_the_mode(gain, not_mode):
    rng = np.random.default_rng(0)
    mode = 0.26 + 0.005 * rng.standard_normal(SEEDS)
    accs = mode + gain + 0.002 * rng.standard_normal(SEEDS)
    assert training_verdict("attention_only", accs, mode, [not_mode] * SEEDS) == (
        "hypothesis",
        "fail",
    )


def test_the_attention_only_hypothesis_is_not_measured_with_fewer_than_ten_seeds():
    got = training_verdict("attention_only", [0.25] * 5, [0.26] * 5, [0.0] * 5)
    assert got == ("hypothesis", "not measured")
