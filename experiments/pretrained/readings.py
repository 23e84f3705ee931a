"""The pretrained study's readings: the numbers of the papers' claims, from one variant's arrays.

Each function reads arrays (a summary's lists, or the strings 'nan' and 'inf'
that stand for them in summary.json) and returns numbers, never a verdict, so
a test can hand it a sequence where a claim holds and one where it does not;
`summary.derive` keeps what they return, and the checks compare it with the
thresholds of `constants.py`. Residuals are relative, r_l = ||X_l - 1
x_bar^T||_F / ||X_l||_F over hidden states l = 0 (the embeddings) .. L.
"""

from __future__ import annotations

import math

import numpy as np

from experiments.lab.stats import log_interval
from experiments.pretrained.constants import (
    FIRST_RATIO_LAYER,
    MIDDLE_LAYERS,
    MIN_RATE_LAYERS,
    RATE_QUANTILES,
    RESIDUAL_FLOOR,
)


def array(values) -> np.ndarray:
    """`values` (lists, numbers, or the strings 'nan' and 'inf' of a summary.json) as float64."""
    return np.asarray(values, dtype=np.float64)


def head_mean(values) -> np.ndarray:
    """`[L, H]` -> `[L]`: mean over heads."""
    return array(values).mean(axis=-1)


def sink(variant: dict, metric: str = "attention_sink", category: str = "sinks") -> np.ndarray:
    """`[L, H]`: a variant's sink mass of one category (`metric` 'attention_sink' or 'perron_sink')."""
    return array(variant[metric][category])


def uniform_sink(variant: dict, category: str = "sinks") -> float:
    """The sink mass uniform attention would give one category (mean over queries)."""
    return float(array(variant["uniform_sink"][category]))


def geometric_residual(variant: dict) -> np.ndarray:
    """`[L + 1]`: the geometric mean over sentences of r_l. If every sentence decays with
    log r_(l+1) >= c log r_l, so does this mean (it is linear in the logs); the arithmetic mean need not."""
    return np.exp(array(variant["log_residual"]))


def sentence_rates(
    log_residual, floor: float = RESIDUAL_FLOOR, min_layers: int = MIN_RATE_LAYERS
) -> list:
    """Each sentence's decay factor per layer: exp of the least-squares slope of log r_l over layers l >= 1.

    log_residual `[S, L + 1]`. The fit uses layers 1, 2, ... while r_l >=
    `floor` (layer 0, the embeddings, is left out: the first layer's drop is
    not part of a per-layer rate); None for a sentence with fewer than
    `min_layers` such layers.
    """
    rates = []
    for logs in array(log_residual):
        resolved = logs[1:] >= np.log(floor)
        stop = int(np.argmin(resolved)) if not resolved.all() else len(resolved)
        layers, values = np.arange(1, stop + 1), logs[1 : stop + 1]
        rates.append(
            float(np.exp(np.polyfit(layers, values, 1)[0])) if stop >= min_layers else None
        )
    return rates


def resolved_rates(variant: dict) -> np.ndarray:
    """The per-sentence decay factors that could be fitted (`sentence_rates`), `[S']`."""
    return array([r for r in variant["rates"] if r is not None])


def first_below(values, level: float):
    """The first index whose value is <= level, or None."""
    hits = np.nonzero(array(values) <= level)[0]
    return int(hits[0]) if hits.size else None


def end_ratio(residual) -> float:
    """r_L / r_0 (NaN when r_0 is not positive)."""
    r = array(residual)
    return float(r[-1] / r[0]) if r[0] > 0 else math.nan


def geometric_rate(residual, floor: float = RESIDUAL_FLOOR):
    """Mean factor per layer, (r_b / r_a)^(1 / (b - a)), between layer a = 0 and the last layer b above `floor`."""
    r = array(residual)
    above = np.nonzero(r >= floor)[0]
    b = int(above[-1]) if above.size else 0
    return float((r[b] / r[0]) ** (1 / b)) if b > 0 and r[0] > 0 else None


def log_ratios(
    residual, floor: float = RESIDUAL_FLOOR, first: int = FIRST_RATIO_LAYER
) -> list[float]:
    """log r_l / log r_(l-1) for l - 1 >= first, r_l >= floor and r_(l-1) < 1.

    r_l = r_(l-1)^c for c >= 2 is doubly exponential decay (c = 3 in Dong et
    al.'s bound); a geometric sequence r_l = q^l has ratios l / (l - 1) -> 1.
    Layer 0 (the embeddings) starts no ratio.
    """
    r = array(residual)
    usable = [
        layer for layer in range(first + 1, len(r)) if r[layer] >= floor and 0 < r[layer - 1] < 1
    ]
    return [float(np.log(r[layer]) / np.log(r[layer - 1])) for layer in usable]


def rate_quantiles(rates, quantiles=RATE_QUANTILES) -> tuple[float | None, list]:
    """The per-sentence decay factors q: (median q, [lower, upper] quantiles); (None, []) when empty."""
    q = array(rates)
    if not q.size:
        return None, []
    return float(np.median(q)), [float(x) for x in np.quantile(q, quantiles)]


def resolved_depth(variant: dict, floor: float = RESIDUAL_FLOOR) -> int:
    """The deepest depth l whose hidden states X_0 .. X_l are all finite with geometric-mean r >= `floor`
    (`geometric_residual`; float32 rounding dominates below it); 0 when X_1 is not."""
    r = geometric_residual(variant)
    ok = np.isfinite(r) & (r >= floor) & np.isfinite(array(variant["residual_abs"]))
    return max(int(np.sum(np.cumprod(ok))) - 1, 0)


def paired_ratio(numerator, denominator, depth: int) -> dict:
    """Per sentence, a / b at one `depth` from two variants' per-sentence logs `[S, L + 1]` (the same
    sentences in the same order), as a geometric mean with its interval over sentences
    (`lab.stats.log_interval`): `{"mean", "low", "high", "n"}`."""
    a, b = array(numerator), array(denominator)
    if a.shape != b.shape:
        raise ValueError(
            f"paired_ratio: the variants' sentences differ, shapes {a.shape} and {b.shape}"
        )
    return log_interval(np.exp(a[:, depth] - b[:, depth]))


def connecting_depth(tokens: int, width: int, causal: bool) -> int:
    """How many layers of sliding-window maps (window W: keys within W - 1 positions) it takes before every
    two of `tokens` rows share a key, so that their product can contract (Dobrushin's coefficient < 1): a
    product of k maps reaches k (W - 1) positions back, and forward too when bidirectional, so causal rows 0
    and n - 1 meet at key 0 after ceil((n - 1) / (W - 1)) layers, bidirectional rows halfway after
    ceil((n - 1) / (2 (W - 1)))."""
    reach = (width - 1) * (1 if causal else 2)
    return -(-(tokens - 1) // reach)


def largest_rise(values) -> float:
    """The largest rise between consecutive values (0 for fewer than two)."""
    v = array(values)
    return float(np.max(np.diff(v))) if len(v) > 1 else 0.0


def fraction_above(values, threshold: float) -> float:
    """The fraction of values above threshold (NaN for none)."""
    v = array(values)
    return float(np.mean(v > threshold)) if v.size else math.nan


def middle_layers(num_layers: int, span=MIDDLE_LAYERS) -> list[int]:
    """0-based indices of the layers l (1-based) with span[0] <= l / L <= span[1]."""
    return [
        layer - 1 for layer in range(1, num_layers + 1) if span[0] <= layer / num_layers <= span[1]
    ]


def map_rates(variant: dict) -> tuple[float, float]:
    """Geometric means of the head-averaged |lambda_2| and tau of a variant's maps over its resolved layers
    (those whose geometric-mean residual r_l >= RESIDUAL_FLOOR, l >= 1)."""
    r = geometric_residual(variant)[1:]
    layers = max(int(np.sum(np.cumprod(r >= RESIDUAL_FLOOR))), 1)

    def mean(x):
        return float(np.exp(np.mean(np.log(np.maximum(head_mean(x)[:layers], 1e-300)))))

    return mean(variant["slem"]), mean(variant["tau"])


def overflow_layer(variant: dict) -> int | None:
    """The first hidden state whose norms are not finite in float32 (`residual_abs`, `shared_norm`), or None."""
    finite = np.isfinite(array(variant["residual_abs"])) & np.isfinite(
        array(variant["shared_norm"])
    )
    return None if finite.all() else int(np.argmin(finite))


def growth_factor(variant: dict, layer: int) -> float:
    """The mean factor per layer by which the token differences ||X - 1 x_bar^T||_F grow before `layer`."""
    growth = array(variant["residual_abs"])[:layer]
    return float((growth[-1] / growth[0]) ** (1 / max(layer - 1, 1)))


def path_medians(paths: dict) -> np.ndarray:
    """`[lengths]`: the median relative residual of the single-head paths of each length."""
    return np.asarray([np.median(array(r)) for r in paths["residual"]])
