"""Summary, checks, report and figures of the pretrained-attention study.

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
sequences that should fail; `predictions` names them. The report's text is
generated from the summary.
"""
from __future__ import annotations

import math

import numpy as np

from attnjax import plotting
from attnjax.analysis import PATTERN_NAMES
from attnjax.study import distinct, prediction, select
from experiments.pretrained.study import SINK_LABELS, SINKS, VARIANTS
from experiments.report_util import count, fmt, markdown_table, predictions_table

# Below this relative residual float32 rounding dominates, and ratios of
# log-residuals mean nothing (as in the rank-collapse study).
RESIDUAL_FLOOR = 1e-5
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
VARIANT_LABELS = {"full": "full model", "no_skip": "no skips", "no_mlp": "no MLPs", "attention_only": "attention only"}
MODEL_LABELS = {"minilm": "all-MiniLM-L6-v2", "smollm2": "SmolLM2-135M"}


# --------------------------------------------------------------------------
# Summary


def _variant_summary(rows: list[dict]) -> dict:
    """`{metric: values}` of one depth run; sink masses as `{metric: {category: values}}`."""
    out = {}
    for row in rows:
        if row["metric"] in ("model", "groups", "example"):
            continue
        if "sink" in row:
            out.setdefault(row["metric"], {})[row["sink"]] = row["values"]
        else:
            out[row["metric"]] = row["values"] if "values" in row else row["value"]
    return out


def _paths_summary(rows: list[dict]) -> dict | None:
    if not rows:
        return None
    paths = select(rows, metric="path_residual")
    return {"lengths": [r["length"] for r in paths], "residual": [r["values"] for r in paths],
            "input_residual": select(rows, metric="input_residual")[0]["value"],
            "sentences": select(rows, metric="path_sentences")[0]["value"]}


def _rounded(value, digits: int = 5):
    """Every float of a nested list / dict to `digits` significant digits (the summary is committed)."""
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_rounded(v, digits) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(f"{value:.{digits}g}")
    return value


def summarize(rows: list[dict], config) -> dict:
    depth = select(rows, part="depth")
    model = {k: v for k, v in select(depth, metric="model")[0].items() if k not in ("metric", "run", "part", "variant")}
    groups = select(depth, metric="groups")[0]
    return _rounded({
        "model": {"name": config.model.name, **model},
        "corpus": {"source": config.text_file or f"docstrings of {len(config.corpus.modules)} standard-library modules",
                   "lengths": groups["lengths"], "counts": groups["counts"]},
        "sink_categories": list(SINKS[model["family"]]),
        "variants": {v: _variant_summary(select(depth, variant=v)) for v in distinct(depth, "variant")},
        "examples": [{k: r[k] for k in ("layer", "head", "reason", "tokens", "values")}
                     for r in select(depth, metric="example")],
        "paths": _paths_summary(select(rows, part="paths")),
    })


# --------------------------------------------------------------------------
# Reading the summary


def _array(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def head_mean(values) -> np.ndarray:
    """`[L, H]` -> `[L]`: mean over heads."""
    return _array(values).mean(axis=-1)


def sink(variant: dict, metric: str = "attention_sink", category: str = "sinks") -> np.ndarray:
    return _array(variant[metric][category])


def geometric_residual(variant: dict) -> np.ndarray:
    """`[L + 1]`: the geometric mean over sentences of r_l. If every sentence decays with
    log r_(l+1) >= c log r_l, so does this mean (it is linear in the logs); the arithmetic mean need not."""
    return np.exp(_array(variant["log_residual"]))


def path_medians(paths: dict) -> np.ndarray:
    return np.asarray([np.median(_array(r)) for r in paths["residual"]])


def first_below(values, level: float):
    """The first index whose value is <= level, or None."""
    hits = np.nonzero(_array(values) <= level)[0]
    return int(hits[0]) if hits.size else None


def geometric_rate(residual, floor: float = RESIDUAL_FLOOR):
    """Mean factor per layer, (r_b / r_a)^(1 / (b - a)), between layer a = 0 and the last layer b above `floor`."""
    r = _array(residual)
    above = np.nonzero(r >= floor)[0]
    b = int(above[-1]) if above.size else 0
    return float((r[b] / r[0]) ** (1 / b)) if b > 0 and r[0] > 0 else None


# --------------------------------------------------------------------------
# Checks: (measured, passed) from arrays; each can fail


def collapse_check(residual, factor: float = COLLAPSE_FACTOR) -> tuple[float, bool]:
    """r_L / r_0 <= factor."""
    r = _array(residual)
    ratio = float(r[-1] / r[0]) if r[0] > 0 else math.nan
    return ratio, bool(ratio <= factor)


def doubly_exponential_check(residual, floor: float = RESIDUAL_FLOOR,
                             min_ratio: float = DOUBLY_EXPONENTIAL_RATIO) -> tuple[float | None, bool | None, list]:
    """min over consecutive layers of log r_l / log r_(l-1) >= min_ratio, over layers with r_l >= floor and r_(l-1) < 1.

    r_l = r_(l-1)^c for c >= 2 is doubly exponential decay (c = 3 in Dong et
    al.'s bound); a geometric sequence r_l = q^l has ratios l / (l - 1) -> 1.
    None (not measured) when no pair of layers qualifies.
    """
    r = _array(residual)
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
    slower, faster = _array(slower), _array(faster)
    layer = first_below(faster, factor * faster[0])
    if layer is None:
        return None, None, None
    ratio = slower[layer] / faster[layer] if faster[layer] > 0 else (math.inf if slower[layer] > 0 else math.nan)
    return float(ratio), bool(ratio > 1), layer


def keeps_check(residual, factor: float = KEEP_FACTOR) -> tuple[float, bool]:
    """r_L / r_0 >= factor."""
    r = _array(residual)
    ratio = float(r[-1] / r[0]) if r[0] > 0 else math.nan
    return ratio, bool(ratio >= factor)


def non_increasing_check(values) -> tuple[float, bool]:
    """The largest rise between consecutive values <= 0."""
    v = _array(values)
    rise = float(np.max(np.diff(v))) if len(v) > 1 else 0.0
    return rise, bool(rise <= 0)


def at_most_check(value, bound: float) -> tuple[float, bool]:
    """value <= bound."""
    return float(value), bool(float(value) <= bound)


def majority_check(values, threshold: float) -> tuple[float, bool]:
    """The fraction of values above threshold is more than one half."""
    v = _array(values)
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
                             f"r_0 = {fmt(_array(pure)[0])}, r_L = {fmt(_array(pure)[-1])}; norms kept"))
    worst, passed, ratios = doubly_exponential_check(geometric_residual(variants["attention_only"]))
    checks.append(prediction("attention only: doubly exponential decay", dong,
                             f"log r_(l+1) / log r_l >= {DOUBLY_EXPONENTIAL_RATIO:g} for consecutive layers", worst,
                             passed, f"r: geometric mean over sentences; layers with r >= {RESIDUAL_FLOOR:g}; ratios "
                             + ", ".join(f"{x:.2f}" for x in ratios[:12]) + (" ..." if len(ratios) > 12 else "")))
    if "no_mlp" in variants:
        kept = _array(variants["no_mlp"]["residual"])[-1]
        ratio, passed = counteract_check(kept, _array(pure)[-1])
        checks.append(prediction("skip connections counteract collapse", dong,
                                 f"r_L(no MLPs, skips kept) >= {COUNTERACT_FACTOR:g} x r_L(attention only)", ratio,
                                 passed, f"r_L = {fmt(kept)} vs {fmt(_array(pure)[-1])}"))
    if "no_skip" in variants:
        ratio, passed, layer = slows_check(variants["no_skip"]["residual"], pure)
        note = (f"at layer {layer}, where attention only has fallen {1 / COLLAPSE_FACTOR:g}x" if layer is not None
                else f"attention only never falls {1 / COLLAPSE_FACTOR:g}x")
        checks.append(prediction("MLPs slow the collapse", dong,
                                 "r_l(no skips, MLPs kept) > r_l(attention only)", ratio, passed, note))
    if "full" in variants:
        ratio, passed = keeps_check(variants["full"]["residual"])
        checks.append(prediction("the full model keeps its rank", dong, f"r_L / r_0 >= {KEEP_FACTOR:g}", ratio, passed,
                                 f"r_0 = {fmt(_array(variants['full']['residual'])[0])}"))
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
                             f"{fmt(float(_array(full['uniform_sink']['sinks'])))}")]
        distance = _array(full["path_first_max"])
        value, passed = at_most_check(distance[-1], FIRST_TOLERANCE)
        checks.append(prediction("products of causal attention converge to 1 e_1^T", "Wu et al. 2024",
                                 f"max_i TV(row i of P_L, e_1) <= {FIRST_TOLERANCE:g}", value, passed,
                                 "P_l = A_l ... A_1 of head-averaged attention; first layer below the tolerance: "
                                 f"{_layer_or_none(first_below(distance, FIRST_TOLERANCE))}"))
        return checks
    uniform = float(_array(full["uniform_sink"]["sinks"]))
    fraction, passed = majority_check(mass / uniform, SINK_UNIFORM_FACTOR)
    return [prediction("attention sinks on [CLS], [SEP] and punctuation", "Clark et al. 2019",
                       f"sink attention >= {SINK_UNIFORM_FACTOR:g} x its uniform share in most layers", fraction,
                       passed, f"fraction of layers; uniform share {fmt(uniform)}")]


def _layer_or_none(index) -> str:
    return "none" if index is None else f"layer {index + 1}"


def predictions(summary: dict) -> list[dict]:
    variants, model = summary["variants"], summary["model"]
    checks = _dong_checks(variants, model["causal"]) + _path_checks(summary["paths"]) + [_bound_check(variants)]
    if "full" in variants:
        checks += _sink_checks(model, variants["full"])
    return checks


# --------------------------------------------------------------------------
# Findings: one paragraph per claim, from the numbers


def _verdict_word(checks: list[dict], name: str) -> str:
    p = next((c for c in checks if c["name"] == name), None)
    return {"pass": "agrees with", "fail": "contradicts", "not measured": "does not test"}[p["verdict"]] if p else \
        "does not test"


def _residual_phrase(residual) -> str:
    r = _array(residual)
    head = ", ".join(fmt(float(x)) for x in r[:6])
    return head + (f", ..., {fmt(float(r[-1]))}" if len(r) > 6 else "")


def _dong_paragraph(summary, checks) -> list[str]:
    v = summary["variants"]
    if "attention_only" not in v:
        return []
    pure = _array(v["attention_only"]["residual"])
    geometric = geometric_residual(v["attention_only"])
    worst, passed, _ = doubly_exponential_check(geometric)
    rate = geometric_rate(geometric)
    if worst is None:
        speed = "too fast to resolve in float32"
    elif passed:
        speed = "doubly exponential (every consecutive ratio of log-residuals, geometric means over sentences, is >= 2)"
    else:
        speed = (f"not doubly exponential (smallest consecutive ratio of log-residuals, geometric means over "
                 f"sentences, {fmt(worst)}); about {fmt(rate)}x per layer on average")
    falls = "falls below" if pure[-1] <= COLLAPSE_FACTOR * pure[0] else "does not fall below"
    text = (f"**Rank collapse without skips and MLPs (Dong et al. 2021).** With the pretrained weights and the "
            f"skip connections and MLPs removed (norms kept), the relative residual r_l = ||X_l - 1 x_bar^T||_F / "
            f"||X_l||_F runs {_residual_phrase(pure)} over layers 0..{len(pure) - 1}: it {falls} "
            f"{COLLAPSE_FACTOR:g} x r_0, "
            f"and the decay is {speed}. This {_verdict_word(checks, 'attention only: doubly exponential decay')} "
            "the paper's doubly exponential rate (and "
            f"{_verdict_word(checks, 'attention only (no skips, no MLPs) collapses')} the collapse itself).")
    if summary["model"]["causal"] and passed is False:
        text += (" For causally masked attention Wu et al. 2024 prove an exponential rate of collapse; the measured "
                 "decay fits that weaker rate.")
    parts = [text]
    if "no_mlp" in v:
        kept = _array(v["no_mlp"]["residual"])
        parts.append(f"Keeping the skips (MLPs removed) leaves r_L = {fmt(float(kept[-1]))} against "
                     f"{fmt(float(pure[-1]))}: this {_verdict_word(checks, 'skip connections counteract collapse')} "
                     "the paper's claim that skip connections counteract the collapse.")
    if "no_skip" in v:
        ratio, _, layer = slows_check(v["no_skip"]["residual"], pure)
        mlp = _array(v["no_skip"]["residual"])
        if layer is not None:
            parts.append(f"Keeping the MLPs (skips removed), r at layer {layer} is {fmt(float(mlp[layer]))} against "
                         f"{fmt(float(pure[layer]))} for attention only, and r_L = {fmt(float(mlp[-1]))}: the MLPs "
                         f"{'slow' if ratio is not None and ratio > 1 else 'do not slow'} the collapse"
                         f"{' but do not stop it' if mlp[-1] <= COLLAPSE_FACTOR * mlp[0] else ''} "
                         f"({_verdict_word(checks, 'MLPs slow the collapse')} the paper).")
    if "full" in v:
        full = _array(v["full"]["residual"])
        parts.append(f"The full model keeps r_L = {fmt(float(full[-1]))} (r_0 = {fmt(float(full[0]))}).")
    return [" ".join(parts), ""]


def _absolute_paragraph(summary) -> list[str]:
    """For each variant: whether a falling relative residual is collapse or growth of the shared component."""
    sentences = []
    for name, v in summary["variants"].items():
        r, res, shared = _array(v["residual"]), _array(v["residual_abs"]), _array(v["shared_norm"])
        if r[-1] >= 0.5 * r[0]:
            continue
        if res[-1] >= res[0]:
            sentences.append(f"{VARIANT_LABELS[name]}: r falls {fmt(float(r[0] / max(r[-1], 1e-300)))}x, but the "
                             f"absolute residual rises from {fmt(float(res[0]))} to {fmt(float(res[-1]))} while the "
                             f"shared component grows from {fmt(float(shared[0]))} to {fmt(float(shared[-1]))}: the "
                             "token differences did not shrink, so this is not collapse.")
        else:
            sentences.append(f"{VARIANT_LABELS[name]}: r falls {fmt(float(r[0] / max(r[-1], 1e-300)))}x and the "
                             f"absolute residual falls too, from {fmt(float(res[0]))} to {fmt(float(res[-1]))}: "
                             "collapse.")
    full = summary["variants"].get("full")
    if full is not None:
        ratio = _array(full["first_norm_ratio"])
        layer = int(np.argmax(ratio))
        token = "first token" if summary["model"]["causal"] else "[CLS] token"
        massive = ("; such a massive activation (Sun et al. 2024) dominates X, which makes the effective rank small "
                   "without the other tokens collapsing" if ratio[layer] >= 10 else "")
        sentences.append(f"In the full model the {token}'s norm reaches {fmt(float(ratio[layer]))}x the median "
                         f"token's (the most, at the output of layer {layer}){massive}.")
    if not sentences:
        return []
    return ["**Relative against absolute residual.** A falling r_l is rank collapse only when the token "
            "differences ||X - 1 x_bar^T||_F shrink, not when the shared component ||1 x_bar^T||_F grows. "
            + " ".join(sentences), ""]


def _paths_paragraph(summary, checks) -> list[str]:
    paths = summary["paths"]
    if not paths:
        return []
    medians = path_medians(paths)
    cells = ", ".join(f"k = {k}: {fmt(float(m))}" for k, m in zip(paths["lengths"], medians))
    return [f"**Path length (Dong et al. 2021, Fig. 2).** Single-head paths of k layers applied to the embeddings "
            f"(r = {fmt(paths['input_residual'])}) have median relative residual {cells}. Long paths "
            f"{'collapse' if medians[-1] <= LONG_PATH_FACTOR * medians[0] else 'do not collapse'}: this "
            f"{_verdict_word(checks, 'long paths collapse (short paths carry the rank)')} the paper's finding that "
            "the rank of the output is carried by short paths (the skip connections make the network an ensemble "
            "of paths, most of them short).", ""]


def _sink_paragraph(summary, checks) -> list[str]:
    full = summary["variants"].get("full")
    if full is None:
        return []
    model = summary["model"]
    mass, perron = head_mean(sink(full)), head_mean(sink(full, "perron_sink"))
    uniform = float(_array(full["uniform_sink"]["sinks"]))
    top = int(np.argmax(mass))
    if model["causal"]:
        fraction, _ = majority_check(mass[BOTTOM_LAYERS:], SINK_SHARE)
        return [f"**Attention sink (Xiao et al. 2023).** The first token receives {fmt(float(mass.mean()))} of the "
                f"attention on average over layers and heads (queries 2..n; uniform attention would give "
                f"{fmt(uniform)}); {fmt(fraction)} of the layers past the bottom {BOTTOM_LAYERS} give it more than "
                f"half, the most layer {top + 1} ({fmt(float(mass[top]))}); the bottom {BOTTOM_LAYERS} layers give "
                f"{', '.join(fmt(float(x)) for x in mass[:BOTTOM_LAYERS])}. The sentences begin with ordinary "
                "words (no BOS token), so the sink is the position, not a special token. This "
                f"{_verdict_word(checks, 'attention sink on the first token')} the paper. The Perron vector of "
                "every causal map is e_1 (the first token is absorbing), so its mass there is 1 by construction.", ""]
    split = ", ".join(f"{cat} {fmt(float(head_mean(sink(full, 'attention_sink', cat)).mean()))}"
                      for cat in summary["sink_categories"][1:])
    return [f"**Attention sinks (Clark et al. 2019).** [CLS], [SEP] and punctuation receive "
            f"{fmt(float(mass.mean()))} of the attention on average over layers and heads (uniform share "
            f"{fmt(uniform)}; by kind: {split}), most in layer {top + 1} ({fmt(float(mass[top]))}); their mass in "
            f"the Perron vectors is {fmt(float(perron.mean()))}. This "
            f"{_verdict_word(checks, 'attention sinks on [CLS], [SEP] and punctuation')} the paper's finding for "
            "BERT.", ""]


def _causal_paragraph(summary, checks) -> list[str]:
    model, v = summary["model"], summary["variants"]
    if not model["causal"] or "full" not in v:
        return []
    full = v["full"]
    distance = _array(full["path_first_max"])
    diag_mean, diag_max = head_mean(full["diagonal_mean"]), head_mean(full["slem"])
    text = (f"**Causal masks and collapse (Wu et al. 2024).** The eigenvalues of a causal attention map are its "
            f"diagonal: a_11 = 1 and a_ii, i >= 2 (mean over layers and heads {fmt(float(diag_mean.mean()))}; "
            f"|lambda_2| = max_(i>=2) a_ii averages {fmt(float(diag_max.mean()))}). The products P_l = A_l ... A_1 "
            f"of head-averaged attention approach 1 e_1^T: max_i TV(row i, e_1) = "
            f"{_residual_phrase(distance)} over layers 1..{len(distance)}, below {FIRST_TOLERANCE:g} from "
            f"{_layer_or_none(first_below(distance, FIRST_TOLERANCE))} "
            f"({_verdict_word(checks, 'products of causal attention converge to 1 e_1^T')} the paper). Yet the full "
            f"model's tokens do not collapse (r_L = {fmt(float(_array(full['residual'])[-1]))}): the skips carry "
            "the tokens past the attention products.")
    if "attention_only" in v:
        pure = _array(v["attention_only"]["residual"])
        text += (f" Without skips and MLPs, with RMSNorm kept, r_L = {fmt(float(pure[-1]))}: pure masked attention "
                 f"collapses ({_verdict_word(checks, 'attention only (no skips, no MLPs) collapses')} the paper's "
                 f"exponential collapse; about {fmt(geometric_rate(geometric_residual(v['attention_only'])))}x per "
                 "layer, geometric mean over sentences), and here the normalisation does not prevent it (the paper "
                 "shows only that LayerNorm can, for some value matrices).")
    worst = float(full["slem_diagonal_error"])
    text += (f" The general iterative `slem` differs from the exact diagonal by up to {fmt(worst)} on these maps "
             "(sink heads, with nearly all mass in the first column, are far from normal), so |lambda_2| is read off "
             "the diagonal.")
    return [text, ""]


# --------------------------------------------------------------------------
# Tables


def _layer_table(summary) -> list[str]:
    name = "full" if "full" in summary["variants"] else next(iter(summary["variants"]))
    v, causal = summary["variants"][name], summary["model"]["causal"]
    L = len(v["entropy"])
    uniform = float(_array(v["uniform_sink"]["sinks"]))
    header = ["layer", "entropy", "abs(lambda_2)", "gap", "tau", f"sink mass (uniform {fmt(uniform)})",
              "Perron sink mass", "head redundancy", "r", "abs residual", "shared", "cosine", "eff. rank"]
    if causal:
        header += ["mean a_ii", "max_i TV(P_l row, e_1)"]
    rows = []
    for layer in range(L + 1):
        hidden = [fmt(float(_array(v[m])[layer])) for m in ("residual", "residual_abs", "shared_norm", "cosine",
                                                             "effective_rank")]
        if layer == 0:
            rows.append(["0 (embeddings)"] + [""] * 7 + hidden + ([""] * 2 if causal else []))
            continue
        a = layer - 1
        lam2 = float(head_mean(v["slem"])[a])
        cells = [fmt(float(head_mean(v["entropy"])[a])), fmt(lam2), fmt(1 - lam2), fmt(float(head_mean(v["tau"])[a]))]
        cells += [fmt(float(head_mean(sink(v))[a])), fmt(float(head_mean(sink(v, "perron_sink"))[a])),
                  fmt(float(_array(v["redundancy"])[a]))]
        extra = [fmt(float(head_mean(v["diagonal_mean"])[a])), fmt(float(_array(v["path_first_max"])[a]))] \
            if causal else []
        rows.append([str(layer)] + cells + hidden + extra)
    return [f"## Per layer ({VARIANT_LABELS[name]})", "",
            "Means over sentences and heads. Attention columns belong to layer l, hidden-state columns to its "
            "output (row 0: the embeddings). entropy: H_i / log(visible keys); gap = 1 - abs(lambda_2); sink mass: "
            f"attention on {SINK_LABELS[summary['model']['family']]}; r = ||X - 1 x_bar^T||_F / ||X||_F, abs "
            "residual = ||X - 1 x_bar^T||_F, shared = ||1 x_bar^T||_F; head redundancy: mean cosine between the maps "
            "of two heads.", "", *markdown_table(header, rows), ""]


def _heads_table(summary) -> list[str]:
    if "full" not in summary["variants"]:
        return []
    v = summary["variants"]["full"]
    classes = np.asarray(v["pattern"], dtype=int)
    rows = []
    for a, row in enumerate(classes):
        counts = {PATTERN_NAMES[c]: int(np.sum(row == c)) for c in np.unique(row)}
        rows.append([str(a + 1), ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])),
                     str(int(np.argmax(sink(v)[a]))), fmt(float(np.max(sink(v)[a]))),
                     str(int(np.argmin(_array(v["entropy"])[a]))), fmt(float(np.min(_array(v["entropy"])[a])))])
    return ["## Heads per layer (full model)", "",
            "Pattern class of each head (`classify_pattern`, its most frequent class over sentences), the head with "
            "the most sink mass and the head with the lowest entropy.", "",
            *markdown_table(["layer", "heads by pattern", "sink head", "its sink mass", "sharpest head",
                             "its entropy"], rows), ""]


def _surgery_table(summary) -> list[str]:
    v = summary["variants"]
    names = [n for n in VARIANTS if n in v]
    L = len(v[names[0]]["residual"]) - 1
    rows = []
    for layer in range(L + 1):
        cells = []
        for n in names:
            r, res = fmt(float(_array(v[n]["residual"])[layer])), fmt(float(_array(v[n]["residual_abs"])[layer]))
            att = "" if layer == 0 else (f" / {fmt(float(head_mean(v[n]['entropy'])[layer - 1]))} / "
                                         f"{fmt(float(head_mean(v[n]['tau'])[layer - 1]))}")
            cells.append(f"{r} / {res}{att}")
        rows.append([str(layer)] + cells)
    return ["## Surgery: the same weights without skips or MLPs", "",
            "Each cell: r / abs residual / attention entropy / tau (mean over heads), at the output of layer l.", "",
            *markdown_table(["layer"] + [VARIANT_LABELS[n] for n in names], rows), ""]


def _paths_table(summary) -> list[str]:
    paths = summary["paths"]
    if not paths:
        return []
    rows = []
    for k, values in zip(paths["lengths"], paths["residual"]):
        v = _array(values)
        q = np.percentile(v, [10, 25, 50, 75, 90])
        rows.append([str(k), str(len(v)), fmt(float(q[2])), f"{fmt(float(q[1]))} .. {fmt(float(q[3]))}",
                     f"{fmt(float(q[0]))} .. {fmt(float(q[4]))}"])
    return ["## Paths of single heads", "",
            f"Relative residual of the path outputs, each averaged over {paths['sentences']} sentences; input "
            f"embeddings: {fmt(paths['input_residual'])}.", "",
            *markdown_table(["k", "paths", "median", "quartiles", "10% .. 90%"], rows), ""]


def markdown(summary: dict) -> str:
    model, corpus, checks = summary["model"], summary["corpus"], summary["predictions"]
    mask = "causal" if model["causal"] else "bidirectional"
    lines = [
        f"# Pretrained attention across depth: {MODEL_LABELS.get(model['name'], model['name'])}", "",
        f"{model['num_layers']} layers, {model['num_heads']} query heads ({model['num_kv_heads']} key/value heads), "
        f"{mask}, {model['norm']}-norm; float32. Text: {sum(corpus['counts'])} sentences from {corpus['source']}, "
        "grouped by exact token count ("
        + ", ".join(f"{n} of {t} tokens" for n, t in zip(corpus["counts"], corpus["lengths"]))
        + "), each group one unpadded batch.", "",
        f"## Predictions: {count(checks, 'pass')} pass, {count(checks, 'fail')} fail", "",
        *predictions_table(checks), "",
        "## Findings", "",
        *_dong_paragraph(summary, checks), *_absolute_paragraph(summary), *_paths_paragraph(summary, checks),
        *_sink_paragraph(summary, checks), *_causal_paragraph(summary, checks),
        *_layer_table(summary), *_heads_table(summary), *_surgery_table(summary), *_paths_table(summary),
        "Plots: " + (", ".join(f"`plots/{name}`" for name in summary["plots"]) or "none"), "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Figures


def _surgery_figures(summary) -> dict:
    v = summary["variants"]
    names = [n for n in VARIANTS if n in v]
    out = {}
    for metric, label in (("residual", "||X - 1 x_bar^T||_F / ||X||_F"), ("residual_abs", "||X - 1 x_bar^T||_F")):
        fig = plotting.metric_vs_depth({VARIANT_LABELS[n]: _array(v[n][metric]) for n in names}, ylabel=label,
                                       start=0, title=f"{MODEL_LABELS.get(summary['model']['name'])}: surgery")
        out[f"surgery_{metric}"] = fig
    return out


def _attention_figure(summary):
    v = summary["variants"]["full"]
    lines = {"entropy / log(keys)": head_mean(v["entropy"]), "abs(lambda_2)": head_mean(v["slem"]),
             "tau": head_mean(v["tau"]), "sink mass": head_mean(sink(v)),
             "Perron sink mass": head_mean(sink(v, "perron_sink"))}
    fig = plotting.metric_vs_depth(lines, ylabel="mean over heads and sentences", log=False,
                                   title="Attention of the full model per layer")
    ax = fig.axes[0]
    ax.axhline(float(_array(v["uniform_sink"]["sinks"])), color="grey", linestyle=":", label="uniform sink mass")
    ax.legend(fontsize=8)
    return fig


def _sink_heatmap(summary):
    v = summary["variants"]["full"]
    mass = sink(v)
    L, H = mass.shape
    fig = plotting.figure(1.2 + 0.45 * H, 1.0 + 0.22 * L)
    ax = fig.add_subplot()
    image = ax.imshow(mass, vmin=0, vmax=1, cmap="viridis", aspect="auto", interpolation="nearest")
    ax.set_xticks(range(H))
    ax.set_yticks(range(L))
    ax.set_yticklabels([str(layer + 1) for layer in range(L)], fontsize=7)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(f"attention on {SINK_LABELS[summary['model']['family']]}", fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def _examples_figure(summary):
    examples = summary["examples"]
    model = summary["variants"]["full"]
    heads = _array(model["entropy"]).shape[1]
    n = len(examples[0]["tokens"])
    maps = np.zeros((heads, n, n))
    for e in examples:
        maps[e["head"]] = _array(e["values"])
    layer = examples[0]["layer"] + 1
    title = f"layer {layer}: " + "; ".join(f"head {e['head']} ({e['reason']})" for e in examples)
    tokens = [t.replace("\u0120", "_") for t in examples[0]["tokens"]]  # the byte-level BPE space marker
    return plotting.attention_heatmaps(maps, tokens=tokens, heads=[e["head"] for e in examples], ncols=len(examples),
                                       title=title, annotate=False)


def _paths_figure(paths):
    fig = plotting.figure(6.0, 4.0)
    ax = fig.add_subplot()
    data = [np.maximum(_array(r), 1e-12) for r in paths["residual"]]
    ax.boxplot(data, positions=range(len(data)), widths=0.6, showfliers=True)
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels([str(k) for k in paths["lengths"]])
    ax.axhline(paths["input_residual"], color="grey", linestyle=":", label="input embeddings")
    ax.set_yscale("log")
    ax.set_xlabel("path length k (layers)")
    ax.set_ylabel("relative residual of the path output")
    ax.set_title("Single-head paths (floored at 1e-12)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _products_figure(summary):
    v, causal = summary["variants"], summary["model"]["causal"]
    metric = "path_first_max" if causal else "path_tau"
    label = "max_i TV(row i of P_l, e_1)" if causal else "tau(P_l)"
    return plotting.metric_vs_depth({VARIANT_LABELS[n]: _array(v[n][metric]) for n in VARIANTS if n in v},
                                    ylabel=label, title="P_l = A_l ... A_1 (head-averaged attention)")


def figures(summary: dict) -> dict:
    out = _surgery_figures(summary)
    out["products"] = _products_figure(summary)
    if "full" in summary["variants"]:
        out["attention_depth"] = _attention_figure(summary)
        out["sink_mass_heads"] = _sink_heatmap(summary)
        out["example_heads"] = _examples_figure(summary)
    if summary["paths"]:
        out["path_length"] = _paths_figure(summary["paths"])
    return out


# --------------------------------------------------------------------------
# The README's results section, from committed runs


def _headline(summary: dict) -> dict:
    """The numbers the README quotes, from one summary."""
    v, model, checks = summary["variants"], summary["model"], summary["predictions"]
    pure, full = _array(v["attention_only"]["residual"]), v["full"]
    worst, _, _ = doubly_exponential_check(geometric_residual(v["attention_only"]))
    medians = path_medians(summary["paths"])
    out = {
        "model": f"{MODEL_LABELS.get(model['name'], model['name'])} "
                 f"({'causal' if model['causal'] else 'bidirectional'})",
        "shape": f"{model['num_layers']} x {model['num_heads']}" + (
            f" ({model['num_kv_heads']} KV heads)" if model["num_kv_heads"] != model["num_heads"] else ""),
        "sentences": str(sum(summary["corpus"]["counts"])),
        "predictions": f"{count(checks, 'pass')} pass, {count(checks, 'fail')} fail",
        "pure": f"{fmt(float(pure[0]))} -> {fmt(float(pure[-1]))}",
        "log_ratio": fmt(worst),
        "no_mlp": fmt(float(_array(v["no_mlp"]["residual"])[-1])),
        "no_skip": fmt(float(_array(v["no_skip"]["residual"])[-1])),
        "full": fmt(float(_array(full["residual"])[-1])),
        "paths": f"{fmt(float(medians[0]))} -> {fmt(float(medians[-1]))} (k = {summary['paths']['lengths'][0]} -> "
                 f"{summary['paths']['lengths'][-1]})",
        "sink": f"{fmt(float(head_mean(sink(full)).mean()))} ({SINK_LABELS[model['family']]}; uniform "
                f"{fmt(float(_array(full['uniform_sink']['sinks'])))})",
        "first": (_layer_or_none(first_below(full["path_first_max"], FIRST_TOLERANCE)) if model["causal"] else "-"),
    }
    out["failed"] = [c["name"] for c in checks if c["verdict"] == "fail"]
    out["doubly"] = _verdict_word(checks, "attention only: doubly exponential decay")
    out["rate"] = fmt(geometric_rate(geometric_residual(v["attention_only"])))
    out["sink_source"] = "Xiao et al. 2023" if model["causal"] else "Clark et al. 2019"
    out["sink_check"] = _verdict_word(checks, "attention sink on the first token" if model["causal"] else
                                      "attention sinks on [CLS], [SEP] and punctuation")
    return out


README_ROWS = (("layers x heads", "shape"), ("sentences", "sentences"), ("predictions", "predictions"),
               ("attention only (no skips, no MLPs): r_0 -> r_L", "pure"),
               ("smallest log r_(l+1) / log r_l (doubly exponential: >= 2)", "log_ratio"),
               ("no MLPs (skips kept): r_L", "no_mlp"), ("no skips (MLPs kept): r_L", "no_skip"),
               ("full model: r_L", "full"), ("single-head paths: median r, shortest -> longest", "paths"),
               ("attention on sink tokens, mean over layers and heads", "sink"),
               (f"products A_l ... A_1 within {FIRST_TOLERANCE:g} of 1 e_1^T from", "first"))


def readme_section(results: dict, times: dict | None = None) -> str:
    """Markdown of the README's "Results: pretrained models" section.

    `results`: `{results directory: its summary.json}` (MiniLM first);
    `times`: `{results directory: wall time of the run}`.
    """
    heads = {d: _headline(s) for d, s in results.items()}
    times = times or {}
    lines = ["## Results: pretrained models", "",
             "Default runs of both variants of the `pretrained` study (float32, 2-core CPU):", "", "```bash",
             "python -m experiments.pretrained --config configs/pretrained.py --workdir runs/pt",
             "python -m experiments.pretrained --config configs/pretrained.py:causal --workdir runs/pt_causal", "```",
             ""]
    for d, h in heads.items():
        when = f", {times[d]}" if d in times else ""
        lines.append(f"* {h['model']}: [`{d}/report.md`]({d}/report.md){when}.")
    lines += ["", *markdown_table(["", *[h["model"] for h in heads.values()]],
                                  [[label, *[h[key] for h in heads.values()]] for label, key in README_ROWS]), ""]
    lines += ["r = ||X - 1 x_bar^T||_F / ||X||_F of the hidden states (Dong et al. 2021), mean over sentences; the "
              "log-residual ratio uses their geometric mean. What it shows:", ""]
    for d, h in heads.items():
        failed = ", ".join(f"'{name}'" for name in h["failed"]) or "none"
        lines.append(f"* {h['model']}: without skips and MLPs the tokens collapse ({h['pure']}, about {h['rate']}x "
                     f"per layer); the smallest consecutive log-residual ratio, {h['log_ratio']}, {h['doubly']} "
                     f"Dong et al. 2021's doubly exponential rate. Skips alone keep r_L = {h['no_mlp']}, the full "
                     f"model {h['full']}; long single-head paths collapse ({h['paths']}). Sink tokens get "
                     f"{h['sink']}, which {h['sink_check']} {h['sink_source']}. Failed checks: {failed}.")
    lines.append("")
    for d, s in results.items():
        name = MODEL_LABELS.get(s["model"]["name"], s["model"]["name"])
        lines += [f"![{name}: surgery]({d}/plots/surgery_residual.png) ![{name}: paths]({d}/plots/path_length.png)", ""]
    return "\n".join(lines)
