"""The pretrained-attention study's checks: each row's verdict from the summary.

Every row is one of the five kinds of `experiments.lab.study.KINDS`:

* predictions, each in its paper's setting: Dong, Cordonnier & Loukas 2021
  (bidirectional pure attention collapses doubly exponentially; skip
  connections and, more weakly, MLPs counteract it), Wu, Ajorlou, Wang,
  Jegelka & Jadbabaie 2024 (pure masked attention collapses exponentially;
  local masks slow the collapse), Xiao et al. 2023 (a causal LM puts most of
  its attention on the first token in most layers past the bottom two; their
  Fig. 2 reads 16-token sentences, as this study does), Sun, Chen, Kolter &
  Liu 2024 (massive activations exist, sit on the first token and
  delimiters, lie in a few fixed dimensions, are nearly constant across
  inputs);
* hypotheses of this codebase: Wu et al.'s local-mask result carried to the
  attention-only network that keeps its block norms (their theorem is for
  pure attention);
* sanity: theorems whose hypotheses hold (|lambda_2| <= tau; the rows of a
  product of causal maps lie within its tau of e_1) and a construction
  (long single-head paths, products of positive maps, lose rank);
* not applicable, with the reason: Clark et al. 2019's [SEP] finding on
  single short sentences, Sun et al.'s criterion on a post-norm model, a
  collapse theorem for bounded tokens on a network whose tokens overflow.

The attention-only network that keeps its block norms, the full model
without its sinks and the per-layer rates are measurements, reported in the
findings without a verdict: Wu et al. prove that with LayerNorm collapse is
not guaranteed, so no paper predicts their outcome.

Decision rules are derived, never chosen to look strict: a paired ratio of
two variants of the same weights on the same sentences passes when its
interval over sentences lies above 1 (no effect), fails when it lies below,
and is not resolved when it straddles 1; "collapse to rank one" is r at
float32 resolution (`RESIDUAL_FLOOR`); "most" is a majority. The numbers
come from the summary (`summary.derive`).
"""

from __future__ import annotations

import math

from experiments.lab.render import fmt, interval_text
from experiments.lab.stats import within
from experiments.lab.study import prediction
from experiments.pretrained.constants import (
    BOTTOM_LAYERS,
    BOUND_TOLERANCE,
    CHECK_LABELS,
    CLARK_SETTING,
    DOUBLY_EXPONENTIAL_RATIO,
    FEW_DIMS,
    FIRST_RATIO_LAYER,
    FIRST_TOLERANCE,
    MAJORITY,
    MASSIVE_FACTOR,
    MASSIVE_SPREAD,
    MASSIVE_VALUE,
    MIDDLE_LAYERS,
    MIN_LOG_RATIOS,
    QK_NORM,
    RESIDUAL_FLOOR,
    SINK_SHARE,
    SUN_SETTING,
    VARIANT_LABELS,
)

DIGITS = ".3g"

# --------------------------------------------------------------------------
# Checks: the verdict of one number of the summary against its rule; each can fail


def collapsed_check(iv, floor: float = RESIDUAL_FLOOR) -> bool | None:
    """Collapse to rank one at float32 resolution: the interval of r_L over sentences lies at or below
    `floor` (True), above it (False), or straddles it (None, not resolved)."""
    return within(iv, -math.inf, floor)


def slower_check(iv) -> bool | None:
    """A paired ratio slower / faster over sentences (`summary.compared`) lies above 1 (True), below 1
    (False) or straddles it (None, not resolved)."""
    return within(iv, 1.0, math.inf)


def doubly_exponential_check(
    worst, count: int, min_ratio: float = DOUBLY_EXPONENTIAL_RATIO, min_ratios: int = MIN_LOG_RATIOS
) -> bool | None:
    """The smallest of `count` log-ratios (`readings.log_ratios`) >= min_ratio; None (not measured) with
    fewer than `min_ratios` of them (too few to tell an exponential from a doubly exponential rate)."""
    if count < min_ratios:
        return None
    return bool(worst >= min_ratio)


def at_most_check(value, bound: float) -> bool:
    """value <= bound."""
    return bool(float(value) <= bound)


def massive_exist_check(layers) -> bool:
    """Some hidden state 1..L is massive (`activations.massive_layers` is not empty)."""
    return bool(layers)


def most_check(iv) -> bool | None:
    """A share's interval over sentences (`activations.hit_readings`) lies above one half (True), below
    (False), or straddles it (None); None without the interval."""
    return within(iv, MAJORITY, math.inf)


def massive_constant_check(spread, bound: float = MASSIVE_SPREAD) -> bool | None:
    """The median spread over the massive layers (`activations.median_spread`) <= bound; None without them."""
    return None if spread is None else bool(spread <= bound)


# --------------------------------------------------------------------------
# Rows


def _ratio_note(c: dict, what: str) -> str:
    return (
        f"{what} of {VARIANT_LABELS[c['slower']]} over {VARIANT_LABELS[c['faster']]} at depth {c['depth']} "
        f"(the deepest where the latter is resolved, r >= {RESIDUAL_FLOOR:g}), geometric mean over "
        f"{c['ratio']['n']} sentences: {interval_text(c['ratio'], DIGITS)} (an interval straddling 1 is not resolved)"
    )


def pure_setting(summary: dict) -> tuple[str, str]:
    """The kind and the setting note of the rows on the norm-free network (`no_norm`): a prediction in
    the papers' pure attention; a hypothesis of this codebase when it keeps a QK-norm (Gemma 3), which
    bounds the logits as no norm of the pure network does."""
    norms = summary["variants"]["no_norm"]["norms"]
    if QK_NORM in norms:
        return "hypothesis", (
            f"; this network keeps its {norms}, which pure attention lacks, so the row is this codebase's "
            "hypothesis"
        )
    return "prediction", ""


def _overflow_note(c: dict) -> str:
    return (
        f"not measured: without norms these weights grow the token differences about "
        f"{fmt(float(c['growth']))}x per layer and overflow float32 at depth {c['overflow']} (r = "
        f"{fmt(c['before'])} at depth {c['overflow'] - 1}, the attention nearly one-hot: lowest mean "
        f"normalised entropy {fmt(c['entropy_low'])})"
    )


def _collapse_rows(summary: dict) -> list[dict]:
    """The norm-free network (`no_norm`: no skips, MLPs or block norms): Dong et al.'s collapse and doubly
    exponential rate (bidirectional), Wu et al.'s collapse (causal); not measured when its tokens overflow
    float32. The network that keeps its block norms is a measurement (no row)."""
    c = summary["collapse"].get("no_norm")
    if c is None:
        return []
    causal = summary["model"]["causal"]
    kind, setting = pure_setting(summary)
    paper = "Wu et al. 2024" if causal else "Dong et al. 2021"
    source = paper if kind == "prediction" else f"this codebase (after {paper})"
    label = CHECK_LABELS["no_norm"]
    claim = f"r_L over sentences at float32 resolution (<= {RESIDUAL_FLOOR:g})"
    if c["overflow"] is not None:
        return [
            prediction(f"{label} collapses", source, claim, None, None, _overflow_note(c), kind)
        ]
    rows = [
        prediction(
            f"{label} collapses",
            source,
            claim,
            c["end"]["mean"],
            collapsed_check(c["end"]),
            f"r_0 = {fmt(float(summary['variants']['no_norm']['residual'][0]))}; r_L per sentence: "
            f"{interval_text(c['end'], DIGITS)} over {c['end']['n']} sentences; below {RESIDUAL_FLOOR:g} "
            "float32 rounding dominates" + setting,
            kind,
        )
    ]
    if not causal:
        rows.append(_dong_rate(label, c))
    return rows


def _dong_rate(label: str, c: dict) -> dict:
    ratios = c["log_ratios"]
    passed = doubly_exponential_check(c["worst"], len(ratios))
    shown = ", ".join(f"{x:.2f}" for x in ratios[:12]) + (" ..." if len(ratios) > 12 else "")
    note = (
        f"r: geometric mean over sentences, r >= {RESIDUAL_FLOOR:g}; {len(ratios)} log-ratio(s) on "
        f"resolved layers >= {FIRST_RATIO_LAYER}" + (f": {shown}" if ratios else "")
    )
    if passed is None:
        note = (
            f"not measured: {len(ratios)} log-ratio(s), fewer than the {MIN_LOG_RATIOS} that tell an "
            f"exponential from a doubly exponential rate (r_l = q^l gives ratios (l + 1) / l); {note}"
        )
    return prediction(
        f"{label}: doubly exponential decay",
        "Dong et al. 2021",
        f"log r_(l+1) / log r_l >= {DOUBLY_EXPONENTIAL_RATIO:g} for consecutive resolved layers >= "
        f"{FIRST_RATIO_LAYER} (at least {MIN_LOG_RATIOS} ratios)",
        None if passed is None else c["worst"],
        passed,
        note,
    )


def _skip_rows(summary: dict) -> list[dict]:
    """Dong et al.: skips counteract the collapse (on the absolute residual: a relative one also falls when
    the shared component grows), MLPs slow it; each against attention only, the same weights and norms.
    Predictions on a bidirectional model (their setting: BERT, ALBERT, XLNet); on a causal one this
    codebase's hypotheses."""
    s, rows = summary["surgery"], []
    causal = summary["model"]["causal"]
    source = "this codebase (after Dong et al. 2021)" if causal else "Dong et al. 2021"
    kind = "hypothesis" if causal else "prediction"
    setting = (
        "; Dong et al. read bidirectional encoders, so on this causal model the row is this codebase's "
        "hypothesis"
        if causal
        else ""
    )
    if s["counteract"] is not None:
        c = s["counteract"]
        own = summary["variants"]["no_mlp"]["residual_abs"]
        rows.append(
            prediction(
                "skip connections counteract collapse",
                source,
                "||X_d - 1 x_bar^T|| with skips (no MLPs) over attention only's, per sentence: interval above 1",
                c["ratio"]["mean"],
                slower_check(c["ratio"]),
                _ratio_note(c, "absolute residual ||X_d - 1 x_bar^T||_F")
                + f"; both keep the block norms; the skips' own token differences run "
                f"{fmt(float(own[0]))} -> {fmt(float(own[-1]))} from X_0 to X_L" + setting,
                kind,
            )
        )
    if s["slows"] is not None:
        c = s["slows"]
        rows.append(
            prediction(
                "MLPs slow the collapse",
                source,
                "r_d without skips (MLPs kept) over attention only's, per sentence: interval above 1",
                c["ratio"]["mean"],
                slower_check(c["ratio"]),
                _ratio_note(c, "r") + setting,
                kind,
            )
        )
    return rows


def band_name(c: dict) -> str:
    """The row name of one band comparison (`summary.surgery["bands"]`)."""
    return f"a local mask (window {c['width']}) slows the collapse: {CHECK_LABELS[c['faster']]}"


def _band_rows(summary: dict) -> list[dict]:
    """Wu et al.: a local mask slows the collapse. A prediction on the norm-free network (their pure
    attention; a hypothesis when it keeps a QK-norm), not measured when its tokens overflow; a hypothesis of
    this codebase on the network that keeps its block norms; not applicable while the comparison depth is
    short of the layers a window needs to connect the sentence."""
    rows = []
    causal = summary["model"]["causal"]
    for c in summary["surgery"]["bands"]:
        base, width = c["faster"], c["width"]
        kind, setting = pure_setting(summary) if base == "no_norm" else ("hypothesis", "")
        if base != "no_norm":
            setting = (
                "; this codebase's hypothesis: Wu et al. prove the local-mask result for pure attention, and "
                "with LayerNorm collapse is not guaranteed"
            )
        source = (
            "Wu et al. 2024" if kind == "prediction" else "this codebase (after Wu et al. 2024)"
        )
        name = band_name(c)
        mask = "causal" if causal else "full"
        claim = (
            f"r_d with window {width} over r_d with the {mask} mask, per sentence: interval above 1"
        )
        read = f" Read here: {interval_text(c['ratio'], DIGITS)} at depth {c['depth']}."
        collapse = summary["collapse"][base]
        tokens, reach = max(summary["corpus"]["lengths"]), c["reach"]
        if collapse["overflow"] is not None:
            rows.append(
                prediction(
                    name, source, claim, None, None, _overflow_note(collapse) + "." + read, kind
                )
            )
        elif c["depth"] < reach:
            note = (
                f"Setting differs: the comparison is resolved to depth {c['depth']} only, fewer than the "
                f"{reach} layers a window of {width} needs before every two of the longest sentence's {tokens} "
                "tokens share a key; before that a product of window maps cannot contract, so a slower fall "
                "is a construction, not Wu et al.'s rate." + read
            )
            rows.append(
                prediction(name, "Wu et al. 2024", claim, None, None, note, "not applicable")
            )
        else:
            rows.append(
                prediction(
                    name,
                    source,
                    claim,
                    c["ratio"]["mean"],
                    slower_check(c["ratio"]),
                    _ratio_note(c, "r") + setting,
                    kind,
                )
            )
    return rows


def _sanity_rows(summary: dict) -> list[dict]:
    """Theorems whose hypotheses hold and a construction: they fail only on a bug."""
    worst = summary["bound"]
    rows = [
        prediction(
            "|lambda_2| <= tau for every map",
            "Seneta 2006, §3.1",
            f"max (|lambda_2| - tau) <= {BOUND_TOLERANCE:g}",
            worst,
            at_most_check(worst, BOUND_TOLERANCE),
            "a theorem: every layer, head, sentence and variant",
            kind="sanity",
        )
    ]
    full, causal = summary["variants"].get("full"), summary["model"]["causal"]
    if full is not None and causal:
        excess = max(float(d) - float(t) for d, t in zip(full["path_first_max"], full["path_tau"]))
        rows.append(
            prediction(
                "products of causal maps: rows within tau(P_l) of e_1",
                "Wu et al. 2024 (a theorem for a positive first column)",
                f"max over depths of (max_i TV(row i of P_l, e_1) - tau(P_l)) <= {BOUND_TOLERANCE:g}",
                excess,
                at_most_check(excess, BOUND_TOLERANCE),
                "P_l = A_l ... A_1 of head-averaged attention (row 1 is e_1, so each row's distance to it is at "
                f"most tau); measured: every row within {FIRST_TOLERANCE:g} of e_1 from "
                f"{depth_or_none(summary['causal_readings']['first'])}, "
                f"{fmt(float(full['path_first_max'][-1]))} at depth L",
                kind="sanity",
            )
        )
    readings, paths = summary["path_readings"], summary["paths"]
    if readings is not None:
        medians = readings["medians"]
        rows.append(
            prediction(
                "long single-head paths lose rank",
                "Dong et al. 2021 (Fig. 2), a construction",
                "median r(k_max) < median r(k_min)",
                readings["long_ratio"],
                bool(medians[-1] < medians[0]),
                "long products of positive row-stochastic maps contract (Seneta 2006); medians "
                + ", ".join(f"k={k}: {fmt(float(m))}" for k, m in zip(paths["lengths"], medians)),
                kind="sanity",
            )
        )
    return rows


def _sink_checks(summary: dict) -> list[dict]:
    full, sinks = summary["variants"]["full"], summary["sinks"]
    if summary["model"]["causal"]:
        layers = len(full["attention_sink"]["sinks"])
        per_sentence = sinks["sentence_fraction"]
        return [
            prediction(
                "attention sink on the first token",
                "Xiao et al. 2023 (Fig. 2: Llama-2-7B, 16-token sentences)",
                f"per sentence, the share of layers past the bottom {BOTTOM_LAYERS} whose first-token attention "
                f"(mean over heads and queries) is > {SINK_SHARE:g}: interval over sentences above 1/2",
                per_sentence["mean"],
                most_check(per_sentence),
                f"layers {BOTTOM_LAYERS}..{layers - 1} (from 0), {per_sentence['n']} sentences: "
                f"{interval_text(per_sentence, DIGITS)}; over the sentence-mean attention "
                f"{fmt(sinks['fraction'])} of those layers; uniform attention would give "
                f"{fmt(sinks['uniform'])}",
            )
        ]
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


def _massive_checks(summary: dict) -> list[dict]:
    """Sun et al. 2024's four claims on the full model's hidden states (`summary.massive`): predictions
    for a pre-norm model; for a post-norm one not applicable, the readings kept. "Constant across inputs"
    is not applicable either when every input opens with the same token and every largest activation sits
    on it (a causal model's hidden states there are then the same for every input)."""
    massive, norm = summary["massive"], summary["model"]["norm"]
    checks = _massive_predictions(massive)
    opener, count = summary["corpus"]["first_tokens"][0]
    if norm != "post":
        first = [massive["per_layer"]["first"][layer] for layer in massive["layers"]]
        if (
            summary["model"]["causal"]
            and count == summary["sentences"]
            and min(first, default=0) == 1
        ):
            constant = checks[-1]
            checks[-1] = prediction(
                constant["name"],
                constant["source"],
                constant["prediction"],
                constant["measured"],
                None,
                f"Setting differs: every input opens with {opener!r}, every sentence's largest activation sits "
                "on it, and under a causal mask its hidden states are the same for every input, so a constant "
                "activation there is a construction. "
                f"Read here: {fmt(massive['spread'])}",
                kind="not applicable",
            )
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
    source, layers, hits = "Sun et al. 2024", massive["layers"], massive["hits"]
    named = ", ".join(str(a) for a in layers) or "none"
    rows = [
        prediction(
            "massive activations exist",
            source,
            f"some hidden state's largest |a| >= {MASSIVE_VALUE:g} and >= {MASSIVE_FACTOR:g} x the median |a| "
            "(means over sentences; their criterion)",
            massive["top_ratio"],
            massive_exist_check(layers),
            f"largest ratio over depths 1..L; largest |a| {fmt(massive['largest_value'])}; "
            f"massive depths: {named}",
        )
    ]
    absent = "not measured: no activation meets the criterion"
    counted = (
        ""
        if hits is None
        else f"{hits['hits']} hits in {hits['sentences']} sentences (every activation that meets the criterion)"
    )
    rows.append(
        prediction(
            "massive activations sit on the first token or the first delimiter",
            source,
            "share of a sentence's hits on the first token or the first delimiter after it: interval over "
            "sentences above 1/2",
            None if hits is None else hits["location"]["mean"],
            None if hits is None else most_check(hits["location"]),
            absent
            if hits is None
            else f"{counted}; first token {fmt(hits['first'])}, first delimiter {fmt(hits['first_delimiter'])}, "
            f"every delimiter {fmt(hits['delimiter'])}, other tokens {fmt(hits['other'])} of the hits; "
            f"interval {interval_text(hits['location'], DIGITS)}",
        )
    )
    share = None if hits is None else hits["dims_share"]
    rows.append(
        prediction(
            "massive activations in a few fixed dimensions",
            source,
            f"share of a sentence's hits in the (up to) {FEW_DIMS} dimensions with the most hits in the other half of "
            "the sentences: interval over sentences above 1/2",
            None if share is None else share["mean"],
            most_check(share),
            absent
            if share is None
            else f"{counted}; dimensions {', '.join(str(d) for d in hits['dims'])} (chosen on every other "
            f"sentence, tested on the rest; by chance {FEW_DIMS} / D of the D features); interval "
            f"{interval_text(share, DIGITS)}",
        )
    )
    rows.append(
        prediction(
            "massive activations constant across inputs",
            source,
            f"std / mean of the largest |a| over sentences <= {MASSIVE_SPREAD:g} (median over the "
            "massive layers)",
            massive["spread"],
            massive_constant_check(massive["spread"]),
            "" if layers else "not measured: no massive layer",
        )
    )
    return rows


def depth_or_none(index) -> str:
    """Index i of the products P_1, P_2, ... (P_l = A_l ... A_1) as the notes and the report name it:
    'depth l' with l = i + 1, the number of layers in the product, or 'none'."""
    return "none" if index is None else f"depth {index + 1}"


def predictions(summary: dict) -> list[dict]:
    """Every row, each with its kind (module docstring)."""
    rows = _collapse_rows(summary) + _skip_rows(summary) + _band_rows(summary)
    if "full" in summary["variants"]:
        rows += _sink_checks(summary)
        rows += _massive_checks(summary)
    return rows + _sanity_rows(summary)
