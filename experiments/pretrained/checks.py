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

The numbers come from the summary (`summary.derive`: `collapse`, `surgery`,
`path_readings`, `sinks`, `massive`, `causal_readings`, `bound`); each check
(`*_check`) compares one of them with its threshold (`constants.py`) and
returns the verdict, and `predictions` names them.
"""

from __future__ import annotations

from experiments.lab.render import fmt
from experiments.lab.study import prediction
from experiments.pretrained.constants import (
    ATTENTION_ONLY,
    BOTTOM_LAYERS,
    BOUND_TOLERANCE,
    CHECK_LABELS,
    CLARK_SETTING,
    COLLAPSE_FACTOR,
    CONTENT_LABELS,
    COUNTERACT_FACTOR,
    DOUBLY_EXPONENTIAL_RATIO,
    FEW_DIMS,
    FIRST_RATIO_LAYER,
    FIRST_TOLERANCE,
    KEEP_FACTOR,
    LONG_PATH_FACTOR,
    MASSIVE_FACTOR,
    MASSIVE_SHARE,
    MASSIVE_SPREAD,
    MASSIVE_VALUE,
    MIDDLE_LAYERS,
    MIN_LOG_RATIOS,
    MIN_RATE_LAYERS,
    RATE_QUANTILES,
    RESIDUAL_FLOOR,
    SINK_SHARE,
    SUN_SETTING,
)

# --------------------------------------------------------------------------
# Checks: the verdict of one number of the summary against its threshold; each can fail


def collapse_check(fraction, factor: float = COLLAPSE_FACTOR) -> bool:
    """r_L / r_0 (`readings.end_ratio`) <= factor."""
    return bool(float(fraction) <= factor)


def doubly_exponential_check(
    worst, count: int, min_ratio: float = DOUBLY_EXPONENTIAL_RATIO, min_ratios: int = MIN_LOG_RATIOS
) -> bool | None:
    """The smallest of `count` log-ratios (`readings.log_ratios`) >= min_ratio; None (not measured) with
    fewer than `min_ratios` of them (too few to tell an exponential from a doubly exponential rate)."""
    if count < min_ratios:
        return None
    return bool(worst >= min_ratio)


def exponential_check(interval) -> bool | None:
    """The upper quantile of the per-sentence decay factors (`readings.rate_quantiles`) < 1; None when no
    sentence could be fitted."""
    if not interval:
        return None
    return bool(float(interval[1]) < 1)


def counteract_check(ratio, factor: float = COUNTERACT_FACTOR) -> bool:
    """kept / removed (`readings.ratio_of`) >= factor (NaN, both 0, fails)."""
    return bool(float(ratio) >= factor)


def slows_check(ratio) -> bool | None:
    """slower_l / faster_l > 1 at the layer `readings.slower_at` picks; None when there is none."""
    return None if ratio is None else bool(float(ratio) > 1)


def keeps_check(fraction, factor: float = KEEP_FACTOR) -> bool:
    """r_L / r_0 (`readings.end_ratio`) >= factor."""
    return bool(float(fraction) >= factor)


def non_increasing_check(rise) -> bool:
    """The largest rise between consecutive values (`readings.largest_rise`) <= 0."""
    return bool(float(rise) <= 0)


def at_most_check(value, bound: float) -> bool:
    """value <= bound."""
    return bool(float(value) <= bound)


def majority_check(fraction) -> bool:
    """The fraction of values above a threshold (`readings.fraction_above`) is more than one half."""
    return bool(float(fraction) > 0.5)


def finite_check(layer) -> bool:
    """Every hidden state is finite: no overflow layer (`readings.overflow_layer` is None)."""
    return layer is None


def massive_exist_check(layers) -> bool:
    """Some hidden state 1..L is massive (`activations.massive_layers` is not empty)."""
    return bool(layers)


def massive_location_check(share, minimum: float = MASSIVE_SHARE) -> bool | None:
    """The share on the first token or a delimiter (`activations.location_share`) >= minimum; None without
    massive layers."""
    return None if share is None else bool(share >= minimum)


def massive_dims_check(share, minimum: float = MASSIVE_SHARE) -> bool | None:
    """The share in the few most frequent dimensions (`activations.pooled_dims`) >= minimum; None without
    massive layers."""
    return None if share is None else bool(share >= minimum)


def massive_constant_check(spread, bound: float = MASSIVE_SPREAD) -> bool | None:
    """The median spread over the massive layers (`activations.median_spread`) <= bound; None without them."""
    return None if spread is None else bool(spread <= bound)


# --------------------------------------------------------------------------
# Predictions


def _missing(name: str, source: str, claim: str, need: str) -> dict:
    return prediction(name, source, claim, None, None, f"not measured: the config has no {need}")


def _ratios_note(ratios: list) -> str:
    shown = ", ".join(f"{x:.2f}" for x in ratios[:12]) + (" ..." if len(ratios) > 12 else "")
    return f"{len(ratios)} log-ratio(s) on resolved layers >= {FIRST_RATIO_LAYER}" + (
        f": {shown}" if ratios else ""
    )


def _dong_rate(name: str, c: dict) -> dict:
    ratios = c["log_ratios"]
    passed = doubly_exponential_check(c["worst"], len(ratios))
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
        c["worst"],
        passed,
        note,
    )


def _wu_rate(name: str, c: dict) -> dict:
    passed = exponential_check(c["interval"])
    note = (
        f"median factor per layer over {c['sentences']} sentences, "
        f"{RATE_QUANTILES[0]:.0%}-{RATE_QUANTILES[1]:.0%}: "
        + " .. ".join(fmt(x) for x in c["interval"])
        + f"; the maps' |lambda_2| {fmt(c['slem'])}, tau {fmt(c['tau'])} (geometric means over the resolved layers)"
    )
    if passed is None:
        note = f"not measured: no sentence has {MIN_RATE_LAYERS} resolved layers >= 1"
    return prediction(
        f"{CHECK_LABELS[name]}: exponential collapse",
        "Wu et al. 2024",
        f"per-sentence factor per layer (least squares on log r, layers >= 1) < 1 on its "
        f"{RATE_QUANTILES[0]:.0%}-{RATE_QUANTILES[1]:.0%} interval",
        c["median"],
        passed,
        note,
    )


def _overflowed(name: str, c: dict, causal: bool) -> list[dict]:
    """The collapse and rate checks of a variant whose hidden states overflow: not measured, and why."""
    note = (
        f"not measured: the hidden states overflow float32 at depth {c['overflow']} (their token differences "
        f"grow about {fmt(float(c['growth']))}x per layer), outside the bounded-token setting of the theorem"
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


def _finite_checks(collapse: dict) -> list[dict]:
    """Sanity (a regime condition): every hidden state of the attention-only variants is finite in float32."""
    out = []
    for name in (n for n in ATTENTION_ONLY if n in collapse):
        layer = collapse[name]["overflow"]
        out.append(
            prediction(
                f"{CHECK_LABELS[name]}: hidden states finite",
                "float32 range",
                "every hidden state's norms finite",
                layer,
                finite_check(layer),
                "measured: the first layer that overflows" if layer is not None else "",
                kind="sanity",
            )
        )
    return out


def _collapse_checks(summary: dict) -> list[dict]:
    variants, collapse, causal = (
        summary["variants"],
        summary["collapse"],
        summary["model"]["causal"],
    )
    source = "Wu et al. 2024" if causal else "Dong et al. 2021"
    present = [n for n in ATTENTION_ONLY if n in collapse]
    if not present:
        return [
            _missing(
                "attention only collapses", source, "r_L / r_0 <= 1e-3", "attention-only variant"
            )
        ]
    checks = []
    for name in present:
        c = collapse[name]
        if c["overflow"] is not None:
            checks += _overflowed(name, c, causal)
            continue
        residual = variants[name]["residual"]
        checks.append(
            prediction(
                f"{CHECK_LABELS[name]} collapses",
                source,
                f"r_L / r_0 <= {COLLAPSE_FACTOR:g}",
                c["ratio"],
                collapse_check(c["ratio"]),
                f"r_0 = {fmt(float(residual[0]))}, r_L = {fmt(float(residual[-1]))}; "
                f"norms: {variants[name]['norms']}",
            )
        )
        checks.append(_wu_rate(name, c) if causal else _dong_rate(name, c))
    return checks


def _dong_checks(summary: dict) -> list[dict]:
    variants, surgery, dong, checks = (
        summary["variants"],
        summary["surgery"],
        "Dong et al. 2021",
        [],
    )
    if "attention_only" not in variants:
        return checks
    pure = float(variants["attention_only"]["residual"][-1])
    if surgery["counteract"] is not None:
        ratio = surgery["counteract"]["ratio"]
        kept = float(variants["no_mlp"]["residual"][-1])
        checks.append(
            prediction(
                "skip connections counteract collapse",
                dong,
                f"r_L(no MLPs, skips kept) >= {COUNTERACT_FACTOR:g} x r_L(attention only)",
                ratio,
                counteract_check(ratio),
                f"r_L = {fmt(kept)} vs {fmt(pure)}; both keep the block norms",
            )
        )
    if surgery["slows"] is not None:
        ratio, layer = surgery["slows"]["ratio"], surgery["slows"]["layer"]
        note = (
            f"at depth {layer}, where attention only has fallen {1 / COLLAPSE_FACTOR:g}x"
            if layer is not None
            else f"attention only never falls {1 / COLLAPSE_FACTOR:g}x"
        )
        checks.append(
            prediction(
                "MLPs slow the collapse",
                dong,
                "r_l(no skips, MLPs kept) > r_l(attention only)",
                ratio,
                slows_check(ratio),
                note,
            )
        )
    return checks


def _keeps_check(summary: dict, sinks: str) -> list[dict]:
    keeps = summary["surgery"]["keeps"]
    if keeps is None:
        return []
    content = summary["variants"]["full"]["residual_content"]
    return [
        prediction(
            "the full model keeps its rank (sinks excluded)",
            "Dong et al. 2021",
            f"r_L / r_0 >= {KEEP_FACTOR:g} for the tokens without {sinks}",
            keeps["ratio"],
            keeps_check(keeps["ratio"]),
            f"without {sinks}: r_0 = {fmt(float(content[0]))}, r_L = {fmt(float(content[-1]))}; "
            f"all tokens: r_L / r_0 = {fmt(keeps['all_tokens'])}",
        )
    ]


def _path_checks(summary: dict) -> list[dict]:
    source, paths, readings = (
        "Dong et al. 2021 (Fig. 2)",
        summary["paths"],
        summary["path_readings"],
    )
    if not paths:
        return [_missing("long paths collapse", source, "median r(k) decreasing", "paths run")]
    checks = [
        prediction(
            "path output residual falls with path length",
            source,
            f"median r(k) non-increasing in k, over medians >= {RESIDUAL_FLOOR:g}",
            readings["rise"],
            non_increasing_check(readings["rise"]),
            "largest rise; medians "
            + ", ".join(
                f"k={k}: {fmt(float(m))}" for k, m in zip(paths["lengths"], readings["medians"])
            ),
        )
    ]
    ratio = readings["long_ratio"]
    checks.append(
        prediction(
            "long paths collapse (short paths carry the rank)",
            source,
            f"median r(k_max) <= {LONG_PATH_FACTOR:g} x median r(k_min)",
            ratio,
            at_most_check(ratio, LONG_PATH_FACTOR),
            f"k_min = {paths['lengths'][0]}, k_max = {paths['lengths'][-1]}",
        )
    )
    return checks


def _bound_check(summary: dict) -> dict:
    worst = summary["bound"]
    return prediction(
        "|lambda_2| <= tau for every map",
        "Seneta 2006, §3.1",
        f"max (|lambda_2| - tau) <= {BOUND_TOLERANCE:g}",
        worst,
        at_most_check(worst, BOUND_TOLERANCE),
        "a theorem: every layer, head, sentence and variant",
        kind="sanity",
    )


def _sink_checks(summary: dict) -> list[dict]:
    full, sinks = summary["variants"]["full"], summary["sinks"]
    if summary["model"]["causal"]:
        layers = len(full["attention_sink"]["sinks"])
        checks = [
            prediction(
                "attention sink on the first token",
                "Xiao et al. 2023",
                f"first-token attention > {SINK_SHARE:g} (mean over heads) in most layers past the "
                f"bottom {BOTTOM_LAYERS}",
                sinks["fraction"],
                majority_check(sinks["fraction"]),
                f"fraction of layers {BOTTOM_LAYERS}..{layers - 1} (from 0); uniform attention would give "
                f"{fmt(sinks['uniform'])}",
            )
        ]
        distance = float(full["path_first_max"][-1])
        checks.append(
            prediction(
                "products of causal attention converge to 1 e_1^T",
                "Wu et al. 2024",
                f"max_i TV(row i of P_L, e_1) <= {FIRST_TOLERANCE:g}",
                distance,
                at_most_check(distance, FIRST_TOLERANCE),
                "P_l = A_l ... A_1 of head-averaged attention; first depth below the tolerance: "
                f"{depth_or_none(summary['causal_readings']['first'])}",
            )
        )
        return checks
    middle = sinks["categories"]
    value = middle["[SEP]"]["middle"]
    return [
        prediction(
            "[SEP] gets over half of the attention in the middle layers",
            "Clark et al. 2019",
            f"[SEP] attention > {SINK_SHARE:g} (mean over heads and the layers at depth "
            f"{MIDDLE_LAYERS[0]:.2f}-{MIDDLE_LAYERS[1]:.2f}, BERT-base's 6-10 of 12)",
            value,
            None,
            f"{CLARK_SETTING} Read here: layers {', '.join(str(a) for a in sinks['middle'])} "
            f"(from 0); [CLS] there: {fmt(middle['[CLS]']['middle'])}, punctuation: "
            f"{fmt(middle['punctuation']['middle'])}; [SEP]'s "
            f"uniform share {fmt(float(full['uniform_sink']['[SEP]']))}",
            kind="not applicable",
        )
    ]


def _massive_checks(massive: dict, norm: str) -> list[dict]:
    """Sun et al. 2024's four claims on the full model's hidden states (`summary.massive`): predictions
    for a pre-norm model; for a post-norm one (`norm` 'post') not applicable, the readings kept."""
    checks = _massive_predictions(massive)
    if norm != "post":
        return checks
    return [
        prediction(
            c["name"],
            c["source"],
            c["prediction"],
            c["measured"],
            None,
            SUN_SETTING + ("" if c["verdict"] == "not measured" else f" Read here: {c['note']}"),
            kind="not applicable",
        )
        for c in checks
    ]


def _massive_predictions(massive: dict) -> list[dict]:
    source, layers = "Sun et al. 2024", massive["layers"]
    named = ", ".join(str(a) for a in layers) or "none"
    checks = [
        prediction(
            "massive activations exist",
            source,
            f"some hidden state's largest |a| >= {MASSIVE_VALUE:g} and >= {MASSIVE_FACTOR:g} x the median |a| "
            "(means over sentences)",
            massive["top_ratio"],
            massive_exist_check(layers),
            f"largest ratio over depths 1..L; largest |a| {fmt(massive['largest_value'])}; "
            f"massive depths: {named}",
        )
    ]
    absent = "" if layers else "not measured: no massive layer"
    checks.append(
        prediction(
            "massive activations sit on the first token or delimiters",
            source,
            f"share of sentences >= {MASSIVE_SHARE:g} (mean over the massive layers)",
            massive["location"],
            massive_location_check(massive["location"]),
            absent
            or f"first token {fmt(massive['first'])}, delimiters {fmt(massive['delimiter'])}",
        )
    )
    checks.append(
        prediction(
            "massive activations in a few fixed dimensions",
            source,
            f"share of sentences' largest |a| in the {FEW_DIMS} most frequent dimensions >= "
            f"{MASSIVE_SHARE:g} (pooled over the massive layers)",
            massive["dims_share"],
            massive_dims_check(massive["dims_share"]),
            absent or "dimensions " + ", ".join(str(d) for d in massive["dims"]),
        )
    )
    checks.append(
        prediction(
            "massive activations constant across inputs",
            source,
            f"std / mean of the largest |a| over sentences <= {MASSIVE_SPREAD:g} (median over the "
            "massive layers)",
            massive["spread"],
            massive_constant_check(massive["spread"]),
            absent,
        )
    )
    return checks


def depth_or_none(index) -> str:
    """Index i of the products P_1, P_2, ... (P_l = A_l ... A_1) as the notes and the report name it:
    'depth l' with l = i + 1, the number of layers in the product, or 'none'."""
    return "none" if index is None else f"depth {index + 1}"


def predictions(summary: dict) -> list[dict]:
    """Every check: the predictions (`kind='prediction'`) and the sanity checks (`kind='sanity'`)."""
    sinks = CONTENT_LABELS[summary["model"]["family"]]
    checks = _collapse_checks(summary) + _dong_checks(summary) + _keeps_check(summary, sinks)
    checks += _path_checks(summary)
    if "full" in summary["variants"]:
        checks += _sink_checks(summary)
        checks += _massive_checks(summary["massive"], summary["model"]["norm"])
    return checks + [_bound_check(summary)] + _finite_checks(summary["collapse"])
