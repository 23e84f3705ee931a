"""The pretrained study's aggregation (`study.accumulate`, `summary.aggregate`, `summary.derive`) on
synthetic rows whose axes have distinct sizes (4 layers, 3 heads, 6 sentences in 2 length groups, 2 path
lengths of 7 paths each), against numbers computed here with NumPy from the docstrings' equations.

With every axis of a different size, a mean over the wrong axis has the wrong length; the data are drawn so
that a median taken as a mean, a worst case taken as a mean, exp of a sum of logs taken for exp of their
mean, or a log in another base all give other numbers (asserted below, so the test can tell).
"""

import math

import numpy as np
import pytest

from configs import pretrained as pretrained_config
from experiments.pretrained import study, summary

LAYERS, HEADS = 4, 3
COUNTS, GROUP_LENGTHS = (2, 4), (5, 7)  # 6 sentences
SENTENCES = sum(COUNTS)
PATH_LENGTHS, PATHS = (1, 3), 7
FLOOR = 1e-5  # constants.RESIDUAL_FLOOR
# Per-sentence decay factors of attention only: skewed, so their median is not their mean.
DECAY = np.array([0.1, 0.12, 0.15, 0.2, 0.5, 0.9])
SPREAD = np.array([0.5, 0.1, 0.3, 0.05, 0.2])  # of the largest |activation|, per hidden state
# Per sentence and layer, the first token's attention (mean over heads): layers 2 and 3 past the bottom two.
SINK = np.array([[0.1, 0.2, 0.6, 0.7]] * 3 + [[0.1, 0.2, 0.6, 0.4]] * 2 + [[0.1, 0.9, 0.3, 0.2]])
# Massive-activation hits per sentence (first token, first delimiter, every delimiter, all): shares skewed so
# that a pooled share is not the mean of the sentences' shares.
HITS = np.array(
    [[3, 0, 0, 3], [1, 1, 2, 8], [2, 0, 0, 2], [0, 1, 1, 5], [6, 0, 0, 6], [1, 0, 0, 4]]
)


def _five(x: float) -> float:
    """`x` to 5 significant digits, as the committed summary holds it."""
    return float(f"{x:.5g}")


five = np.vectorize(_five, otypes=[float])


def _variant(rng, decay, *, heads: int) -> dict:
    """One variant's metrics, each rounded as the summary rounds them (so rounding leaves them)."""
    layer = np.arange(LAYERS + 1)
    logs = (
        np.log(0.8) + layer * np.log(decay)[:, None] + rng.normal(0, 0.05, (SENTENCES, LAYERS + 1))
    )
    per_head = {
        m: five(rng.uniform(0.2, 0.9, (LAYERS, heads)))
        for m in ("entropy", "slem", "tau", "diagonal_mean")
    }
    return {
        **per_head,
        "attention_sink": {"sinks": five(rng.uniform(0.2, 0.95, (LAYERS, heads)))},
        "perron_sink": {"sinks": five(rng.uniform(0.2, 0.95, (LAYERS, heads)))},
        "uniform_sink": {"sinks": 0.17},
        "sentence_log_residual": logs,
        "residual": five(np.exp(logs).mean(0)),
        "log_residual": five(logs.mean(0)),
        "residual_abs": five(rng.uniform(1, 5, LAYERS + 1)),
        "shared_norm": five(rng.uniform(1, 5, LAYERS + 1)),
        "slem_over_tau": _five(-rng.uniform(1e-3, 1e-1)),
    }


def _data(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    only = _variant(rng, DECAY, heads=1)  # the surgery variants keep the mean over heads
    full = _variant(rng, rng.uniform(0.9, 0.99, SENTENCES), heads=HEADS)
    value = np.array([1.0, 150.0, 300.0, 200.0, 2.0])
    full.update(
        residual_content=five(rng.uniform(0.3, 0.9, LAYERS + 1)),
        first_norm_ratio=np.array([1.0, 3.0, 40.0, 12.0, 2.0]),
        path_first_max=np.array([0.5, 0.01, 5e-4, 1e-4]),
        pattern=rng.integers(0, 6, (LAYERS, HEADS)),
        massive_ratio=np.array([5.0, 2000.0, 3000.0, 1500.0, 10.0]),
        massive_value=value,
        massive_value_sq=five(value**2 * (1 + SPREAD**2)),
        massive_first=np.array([0.2, 0.5, 0.75, 0.25, 0.0]),
        massive_delimiter=np.array([0.1, 0.25, 0.0, 0.25, 0.5]),
        massive_count=np.array([0.0, 1.0, 2.0, 1.0, 0.0]),
        massive_dims=[[[5, 4], [2, 2]]] * (LAYERS + 1),
        # Every hit per sentence: on the first token, on delimiters, all; and per feature dimension.
        sentence_hits=HITS,
        sentence_hit_dims=[[[5, int(n - 1)], [2, 1]] for n in HITS[:, 3]],
        sentence_sink=SINK,
    )
    paths = five(rng.lognormal(-2, 1.5, (len(PATH_LENGTHS), PATHS)))
    return {"full": full, "attention_only": only, "paths": paths}


def _rows(d: dict) -> list[dict]:
    model = {"metric": "model", "num_layers": LAYERS, "num_heads": HEADS, "num_kv_heads": 1}
    model |= {"causal": True, "norm": "pre", "family": "llama"}
    rows = []
    for name in ("full", "attention_only"):
        base = {"part": "depth", "variant": name}
        groups = {"metric": "groups", "lengths": list(GROUP_LENGTHS), "counts": list(COUNTS)}
        groups["first_tokens"] = [["The", 4], ["A", 2]]
        rows += [{**base, **model}, {**base, **groups}]
        for metric, values in d[name].items():
            if isinstance(values, dict):
                rows += [
                    {**base, "metric": metric, "sink": c, "values": np.asarray(v).tolist()}
                    for c, v in values.items()
                ]
            elif metric == "pattern":
                rows.append({**base, "metric": metric, "values": values.tolist()})
            elif np.ndim(values) == 0:
                rows.append({**base, "metric": metric, "value": values})
            else:
                rows.append({**base, "metric": metric, "values": np.asarray(values).tolist()})
    base = {"part": "paths"}
    for k, values in zip(PATH_LENGTHS, d["paths"]):
        rows.append({**base, "metric": "path_residual", "length": k, "values": values.tolist()})
    rows.append({**base, "metric": "input_residual", "value": 0.9})
    rows.append({**base, "metric": "path_sentences", "value": 3})
    return rows


@pytest.fixture(scope="module")
def case():
    d = _data()
    return d, summary.summarize(_rows(d), pretrained_config.get_config("causal_smoke"))


def _rate(logs) -> float:
    """A sentence's decay factor per layer: exp of the least-squares slope of log r_l over l = 1..L."""
    layer, y = np.arange(1, LAYERS + 1), np.asarray(logs[1:])
    slope = np.sum((layer - layer.mean()) * (y - y.mean())) / np.sum((layer - layer.mean()) ** 2)
    return _five(math.exp(slope))


def _geometric_mean(x) -> float:
    return math.exp(np.mean(np.log(x)))


def test_the_synthetic_axes_have_distinct_sizes():
    sizes = (LAYERS, HEADS, SENTENCES, LAYERS + 1, len(PATH_LENGTHS), PATHS)
    assert len(set(sizes)) == len(sizes) and min(sizes) >= 2


def test_head_means_average_over_heads_per_layer(case):
    d, s = case
    assert s["sentences"] == SENTENCES and s["variant_names"] == ["full", "attention_only"]
    for name in ("full", "attention_only"):
        means = s["head_means"][name]
        for metric in ("entropy", "slem", "tau", "diagonal_mean"):
            want = [np.mean(d[name][metric][layer]) for layer in range(LAYERS)]
            np.testing.assert_allclose(means[metric], want, rtol=1e-12)
        sinks = d[name]["attention_sink"]["sinks"]
        want = [np.mean(sinks[layer]) for layer in range(LAYERS)]
        np.testing.assert_allclose(means["attention_sink"]["sinks"], want, rtol=1e-12)
        np.testing.assert_allclose(means["gap"], 1 - np.asarray(means["slem"]), rtol=1e-12)


def test_collapse_rates_median_over_sentences_and_geometric_means_over_layers(case):
    d, s = case
    v, c = d["attention_only"], s["collapse"]["attention_only"]
    g = np.exp(v["log_residual"])  # the geometric mean over sentences of r_l (natural log)
    ratios = [math.log(g[i]) / math.log(g[i - 1]) for i in range(2, LAYERS + 1) if g[i] >= FLOOR]
    np.testing.assert_allclose(c["log_ratios"], ratios, rtol=1e-12)
    assert c["worst"] == pytest.approx(min(ratios), rel=1e-12)
    assert c["rate"] == pytest.approx((g[LAYERS] / g[0]) ** (1 / LAYERS), rel=1e-12)
    rates = [_rate(logs) for logs in v["sentence_log_residual"]]
    assert c["sentences"] == SENTENCES
    assert c["median"] == pytest.approx(np.median(rates), rel=1e-12)
    assert abs(np.median(rates) - np.mean(rates)) > 0.1  # skewed: a mean would differ
    np.testing.assert_allclose(c["interval"], np.quantile(rates, (0.05, 0.95)), rtol=1e-12)
    # The maps' |lambda_2| and tau: geometric means over the (all resolved) layers of the head means.
    slem, tau = _geometric_mean(v["slem"][:, 0]), _geometric_mean(v["tau"][:, 0])
    assert (c["slem"], c["tau"]) == (pytest.approx(slem, rel=1e-12), pytest.approx(tau, rel=1e-12))
    assert c["place"] == (
        "below" if c["median"] < slem else "above" if c["median"] > tau else "between"
    )
    assert c["overflow"] is None
    assert c["ratio"] == pytest.approx(v["residual"][-1] / v["residual"][0], rel=1e-12)
    # r_L per sentence: a geometric mean over sentences and its interval on the log scale.
    last = np.asarray(v["sentence_log_residual"])[:, -1]
    assert c["end"]["mean"] == pytest.approx(math.exp(np.mean(last)), rel=1e-4)
    half = 2.5705818 * np.std(last, ddof=1) / math.sqrt(SENTENCES)  # t_(0.975, 5)
    assert c["end"]["high"] == pytest.approx(math.exp(np.mean(last) + half), rel=1e-4)


def test_sinks_heads_and_causal_readings_of_the_full_model(case):
    d, s = case
    full = d["full"]
    mass = np.array([np.mean(row) for row in full["attention_sink"]["sinks"]])  # [L]
    sinks = s["sinks"]
    assert sinks["mean"] == pytest.approx(np.mean(mass), rel=1e-12)
    assert sinks["top"] == int(np.argmax(mass)) and sinks["top_mass"] == pytest.approx(mass.max())
    assert sinks["fraction"] == pytest.approx(np.mean(mass[2:] > 0.5))
    per_sentence = np.mean(SINK[:, 2:] > 0.5, axis=1)  # 1, 1, 1, 0.5, 0.5, 0
    assert sinks["sentence_fraction"]["mean"] == pytest.approx(np.mean(per_sentence), rel=1e-12)
    assert sinks["sentence_fraction"]["n"] == SENTENCES
    np.testing.assert_allclose(sinks["bottom"], mass[:2], rtol=1e-12)
    perron = np.mean([np.mean(row) for row in full["perron_sink"]["sinks"]])
    assert sinks["perron"] == pytest.approx(perron, rel=1e-12)
    causal = s["causal_readings"]
    assert causal["diagonal"] == pytest.approx(np.mean(full["diagonal_mean"]), rel=1e-12)
    assert causal["slem"] == pytest.approx(np.mean(full["slem"]), rel=1e-12)
    assert causal["first"] == 2  # the first layer whose product's rows are within 1e-3 of e_1
    heads = s["heads"]
    assert len(heads) == LAYERS
    for layer, row in enumerate(heads):
        sink_row, entropy_row = full["attention_sink"]["sinks"][layer], full["entropy"][layer]
        assert row["sink_head"] == int(np.argmax(sink_row))
        assert row["sink_mass"] == pytest.approx(np.max(sink_row))
        assert row["sharpest_head"] == int(np.argmin(entropy_row))
        assert row["entropy"] == pytest.approx(np.min(entropy_row))
        assert sum(n for _, n in row["patterns"]) == HEADS
    # The bound is the worst (largest) |lambda_2| - tau over the variants, not their mean.
    worst = max(full["slem_over_tau"], d["attention_only"]["slem_over_tau"])
    assert s["bound"] == worst


def test_surgery_and_absolute_readings(case):
    d, s = case
    content = d["full"]["residual_content"]
    keeps = s["surgery"]["keeps"]
    assert keeps["ratio"] == pytest.approx(content[-1] / content[0], rel=1e-12)
    assert keeps["low"] == content.min() and keeps["low_layer"] == int(np.argmin(content))
    g = np.exp(d["attention_only"]["log_residual"])  # r as the geometric mean over sentences
    (fall,) = [f for f in s["absolute"]["falls"] if f["variant"] == "attention_only"]
    assert fall["factor"] == pytest.approx(g[0] / g[-1], rel=1e-12)
    first = s["absolute"]["first_norm"]
    assert (first["layer"], first["ratio"], first["massive"]) == (2, 40.0, True)


def test_massive_readings_take_medians_and_means_over_the_massive_layers(case):
    d, s = case
    m = s["massive"]
    assert m["layers"] == [1, 2, 3] and m["top"] == 2
    spread = np.sqrt(d["full"]["massive_value_sq"] - d["full"]["massive_value"] ** 2)
    spread = spread / d["full"]["massive_value"]
    np.testing.assert_allclose(spread, SPREAD, rtol=1e-4)
    assert m["spread"] == pytest.approx(np.median(spread[1:4]), rel=1e-12)
    assert np.max(spread[1:4]) > 1.5 * np.median(spread[1:4])  # the worst layer would differ
    # Every hit: each sentence's share on the first token or a delimiter, then its mean over sentences.
    hits = m["hits"]
    share = (HITS[:, 0] + HITS[:, 1]) / HITS[:, 3]  # the first token and the first delimiter
    assert hits["location"]["mean"] == pytest.approx(np.mean(share), rel=1e-12)
    pooled = (HITS[:, 0].sum() + HITS[:, 1].sum()) / HITS[:, 3].sum()
    assert abs(pooled - np.mean(share)) > 0.05  # a pooled share would differ
    assert hits["first"] == pytest.approx(HITS[:, 0].sum() / HITS[:, 3].sum(), rel=1e-12)
    other = 1 - (HITS[:, 0].sum() + HITS[:, 2].sum()) / HITS[:, 3].sum()
    assert hits["other"] == pytest.approx(other, rel=1e-12)
    assert (hits["hits"], hits["sentences"]) == (int(HITS[:, 3].sum()), SENTENCES)
    # Dimensions chosen on sentences 0, 2, 4 and tested on 1, 3, 5: dimension 5 holds all but one hit.
    assert hits["dims"] == [5, 2]
    assert hits["dims_share"]["mean"] == pytest.approx(1.0, rel=1e-12)


def test_path_readings_are_medians_over_the_paths_of_each_length(case):
    d, s = case
    p = s["path_readings"]
    medians = [np.median(row) for row in d["paths"]]
    np.testing.assert_allclose(p["medians"], medians, rtol=1e-12)
    assert all(abs(np.median(r) - np.mean(r)) > 0.01 * np.mean(r) for r in d["paths"])
    assert p["counts"] == [PATHS] * len(PATH_LENGTHS)
    assert p["long_ratio"] == pytest.approx(medians[-1] / medians[0], rel=1e-12)
    for got, row in zip(p["quantiles"], d["paths"]):
        np.testing.assert_allclose(got, np.percentile(row, [10, 25, 50, 75, 90]), rtol=1e-12)


def test_accumulate_sums_over_groups_keeps_the_worst_and_every_sentence():
    """Over two groups of different sizes: sums add, worst cases take the max, per-sentence rows append."""
    rng = np.random.default_rng(1)
    groups = [
        {
            "entropy": rng.uniform(size=(LAYERS, HEADS)),
            "slem_over_tau": np.float64(w),
            "sentence_log_residual": rng.normal(size=(n, LAYERS + 1)),
        }
        for n, w in zip(COUNTS, (-0.01, -0.03))
    ]
    total = {}
    for part in groups:
        total = study.accumulate(total, part)
    np.testing.assert_allclose(total["entropy"], groups[0]["entropy"] + groups[1]["entropy"])
    assert total["slem_over_tau"] == -0.01
    np.testing.assert_array_equal(
        total["sentence_log_residual"],
        np.concatenate([g["sentence_log_residual"] for g in groups]),
    )
