"""The numbers of Sun, Chen, Kolter & Liu 2024, "Massive activations in large language models", from the
full model's hidden states.

Their claims (for LLaMA2, Mixtral, GPT-2 and others): a few activations are
massive, >= 100 in size and about 1000x the median |activation| of their
hidden state or more (up to about 10^5x); they sit on the starting token and
on delimiter tokens (the first period or newline); they lie in a few fixed
feature dimensions; their values are largely constant across inputs. Each
function reads arrays, so a test can hand it hidden states where a claim
holds and where it does not; `readings` is what the summary keeps, and the
checks compare it with the thresholds (`constants.py`).
"""

from __future__ import annotations

import numpy as np

from experiments.lab.stats import interval
from experiments.pretrained.constants import FEW_DIMS, MASSIVE_FACTOR, MASSIVE_VALUE
from experiments.pretrained.readings import array


def massive(variant: dict) -> dict:
    """Sun et al. 2024's readings per hidden state `[L + 1]`: `ratio` (largest |a| / median, mean over
    sentences), `value` (largest |a|, mean), `spread` (its std / mean over sentences), `count` (massive
    activations per sentence), `first`, `delimiter`, `other` (shares of sentences whose largest |a| sits there),
    `dims` (per state, `[dimension, sentences]` pairs, most sentences first)."""
    value, square = array(variant["massive_value"]), array(variant["massive_value_sq"])
    first, delimiter = array(variant["massive_first"]), array(variant["massive_delimiter"])
    spread = np.sqrt(np.maximum(square - value**2, 0)) / np.maximum(value, 1e-300)
    return {
        "ratio": array(variant["massive_ratio"]),
        "value": value,
        "spread": spread,
        "count": array(variant["massive_count"]),
        "first": first,
        "delimiter": delimiter,
        "other": 1 - first - delimiter,
        "dims": variant["massive_dims"],
    }


def massive_layers(
    ratio, value, factor: float = MASSIVE_FACTOR, minimum: float = MASSIVE_VALUE
) -> list[int]:
    """Hidden states 1..L (0: the embeddings, left out) whose largest |a| is massive: >= minimum and >= factor x
    the median (means over sentences)."""
    r, v = array(ratio), array(value)
    return [layer for layer in range(1, len(r)) if r[layer] >= factor and v[layer] >= minimum]


def median_spread(spread, layers) -> float | None:
    """The median over the massive `layers` of std / mean of the largest |a| over sentences; None without."""
    if not layers:
        return None
    return float(np.median(array(spread)[layers]))


def _dim_shares(pairs: list) -> list:
    """The three most frequent `[dimension, sentences]` pairs of one state as `[dimension, share]`."""
    total = sum(n for _, n in pairs) or 1
    return [[d, n / total] for d, n in pairs[:3]]


def _top_dims(per_sentence: list, few: int) -> list[int]:
    """The `few` dimensions with the most hits over sentences' `[dimension, hits]` pairs."""
    pooled = {}
    for pairs in per_sentence:
        for dim, n in pairs:
            pooled[int(dim)] = pooled.get(int(dim), 0) + n
    return sorted(pooled, key=lambda d: -pooled[d])[:few]


def hit_readings(variant: dict, few: int = FEW_DIMS) -> dict | None:
    """Every criterion hit of Sun et al.'s criterion in the full model's hidden states, per sentence.

    `sentence_hits` `[S, 4]` (hits on the first token, on the first
    delimiter after it, on every delimiter after it, all),
    `sentence_hit_dims` (per sentence, `[dimension, hits]` pairs). Over the
    sentences with a hit: `first`, `first_delimiter`, `delimiter` (every
    delimiter after the first token), `other` (the rest): pooled shares of
    the hits; `location` (each sentence's share of its hits on the first
    token or the first delimiter, Sun et al.'s two positions: mean and
    interval over sentences,
    `lab.stats.interval`), `dims` (the `few` dimensions with the most hits
    in every other sentence with a hit, 0, 2, ...), `dims_share` (the other
    sentences' share of their hits in them: mean and interval; None with a
    single sentence), `hits` and `sentences` (how many). None when no
    sentence has a hit.
    """
    counts = array(variant["sentence_hits"]).reshape(-1, 4)
    hit = counts[:, 3] > 0
    if not hit.any():
        return None
    first, first_delimiter, delimiter, total = counts[hit].T
    dims = [pairs for pairs, h in zip(variant["sentence_hit_dims"], hit) if h]
    # The dimensions are chosen on every other sentence and tested on the rest, so that a row of
    # scattered dimensions can fail (chosen on the same hits, the top ones would hold them by construction).
    top = _top_dims(dims[0::2], few)
    tested = array([sum(n for d, n in pairs if int(d) in top) for pairs in dims[1::2]])
    return {
        "first": float(first.sum() / total.sum()),
        "first_delimiter": float(first_delimiter.sum() / total.sum()),
        "delimiter": float(delimiter.sum() / total.sum()),
        "other": float(1 - (first.sum() + delimiter.sum()) / total.sum()),
        "location": interval((first + first_delimiter) / total),
        "dims": top,
        "dims_share": interval(tested / total[1::2]) if len(dims) > 1 else None,
        "hits": int(total.sum()),
        "sentences": int(hit.sum()),
    }


def readings(variant: dict) -> dict:
    """Every number of Sun et al.'s four claims on one variant's hidden states (the full model's).

    `layers`: the massive hidden states (`massive_layers`); `top`: the state 1..L with the largest ratio,
    `top_ratio`, `top_value` its ratio and largest |a|; `largest_value`: the largest |a| over states 1..L;
    `spread` (`median_spread`); `hits`: where every criterion hit sits (`hit_readings`); `per_layer`:
    `massive`'s per-state arrays, `dims` as the three most frequent `[dimension, share]` of each state.
    """
    m = massive(variant)
    layers = massive_layers(m["ratio"], m["value"])
    top = int(np.argmax(m["ratio"][1:])) + 1
    per_layer = {k: v.tolist() for k, v in m.items() if k != "dims"}
    return {
        "layers": layers,
        "top": top,
        "top_ratio": float(m["ratio"][top]),
        "top_value": float(m["value"][top]),
        "largest_value": float(np.max(m["value"][1:])),
        "spread": median_spread(m["spread"], layers),
        "hits": hit_readings(variant),
        "per_layer": {**per_layer, "dims": [_dim_shares(pairs) for pairs in m["dims"]]},
    }
