"""The long-context study's checks: predictions from the papers, and sanity conditions listed apart.

Every threshold below was written before the first run and is not to be
relaxed. A prediction is judged on the 95% interval over text segments
(`experiments.lab.stats.interval`); an interval with a NaN bound (too few segments, a
non-finite value) is "not measured".

Predictions:

* Barbero et al. 2025, "Why do LLMs attend to the first token?", study how
  context length shapes the sink and report stronger sinks with longer
  context (their setting: models pre-trained at different context lengths;
  here one model read at T = 256..8192, so this tests the weaker reading
  "the first-token sink mass of a T-token input grows with T"): the growth of
  the model-mean sink mass from the shortest to the longest T is > 0 (the
  interval's lower end).
* Xiao et al. 2023, "Efficient streaming language models with attention
  sinks": "window attention ... fails when the text length surpasses the
  cache size": window-only perplexity beyond the window (positions p >= W) is
  at least `BLOWUP_RATIO` times full attention's (lower end), for each W.
* Xiao et al. 2023: "keeping the KV of initial tokens will largely recover the
  performance of window attention" (their Table: 4 sink tokens + window
  within a few percent of the sliding window with re-computation): with 4
  sinks, the perplexity ratio to re-computation at the sampled positions is
  at most `RECOVERY_RATIO` (upper end), for each W.
* Causal role of the sink (Xiao et al. 2023, Barbero et al. 2025: the first
  token is where attention goes when no other key is wanted): removing
  attention to token 0 in all layers raises perplexity by at least
  `ABLATION_RATIO` (lower end).

Sanity: rows of a shorter input equal the prefix rows of the longest forward
(causality; justifies one forward for every T); window masks equal full
attention for p < W; the attention is in a non-degenerate regime (model-mean
normalised entropy in `ENTROPY_RANGE`).
"""

from __future__ import annotations

import math

from experiments.lab.render import interval_text
from experiments.lab.stats import number
from experiments.lab.study import prediction

BARBERO = "Barbero et al. 2025"
XIAO = "Xiao et al. 2023"
BLOWUP_RATIO = 2.0
RECOVERY_RATIO = 1.10
ABLATION_RATIO = 1.5
N_SINK_RECOVERY = 4
PREFIX_TOLERANCE = 1e-3  # float32 statistics, different key-chunk partitions
EARLY_TOLERANCE = 1e-3  # nll (nats): the same mask rows, float32
ENTROPY_RANGE = (0.02, 0.98)
DIGITS = ".4g"  # an interval's numbers, as the records and the report print them


def _resolved(iv: dict) -> bool:
    """Whether both ends of interval `iv` (JSON form: 'nan' for NaN) are finite."""
    return math.isfinite(number(iv["low"])) and math.isfinite(number(iv["high"]))


def _lower(name, source, text, iv, threshold, note="", strict=False) -> dict:
    """Pass iff the interval's lower end is >= `threshold` (> when `strict`)."""
    low = number(iv["low"])
    passed = (low > threshold if strict else low >= threshold) if _resolved(iv) else None
    return prediction(name, source, text, interval_text(iv, DIGITS), passed, note)


def _upper(name, source, text, iv, threshold, note="") -> dict:
    passed = (number(iv["high"]) <= threshold) if _resolved(iv) else None
    return prediction(name, source, text, interval_text(iv, DIGITS), passed, note)


def predictions(summary: dict) -> list[dict]:
    """Every check's verdict (predictions, then sanity) from the summary."""
    st, sm, ab = summary["statistics"], summary["stream"], summary["ablation"]
    t0, t1 = st["lengths"][0], st["lengths"][-1]
    out = [
        _lower(
            f"sink mass on token 0 grows from T={t0} to T={t1}",
            BARBERO,
            "model-mean sink mass(T_max) - sink mass(T_min) > 0",
            st["sink_growth"],
            0.0,
            f"{st['layers_growing']} of {st['num_layers']} layers grow; setting differs (see report)",
            strict=True,
        )
    ]
    for w, win in sm["windows"].items():
        out.append(
            _lower(
                f"window-only attention blows up past the window (W={w})",
                XIAO,
                f"ppl(window {w}) / ppl(full) at p >= W >= {BLOWUP_RATIO:g}",
                win["beyond_ratio"][f"window_{w}"],
                BLOWUP_RATIO,
            )
        )
        key = f"sink{N_SINK_RECOVERY}_window_{w}"
        if key in win["sampled_ratio"]:
            out.append(
                _upper(
                    f"{N_SINK_RECOVERY} sinks + window recover re-computation (W={w})",
                    XIAO,
                    f"ppl({N_SINK_RECOVERY} sinks + window {w}) / ppl(recompute) <= {RECOVERY_RATIO:g}",
                    win["sampled_ratio"][key],
                    RECOVERY_RATIO,
                    f"at {len(sm['positions'])} sampled positions per segment",
                )
            )
    out.append(
        _lower(
            "removing attention to token 0 in all layers hurts",
            f"{XIAO}; {BARBERO}",
            f"ppl(token 0 removed, all layers) / ppl >= {ABLATION_RATIO:g}",
            ab["all_ratio"],
            ABLATION_RATIO,
        )
    )
    gap = None if st["prefix_gap"] is None else number(st["prefix_gap"])
    out.append(
        prediction(
            "a T-token input's statistics are the longest forward's first T rows",
            "causality",
            f"max |difference| <= {PREFIX_TOLERANCE:g}",
            gap,
            None if gap is None else gap <= PREFIX_TOLERANCE,
            "segment 0",
            kind="sanity",
        )
    )
    early = number(summary["early_gap"])
    out.append(
        prediction(
            "window masks equal full attention before the window fills",
            "identity",
            f"max |nll difference| at p < W <= {EARLY_TOLERANCE:g}",
            early,
            early <= EARLY_TOLERANCE,
            kind="sanity",
        )
    )
    ent = number(st["model_mean"]["normalized_entropy"][-1]["mean"])
    out.append(
        prediction(
            "attention is neither one-hot nor uniform",
            "regime",
            f"model-mean normalised entropy at T={t1} in {ENTROPY_RANGE}",
            ent,
            ENTROPY_RANGE[0] < ent < ENTROPY_RANGE[1],
            kind="sanity",
        )
    )
    return out
