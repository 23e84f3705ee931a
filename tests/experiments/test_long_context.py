"""The long-context study (experiments.long_context): its measurements against step-by-step references on a
tiny llama, its readings against NumPy, and each row's decision rule passing where the paper's claim holds and
failing where it does not.

The study contract (end to end, on a tiny llama) runs in tests/experiments/lab/test_studies.py.
"""

import copy
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax.nn import edits as edits_lib
from attnjax.serialization import json_form
from configs import long_context as long_context_config
from experiments.lab import causal_lm as model_lib
from experiments.lab import text
from experiments.long_context import checks, interventions, streaming
from tests import tiny_checkpoint
from tests.paths import REPO, link_from, study_page


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3-layer tiny llama (`tests/tiny_checkpoint.py`) and random tokens `[2, 12]` over its vocabulary."""
    from attnjax import pretrained

    path = tiny_checkpoint.write(tmp_path_factory.mktemp("tiny"), layers=3)
    model, _ = pretrained.from_pretrained(str(path))
    tokens = jax.random.randint(jax.random.key(0), (2, 12), 0, tiny_checkpoint.VOCAB)
    return model, tokens


def _nll(logits, target) -> np.ndarray:
    """-log softmax(logits)[target] in float64, from logits `[B, V]` and targets `[B]`."""
    x = np.asarray(logits, np.float64)
    logp = x - x.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    return -logp[np.arange(len(target)), np.asarray(target)]


def test_cache_nll_is_the_sink_cache_fed_one_token_at_a_time(tiny):
    """Against the library's sink cache called step by step, each n prefilled apart: a wrong target
    alignment, prefill length, cache size or a prefill shared wrongly changes the values."""
    model, tokens = tiny
    cache, n_sinks = 5, (0, 2)
    got = np.asarray(streaming.cache_nll(model, tokens, n_sinks, cache))
    assert got.shape == (2, 2, tokens.shape[1] - cache)
    for n, row in zip(n_sinks, got):
        model.init_cache(tokens.shape[0], cache)
        sink = (n, cache - n)
        model(tokens[:, : cache - 1], decode=True, deterministic=True, sink_cache=sink)
        want = []
        for p in range(cache - 1, tokens.shape[1] - 1):
            logits = model(tokens[:, p : p + 1], decode=True, deterministic=True, sink_cache=sink)
            want.append(_nll(logits[:, -1], tokens[:, p + 1]))
        np.testing.assert_allclose(row, np.stack(want, 1), rtol=1e-5, atol=1e-6)
    assert np.abs(got[0, :, 1:] - got[1, :, 1:]).max() > 1e-3  # the variants differ after eviction


def test_full_and_recompute_nll_are_their_definitions(tiny):
    """full_nll: the full forward's next-token loss; recompute_nll: one forward per position over the
    `cache` tokens ending there (chunks of 3, so the padded last chunk is used too)."""
    model, tokens = tiny
    cache = 4
    logits = model(tokens)
    full = np.asarray(streaming.full_nll(model, tokens, cache - 1))
    want = np.stack(
        [_nll(logits[:, p], tokens[:, p + 1]) for p in range(cache - 1, tokens.shape[1] - 1)], 1
    )
    np.testing.assert_allclose(full, want, rtol=1e-5, atol=1e-6)
    got = np.asarray(streaming.recompute_nll(model, tokens, cache, chunk=3))
    want = np.stack(
        [
            _nll(model(tokens[:, p - cache + 1 : p + 1])[:, -1], tokens[:, p + 1])
            for p in range(cache - 1, tokens.shape[1] - 1)
        ],
        1,
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 0], full[:, 0], rtol=1e-5, atol=1e-6)  # window = the prefix
    # A model read after a <bos>: it takes the place of each window's oldest token.
    got = np.asarray(streaming.recompute_nll(model, tokens, cache, chunk=3, prefix=(5,)))
    want = [
        _nll(model(tokens[:, p - cache + 1 : p + 1].at[:, 0].set(5))[:, -1], tokens[:, p + 1])
        for p in range(cache - 1, tokens.shape[1] - 1)
    ]
    np.testing.assert_allclose(got, np.stack(want, 1), rtol=1e-5, atol=1e-6)


def test_cache_nll_refuses_a_cache_that_does_not_fit(tiny):
    model, tokens = tiny
    with pytest.raises(ValueError, match="0 <= n_sink < cache < T"):
        streaming.cache_nll(model, tokens, (0, 4), 4)
    with pytest.raises(ValueError, match="cache=12, T=12"):
        streaming.cache_nll(model, tokens, (0,), 12)


def test_formation_layer_is_the_half_maximum_onset():
    assert interventions.formation_layer([0.01, 0.1, 0.3, 0.5, 0.45]) == 2  # 0.3 >= 0.5 / 2
    assert interventions.formation_layer([0.6, 0.1, 0.2]) == 0
    assert interventions.formation_layer([0.0, 0.24, 0.26, 0.5]) == 2


def test_first_massive_marks_only_the_first_layer_with_sun_hits():
    hidden = np.ones((4, 1, 6, 8), np.float32)
    hidden[2, 0, 0, 3] = 2000.0  # >= 100 and >= 1000 x the median (1)
    hidden[3, 0, 0, 3] = 2500.0
    hidden[3, 0, 4, 1] = -3000.0
    hidden[1, 0, 2, 5] = 500.0  # >= 100 but not 1000 x the median
    layer, where = interventions.first_massive(jnp.asarray(hidden))
    assert layer == 2 and where.sum() == 1 and where[2, 0, 0, 3]
    layer, where = interventions.first_massive(jnp.ones((3, 1, 4, 4)))
    assert layer == -1 and not where.any()


def test_received_mass_averages_heads_and_the_rows_that_see_the_key():
    w = np.zeros((1, 1, 2, 3, 3))
    w[0, 0, :, 0, 0] = 1.0  # row 0: left out
    w[0, 0, 0, 1:, 0] = 1.0  # head 0: rows 1, 2 on key 0
    w[0, 0, 1, 1, 1] = 1.0  # head 1: row 1 on key 1, row 2 on key 2
    w[0, 0, 1, 2, 2] = 1.0
    # key 0 and 1: rows 1, 2 (4 head-rows); key 2: row 2 only (2 head-rows)
    np.testing.assert_allclose(interventions.received_mass(jnp.asarray(w)), [[0.5, 0.25, 0.5]])


def test_the_formation_edit_removes_key_0_from_those_layers_only(tiny):
    model, tokens = tiny
    edits = tuple(edits_lib.remove_keys(layer, [0]) for layer in (1, 2))
    before = interventions.forward(model, tokens[:1], ())[1]
    after = interventions.forward(model, tokens[:1], edits)[1]
    np.testing.assert_array_equal(np.asarray(after[1:, ..., 1:, 0]), 0.0)
    np.testing.assert_allclose(np.asarray(after[0]), np.asarray(before[0]), rtol=1e-6)
    # renormalised over the keys left (row 0 saw only key 0: nothing is left)
    np.testing.assert_allclose(np.asarray(after[1:, ..., 1:, :].sum(-1)), 1.0, rtol=1e-5)


def test_hits_are_classed_by_the_token_they_sit_on():
    hits = np.zeros((2, 1, 4, 3), bool)
    hits[:, 0, 0, 1] = True  # token 0 in both layers
    hits[1, 0, 2, 0] = True  # a period
    hits[1, 0, 3, 2] = True  # a word
    classes = interventions.hit_classes(hits, ["<bos>", " the", " .", " cat"])
    assert classes == {"first": 2, "delimiter": 1, "other": 1}


def test_text_is_deterministic_and_long_enough_for_the_default():
    a = text.long_text(("json", "heapq"))
    assert a == text.long_text(("json", "heapq")) and a.startswith(
        "JSON (JavaScript Object Notation)"
    )
    with pytest.raises(TypeError, match="one str"):
        text.long_text("json")
    tokens = np.arange(100)
    np.testing.assert_array_equal(text.segment(tokens, 1, 10, stride=20, seed=1), np.arange(40, 50))
    with pytest.raises(ValueError, match="the text has 100 tokens"):
        text.segment(tokens, 4, 30, stride=20)
    for variant in ("", "gemma3"):
        config = long_context_config.get_config(variant)
        # ~4 characters per token: the default's segments, each of its longest length.
        need = (config.text.num_segments - 1) * config.text.segment_stride + max(
            config.statistics.lengths
        )
        assert len(text.long_text(config.text.modules)) > 5 * need


# --------------------------------------------------------------------------
# The decision rules


def test_the_decision_rules_on_intervals():
    iv = {"mean": 2.0, "low": 1.5, "high": 3.0, "n": 10}
    assert checks.above(iv, 1.0) is True and checks.above(iv, 3.5) is False
    assert checks.above(iv, 2.0) is None  # straddles the threshold: not resolved, not a failure
    assert checks.within(iv, 1.48, 350) is True
    assert checks.within(iv, 3.5, 350) is False  # disjoint: below the range
    assert checks.within(iv, 2.0, 350) is None  # straddles the range's lower end
    nan = {"mean": 2.0, "low": "nan", "high": "nan", "n": 1}
    assert checks.above(nan, 1.0) is checks.within(nan, 1, 3) is checks.above(None, 1.0) is None


def _iv(mean, half=0.01):
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": 10}


def _edit(ratio=1.0, relocation=0.1, margin=0.4):
    return {
        "ppl_ratio": _iv(ratio),
        "ppl_ratio_values": [ratio * (1 + 0.01 * k) for k in range(10)],
        "relocation": _iv(relocation),
        "first_margin": _iv(margin),
    }


def _summary(bos=False):
    """A summary where every claim holds."""
    cache = {
        "window_over_sinks": {"1": _iv(3.0), "4": _iv(3.0)},
        "over_recompute": {"sink4": _iv(1.0), "window": _iv(3.0)},
        "newline_over_sinks": _iv(1.0),
        "pre_eviction_gap": 1e-6,
    }
    big = {**copy.deepcopy(cache), "over_recompute": {}, "newline_over_sinks": None}
    return {
        "statistics": {"lengths": [256, 8192], "prefix_gap": 1e-6},
        "stream": {"caches": {"64": cache, "256": big}, "positions": 128},
        "edits": {
            "segments": list(range(10)),
            "massive_segments": list(range(10)),
            "bos": bos,
            "sun_layer": 11,
            "sun_positions": 1.0,
            "zero_over_unigram": _iv(50.0),
            "mean_minus_swap": _iv(-0.01),
            "value_over_removal": _iv(0.8),
            "spread_ratio": {"remove_formation": _iv(1.5), "remove_all": _iv(1.3)},
            "edits": {
                "remove_formation": _edit(ratio=2.0),
                "remove_all": _edit(ratio=1.01, relocation=0.9),
                "massive_zero": _edit(ratio=1e4),
                "massive_mean": _edit(),
                "massive_swap": _edit(),
                "value_zero": _edit(ratio=1.1),
                "first_newline": _edit(),
                "first_random": _edit(),
            },
        },
    }


def _verdicts(s):
    return {p["name"]: p["verdict"] for p in checks.predictions(json_form(s))}


def _one(s, start):
    (verdict,) = [v for name, v in _verdicts(s).items() if name.startswith(start)]
    return verdict


def test_every_row_passes_where_the_claims_hold():
    with_bos = _verdicts(_summary(bos=True))
    assert len(with_bos) == 18
    assert {n for n, v in with_bos.items() if v != "pass"} == {
        "sinks grow with the context length",
        "setting them to their mean is harmless",  # <bos>'s state is the same for every input
    }
    without_bos = _verdicts(_summary())
    assert {n for n, v in without_bos.items() if v != "pass"} == {
        "sinks grow with the context length",
        "the sink stays at position 0 when the first token is replaced by a random text token",
        "without its first token (<bos>) a perturbation spreads further",
    }


def _set(path, value):
    """An edit of the summary that sets `path` (keys) to `value`."""

    def edit(s):
        for key in path[:-1]:
            s = s[key]
        s[path[-1]] = value

    return edit


BREAKS = [  # (row name prefix, edit that makes the claim false)
    (  # no blow-up at all: below the paper's range too (that row's own break is the next one)
        "window attention fails once the first tokens are evicted (C=256)",
        _set(("stream", "caches", "256", "window_over_sinks", "4"), _iv(0.9)),
    ),
    (
        "window attention fails once the first tokens are evicted (C=64)",
        _set(("stream", "caches", "64", "window_over_sinks", "4"), _iv(0.9)),
    ),
    (
        "the blow-up lies in the paper's range across models (C=256)",
        _set(("stream", "caches", "256", "window_over_sinks", "4"), _iv(1.2)),
    ),
    (
        "4 sinks + window nearly match re-computation",
        _set(("stream", "caches", "64", "over_recompute", "sink4"), _iv(1.1)),
    ),
    (
        "4 newlines as sinks recover like the first tokens",
        _set(("stream", "caches", "64", "newline_over_sinks"), _iv(1.2)),
    ),
    (
        "the sink stays at position 0 when the first token is replaced by a newline",
        _set(("edits", "edits", "first_newline", "first_margin"), _iv(-0.2)),
    ),
    (
        "the sink stays at position 0 when the first token is replaced by a random",
        _set(("edits", "edits", "first_random", "first_margin"), _iv(-0.2)),
    ),
    (
        "removing the sink from its formation layer on raises",
        _set(("edits", "edits", "remove_formation", "ppl_ratio"), _iv(0.95)),
    ),
    (
        "removing key 0 in every layer relocates",
        _set(("edits", "edits", "remove_all", "relocation"), _iv(0.2)),
    ),
    (
        "without the sink a perturbation spreads",
        _set(("edits", "spread_ratio", "remove_formation"), _iv(0.8)),
    ),
    (
        "without its first token (<bos>) a perturbation",
        _set(("edits", "spread_ratio", "remove_all"), _iv(0.8)),
    ),
    (
        "the sink's value carries less of its effect than its key",
        _set(("edits", "edits", "value_zero", "ppl_ratio_values"), [1.9, 1.85] * 5),
    ),
    ("setting the massive activations to zero", _set(("edits", "zero_over_unigram"), _iv(0.5))),
    ("setting them to their mean is harmless", _set(("edits", "mean_minus_swap"), _iv(0.1))),
    ("a T-token input's statistics", _set(("statistics", "prefix_gap"), 0.01)),
    (
        "every cache equals full attention before",
        _set(("stream", "caches", "64", "pre_eviction_gap"), 0.5),
    ),
]


@pytest.mark.parametrize("start, edit", BREAKS)
def test_each_row_fails_where_its_claim_does_not_hold(start, edit):
    s = copy.deepcopy(_summary(bos=not start.startswith("setting them to their mean")))
    edit(s)
    assert _one(s, start) == "fail"
    failed = {name for name, v in _verdicts(s).items() if v == "fail"}
    if start.startswith("window attention fails once the first tokens are evicted (C=256)"):
        failed.discard("the blow-up lies in the paper's range across models (C=256)")
    assert len(failed) == 1  # only that row


def test_a_moved_sink_invalidates_the_rows_that_rest_on_the_edit():
    s = copy.deepcopy(_summary())
    s["edits"]["edits"]["remove_formation"]["relocation"] = _iv(0.5, 0.1)  # straddles 1/2
    checked = "removing the sink from its formation layer on does not move it"
    assert _verdicts(s)[checked] == "not measured"
    s["edits"]["edits"]["remove_formation"]["relocation"] = _iv(0.7)
    verdicts = _verdicts(s)
    assert verdicts["removing the sink from its formation layer on does not move it"] == "fail"
    assert verdicts["removing the sink from its formation layer on raises perplexity"] == (
        "not measured"
    )
    moved = "without the sink a perturbation spreads further (key 0 removed from l* on)"
    assert verdicts[moved] == "not measured"
    assert verdicts["the sink's value carries less of its effect than its key"] == "not measured"


def test_sun_rows_are_not_applicable_without_massive_activations_and_a_straddle_is_unresolved():
    s = copy.deepcopy(_summary())
    s["edits"]["massive_segments"] = [3]
    rows = {p["name"]: p for p in checks.predictions(json_form(s))}
    assert rows["setting them to their mean is harmless"]["verdict"] == "not applicable"
    assert "1 of 10 segments" in rows["setting them to their mean is harmless"]["note"]
    s = copy.deepcopy(_summary())
    s["edits"]["sun_positions"] = 150.0  # outlier features of every token
    rows = {p["name"]: p for p in checks.predictions(json_form(s))}
    assert rows["setting the massive activations to zero is catastrophic"]["verdict"] == (
        "not applicable"
    )
    assert "150 positions per segment" in rows["setting them to their mean is harmless"]["note"]
    s = copy.deepcopy(_summary())
    s["stream"]["caches"]["64"]["over_recompute"]["sink4"] = _iv(1.03, 0.02)
    assert _one(s, "4 sinks + window nearly match re-computation") == "not measured"


# --------------------------------------------------------------------------
# Configs and committed results


def test_model_segments_open_with_the_tokenizers_prefix(tmp_path):
    path = tiny_checkpoint.write(tmp_path / "tiny", layers=1)
    config = long_context_config.get_config("smoke")
    config.model.path = str(path)
    tokens = np.asarray(model_lib.segments(config, 8, count=2))
    assert tokens.shape == (2, 8) and model_lib.prefix(config) == ()
    with pytest.raises(ValueError, match="0 tokens for this tokenizer"):
        model_lib.token_id(config, "\n")  # the tiny tokenizer splits on whitespace


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda c: setattr(c.stream, "sinks", (1, 32)), r"stream.sinks \(\(1, 32\)\) must be <"),
        (lambda c: setattr(c.stream, "recompute", (64,)), r"stream.recompute \(\(64,\)\) must be"),
        (lambda c: setattr(c.statistics, "num_segments", 3), r"statistics.num_segments \(3\)"),
        (lambda c: setattr(c.edits, "rate_length", 64), r"edits.rate_length \(64\) must be <="),
        (lambda c: setattr(c.model, "name", "gpt2"), r"model.name must be one of"),
    ],
)
def test_bad_configs_raise_naming_the_field(edit, match):
    from experiments.long_context import study

    config = long_context_config.get_config("smoke")
    with config.unlocked():
        edit(config)
    with pytest.raises(ValueError, match=match):
        study.specs(config)


def test_committed_results_are_their_summaries_rendered():
    """Each model's committed report is its summary rendered, its checks give its verdicts, the run is
    the model's default config; the results section that ends the study's page is both summaries rendered."""
    from experiments.long_context import report

    summaries, timings = {}, {}
    for name, results in report.RESULTS.items():
        folder = REPO / results
        committed = json.loads((folder / "summary.json").read_text())
        variant = "" if name == "smollm2" else name
        assert committed["config"] == json.loads(
            json.dumps(long_context_config.get_config(variant).to_dict())
        )
        assert json_form(checks.predictions(committed)) == committed["predictions"]
        assert (folder / "report.md").read_text() == report.markdown(committed)
        assert sorted(p.name for p in (folder / "plots").iterdir()) == committed["plots"]
        summaries[name], timings[name] = committed, json.loads((folder / "timing.json").read_text())
    page = study_page("long_context")
    text_ = page.read_text()
    section = text_[text_.index("## Results: attention sinks at long context\n") :]
    links = {name: link_from(page, results) for name, results in report.RESULTS.items()}
    assert section == report.readme_section(summaries, timings, results=links) + "\n"
