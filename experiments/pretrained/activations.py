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


def location_share(first, delimiter, layers) -> float | None:
    """Over the massive `layers`, the mean share of sentences whose largest |a| is on the first token or a
    delimiter; None without massive layers."""
    if not layers:
        return None
    return float(np.mean((array(first) + array(delimiter))[layers]))


def pooled_dims(dims, layers, few: int = FEW_DIMS) -> tuple[float | None, list]:
    """Pooled over the massive `layers`, the share of sentences' largest |a| in the `few` most frequent
    dimensions, and those dimensions; `dims[l]`: `[dimension, sentences]` pairs. (None, []) without layers."""
    if not layers:
        return None, []
    counts = {}
    for layer in layers:
        for dim, n in dims[layer]:
            counts[int(dim)] = counts.get(int(dim), 0) + n
    top = sorted(counts, key=lambda d: -counts[d])[:few]
    return float(sum(counts[d] for d in top) / sum(counts.values())), top


def median_spread(spread, layers) -> float | None:
    """The median over the massive `layers` of std / mean of the largest |a| over sentences; None without."""
    if not layers:
        return None
    return float(np.median(array(spread)[layers]))


def _mean_over(values, layers) -> float | None:
    return float(np.mean(values[layers])) if layers else None


def _dim_shares(pairs: list) -> list:
    """The three most frequent `[dimension, sentences]` pairs of one state as `[dimension, share]`."""
    total = sum(n for _, n in pairs) or 1
    return [[d, n / total] for d, n in pairs[:3]]


def readings(variant: dict) -> dict:
    """Every number of Sun et al.'s four claims on one variant's hidden states (the full model's).

    `layers`: the massive hidden states (`massive_layers`); `top`: the state 1..L with the largest ratio,
    `top_ratio`, `top_value` its ratio and largest |a|; `largest_value`: the largest |a| over states 1..L;
    `location` (`location_share`), `first`, `delimiter` (their means over the massive layers);
    `dims_share`, `dims` (`pooled_dims`); `spread` (`median_spread`); `per_layer`: `massive`'s
    per-state arrays, `dims` as the three most frequent `[dimension, share]` of each state.
    """
    m = massive(variant)
    layers = massive_layers(m["ratio"], m["value"])
    top = int(np.argmax(m["ratio"][1:])) + 1
    share, dims = pooled_dims(m["dims"], layers)
    per_layer = {k: v.tolist() for k, v in m.items() if k != "dims"}
    return {
        "layers": layers,
        "top": top,
        "top_ratio": float(m["ratio"][top]),
        "top_value": float(m["value"][top]),
        "largest_value": float(np.max(m["value"][1:])),
        "location": location_share(m["first"], m["delimiter"], layers),
        "first": _mean_over(m["first"], layers),
        "delimiter": _mean_over(m["delimiter"], layers),
        "dims_share": share,
        "dims": dims,
        "spread": median_spread(m["spread"], layers),
        "per_layer": {**per_layer, "dims": [_dim_shares(pairs) for pairs in m["dims"]]},
    }
