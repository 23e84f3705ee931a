"""The pretrained-attention study's checks: each prediction's verdict from the summary.

Checks the measurements of one pretrained model against:

* Dong, Cordonnier & Loukas 2021, "Attention is not all you need: pure
  attention loses rank doubly exponentially with depth" (bidirectional
  attention): without skips and MLPs the tokens collapse doubly
  exponentially; skip connections (and, more weakly, MLPs) counteract it;
  long single-head paths collapse, so the network's output is carried by
  short paths;
* Wu, Ajorlou, Wang, Jegelka & Jadbabaie 2024, "On the role of attention
  masks and LayerNorm in transformers" (causal masks): pure masked attention
  collapses at an exponential rate, and products of causal attention
  matrices converge to 1 e_1^T;
* Xiao, Tian, Chen, Han & Lewis 2023, "Efficient streaming language models
  with attention sinks": a causal LM puts most of its attention on the first
  token in most layers beyond the bottom two;
* Clark, Khandelwal, Levy & Manning 2019, "What does BERT look at?": over
  half of BERT-base's attention in layers 6-10 (of 12) falls on [SEP];
* Sun, Chen, Kolter & Liu 2024, "Massive activations in large language
  models" (`activations.py`);

and, as sanity (a theorem, not a prediction), Seneta 2006, "Non-negative
Matrices and Markov Chains": |lambda_2| <= tau.

Each check is a function of arrays (`*_check`) that returns the measured
number and the verdict, so it can be tested on sequences that should pass and
sequences that should fail; `predictions` names them.
"""

from __future__ import annotations

import math

import numpy as np

from experiments.lab.render import fmt
from experiments.lab.study import prediction
from experiments.pretrained import activations
from experiments.pretrained.corpus import CONTENT_LABELS
from experiments.pretrained.summary import (
    ATTENTION_ONLY,
    MIN_RATE_LAYERS,
    RESIDUAL_FLOOR,
    array,
    first_below,
    geometric_residual,
    head_mean,
    path_medians,
    resolved_rates,
    sink,
    uniform_sink,
)

# Collapse: the relative residual falls by three orders of magnitude.
COLLAPSE_FACTOR = 1e-3
# Doubly exponential decay, r_(l+1) <= r_l^c with c >= 2: log r_(l+1) / log r_l >= 2, on resolved layers >= 1.
DOUBLY_EXPONENTIAL_RATIO = 2.0
FIRST_RATIO_LAYER = 1
# Fewer log-ratios cannot tell the rates apart: r_l = q^l (exponential from layer 0) gives ratios (l + 1) / l,
# 2 and 1.5 on the pairs from layer 1, so two ratios separate it from doubly exponential decay by one ratio only.
MIN_LOG_RATIOS = 3
# Wu et al. 2024: exponential collapse, the per-sentence decay factor per layer below 1 on this interval.
RATE_QUANTILES = (0.05, 0.95)
# "Counteracts": skips keep the last layer's residual at least 10x that of attention only.
COUNTERACT_FACTOR = 10.0
# "Keeps rank": the full model's tokens without the sinks lose less than a factor 10 of relative residual.
KEEP_FACTOR = 0.1
# "Long paths collapse": the median residual of the longest paths is 1% of the shortest's or less.
LONG_PATH_FACTOR = 1e-2
# Xiao et al. 2023: more than half of the attention on the first token, in most layers past the bottom two.
SINK_SHARE = 0.5
BOTTOM_LAYERS = 2
# Clark et al. 2019: layers 6-10 of BERT-base's 12, as fractions of the depth.
MIDDLE_LAYERS = (6 / 12, 10 / 12)
# Wu et al. 2024: the rows of P_L are within this total-variation distance of e_1.
FIRST_TOLERANCE = 1e-3
# |lambda_2| <= tau up to float32 rounding of both.
BOUND_TOLERANCE = 1e-5

# --------------------------------------------------------------------------
# Checks: (measured, passed) from arrays; each can fail


def collapse_check(residual, factor: float = COLLAPSE_FACTOR) -> tuple[float, bool]:
    """r_L / r_0 <= factor."""
    r = array(residual)
    ratio = float(r[-1] / r[0]) if r[0] > 0 else math.nan
    return ratio, bool(ratio <= factor)


def log_ratios(
    residual, floor: float = RESIDUAL_FLOOR, first: int = FIRST_RATIO_LAYER
) -> list[float]:
    """log r_l / log r_(l-1) for l - 1 >= first, r_l >= floor and r_(l-1) < 1."""
    r = array(residual)
    usable = [
        layer for layer in range(first + 1, len(r)) if r[layer] >= floor and 0 < r[layer - 1] < 1
    ]
    return [float(np.log(r[layer]) / np.log(r[layer - 1])) for layer in usable]


def doubly_exponential_check(
    residual,
    floor: float = RESIDUAL_FLOOR,
    min_ratio: float = DOUBLY_EXPONENTIAL_RATIO,
    min_ratios: int = MIN_LOG_RATIOS,
) -> tuple[float | None, bool | None, list]:
    """min of `log_ratios` >= min_ratio, when there are at least `min_ratios` of them.

    r_l = r_(l-1)^c for c >= 2 is doubly exponential decay (c = 3 in Dong et
    al.'s bound); a geometric sequence r_l = q^l has ratios l / (l - 1) -> 1.
    Layer 0 (the embeddings) starts no ratio. None (not measured) with
    fewer than `min_ratios` ratios.
    """
    ratios = log_ratios(residual, floor)
    worst = min(ratios) if ratios else None
    if len(ratios) < min_ratios:
        return worst, None, ratios
    return worst, bool(worst >= min_ratio), ratios


def exponential_check(rates, quantiles=RATE_QUANTILES) -> tuple[float | None, bool | None, list]:
    """The per-sentence decay factors q: (median q, upper quantile < 1, [lower, upper] quantiles); None when empty."""
    q = array(rates)
    if not q.size:
        return None, None, []
    interval = [float(x) for x in np.quantile(q, quantiles)]
    return float(np.median(q)), bool(interval[1] < 1), interval


def counteract_check(kept, removed, factor: float = COUNTERACT_FACTOR) -> tuple[float, bool]:
    """kept / removed >= factor (inf when only `removed` is 0; NaN, a fail, when both are)."""
    kept, removed = float(kept), float(removed)
    ratio = kept / removed if removed > 0 else (math.inf if kept > 0 else math.nan)
    return ratio, bool(ratio >= factor)


def slows_check(
    slower, faster, factor: float = COLLAPSE_FACTOR
) -> tuple[float | None, bool | None, int | None]:
    """At the first layer l where `faster` has fallen to factor x its input, slower_l / faster_l > 1.

    Returns (ratio, passed, l); (None, None, None) when `faster` never falls that far.
    """
    slower, faster = array(slower), array(faster)
    layer = first_below(faster, factor * faster[0])
    if layer is None:
        return None, None, None
    ratio = (
        slower[layer] / faster[layer]
        if faster[layer] > 0
        else (math.inf if slower[layer] > 0 else math.nan)
    )
    return float(ratio), bool(ratio > 1), layer


def keeps_check(residual, factor: float = KEEP_FACTOR) -> tuple[float, bool]:
    """r_L / r_0 >= factor."""
    r = array(residual)
    ratio = float(r[-1] / r[0]) if r[0] > 0 else math.nan
    return ratio, bool(ratio >= factor)


def non_increasing_check(values) -> tuple[float, bool]:
    """The largest rise between consecutive values <= 0."""
    v = array(values)
    rise = float(np.max(np.diff(v))) if len(v) > 1 else 0.0
    return rise, bool(rise <= 0)


def at_most_check(value, bound: float) -> tuple[float, bool]:
    """value <= bound."""
    return float(value), bool(float(value) <= bound)


def majority_check(values, threshold: float) -> tuple[float, bool]:
    """The fraction of values above threshold is more than one half."""
    v = array(values)
    fraction = float(np.mean(v > threshold)) if v.size else math.nan
    return fraction, bool(fraction > 0.5)


def middle_layers(num_layers: int, span=MIDDLE_LAYERS) -> list[int]:
    """0-based indices of the layers l (1-based) with span[0] <= l / L <= span[1]."""
    return [
        layer - 1 for layer in range(1, num_layers + 1) if span[0] <= layer / num_layers <= span[1]
    ]


def middle_share_check(mass, share: float = SINK_SHARE) -> tuple[float, bool]:
    """Mean over the middle layers (`middle_layers`) of the per-layer mass > share."""
    m = array(mass)
    value = float(np.mean(m[middle_layers(len(m))]))
    return value, bool(value > share)


# --------------------------------------------------------------------------
# Predictions

# The attention-only variants as the check names call them.
CHECK_LABELS = {
    "attention_only": "attention only (norms kept)",
    "no_norm": "attention only, no norms",
}


def _missing(name: str, source: str, claim: str, need: str) -> dict:
    return prediction(name, source, claim, None, None, f"not measured: the config has no {need}")


def _ratios_note(ratios: list) -> str:
    shown = ", ".join(f"{x:.2f}" for x in ratios[:12]) + (" ..." if len(ratios) > 12 else "")
    return f"{len(ratios)} log-ratio(s) on resolved layers >= {FIRST_RATIO_LAYER}" + (
        f": {shown}" if ratios else ""
    )


def _dong_rate(name: str, variant: dict) -> dict:
    worst, passed, ratios = doubly_exponential_check(geometric_residual(variant))
    note = f"r: geometric mean over sentences, r >= {RESIDUAL_FLOOR:g}; {_ratios_note(ratios)}"
    if passed is None:
        note = (
            f"not measured: {len(ratios)} log-ratio(s), fewer than the {MIN_LOG_RATIOS} that tell an exponential "
            f"from a doubly exponential rate; {note}"
        )
    return prediction(
        f"{CHECK_LABELS[name]}: doubly exponential decay",
        "Dong et al. 2021",
        f"log r_(l+1) / log r_l >= {DOUBLY_EXPONENTIAL_RATIO:g} for consecutive resolved layers >= "
        f"{FIRST_RATIO_LAYER} (at least {MIN_LOG_RATIOS} ratios)",
        worst,
        passed,
        note,
    )


def map_rates(variant: dict) -> tuple[float, float]:
    """Geometric means of the head-averaged |lambda_2| and tau of a variant's maps over its resolved layers
    (those whose geometric-mean residual r_l >= RESIDUAL_FLOOR, l >= 1)."""
    r = geometric_residual(variant)[1:]
    layers = max(int(np.sum(np.cumprod(r >= RESIDUAL_FLOOR))), 1)

    def mean(x):
        return float(np.exp(np.mean(np.log(np.maximum(head_mean(x)[:layers], 1e-300)))))

    return mean(variant["slem"]), mean(variant["tau"])


def _wu_rate(name: str, variant: dict) -> dict:
    median, passed, interval = exponential_check(resolved_rates(variant))
    lam2, tau = map_rates(variant)
    note = (
        f"median factor per layer over {len(resolved_rates(variant))} sentences, "
        f"{RATE_QUANTILES[0]:.0%}-{RATE_QUANTILES[1]:.0%}: "
        + " .. ".join(fmt(x) for x in interval)
        + f"; the maps' |lambda_2| {fmt(lam2)}, tau {fmt(tau)} (geometric means over the resolved layers)"
    )
    if passed is None:
        note = f"not measured: no sentence has {MIN_RATE_LAYERS} resolved layers >= 1"
    return prediction(
        f"{CHECK_LABELS[name]}: exponential collapse",
        "Wu et al. 2024",
        f"per-sentence factor per layer (least squares on log r, layers >= 1) < 1 on its "
        f"{RATE_QUANTILES[0]:.0%}-{RATE_QUANTILES[1]:.0%} interval",
        median,
        passed,
        note,
    )


def overflow_layer(variant: dict) -> int | None:
    """The first hidden state whose norms are not finite in float32 (`residual_abs`, `shared_norm`), or None."""
    finite = np.isfinite(array(variant["residual_abs"])) & np.isfinite(
        array(variant["shared_norm"])
    )
    return None if finite.all() else int(np.argmin(finite))


def finite_check(variant: dict) -> tuple[int | None, bool]:
    """(the first hidden state that overflows, or None; every hidden state is finite)."""
    layer = overflow_layer(variant)
    return layer, layer is None


def _overflowed(name: str, variant: dict, layer: int, causal: bool) -> list[dict]:
    """The collapse and rate checks of a variant whose hidden states overflow: not measured, and why."""
    growth = array(variant["residual_abs"])[:layer]
    factor = (growth[-1] / growth[0]) ** (1 / max(layer - 1, 1))
    note = (
        f"not measured: the hidden states overflow float32 at layer {layer} (their token differences grow about "
        f"{fmt(float(factor))}x per layer), outside the bounded-token setting of the theorem"
    )
    label = CHECK_LABELS[name]
    source, rate, claim = (
        ("Wu et al. 2024", "exponential collapse", "per-sentence factor per layer < 1")
        if causal
        else ("Dong et al. 2021", "doubly exponential decay", "log r_(l+1) / log r_l >= 2")
    )
    return [
        prediction(
            f"{label} collapses", source, f"r_L / r_0 <= {COLLAPSE_FACTOR:g}", None, None, note
        ),
        prediction(f"{label}: {rate}", source, claim, None, None, note),
    ]


def _finite_checks(variants: dict) -> list[dict]:
    """Sanity (a regime condition): every hidden state of the attention-only variants is finite in float32."""
    out = []
    for name in (n for n in ATTENTION_ONLY if n in variants):
        layer, passed = finite_check(variants[name])
        out.append(
            prediction(
                f"{CHECK_LABELS[name]}: hidden states finite",
                "float32 range",
                "every hidden state's norms finite",
                layer,
                passed,
                "measured: the first layer that overflows" if layer is not None else "",
                kind="sanity",
            )
        )
    return out


def _collapse_checks(variants: dict, causal: bool) -> list[dict]:
    source = "Wu et al. 2024" if causal else "Dong et al. 2021"
    present = [n for n in ATTENTION_ONLY if n in variants]
    if not present:
        return [
            _missing(
                "attention only collapses", source, "r_L / r_0 <= 1e-3", "attention-only variant"
            )
        ]
    checks = []
    for name in present:
        overflow = overflow_layer(variants[name])
        if overflow is not None:
            checks += _overflowed(name, variants[name], overflow, causal)
            continue
        residual = variants[name]["residual"]
        ratio, passed = collapse_check(residual)
        checks.append(
            prediction(
                f"{CHECK_LABELS[name]} collapses",
                source,
                f"r_L / r_0 <= {COLLAPSE_FACTOR:g}",
                ratio,
                passed,
                f"r_0 = {fmt(array(residual)[0])}, r_L = {fmt(array(residual)[-1])}; "
                f"norms: {variants[name]['norms']}",
            )
        )
        checks.append(
            _wu_rate(name, variants[name]) if causal else _dong_rate(name, variants[name])
        )
    return checks


def _dong_checks(variants: dict) -> list[dict]:
    dong, checks = "Dong et al. 2021", []
    if "attention_only" not in variants:
        return checks
    pure = variants["attention_only"]["residual"]
    if "no_mlp" in variants:
        kept = array(variants["no_mlp"]["residual"])[-1]
        ratio, passed = counteract_check(kept, array(pure)[-1])
        checks.append(
            prediction(
                "skip connections counteract collapse",
                dong,
                f"r_L(no MLPs, skips kept) >= {COUNTERACT_FACTOR:g} x r_L(attention only)",
                ratio,
                passed,
                f"r_L = {fmt(kept)} vs {fmt(array(pure)[-1])}; both keep the block norms",
            )
        )
    if "no_skip" in variants:
        ratio, passed, layer = slows_check(variants["no_skip"]["residual"], pure)
        note = (
            f"at layer {layer}, where attention only has fallen {1 / COLLAPSE_FACTOR:g}x"
            if layer is not None
            else f"attention only never falls {1 / COLLAPSE_FACTOR:g}x"
        )
        checks.append(
            prediction(
                "MLPs slow the collapse",
                dong,
                "r_l(no skips, MLPs kept) > r_l(attention only)",
                ratio,
                passed,
                note,
            )
        )
    return checks


def _keeps_check(variants: dict, sinks: str) -> list[dict]:
    if "full" not in variants:
        return []
    full = variants["full"]
    ratio, passed = keeps_check(full["residual_content"])
    return [
        prediction(
            "the full model keeps its rank (sinks excluded)",
            "Dong et al. 2021",
            f"r_L / r_0 >= {KEEP_FACTOR:g} for the tokens without {sinks}",
            ratio,
            passed,
            f"without {sinks}: r_0 = {fmt(array(full['residual_content'])[0])}, r_L = "
            f"{fmt(array(full['residual_content'])[-1])}; all tokens: r_L / r_0 = "
            f"{fmt(keeps_check(full['residual'])[0])}",
        )
    ]


def _path_checks(paths) -> list[dict]:
    source = "Dong et al. 2021 (Fig. 2)"
    if not paths:
        return [_missing("long paths collapse", source, "median r(k) decreasing", "paths run")]
    medians = path_medians(paths)
    rise, passed = non_increasing_check(
        medians[medians >= RESIDUAL_FLOOR]
    )  # float32 rounding below the floor
    checks = [
        prediction(
            "path output residual falls with path length",
            source,
            f"median r(k) non-increasing in k, over medians >= {RESIDUAL_FLOOR:g}",
            rise,
            passed,
            "largest rise; medians "
            + ", ".join(f"k={k}: {fmt(float(m))}" for k, m in zip(paths["lengths"], medians)),
        )
    ]
    ratio, passed = at_most_check(
        float(medians[-1] / medians[0]) if medians[0] > 0 else math.nan, LONG_PATH_FACTOR
    )
    checks.append(
        prediction(
            "long paths collapse (short paths carry the rank)",
            source,
            f"median r(k_max) <= {LONG_PATH_FACTOR:g} x median r(k_min)",
            ratio,
            passed,
            f"k_min = {paths['lengths'][0]}, k_max = {paths['lengths'][-1]}",
        )
    )
    return checks


def _bound_check(variants: dict) -> dict:
    worst = max(float(v["slem_over_tau"]) for v in variants.values())
    value, passed = at_most_check(worst, BOUND_TOLERANCE)
    return prediction(
        "|lambda_2| <= tau for every map",
        "Seneta 2006, §3.1",
        f"max (|lambda_2| - tau) <= {BOUND_TOLERANCE:g}",
        value,
        passed,
        "a theorem: every layer, head, sentence and variant",
        kind="sanity",
    )


def _sink_checks(model: dict, full: dict) -> list[dict]:
    mass = head_mean(sink(full))
    if model["causal"]:
        fraction, passed = majority_check(mass[BOTTOM_LAYERS:], SINK_SHARE)
        checks = [
            prediction(
                "attention sink on the first token",
                "Xiao et al. 2023",
                f"first-token attention > {SINK_SHARE:g} (mean over heads) in most layers past the "
                f"bottom {BOTTOM_LAYERS}",
                fraction,
                passed,
                f"fraction of layers {BOTTOM_LAYERS + 1}..{len(mass)}; uniform attention would give "
                f"{fmt(uniform_sink(full))}",
            )
        ]
        distance = array(full["path_first_max"])
        value, passed = at_most_check(distance[-1], FIRST_TOLERANCE)
        checks.append(
            prediction(
                "products of causal attention converge to 1 e_1^T",
                "Wu et al. 2024",
                f"max_i TV(row i of P_L, e_1) <= {FIRST_TOLERANCE:g}",
                value,
                passed,
                "P_l = A_l ... A_1 of head-averaged attention; first layer below the tolerance: "
                f"{layer_or_none(first_below(distance, FIRST_TOLERANCE))}",
            )
        )
        return checks
    sep = head_mean(sink(full, category="[SEP]"))
    layers = middle_layers(len(sep))
    value, passed = middle_share_check(sep)
    return [
        prediction(
            "[SEP] gets over half of the attention in the middle layers",
            "Clark et al. 2019",
            f"[SEP] attention > {SINK_SHARE:g} (mean over heads and the layers at depth "
            f"{MIDDLE_LAYERS[0]:.2f}-{MIDDLE_LAYERS[1]:.2f}, BERT-base's 6-10 of 12)",
            value,
            passed,
            f"layers {', '.join(str(a + 1) for a in layers)}; [CLS] there: "
            f"{fmt(float(np.mean(head_mean(sink(full, category='[CLS]'))[layers])))}, punctuation: "
            f"{fmt(float(np.mean(head_mean(sink(full, category='punctuation'))[layers])))}; [SEP]'s "
            f"uniform share {fmt(float(array(full['uniform_sink']['[SEP]'])))}",
        )
    ]


def layer_or_none(index) -> str:
    """A layer index as the notes and the report name it: 'layer l' (1-based), or 'none'."""
    return "none" if index is None else f"layer {index + 1}"


def predictions(summary: dict) -> list[dict]:
    """Every check: the predictions (`kind='prediction'`) and the sanity checks (`kind='sanity'`)."""
    variants, model = summary["variants"], summary["model"]
    sinks = CONTENT_LABELS[model["family"]]
    checks = (
        _collapse_checks(variants, model["causal"])
        + _dong_checks(variants)
        + _keeps_check(variants, sinks)
    )
    checks += _path_checks(summary["paths"])
    if "full" in variants:
        checks += _sink_checks(model, variants["full"]) + activations.predictions(variants["full"])
    return checks + [_bound_check(variants)] + _finite_checks(variants)
