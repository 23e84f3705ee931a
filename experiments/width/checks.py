"""The width study's rows, each of one kind (`experiments.lab.study.KINDS`), from the summary.

The abstract's three claims, per model, in the paper's setting (one softmax
attention layer at initialisation, a single head, as the authors' code draws
it). On the random Markov model they follow from the construction, and so are
sanity rows: with iid logits the map is 1 1^T / n plus a bulk of order
n^(-1/2), from which all three follow (derived in this codebase). The three
rows of a model are consequences of that one structure, not independent
confirmations. On key-query attention (weights N(0, 1), and Xavier's, the authors'
default) they are predictions: whether that picture describes the map a
real layer computes at initialisation.

* the gap opens: the slope of log(sigma_2 / sigma_1) against log n, per seed,
  has its 95% interval below half the bulk edge's exponent, the midpoint of
  its two alternatives: a gap opening like the bulk edge (slope -1/2 at a fixed
  logit variance, -3/2 with Xavier's) and none (slope 0, as an identity or
  local-window map gives);
* rank collapse in width: the slope of log(sr(A Z) / sr(Z)) against log n,
  the output's stable rank as a share of its input's. The two alternatives are
  a bounded output rank (slope -1, sr(Z) growing like n) and a kept one (slope
  0, as attention replaced by the identity or a local window keeps it); the
  row passes when the 95% interval is below their midpoint, -1/2. A rule of
  "below 0" would pass a local-window map, whose share drifts from 0.27 to
  0.22 over n = 64..1024 at finite size while its output's rank grows like n;
* the fix mitigates it: the same share's slope with the fix minus without it,
  paired per seed, above 1/2, the midpoint between no effect (0) and moving the
  output from the bounded alternative to the kept one (1). Not the ratio
  sr(A_perp Z) / sr(A Z) at one n: removing the outlier removes the
  denominator of sr, so that ratio exceeds 1 whatever n does.

Hypotheses (this codebase, from the random-matrix theory of random Markov
matrices; the paper's theorems were not retrieved, so no constant of theirs is
used), per model, slopes over the largest `summary.TAIL` lengths, two-sided:
sigma_2 falls at the exponent of the bulk edge 2 sqrt((e^v - 1) / n) (its constant
is a measurement in the report; slope -1/2 at a fixed
logit variance v; -3/2 with Xavier's initialisation, where v = 1/d^2 and
d = n / gamma, so e^v - 1 ~ 1/n^2); with the fix the output's stable rank grows
like n (slope 1 in the interval).

Sanity also: A is row-stochastic, so A 1 = 1 (and the fix removes the direction 1
exactly) and sigma_1(A) >= 1, to float64 rounding of a sum of n terms.
"""

from __future__ import annotations

import math

from experiments.lab import stats
from experiments.lab.render import interval_text
from experiments.lab.study import prediction
from experiments.width.constants import (
    MIN_UNITS,
    SHARE_MIDPOINT,
    SIGMA_2_SLOPES,
    TAIL,
)

PAPER = "Naderi, Nait Saada and Tanner 2025, abstract"
MODEL_NAMES = {
    "markov": "random Markov model (logits iid N(-s2/2, s2))",
    "key_query": "key-query attention, orthonormal tokens, W_Q, W_K iid N(0, 1)",
    "key_query_xavier": "key-query attention, orthonormal tokens, Xavier's W_Q, W_K",
}
THEOREM = (
    "on this model a consequence of its construction: a rank-one part 1 1^T / n plus a bulk of independent "
    "entries (derived in this codebase; the paper's theorems were not retrieved)"
)
GAP_QUOTE = (
    '"a spectral gap between the two largest singular values of the attention matrix as the cause '
    'of (iii)"'
)
WIDTH_QUOTE = '"(iii) rank collapse in width, which occurs as the context length increases"'
FIX_QUOTE = '"mitigate rank collapse in width by removing the outlier eigenvalue(s)"'


def _enough(summary: dict, passed: bool | None) -> bool | None:
    return passed if summary["seeds"] >= MIN_UNITS else None


def _few(summary: dict) -> str:
    few = summary["seeds"] < MIN_UNITS
    return f"; not measured: {summary['seeds']} seeds, a verdict needs {MIN_UNITS}" if few else ""


def _span(summary: dict, tail: bool = False) -> str:
    lengths = summary["lengths"][-TAIL:] if tail else summary["lengths"]
    return f"n = {lengths[0]}..{lengths[-1]}"


def identity_row(summary: dict) -> dict:
    """A 1 = 1 and sigma_1 >= 1 for every map (sanity)."""
    bound = max(summary["lengths"]) * summary["float64_eps"]
    s = summary["statistics"].values()
    error = max(m["row_sum_error"] for m in s)
    sigma = min(m["sigma_1_min"] for m in s)
    return prediction(
        "A 1 = 1 and sigma_1(A) >= 1 (A row-stochastic; the fix removes the direction 1 exactly)",
        "softmax rows sum to 1 (an identity)",
        f"max |A 1 - 1| <= n eps and min sigma_1 >= 1 - n eps, n eps = {bound:.3g} "
        "(float64 rounding of a sum of n terms)",
        error,
        error <= bound and sigma >= 1 - bound,
        f"max |A 1 - 1| = {error:.3g}; min sigma_1 = {sigma:.6f}",
        kind="sanity",
    )


def model_rows(summary: dict, model: str) -> list[dict]:
    """The abstract's three claims (sanity on the random Markov model, predictions on key-query attention)
    and two hypotheses for one model."""
    m = summary["statistics"][model]
    slopes, name, few = m["slopes"], MODEL_NAMES[model], _few(summary)
    gap, share, gain = slopes["gap_ratio"], slopes["output_rank_share"], m["fix_slope_gain"]
    kind = "sanity" if model == "markov" else "prediction"
    setting = f"; {THEOREM}" if kind == "sanity" else ""
    edge = SIGMA_2_SLOPES[model]

    def claim(title, quote, rule, iv, passed, note):
        return prediction(
            f"{title} ({model})",
            f"{PAPER}: {quote}{setting}",
            f"{rule}, {_span(summary)}",
            iv["mean"],
            _enough(summary, passed),
            f"{name}; {note}{few}",
            kind=kind,
        )

    return [
        claim(
            "the gap between sigma_1 and sigma_2 opens as n grows",
            GAP_QUOTE,
            f"slope of log(sigma_2 / sigma_1) against log n: the 95% interval over seeds below "
            f"{edge / 2:g}, the midpoint of a gap opening like the bulk edge ({edge:g}) and none (0: an "
            "identity or local-window map)",
            gap,
            stats.within(gap, -math.inf, edge / 2),
            f"slope {interval_text(gap)}",
        ),
        claim(
            "rank collapse in width: the output keeps a falling share of its input's rank",
            WIDTH_QUOTE,
            f"slope of log(sr(A Z) / sr(Z)) against log n: the 95% interval below {SHARE_MIDPOINT:g}, the "
            "midpoint of a bounded output rank (-1) and a kept one (0, as identity or local-window "
            "attention keeps it)",
            share,
            stats.within(share, -math.inf, SHARE_MIDPOINT),
            f"sr = ||.||_F^2 / ||.||_2^2; slope {interval_text(share)}",
        ),
        claim(
            "removing the outlier slows the collapse in width",
            FIX_QUOTE,
            "slope of log(sr((A - (1/n) 1 1^T) Z) / sr(Z)) against log n minus that of "
            f"log(sr(A Z) / sr(Z)), paired per seed: the 95% interval above {-SHARE_MIDPOINT:g}, the "
            "midpoint of no effect (0) and the output moved from a bounded rank to a kept one (1)",
            gain,
            stats.within(gain, -SHARE_MIDPOINT, math.inf),
            f"difference {interval_text(gain)}; with the fix the share's slope is "
            f"{interval_text(slopes['fixed_rank_share'])}; sr(A_perp Z) / sr(A Z) at n = "
            f"{summary['lengths'][-1]}: {interval_text(m['fix_gain_largest'])}",
        ),
        _tail_row(
            summary,
            model,
            "sigma_2_tail",
            edge,
            f"sigma_2(A) falls with n at the exponent of the bulk edge 2 sqrt((e^v - 1) / n) ({model})",
            "a map 1 1^T / n plus independent entries of variance (e^v - 1) / n^2 (this codebase's "
            "reading, the paper's theorem not retrieved; slope -1/2 at a fixed logit variance v, -3/2 "
            "with Xavier's v = 1 / d^2, d proportional to n)",
            "slope of log sigma_2 against log n",
        ),
        _tail_row(
            summary,
            model,
            "fixed_tail",
            1.0,
            f"with the fix the output's stable rank grows like n ({model})",
            "without the outlier the map's singular values are a bulk of order n^(-1/2) (this "
            "codebase's reading)",
            "slope of log sr((A - (1/n) 1 1^T) Z) against log n",
        ),
    ]


def _tail_row(summary, model, slope, value, name, source, what) -> dict:
    iv = summary["statistics"][model]["slopes"][slope]
    return prediction(
        name,
        source,
        f"{what}, {_span(summary, tail=True)} (the largest {TAIL} lengths, where the leading order "
        f"applies): the 95% interval over seeds contains {value:g}",
        iv["mean"],
        _enough(summary, stats.contains(iv, value)),
        f"{MODEL_NAMES[model]}; slope {interval_text(iv)}{_few(summary)}",
        kind="hypothesis",
    )


def predictions(summary: dict) -> list[dict]:
    """The sanity row, then each model's rows."""
    rows = [identity_row(summary)]
    for model in summary["models"]:
        rows += model_rows(summary, model)
    return rows
