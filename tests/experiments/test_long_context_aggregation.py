"""The long-context study's aggregation (`summary.summarize`) on synthetic rows whose axes have distinct
sizes (3 segments, 4 layers, 6 heads, 2 lengths, 5 positions past the cache), against the module
docstring's equations written here with NumPy: an interval over layers instead of segments has the wrong
`n`, a mean over the wrong axis the wrong value.
"""

import math

import numpy as np
import pytest

from configs import long_context as long_context_config
from experiments.long_context import checks, interventions, summary
from experiments.long_context.study import STATISTICS
from tests.intervals import assert_interval, t_interval

SEGMENTS, LAYERS, HEADS = 3, 4, 6
LENGTHS = (8, 16)
CACHE, POSITIONS = 6, 5  # nll at positions C-1..C+K-1: K + 1 values, the first before eviction
SINKS = (1, 4)
EDITS = interventions.EDITS
FORMATION = (1, 2, 1)  # l* per segment


def _config():
    config = long_context_config.get_config("smoke")
    config.statistics.update(lengths=LENGTHS, num_segments=SEGMENTS)
    config.text.num_segments = SEGMENTS
    config.stream.update(caches=(CACHE,), sinks=SINKS, positions=POSITIONS, recompute=(CACHE,))
    return config


def _log_interval(values) -> dict:
    x = t_interval(np.log(values))
    return {**{k: math.exp(x[k]) for k in ("mean", "low", "high")}, "n": x["n"]}


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    stat = {m: rng.uniform(0.1, 0.9, (SEGMENTS, len(LENGTHS), LAYERS, HEADS)) for m in STATISTICS}
    variants = ["window", *(f"sink{n}" for n in SINKS), "full", "newline4"]
    nll = {v: rng.gamma(2.0, 1.5, (SEGMENTS, POSITIONS + 1)) for v in variants + ["recompute"]}
    for v in nll:  # before eviction every variant equals window attention but for a small gap
        nll[v][:, 0] = nll["window"][:, 0] + (0.0 if v == "newline4" else 1e-6)
    mass = {e: rng.uniform(0.0, 0.6, (SEGMENTS, LAYERS)) for e in EDITS}
    other = {e: rng.uniform(0.0, 0.3, (SEGMENTS, LAYERS)) for e in EDITS}
    edit_nll = {e: rng.uniform(2.0, 4.0, SEGMENTS) for e in EDITS}
    spread = {
        e: rng.uniform(0.1, 0.5, (SEGMENTS, LAYERS))
        for e in ("none", "remove_formation", "remove_all")
    }
    rows = []
    for s in range(SEGMENTS):
        base = {"part": "statistics", "segment": s, "cache": 0}
        for i, t in enumerate(LENGTHS):
            for m in STATISTICS:
                rows.append({**base, "metric": m, "length": t, "values": stat[m][s, i].tolist()})
        for tok in ("all", "without_first"):
            values = rng.uniform(0.2, 1.0, LAYERS + 1).tolist()
            rows.append({**base, "metric": "residual", "tokens": tok, "values": values})
        for v, x in nll.items():
            part = "recompute" if v == "recompute" else "stream"
            row = {"part": part, "segment": -1, "cache": CACHE, "metric": "nll", "variant": v}
            rows.append({**row, "index": s, "values": x[s].tolist()})
        base = {"part": "edits", "segment": s, "cache": 0}
        rows.append(
            {
                **base,
                "metric": "sink",
                "formation_layer": FORMATION[s],
                "unigram_nll": 5.0 + s,
                "bos": False,
                "sun_layer": 1,
                "sun_features": [3],
                "sun_positions": 1,
            }
        )
        for inputs in ("text", "random"):
            rows.append({**base, "metric": "sink_rate", "inputs": inputs, "value": 0.1 * (s + 1)})
        for e in EDITS:
            row = {"metric": "edit", "edit": e, "nll": edit_nll[e][s]}
            rows.append({**base, **row, "key0_mass": mass[e][s].tolist()})
            rows[-1].update(other_max=other[e][s].tolist(), sink_token_mass=mass[e][s].tolist())
        for e, x in spread.items():
            rows.append({**base, "metric": "spread", "edit": e, "values": x[s].tolist()})
    data = {"stat": stat, "nll": nll, "mass": mass, "other": other, "edit_nll": edit_nll}
    return {**data, "spread": spread}, summary.summarize(rows, _config())


def test_statistics_are_intervals_over_segments_of_means_over_layers_and_heads(case):
    d, s = case
    for m in STATISTICS:
        for i in range(len(LENGTHS)):
            want = t_interval(d["stat"][m][:, i].mean(axis=(1, 2)))
            assert_interval(s["statistics"]["model_mean"][m][i], want)
            for layer in range(LAYERS):
                want = t_interval(d["stat"][m][:, i, layer].mean(axis=-1))
                assert_interval(s["statistics"]["per_layer"][m][i][layer], want)


def test_stream_perplexities_and_ratios_are_per_segment_after_eviction(case):
    d, s = case
    cache = s["stream"]["caches"][str(CACHE)]
    ppl = {v: np.exp(x[:, 1:].mean(axis=1)) for v, x in d["nll"].items()}  # positions >= C
    assert_interval(cache["ppl"]["window"], _log_interval(ppl["window"]))
    for n in SINKS:
        want = _log_interval(ppl["window"] / ppl[f"sink{n}"])
        assert_interval(cache["window_over_sinks"][str(n)], want)
    assert_interval(
        cache["over_recompute"]["sink4"], _log_interval(ppl["sink4"] / ppl["recompute"])
    )
    assert_interval(cache["over_full"]["window"], _log_interval(ppl["window"] / ppl["full"]))
    assert_interval(cache["newline_over_sinks"], _log_interval(ppl["newline4"] / ppl["sink4"]))
    assert cache["pre_eviction_gap"] == pytest.approx(
        1e-6
    )  # the newline arm (other tokens) left out


def test_edit_readings_are_per_segment_over_the_sink_layers(case):
    d, s = case
    ed = s["edits"]
    for e in ("remove_formation", "first_newline"):
        relocation = [
            d["other"][e][g, FORMATION[g] :].mean() / d["mass"]["none"][g, FORMATION[g] :].mean()
            for g in range(SEGMENTS)
        ]
        assert_interval(ed["edits"][e]["relocation"], _log_interval(relocation))
        margin = [
            (d["mass"][e][g] - d["other"][e][g])[FORMATION[g] :].mean() for g in range(SEGMENTS)
        ]
        assert_interval(ed["edits"][e]["first_margin"], t_interval(margin))
        ratio = np.exp(d["edit_nll"][e] - d["edit_nll"]["none"])
        assert_interval(ed["edits"][e]["ppl_ratio"], _log_interval(ratio))
    unigram = np.exp(d["edit_nll"]["massive_zero"] - (5.0 + np.arange(SEGMENTS)))
    assert_interval(ed["zero_over_unigram"], _log_interval(unigram))
    nll = d["edit_nll"]
    harmless = np.abs(nll["massive_mean"] - nll["none"]) - np.abs(nll["massive_swap"] - nll["none"])
    assert_interval(ed["mean_minus_swap"], t_interval(harmless))
    spread = d["spread"]["remove_all"][:, -1] / d["spread"]["none"][:, -1]  # the last layer
    assert_interval(ed["spread_ratio"]["remove_all"], _log_interval(spread))
    # s = ln(ppl ratio of zeroing v_0) / ln(ppl ratio of removing key 0): a ratio of nll differences
    share = (nll["value_zero"] - nll["none"]) / (nll["remove_formation"] - nll["none"])
    assert_interval(checks.value_share(ed["edits"]), t_interval(share))
    assert_interval(ed["sink_rate"]["text"]["interval"], t_interval([0.1, 0.2, 0.3]))
