"""The width study: its maps, its metrics against NumPy from the equations, and every row failing where the
claim it tests is false."""

import copy
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ml_collections import ConfigDict

from configs import width as width_config
from experiments.lab import stats
from experiments.width import checks, maps, study, summary


def test_the_maps_are_row_stochastic_with_the_stated_logit_variance():
    key = jax.random.key(3)
    a = maps.markov_map(key, 512, math.log(2))
    assert a.dtype == jnp.float64
    np.testing.assert_allclose(np.sum(np.asarray(a), axis=-1), 1.0, rtol=0, atol=1e-13)
    centred = np.log(np.asarray(a))
    centred -= centred.mean(axis=-1, keepdims=True)
    # Var of 512 x 512 iid N(., log 2) draws: standard error about 0.1%.
    assert np.mean(centred.var(axis=-1, ddof=1)) == pytest.approx(math.log(2), rel=0.01)
    # E e^G = 1 with mean -s2/2: the unnormalised row sums are n up to sampling.
    b = maps.key_query_map(key, 512, 512, 1.0)
    np.testing.assert_allclose(np.sum(np.asarray(b), axis=-1), 1.0, rtol=0, atol=1e-13)


def test_the_key_query_map_is_the_softmax_of_its_scaled_logits():
    """NumPy from the equation, on the same draws (the map's key split as the function splits it)."""
    key, n, d = jax.random.key(5), 48, 64
    kq, kk = jax.random.split(key)
    q, k = (2.0 * np.asarray(jax.random.normal(p, (n, 1, d), jnp.float64))[:, 0] for p in (kq, kk))
    logits = q @ k.T / np.sqrt(d)
    expected = np.exp(logits - logits.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(maps.key_query_map(key, n, d, 2.0)), expected, rtol=1e-12)


def test_the_metrics_equal_numpy_from_the_equations():
    rng = np.random.default_rng(0)
    n, d = 40, 56
    g = rng.normal(size=(n, n))
    a = np.exp(g) / np.exp(g).sum(axis=-1, keepdims=True)
    z = rng.normal(size=(n, d))
    with jax.enable_x64(True):
        got = {k: float(v) for k, v in study.metrics(jnp.asarray(a), jnp.asarray(z)).items()}

    def sr(m):
        s = np.linalg.svd(m, compute_uv=False)
        return np.sum(s**2) / s[0] ** 2

    fixed = (a - np.ones((n, n)) / n) @ z  # the paper's fix, written out
    out = a @ z
    s = np.linalg.svd(a, compute_uv=False)
    expected = {
        "sigma_1": s[0],
        "sigma_2": s[1],
        "sigma_3": s[2],
        "stable_rank_map": sr(a),
        "stable_rank_output": sr(out),
        "stable_rank_fixed": sr(fixed),
        "stable_rank_values": sr(z),
        "residual_output": np.linalg.norm(out - out.mean(axis=0)) / np.linalg.norm(out),
        "logit_variance": np.mean(g.var(axis=-1, ddof=1)),
        "row_sum_error": np.max(np.abs(a.sum(axis=-1) - 1)),
    }
    assert set(got) == set(study.METRICS) == set(expected)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-10, abs=1e-15), name


def _summary(values_by_model: dict, lengths, seeds: int) -> dict:
    """A summary from synthetic measurements `{model: {metric: [n][seed]}}` with its rows."""
    derived = summary.derive(
        {
            "models": list(values_by_model),
            "lengths": list(lengths),
            "seeds": seeds,
            "values": values_by_model,
        }
    )
    derived["predictions"] = checks.predictions(derived)
    return derived


def _values(
    lengths,
    seeds,
    rng,
    *,
    gap_slope,
    share_slope,
    gain,
    fixed_slope,
    sigma_2_slope=-0.5,
    input_slope=1.0,
):
    """Synthetic per-length, per-seed metrics with the given laws and 2% lognormal noise."""
    n = np.asarray(lengths, float)[:, None]

    def law(scale, slope):
        return (
            scale * (n / n[0]) ** slope * np.exp(0.02 * rng.normal(size=(len(lengths), seeds)))
        ).tolist()

    sigma_2 = law(0.3, sigma_2_slope)
    inputs = np.asarray(law(n[0, 0] / 4, input_slope))
    output = (np.asarray(law(8.0 / n[0, 0], share_slope)) * inputs).tolist()  # sr(A Z) / sr(Z)
    return {
        "sigma_1": np.ones((len(lengths), seeds)).tolist(),
        "sigma_2": np.asarray(law(0.3, gap_slope)).tolist() if gap_slope is not None else sigma_2,
        "sigma_3": sigma_2,
        "stable_rank_map": law(2.0, 0.0),
        "stable_rank_output": output,
        "stable_rank_fixed": law(gain, fixed_slope),
        "stable_rank_values": inputs.tolist(),
        "residual_output": law(0.7, 0.0),
        "logit_variance": law(math.log(2), 0.0),
        "row_sum_error": np.zeros((len(lengths), seeds)).tolist(),
    }


LENGTHS, SEEDS = (64, 128, 256, 512), 10


def _verdicts(model="markov", **laws) -> dict:
    values = _values(LENGTHS, SEEDS, np.random.default_rng(1), **laws)
    rows = _summary({model: values}, LENGTHS, SEEDS)["predictions"]
    return {row["name"].split(" (")[0]: row["verdict"] for row in rows}


TRUE_LAWS = dict(gap_slope=-0.5, share_slope=-1.0, gain=20.0, fixed_slope=1.0)


def test_every_row_passes_where_its_claim_holds():
    assert set(_verdicts(**TRUE_LAWS).values()) == {"pass"}


@pytest.mark.parametrize(
    "law,row",
    [
        ({"gap_slope": 0.1}, "the gap between sigma_1 and sigma_2 opens as n grows"),
        (
            {"share_slope": 0.05},
            "rank collapse in width: the output keeps a falling share of its input's rank",
        ),
        ({"fixed_slope": -0.2}, "removing the outlier slows the collapse in width"),
        (
            {"gap_slope": None, "sigma_2_slope": -0.3},
            "sigma_2(A) falls with n at the exponent of the bulk edge 2 sqrt((e^v - 1) / n)",
        ),
        ({"fixed_slope": 0.6}, "with the fix the output's stable rank grows like n"),
    ],
)
def test_each_row_fails_where_its_claim_is_false(law, row):
    verdicts = _verdicts(**{**TRUE_LAWS, **law})
    assert verdicts[row] == "fail"


def test_the_collapse_is_read_against_the_inputs_rank_not_n():
    """An input whose stable rank grows like n^0.3 (not like n) and an output that keeps all of it: no collapse,
    though the output's rank over n falls like n^-0.7."""
    verdicts = _verdicts(**{**TRUE_LAWS, "share_slope": 0.0, "input_slope": 0.3})
    assert (
        verdicts["rank collapse in width: the output keeps a falling share of its input's rank"]
        == "fail"
    )


@pytest.mark.parametrize("slope,verdict", [(-1.5, "pass"), (-0.5, "fail")])
def test_xaviers_bulk_edge_falls_like_n_to_the_minus_three_halves(slope, verdict):
    """With Xavier's weights the logit variance is 1/d^2, d proportional to n: the edge 2 sqrt((e^v - 1) / n)
    falls like n^(-3/2), and a fixed-variance slope (-1/2) is a fail there."""
    verdicts = _verdicts(
        "key_query_xavier", **{**TRUE_LAWS, "gap_slope": None, "sigma_2_slope": slope}
    )
    assert (
        verdicts["sigma_2(A) falls with n at the exponent of the bulk edge 2 sqrt((e^v - 1) / n)"]
        == verdict
    )


def test_identity_attention_keeps_the_rank_and_fails_the_width_rows():
    """Attention replaced by the identity: the output keeps all of its input's rank and sigma_2 / sigma_1 = 1
    at every n (slopes exactly 0, which show neither a collapse nor a gap opening; measured against n
    instead, sr(Z) / n falls towards 1/4 at these lengths and would pass)."""
    rng = np.random.default_rng(2)
    values = {m: [] for m in study.METRICS}
    with jax.enable_x64(True):
        for n in LENGTHS:
            per = [
                study.metrics(jnp.eye(n), jnp.asarray(rng.normal(size=(n, n))))
                for _ in range(SEEDS)
            ]
            for m in study.METRICS:
                values[m].append([float(p[m]) for p in per])
    rows = _summary({"markov": values}, LENGTHS, SEEDS)["predictions"]
    verdicts = {row["name"].split(" (")[0]: row["verdict"] for row in rows}
    assert (
        verdicts["rank collapse in width: the output keeps a falling share of its input's rank"]
        != "pass"
    )
    assert verdicts["the gap between sigma_1 and sigma_2 opens as n grows"] == "fail"


def band_map(n: int, width: int) -> np.ndarray:
    """Uniform causal attention over the last `width` tokens: row-stochastic, no outlier."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    band = ((j <= i) & (j > i - width)).astype(float)
    return band / band.sum(axis=-1, keepdims=True)


def test_a_local_window_map_opens_no_gap_and_fails_the_width_rows():
    """A map with no outlier (uniform over a window of 8 keys): sigma_2 / sigma_1 stays near 1 and the output
    keeps its share of the input's rank, so the gap and collapse rows must not pass on it, and the fix
    (which removes an outlier that is not there) must not be credited."""
    rng = np.random.default_rng(4)
    values = {m: [] for m in study.METRICS}
    with jax.enable_x64(True):
        for n in LENGTHS:
            a = jnp.asarray(band_map(n, 8))
            per = [study.metrics(a, jnp.asarray(rng.normal(size=(n, n)))) for _ in range(SEEDS)]
            for m in study.METRICS:
                values[m].append([float(p[m]) for p in per])
    rows = _summary({"key_query": values}, LENGTHS, SEEDS)["predictions"]
    verdicts = {row["name"].split(" (")[0]: row["verdict"] for row in rows}
    assert verdicts["the gap between sigma_1 and sigma_2 opens as n grows"] == "fail"
    assert (
        verdicts["rank collapse in width: the output keeps a falling share of its input's rank"]
        != "pass"
    )
    assert verdicts["removing the outlier slows the collapse in width"] != "pass"


def test_fewer_seeds_than_a_verdict_needs_are_not_measured():
    values = _values(LENGTHS, 5, np.random.default_rng(1), **TRUE_LAWS)
    rows = _summary({"markov": values}, LENGTHS, 5)["predictions"]
    assert {r["verdict"] for r in rows[1:]} == {"not measured"}  # all but the identity row


def test_a_map_whose_rows_do_not_sum_to_one_fails_the_sanity_row():
    values = _values(LENGTHS, SEEDS, np.random.default_rng(1), **TRUE_LAWS)
    values["row_sum_error"][-1][3] = 1e-6
    rows = _summary({"markov": values}, LENGTHS, SEEDS)["predictions"]
    assert rows[0]["kind"] == "sanity" and rows[0]["verdict"] == "fail"


def test_config_errors_name_the_key():
    config = width_config.get_config()
    for key, bad, match in [
        ("width_ratio", 2.0, "width_ratio"),
        ("models", ("markov", "bogus"), "config.models"),
        ("lengths", (64,), "config.lengths"),
        ("num_seeds", 1, "num_seeds"),
        ("logit_variance", 4000.0, "underflow"),
        ("weight_std", 8.0, "underflow"),
    ]:
        broken = ConfigDict(copy.deepcopy(config.to_dict()))
        broken[key] = bad
        with pytest.raises(ValueError, match=match):
            study.specs(broken)


def test_the_slopes_are_least_squares_fits_of_the_logs():
    lengths = [64, 128, 256, 1024]
    values = np.array([[3.0 * n**-0.5 * (1 + 0.01 * s) for s in range(3)] for n in lengths])
    slopes = summary.log_slopes(lengths, values)
    for s in range(3):
        expected = np.polyfit(np.log(lengths), np.log(values[:, s]), 1)[0]
        assert slopes[s] == pytest.approx(expected, rel=1e-12)
    assert stats.number(stats.interval(slopes)["mean"]) == pytest.approx(-0.5, abs=1e-12)


def test_xaviers_gap_is_decided_at_half_its_own_edge_exponent():
    """With Xavier's weights a gap opens like n^(-3/2): a slope of -1/2 is nearer to no gap's 0 than to that,
    so it fails there (it passes at a fixed logit variance, where the edge's exponent is -1/2)."""
    row = "the gap between sigma_1 and sigma_2 opens as n grows"
    assert _verdicts("key_query_xavier", **{**TRUE_LAWS, "gap_slope": -0.5})[row] == "fail"
    assert _verdicts("key_query", **{**TRUE_LAWS, "gap_slope": -0.5})[row] == "pass"
