"""The long-context study (experiments.long_context): its pieces against NumPy, and each check passing on a
synthetic summary where the paper's claim holds and failing where it does not.

The study contract (end to end, on a tiny llama) runs in tests/experiments/lab/test_studies.py; this file is cheap.
"""

import copy
import math

import jax.numpy as jnp
import numpy as np
import pytest

from attnjax.serialization import json_form
from configs import long_context as long_context_config
from experiments.lab import stats
from experiments.long_context import checks, study, summary, text
from tests.paths import REPO, link_from, study_page


def test_band_mask_matches_the_definition():
    T, W, n = 9, 3, 2
    mask = study.band_mask(T, W, n)
    for i in range(T):
        for j in range(T):
            assert mask[i, j] == (j <= i and (i - j < W or j < n))
    assert (study.band_mask(T) == np.tril(np.ones((T, T), bool))).all()
    assert (
        study.band_mask(T, W)
        == (np.tril(np.ones((T, T), bool)) & ~np.tril(np.ones((T, T), bool), -W))
    ).all()


def test_token_nll_is_the_negative_log_probability_of_the_next_token():
    rng = np.random.default_rng(0)
    logits, tokens = rng.normal(size=(2, 5, 7)), rng.integers(0, 7, size=(2, 5))
    got = np.asarray(study.token_nll(jnp.asarray(logits, jnp.float32), jnp.asarray(tokens)))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    want = -np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], -1)[..., 0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_interval_is_the_student_t_interval():
    iv = stats.interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / np.sqrt(3)  # t_{0.975, 2} * s / sqrt(n)
    assert iv["mean"] == 2.0 and iv["n"] == 3
    np.testing.assert_allclose([iv["low"], iv["high"]], [2 - half, 2 + half], rtol=1e-9)
    assert np.isnan(stats.interval([1.0])["low"]) and np.isnan(
        stats.interval([1.0, np.inf])["high"]
    )


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
    config = long_context_config.get_config()
    # ~4 characters per token: the default segments need about 3 x 8192 tokens.
    need = (config.text.num_segments - 1) * config.text.segment_stride + config.statistics.lengths[
        -1
    ]
    assert len(text.long_text(config.text.modules)) > 6 * need


def test_recompute_positions_leave_room_for_the_window_and_the_target():
    config = long_context_config.get_config()
    p = study.recompute_positions(config)
    assert p.min() >= max(config.stream.windows) and p.max() <= config.stream.length - 2
    assert len(p) == config.stream.recompute_positions


# --------------------------------------------------------------------------
# The checks on synthetic summaries


def _iv(mean, half=0.01):
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": 3}


def _summary():
    """A summary where every claim holds."""
    windows = {
        w: {
            "beyond_ratio": {f"window_{w}": _iv(5.0), f"sink4_window_{w}": _iv(1.01)},
            "sampled_ratio": {
                "full": _iv(0.98),
                f"window_{w}": _iv(5.0),
                f"sink4_window_{w}": _iv(1.02),
            },
            "sampled_ppl": {},
            "early_gap": 0.0,
        }
        for w in ("256", "1024")
    }
    return {
        "statistics": {
            "lengths": [256, 8192],
            "num_layers": 30,
            "num_heads": 9,
            "sink_growth": _iv(0.05),
            "layers_growing": 25,
            "prefix_gap": 1e-6,
            "model_mean": {"normalized_entropy": [_iv(0.5), _iv(0.4)]},
        },
        "stream": {"windows": windows, "positions": list(range(16))},
        "ablation": {"all_ratio": _iv(4.0)},
    }


def _verdicts(s):
    """The verdicts of the checks on `s`, its derived numbers recomputed (`summary.derive`)."""
    return {p["name"]: p["verdict"] for p in checks.predictions(summary.derive(s))}


def _one(s, start):
    (verdict,) = [v for name, v in _verdicts(s).items() if name.startswith(start)]
    return verdict


def test_every_check_passes_where_the_claims_hold():
    verdicts = _verdicts(_summary())
    assert len(verdicts) == 9 and set(verdicts.values()) == {"pass"}


BREAKS = [  # (check name prefix, edit that makes the claim false)
    ("sink mass on token 0 grows", lambda s: s["statistics"].update(sink_growth=_iv(-0.02))),
    (
        "sink mass on token 0 grows",
        lambda s: s["statistics"].update(sink_growth=_iv(0.005, 0.01)),
    ),  # spans 0
    (
        "sink mass on token 0 grows",
        lambda s: s["statistics"].update(sink_growth=_iv(0.01, 0.01)),
    ),  # low end 0
    (
        "window-only attention blows up past the window (W=256)",
        lambda s: s["stream"]["windows"]["256"]["beyond_ratio"].update(window_256=_iv(1.9, 0.2)),
    ),
    (
        "4 sinks + window recover re-computation (W=1024)",
        lambda s: s["stream"]["windows"]["1024"]["sampled_ratio"].update(
            sink4_window_1024=_iv(1.09, 0.02)
        ),
    ),
    (
        "removing attention to token 0 in all layers",
        lambda s: s["ablation"].update(all_ratio=_iv(1.2)),
    ),
    ("a T-token input's statistics", lambda s: s["statistics"].update(prefix_gap=0.01)),
    (
        "window masks equal full attention",
        lambda s: s["stream"]["windows"]["256"].update(early_gap=0.5),
    ),
    (
        "attention is neither one-hot nor uniform",
        lambda s: s["statistics"]["model_mean"].update(normalized_entropy=[_iv(0.5), _iv(0.99)]),
    ),
]


@pytest.mark.parametrize("start, edit", BREAKS)
def test_each_check_fails_where_its_claim_does_not_hold(start, edit):
    s = copy.deepcopy(_summary())
    edit(s)
    assert _one(s, start) == "fail"
    assert sum(v == "fail" for v in _verdicts(s).values()) == 1  # only that check


def test_an_unresolved_interval_is_not_measured():
    s = _summary()
    s["ablation"]["all_ratio"] = {"mean": 4.0, "low": float("nan"), "high": float("nan"), "n": 1}
    assert _one(s, "removing attention to token 0") == "not measured"


def test_an_unresolved_interval_in_json_form_is_not_measured():
    """As the runner hands them over (the summary's JSON form), NaN ends are the strings 'nan': the
    checks read them as numbers, and the interval prints as NaN."""
    s = _summary()
    s["ablation"]["all_ratio"] = {"mean": 4.0, "low": float("nan"), "high": float("nan"), "n": 1}
    s["statistics"]["sink_growth"] = {"mean": float("inf"), "low": -math.inf, "high": 1.0, "n": 3}
    checked = {p["name"]: p for p in checks.predictions(json_form(summary.derive(s)))}
    ablation = checked["removing attention to token 0 in all layers hurts"]
    (growth,) = [p for name, p in checked.items() if name.startswith("sink mass on token 0 grows")]
    assert ablation["verdict"] == growth["verdict"] == "not measured"
    assert ablation["measured"] == "4 [nan, nan]" and growth["measured"] == "inf [-inf, 1]"
    assert sum(p["verdict"] == "not measured" for p in checked.values()) == 2
    # A NaN in a sanity check's number is no pass: the comparison with "nan" read as NaN fails.
    s["statistics"].update(prefix_gap=math.nan)
    s["statistics"]["model_mean"]["normalized_entropy"][-1]["mean"] = math.nan
    checked = {p["name"]: p["verdict"] for p in checks.predictions(json_form(summary.derive(s)))}
    assert checked["attention is neither one-hot nor uniform"] == "fail"
    assert checked["a T-token input's statistics are the longest forward's first T rows"] == "fail"


def test_committed_results_are_their_summary_rendered():
    """The committed report and the results section that ends the study's documentation page (its links
    relative to the page) are the committed default summary rendered; its checks give its verdicts; the run is
    the default config."""
    import json

    from experiments.long_context import report

    repo = REPO
    results = repo / report.README_RESULTS
    committed = json.loads((results / "summary.json").read_text())
    timing = json.loads((results / "timing.json").read_text())
    assert committed["config"] == json.loads(json.dumps(long_context_config.get_config().to_dict()))
    assert json_form(summary.derive(committed)) == committed  # it holds its derived numbers
    assert json_form(checks.predictions(committed)) == committed["predictions"]
    assert (results / "report.md").read_text() == report.markdown(committed)
    assert sorted(p.name for p in (results / "plots").iterdir()) == committed["plots"]
    page = study_page("long_context")
    text = page.read_text()
    # The section runs to the end of the page.
    section = text[text.index("## Results: attention sinks at long context\n") :]
    links = link_from(page, report.README_RESULTS)
    assert section == report.readme_section(committed, timing, results=links) + "\n"
