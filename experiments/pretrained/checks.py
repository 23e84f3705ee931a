"""The pretrained-attention study's checks: each prediction's verdict from the summary.

Checks the measurements of one pretrained model against:

* Dong, Cordonnier & Loukas 2021, "Attention is not all you need: pure
  attention loses rank doubly exponentially with depth": without skips and
  MLPs the tokens collapse doubly exponentially; skip connections (and, more
  weakly, MLPs) counteract it; long single-head paths collapse, so the
  network's output is carried by short paths;
* Xiao, Tian, Chen, Han & Lewis 2023, "Efficient streaming language models
  with attention sinks": a causal LM puts most of its attention on the first
  token in most layers beyond the bottom two;
* Wu, Ajorlou, Wang, Jegelka & Jadbabaie 2024, "On the role of attention
  masks and LayerNorm in transformers": products of causal attention
  matrices converge to 1 e_1^T, and pure masked attention still collapses;
* Clark, Khandelwal, Levy & Manning 2019, "What does BERT look at?": BERT's
  heads attend heavily to [CLS], [SEP] and punctuation;
* Seneta 2006, "Non-negative Matrices and Markov Chains": |lambda_2| <= tau.

Each check is a function of arrays (`*_check`) that returns the measured
number and the verdict, so it can be tested on sequences that should pass and
sequences that should fail; `predictions` names them.
"""
from __future__ import annotations

import math

import numpy as np

from attnjax.study import prediction
from experiments.pretrained.summary import (
    RESIDUAL_FLOOR,
    array,
    first_below,
    geometric_residual,
    head_mean,
    path_medians,
    sink,
    uniform_sink,
)
from experiments.report_util import fmt

# Collapse: the relative residual falls by three orders of magnitude.
COLLAPSE_FACTOR = 1e-3
# Doubly exponential decay, r_(l+1) <= r_l^c with c >= 2: log r_(l+1) / log r_l >= 2.
DOUBLY_EXPONENTIAL_RATIO = 2.0
# "Counteracts": skips keep the last layer's residual at least 10x that of attention only.
COUNTERACT_FACTOR = 10.0
# "Keeps rank": the full model loses less than a factor 10 of relative residual.
KEEP_FACTOR = 0.1
# "Long paths collapse": the median residual of the longest paths is 1% of the shortest's or less.
LONG_PATH_FACTOR = 1e-2
# Xiao et al. 2023: more than half of the attention on the first token, in most layers past the bottom two.
SINK_SHARE = 0.5
BOTTOM_LAYERS = 2
# Clark et al. 2019: the sink tokens get at least twice their uniform share.
SINK_UNIFORM_FACTOR = 2.0
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


def doubly_exponential_check(residual, floor: float = RESIDUAL_FLOOR,
                             min_ratio: float = DOUBLY_EXPONENTIAL_RATIO) -> tuple[float | None, bool | None, list]:
    """min over consecutive layers of log r_l / log r_(l-1) >= min_ratio, over layers with r_l >= floor and r_(l-1) < 1.

    r_l = r_(l-1)^c for c >= 2 is doubly exponential decay (c = 3 in Dong et
    al.'s bound); a geometric sequence r_l = q^l has ratios l / (l - 1) -> 1.
    None (not measured) when no pair of layers qualifies.
    """
    r = array(residual)
    usable = [layer for layer in range(1, len(r)) if r[layer] >= floor and 0 < r[layer - 1] < 1]
    ratios = [float(np.log(r[layer]) / np.log(r[layer - 1])) for layer in usable]
    if not ratios:
        return None, None, []
    return min(ratios), bool(min(ratios) >= min_ratio), ratios


def counteract_check(kept, removed, factor: float = COUNTERACT_FACTOR) -> tuple[float, bool]:
    """kept / removed >= factor (inf when only `removed` is 0; NaN, a fail, when both are)."""
    kept, removed = float(kept), float(removed)
    ratio = kept / removed if removed > 0 else (math.inf if kept > 0 else math.nan)
    return ratio, bool(ratio >= factor)


def slows_check(slower, faster, factor: float = COLLAPSE_FACTOR) -> tuple[float | None, bool | None, int | None]:
    """At the first layer l where `faster` has fallen to factor x its input, slower_l / faster_l > 1.

    Returns (ratio, passed, l); (None, None, None) when `faster` never falls that far.
    """
    slower, faster = array(slower), array(faster)
    layer = first_below(faster, factor * faster[0])
    if layer is None:
        return None, None, None
    ratio = slower[layer] / faster[layer] if faster[layer] > 0 else (math.inf if slower[layer] > 0 else math.nan)
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


# --------------------------------------------------------------------------
# Predictions


def _missing(name: str, source: str, claim: str, need: str) -> dict:
    return prediction(name, source, claim, None, None, f"not measured: the config has no {need}")


def _dong_checks(variants: dict, causal: bool) -> list[dict]:
    source = "Dong et al. 2021" + (" / Wu et al. 2024 (causal mask)" if causal else "")
    dong = "Dong et al. 2021"
    checks = []
    if "attention_only" not in variants:
        return [_missing("attention only collapses", source, "r_L / r_0 <= 1e-3", "attention_only variant")]
    pure = variants["attention_only"]["residual"]
    ratio, passed = collapse_check(pure)
    checks.append(prediction("attention only (no skips, no MLPs) collapses", source,
                             f"r_L / r_0 <= {COLLAPSE_FACTOR:g}", ratio, passed,
                             f"r_0 = {fmt(array(pure)[0])}, r_L = {fmt(array(pure)[-1])}; norms kept"))
    worst, passed, ratios = doubly_exponential_check(geometric_residual(variants["attention_only"]))
    checks.append(prediction("attention only: doubly exponential decay", dong,
                             f"log r_(l+1) / log r_l >= {DOUBLY_EXPONENTIAL_RATIO:g} for consecutive layers", worst,
                             passed, f"r: geometric mean over sentences; layers with r >= {RESIDUAL_FLOOR:g}; ratios "
                             + ", ".join(f"{x:.2f}" for x in ratios[:12]) + (" ..." if len(ratios) > 12 else "")))
    if "no_mlp" in variants:
        kept = array(variants["no_mlp"]["residual"])[-1]
        ratio, passed = counteract_check(kept, array(pure)[-1])
        checks.append(prediction("skip connections counteract collapse", dong,
                                 f"r_L(no MLPs, skips kept) >= {COUNTERACT_FACTOR:g} x r_L(attention only)", ratio,
                                 passed, f"r_L = {fmt(kept)} vs {fmt(array(pure)[-1])}"))
    if "no_skip" in variants:
        ratio, passed, layer = slows_check(variants["no_skip"]["residual"], pure)
        note = (f"at layer {layer}, where attention only has fallen {1 / COLLAPSE_FACTOR:g}x" if layer is not None
                else f"attention only never falls {1 / COLLAPSE_FACTOR:g}x")
        checks.append(prediction("MLPs slow the collapse", dong,
                                 "r_l(no skips, MLPs kept) > r_l(attention only)", ratio, passed, note))
    if "full" in variants:
        ratio, passed = keeps_check(variants["full"]["residual"])
        checks.append(prediction("the full model keeps its rank", dong, f"r_L / r_0 >= {KEEP_FACTOR:g}", ratio, passed,
                                 f"r_0 = {fmt(array(variants['full']['residual'])[0])}"))
    return checks


def _path_checks(paths) -> list[dict]:
    source = "Dong et al. 2021 (Fig. 2)"
    if not paths:
        return [_missing("long paths collapse", source, "median r(k) decreasing", "paths run")]
    medians = path_medians(paths)
    rise, passed = non_increasing_check(medians)
    checks = [prediction("path output residual falls with path length", source,
                         "median r(k) non-increasing in k", rise, passed,
                         "largest rise; medians " + ", ".join(f"k={k}: {fmt(float(m))}"
                                                              for k, m in zip(paths["lengths"], medians)))]
    ratio = float(medians[-1] / medians[0]) if medians[0] > 0 else math.nan
    checks.append(prediction("long paths collapse (short paths carry the rank)", source,
                             f"median r(k_max) <= {LONG_PATH_FACTOR:g} x median r(k_min)", ratio,
                             bool(ratio <= LONG_PATH_FACTOR),
                             f"k_min = {paths['lengths'][0]}, k_max = {paths['lengths'][-1]}"))
    return checks


def _bound_check(variants: dict) -> dict:
    worst = max(float(v["slem_over_tau"]) for v in variants.values())
    value, passed = at_most_check(worst, BOUND_TOLERANCE)
    return prediction("|lambda_2| <= tau for every map", "Seneta 2006, §3.1",
                      f"max (|lambda_2| - tau) <= {BOUND_TOLERANCE:g}", value, passed,
                      "every layer, head, sentence and variant")


def _sink_checks(model: dict, full: dict) -> list[dict]:
    mass = head_mean(sink(full))
    if model["causal"]:
        fraction, passed = majority_check(mass[BOTTOM_LAYERS:], SINK_SHARE)
        checks = [prediction("attention sink on the first token", "Xiao et al. 2023",
                             f"first-token attention > {SINK_SHARE:g} (mean over heads) in most layers past the "
                             f"bottom {BOTTOM_LAYERS}", fraction, passed,
                             f"fraction of layers {BOTTOM_LAYERS + 1}..{len(mass)}; uniform attention would give "
                             f"{fmt(uniform_sink(full))}")]
        distance = array(full["path_first_max"])
        value, passed = at_most_check(distance[-1], FIRST_TOLERANCE)
        checks.append(prediction("products of causal attention converge to 1 e_1^T", "Wu et al. 2024",
                                 f"max_i TV(row i of P_L, e_1) <= {FIRST_TOLERANCE:g}", value, passed,
                                 "P_l = A_l ... A_1 of head-averaged attention; first layer below the tolerance: "
                                 f"{layer_or_none(first_below(distance, FIRST_TOLERANCE))}"))
        return checks
    uniform = uniform_sink(full)
    fraction, passed = majority_check(mass / uniform, SINK_UNIFORM_FACTOR)
    return [prediction("attention sinks on [CLS], [SEP] and punctuation", "Clark et al. 2019",
                       f"sink attention >= {SINK_UNIFORM_FACTOR:g} x its uniform share in most layers", fraction,
                       passed, f"fraction of layers; uniform share {fmt(uniform)}")]


def layer_or_none(index) -> str:
    """A layer index as the notes and the report name it: 'layer l' (1-based), or 'none'."""
    return "none" if index is None else f"layer {index + 1}"


def predictions(summary: dict) -> list[dict]:
    variants, model = summary["variants"], summary["model"]
    checks = _dong_checks(variants, model["causal"]) + _path_checks(summary["paths"]) + [_bound_check(variants)]
    if "full" in variants:
        checks += _sink_checks(model, variants["full"])
    return checks


