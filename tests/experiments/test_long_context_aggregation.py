"""The long-context study's aggregation (`summary.aggregate`, `summary.derive`) on synthetic rows whose
axes have distinct sizes (3 segments, 4 layers, 6 heads, 2 lengths, 2 windows, 2 ablated layers), against
summaries computed here with NumPy from the module docstring's equations.

With every axis of a different size, an interval taken over layers instead of segments has the wrong
`n`, a mean over the wrong axis the wrong length or value; the data are drawn so that the numbers a
transposed or mis-reduced aggregation gives also differ (asserted below, so the test can tell).
"""

import math

import numpy as np
import pytest

from configs import long_context as long_context_config
from experiments.long_context import summary
from experiments.long_context.study import STATISTICS
from tests.intervals import assert_interval, t_interval

SEGMENTS, LAYERS, HEADS = 3, 4, 6
LENGTHS = (8, 16)
T, BIN, WINDOWS, SINKS = 25, 10, (4, 8), (2,)  # nll has T - 1 = 24 positions, bins 0, 10, 20
POSITIONS = [8, 13, 18, 23]
ABLATED = (0, 2)
# Per-layer growth of the sink mass from the shortest to the longest length: three layers grow,
# the last falls by more than the others grow, so every segment's mean over layers falls.
LAYER_GROWTH = np.array([0.1, 0.05, 0.02, -0.4])


def ppl(nll) -> float:
    """Perplexity: exp of the mean nll."""
    return math.exp(sum(nll) / len(nll))


def _config():
    config = long_context_config.get_config("smoke")
    config.statistics.lengths = LENGTHS
    config.stream.update(length=T, windows=WINDOWS, sinks=SINKS, bin=BIN)
    return config


def _data(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    stat = {m: rng.uniform(0.1, 0.9, (SEGMENTS, len(LENGTHS), LAYERS, HEADS)) for m in STATISTICS}
    growth = LAYER_GROWTH + rng.normal(0, 0.01, (SEGMENTS, LAYERS))  # [segments, layers]
    stat["sink_mass"][:, -1] = stat["sink_mass"][:, 0] + growth[..., None]
    stat["sink_mass"][:, -1] += rng.normal(0, 0.01, (SEGMENTS, LAYERS, HEADS))
    variants = ["full"] + [
        f"{prefix}window_{w}" for w in WINDOWS for prefix in ["", *(f"sink{n}_" for n in SINKS)]
    ]
    return {
        "stat": stat,
        "residual": {tok: rng.uniform(0.2, 1.0, (SEGMENTS, LAYERS + 1)) for tok in ("all", "wf")},
        "prefix_gap": 3e-5,
        "nll": {v: rng.gamma(2.0, 1.5, (SEGMENTS, T - 1)) for v in variants},
        "recompute": {w: rng.gamma(2.0, 1.5, (SEGMENTS, len(POSITIONS))) for w in WINDOWS},
        "ablation": {
            "none": rng.uniform(2, 3, SEGMENTS),
            "layer": rng.uniform(2, 5, (SEGMENTS, len(ABLATED))),
            "all": rng.uniform(4, 6, SEGMENTS),
        },
    }


def _rows(d: dict) -> list[dict]:
    rows = []
    for s in range(SEGMENTS):
        base = {"part": "statistics", "segment": s}
        for i, t in enumerate(LENGTHS):
            for m in STATISTICS:
                values = d["stat"][m][s, i].tolist()
                rows.append({**base, "metric": m, "length": t, "values": values})
        for tok, key in (("all", "all"), ("without_first", "wf")):
            values = d["residual"][key][s].tolist()
            rows.append({**base, "metric": "residual", "tokens": tok, "values": values})
        if s == 0:
            rows.append(
                {**base, "metric": "prefix_gap", "length": LENGTHS[0], "value": d["prefix_gap"]}
            )
        base = {"part": "stream", "segment": s}
        rows.append({**base, "metric": "positions", "values": POSITIONS})
        for v, nll in d["nll"].items():
            rows.append({**base, "metric": "nll", "variant": v, "values": nll[s].tolist()})
        for w, nll in d["recompute"].items():
            rows.append(
                {**base, "metric": "nll_recompute", "variant": f"recompute_{w}", "window": w}
                | {"values": nll[s].tolist()}
            )
        base = {"part": "ablation", "segment": s, "metric": "nll"}
        rows.append({**base, "removed": "none", "layer": -1, "value": d["ablation"]["none"][s]})
        for j, layer in enumerate(ABLATED):
            value = d["ablation"]["layer"][s, j]
            rows.append({**base, "removed": "layer", "layer": layer, "value": value})
        rows.append({**base, "removed": "all", "layer": -1, "value": d["ablation"]["all"][s]})
    return rows


@pytest.fixture(scope="module")
def case():
    d = _data()
    return d, summary.summarize(_rows(d), _config())


def test_the_synthetic_axes_have_distinct_sizes():
    sizes = (SEGMENTS, LAYERS, HEADS, len(LENGTHS), LAYERS + 1)
    assert len(set(sizes)) == len(sizes) and min(sizes) >= 2
    assert len(ABLATED) not in (SEGMENTS, LAYERS) and len(WINDOWS) not in (SEGMENTS, LAYERS)


def test_statistics_are_intervals_over_segments_of_means_over_layers_and_heads(case):
    d, s = case
    st = s["statistics"]
    assert (st["num_layers"], st["num_heads"], st["lengths"]) == (LAYERS, HEADS, list(LENGTHS))
    for m in STATISTICS:
        a = d["stat"][m]
        for i in range(len(LENGTHS)):
            model = [np.mean(a[g, i]) for g in range(SEGMENTS)]
            assert_interval(st["model_mean"][m][i], t_interval(model))
            assert len(st["per_layer"][m][i]) == LAYERS
            for layer in range(LAYERS):
                means = [np.mean(a[g, i, layer]) for g in range(SEGMENTS)]
                assert_interval(st["per_layer"][m][i][layer], t_interval(means))


def test_sink_growth_is_over_segments_and_layers_growing_counts_layers(case):
    d, s = case
    sink = d["stat"]["sink_mass"]
    growth = [np.mean(sink[g, -1]) - np.mean(sink[g, 0]) for g in range(SEGMENTS)]
    assert_interval(s["statistics"]["sink_growth"], t_interval(growth))
    per_layer = [
        np.mean([np.mean(sink[g, -1, ly] - sink[g, 0, ly]) for g in range(SEGMENTS)])
        for ly in range(LAYERS)
    ]
    assert s["statistics"]["layers_growing"] == sum(x > 0 for x in per_layer) == 3
    # Counted over segments instead, no segment grows: the data tell the axes apart.
    assert sum(x > 0 for x in growth) == 0


def test_residual_ratios_are_intervals_over_segments_per_hidden_state(case):
    d, s = case
    for tok, key in (("all", "all"), ("without_first", "wf")):
        got = s["statistics"]["residual"][tok]
        assert len(got) == LAYERS + 1
        for layer in range(LAYERS + 1):
            assert_interval(got[layer], t_interval(d["residual"][key][:, layer]))
    assert s["statistics"]["prefix_gap"] == d["prefix_gap"]


def test_perplexities_are_exp_of_the_mean_nll_per_segment(case):
    d, s = case
    nll, sm = d["nll"], s["stream"]
    assert sm["bin_starts"] == [0, 10, 20] and sm["positions"] == POSITIONS
    for v in nll:
        bins = [(0, 10), (10, 20), (20, T - 1)]
        assert len(sm["ppl_bins"][v]) == len(bins)
        for k, (a, b) in enumerate(bins):
            want = t_interval([ppl(nll[v][g, a:b]) for g in range(SEGMENTS)])
            assert_interval(sm["ppl_bins"][v][k], want)
    assert_interval(sm["full_ppl"], t_interval([ppl(nll["full"][g]) for g in range(SEGMENTS)]))
    assert sm["full_ppl"]["mean"] < 20  # exp(sum of 24 nll) would be ~e^70


def test_window_ratios_and_the_early_gap(case):
    d, s = case
    nll, rec = d["nll"], d["recompute"]
    gaps = {}
    for w in WINDOWS:
        win = s["stream"]["windows"][str(w)]
        mine = [v for v in nll if v.endswith(f"window_{w}")]
        for v in mine:
            ratios = [ppl(nll[v][g, w:]) / ppl(nll["full"][g, w:]) for g in range(SEGMENTS)]
            assert_interval(win["beyond_ratio"][v], t_interval(ratios))
        for v in ["full", *mine]:
            at = [ppl(nll[v][g, POSITIONS]) for g in range(SEGMENTS)]
            ratios = [a / ppl(rec[w][g]) for g, a in enumerate(at)]
            assert_interval(win["sampled_ratio"][v], t_interval(ratios))
            assert_interval(win["sampled_ppl"][v], t_interval(at))
        recomputed = [ppl(rec[w][g]) for g in range(SEGMENTS)]
        assert_interval(win["sampled_ppl"][f"recompute_{w}"], t_interval(recomputed))
        diffs = [
            abs(nll[v][g, p] - nll["full"][g, p])
            for v in mine
            for g in range(SEGMENTS)
            for p in range(w)
        ]
        gaps[w] = max(diffs)
        assert win["early_gap"] == pytest.approx(gaps[w], rel=1e-12)
        assert gaps[w] > 1.5 * np.mean(diffs)  # the worst, not a mean
    assert s["early_gap"] == pytest.approx(max(gaps.values()), rel=1e-12)
    assert max(gaps.values()) > 1.01 * np.mean(list(gaps.values()))


def test_ablation_ratios_are_per_segment_exp_of_mean_nll(case):
    d, s = case
    ab, a = s["ablation"], d["ablation"]
    base = [math.exp(x) for x in a["none"]]
    assert_interval(ab["base_ppl"], t_interval(base))
    assert ab["layers"] == list(ABLATED) and len(ab["layer_ratio"]) == len(ABLATED)
    for j in range(len(ABLATED)):
        ratios = [math.exp(a["layer"][g, j]) / base[g] for g in range(SEGMENTS)]
        assert_interval(ab["layer_ratio"][j], t_interval(ratios))
    all_ratio = [math.exp(a["all"][g]) / base[g] for g in range(SEGMENTS)]
    assert_interval(ab["all_ratio"], t_interval(all_ratio))
