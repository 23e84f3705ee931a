"""The rank-collapse study's report rows: verdicts over the summary, each of one of five kinds.

Rows test Dong, Cordonnier & Loukas 2021 ("Attention is not all you need:
pure attention loses rank doubly exponentially with depth"), Noci et al. 2022
("Signal propagation in transformers: theoretical perspectives and the role of
rank collapse") and Wu et al. 2024 ("On the role of attention masks and
LayerNorm in transformers") as the protocol of the project's SCIENCE notes
asks: a *prediction* is a paper's own claim in the paper's setting, a
*hypothesis* a claim of this codebase (or a paper's claim carried to a
setting the paper does not use), a *sanity* row an identity, a construction or
a resolution condition that fails only on a bug, and a *not applicable* row a
claim whose setting (or constant) is not retrieved; no row here is a
replication (none of these papers reports a number measured as these runs
measure). Every threshold below names its source. Each record's name, claim
and note are the check's own words; the numbers are the summary's (its
sections, `summary.derive`): a check compares them with its thresholds and
computes nothing.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from experiments.lab.render import interval_text
from experiments.lab.stats import contains, numbers
from experiments.lab.study import config_of, prediction
from experiments.rank_collapse.constants import EPS, LOCAL_WINDOW, RESOLVED, SATURATED

# A verdict rests on at least this many independent units (seeds), each with an interval (protocol).
MIN_UNITS = 10
# A least-squares slope needs two points: each seed's local exponent needs two pairs in the window.
MIN_PAIRS = 2
# Dong et al.'s leading order (`scaling.py`): res(SA(1 x^T + R)) = O(||R||^3), so the local exponent is 3.
DONG_EXPONENT = 3.0
# The eps-identity's next-order term is O(eps), so one decade down its deviation from 3 shrinks 10x; a
# shrink of at least sqrt(10) (half a decade on a log scale) leaves room for the order after it, while an
# exponent that is not 3 (a bug) keeps its deviation in every decade.
IDENTITY_SHRINK = math.sqrt(10)
# Below this a deviation from 3 is rounding: the identity's smallest residual is ~eps_min^3 of the token size,
# so float64 rounding (machine epsilon) moves its log, and the slope, by about epsilon / eps_min^3.
IDENTITY_ROUNDING = float(np.finfo(np.float64).eps) / min(EPS) ** 3
# Logit variance: the tolerance is halfway on a log scale between the prediction and the nearest scaling
# error, 1/d_k instead of 1/sqrt(d_k), which moves the variance by a factor d_k: a factor sqrt(d_k).
LOGIT_VARIANCE_TOLERANCE = "sqrt(d_k)"
# A per-layer rate of r_l below this is a collapse (r_(l+1) < r_l).
COLLAPSE_RATE = 1.0
# Sign thresholds of a trend (Noci et al.'s depth trends, a rate that rises or falls with depth, a local
# mask slower than the full one, an excess over a baseline): the claim's direction, nothing more.
NO_TREND = 0.0
SOURCE_WU = "Wu et al. 2024"
SOURCE_DONG = "Dong et al. 2021"
SOURCE_NOCI = "Noci et al. 2022"
OURS = "this codebase"
# Wu et al. 2024's statements, quoted in the rows (abstract; the last from their Figure 2's caption).
WU_MASKED = "pure masked attention still suffers from exponential collapse to a rank one subspace"
WU_LOCAL = "sparse or local masks can provably slow the collapse"
WU_LAYERNORM = "for certain classes of value matrices, collapse to a rank one subspace still happens exponentially"
WU_NO_COLLAPSE = (
    "with proper choice of value matrices, a general class of sequences may not converge to a rank one "
    "subspace"
)
WU_RANDOM = "as soon as we solely add in LayerNorm, mu(X(t)) no longer converge to zero in randomly initialized models"
# Noci et al. 2022, as established offline: Figure 1 (post-LN) and the abstract's gradient statement.
NOCI_ALIGNMENT = (
    "unless the residual branches are scaled at initialisation, token alignment (cosine) at "
    "initialisation grows with depth (Figure 1, post-LN)"
)
NOCI_GRADIENTS = (
    "rank collapse makes the gradients of the queries and keys vanish at initialisation; scaling the "
    "residual branches prevents it (abstract, paraphrased; the theorem is not retrieved)"
)
# Noci et al.'s Figure 1 is post-LN: the pre-LN rows are this codebase's hypotheses (another placement).
NOCI_PLACEMENT = "post-LN"
# What the Dong rows need (`summary.dong_run`).
DONG_RUN = "init or scale sweep run of bidirectional attention_only (softmax) at dong_embedding_std"


def std_label(std) -> str:
    """An embedding std as the checks, the report and the figures name it."""
    return "default (1/sqrt(D))" if std is None else f"{std:g}"


def _missing(name, source, claim, need, kind="prediction"):
    return prediction(
        name, source, claim, None, None, f"not measured: the config has no {need}", kind=kind
    )


def _unresolved(name, source, claim, kind="prediction"):
    """A row not measured because its runs resolve fewer than 3 depths (r_l above `RESOLVED`)."""
    return prediction(
        name,
        source,
        claim,
        None,
        None,
        f"not measured: fewer than 3 depths with r_l above {RESOLVED:g}",
        kind=kind,
    )


def _numbers(values, spec: str = ".3g") -> str:
    return ", ".join(format(v, spec) for v in values)


def enough(x: dict) -> bool:
    """Whether an interval over seeds can carry a verdict: >= `MIN_UNITS` units and finite ends."""
    return x["n"] >= MIN_UNITS and math.isfinite(x["low"]) and math.isfinite(x["high"])


def _decide(x: dict, passed: bool):
    """`passed` where the interval `x` can carry a verdict, else None (not measured)."""
    return bool(passed) if enough(x) else None


def _too_few(x: dict) -> str:
    return (
        ""
        if enough(x)
        else f" Not measured: {x['n']} seeds with finite interval ends needed >= {MIN_UNITS}."
    )


# --------------------------------------------------------------------------
# Dong et al. 2021


def regime_checks(summary: dict) -> list[dict]:
    """Sanity: the Dong run's layer-0 logit variance is the sqrt(d_k) argument's (its regime by design)."""
    source = "Vaswani et al. 2017 (Var(q.k / sqrt(d_k)) = Var(q) Var(k) d_k / d_k)"
    name = "layer-0 logit variance = (std_e^2 + std_p^2)^2"
    dong = numbers(summary["dong"])
    if dong is None:
        return [_missing(name, source, "measured / predicted", DONG_RUN, kind="sanity")]
    std, reg = dong["embedding_std"], dong["regime"]
    predicted, ratio, head_dim = (
        dong["predicted_logit_variance"],
        dong["logit_variance_ratio"],
        dong["head_dim"],
    )
    factor = math.sqrt(head_dim)
    return [
        prediction(
            f"{name} (attention only, init, embedding std {std_label(std)})",
            source,
            f"measured / predicted within a factor {LOGIT_VARIANCE_TOLERANCE} = {factor:.3g} (halfway on a "
            f"log scale to the nearest scaling error, 1/d_k for 1/sqrt(d_k), a factor d_k = {head_dim})",
            ratio,
            1 / factor <= ratio <= factor,
            f"measured {reg['logit_variance']:.4g}, predicted {predicted:.4g} (LeCun-normal W_Q, W_K; "
            f"the learned position table's std beside std_e); layer-0 entropy / log S "
            f"{reg['entropy']:.3f}, Dobrushin tau {reg['tau']:.3f}",
            kind="sanity",
        )
    ]


def window_check(exponent: dict, label: str, source: str = SOURCE_DONG) -> dict:
    """Sanity (resolution): every seed has `MIN_PAIRS` pairs in Dong's local window, over `MIN_UNITS` seeds."""
    pairs = exponent["pairs"]
    return prediction(
        f"Dong's local window is resolved ({label})",
        source,
        f"every seed has >= {MIN_PAIRS} (example, depth) pairs with {RESOLVED:g} < r_(l-1) < "
        f"{LOCAL_WINDOW:g} and r_l > {RESOLVED:g} (a slope needs two points), over >= {MIN_UNITS} seeds "
        "(the protocol's units)",
        min(pairs),
        min(pairs) >= MIN_PAIRS and len(pairs) >= MIN_UNITS,
        f"pairs per seed {_numbers(pairs, 'd')} over {len(pairs)} seeds; distinct depth transitions "
        f"l - 1 -> l per seed {_numbers(exponent['transitions'], 'd')} (a seed with one transition measures "
        "one layer's map over its examples); left out because r_l is at or below the resolution (read on "
        f"the outcome, as the protocol reads no value at rounding): {_numbers(exponent['unresolved'], 'd')}",
        kind="sanity",
    )


def exponent_check(exponent: dict, saturation: dict, label: str, source: str = SOURCE_DONG) -> dict:
    """Sanity (a theorem whose hypotheses hold): Dong's local exponent is 3, two-sided (3 inside its
    interval over >= `MIN_UNITS` seeds);
    `exponent` and `saturation` are `summary.cubic_exponent`s (the local window, r_(l-1) >= SATURATED)."""
    claim = (
        "||res(SA(X))||_1,inf <= c ||res(X)||_1,inf^3 (Theorem 2.2); at leading order the map is cubic "
        f"(X = 1 x^T + R: res = O(||R||^3)), so the slope of log ||res(X_l)|| on log ||res(X_(l-1))|| over "
        f"the pairs with {RESOLVED:g} < r_(l-1) < {LOCAL_WINDOW:g} (the local window, where the next-order "
        f"term is below the resolution: see the identity rows) is {DONG_EXPONENT:g}: two-sided, "
        f"{DONG_EXPONENT:g} inside the 95% interval over >= {MIN_UNITS} seeds"
    )
    passed = contains(exponent, DONG_EXPONENT)
    return prediction(
        f"Dong's local exponent is 3 ({label})",
        f"{source} (leading order, derived in scaling.py)",
        claim,
        exponent["mean"],
        _decide(exponent, passed),
        f"{interval_text(exponent)} over {exponent['n']} seeds; pairs per seed "
        f"{_numbers(exponent['pairs'], 'd')}; per-seed slopes {_numbers(exponent['slopes'])}. Beside it "
        f"(not a verdict), the slope over initialisation-sized residuals, r_(l-1) >= {SATURATED:g}: "
        f"{interval_text(saturation)} (softmax saturation, the next-order term; not evidence against the "
        f"theorem). A consequence of the leading-order expansion, not a test of Dong et al.'s experiments "
        "(BERT/ALBERT/XLNet with skips and MLPs removed), which this study does not run."
        f"{_too_few(exponent)}",
        kind="sanity",
    )


def identity_check(identity: dict, label: str, source: str = SOURCE_DONG) -> dict:
    """Sanity: the eps-scaling identity on every layer (`identity`: `summary.identity_slopes`): the slope of
    ||res|| against eps deviates from 3 by a next-order term that shrinks with eps, by >= `IDENTITY_SHRINK`
    from the decade [eps_1, eps_0] to [eps_2, eps_1]."""
    eps = identity["eps"]
    per_layer = "; ".join(
        f"depth {row['depth']}: slope {_numbers(row['slope'], '.5f')}, |slope - 3| "
        f"{_numbers(row['deviation'], '.2g')}"
        for row in identity["layers"]
    )
    shrinks = all(
        row["deviation"][-1] <= max(row["deviation"][-2] / IDENTITY_SHRINK, IDENTITY_ROUNDING)
        for row in identity["layers"]
    )
    worst = identity["worst_shrink"]
    return prediction(
        f"the eps-scaling identity holds at every layer ({label})",
        f"{source} (leading order, derived in scaling.py)",
        f"feed 1 x_bar^T + eps R_hat (the layer's own input X_(l-1), its residual rescaled to relative size "
        f"eps) through layer l with its weights: ||res|| = c eps^3 (1 + O(eps)), so per layer the median "
        f"over seeds and examples of |slope - 3| over the decade [{eps[-1]:g}, {eps[-2]:g}] is at most "
        f"1/sqrt(10) of the one over [{eps[-2]:g}, {eps[-3]:g}] (an O(eps) term shrinks 10x per decade), "
        f"or at float64 rounding ({IDENTITY_ROUNDING:.2g}: machine epsilon / eps_min^3)",
        worst,
        shrinks,
        f"largest shrink ratio over depths {worst:.3g} (an O(eps) term: 0.1); per decade, largest eps "
        f"first: {per_layer}",
        kind="sanity",
    )


def edge_check(identity: dict, exponent: dict, label: str, source: str = SOURCE_DONG) -> dict:
    """Sanity: at the local window's top decade the identity's next-order term moves the slope by less than
    the local exponent's resolution (half its interval's width)."""
    resolution = (exponent["high"] - exponent["low"]) / 2
    return prediction(
        f"Dong's local window is in the leading order ({label})",
        f"{source} (leading order, derived in scaling.py)",
        f"at the window's top decade [{identity['eps'][-1]:g}, {LOCAL_WINDOW:g}] the identity's |slope - 3| "
        "(median over seeds and examples, largest over layers) is below half the width of the local "
        "exponent's 95% interval: the next-order term cannot move the verdict",
        identity["edge"],
        _decide(exponent, identity["edge"] < resolution),
        f"|slope - 3| {identity['edge']:.2g} against the exponent's half-width {resolution:.3g}"
        f"{_too_few(exponent)}",
        kind="sanity",
    )


def bound_row(looseness: dict, label: str, source: str = SOURCE_DONG) -> dict:
    """Not applicable: Dong's bound needs the constant γ, whose definition is not retrieved; its slack per
    layer is reported as a function of γ (`looseness`: `summary.bound_looseness`)."""
    per_layer = "; ".join(
        f"depth {row['depth']}: slack {row['slack']:.3g} gamma, measured / bound {row['median']:.3g} / "
        "gamma"
        for row in looseness["rows"]
    )
    return prediction(
        f"residual <= Dong's bound c_l ||res(X_(l-1))||^3 ({label})",
        source,
        "||res(X_l)||_1,inf <= c_l ||res(X_(l-1))||_1,inf^3, c_l = 4 gamma sum_h ||W_QK^h||_1 "
        "||W_V^h||_1,inf / sqrt(d_qk), from the actual weights",
        None,
        None,
        "the bound's constant gamma (defined in the paper's appendix) is not retrieved, so the bound's "
        "value in this setting is unknown and no verdict rests on it. Both numbers are linear in gamma; per "
        "resolved layer, medians over seeds and examples: the slack c_l ||res(X_(l-1))||^2 (the bound "
        "guarantees a contraction only where it is < 1) and measured / bound: "
        + (per_layer or f"no layer resolved above {RESOLVED:g}"),
        kind="not applicable",
    )


def dong_checks(summary: dict) -> list[dict]:
    dong = numbers(summary["dong"])
    if dong is None:
        return [
            _missing(
                "Dong's local exponent is 3", SOURCE_DONG, "slope = 3", DONG_RUN, kind="sanity"
            )
        ]
    label = (
        f"bidirectional attention only, init, L={dong['depth']}, embedding std "
        f"{std_label(dong['embedding_std'])}, float64"
    )
    exponent, identity = dong["exponent"], dong["identity"]
    rows = [window_check(exponent, label), exponent_check(exponent, dong["saturation"], label)]
    if identity is not None:
        rows += [identity_check(identity, label), edge_check(identity, exponent, label)]
    return rows + [bound_row(dong["looseness"], label)]


# --------------------------------------------------------------------------
# Noci et al. 2022


def _noci_kind(placement: str) -> tuple[str, str]:
    """(kind, source) of a Noci row: a prediction in Figure 1's placement, else this codebase's hypothesis."""
    if placement == NOCI_PLACEMENT:
        return "prediction", SOURCE_NOCI
    return "hypothesis", f"{OURS} ({SOURCE_NOCI}'s claim in another LayerNorm placement)"


def _still_trends(stat: dict) -> bool:
    """Whether the scaled network's own trend is resolved: its 95% interval over seeds excludes 0."""
    scaled = stat["scaled"]
    return scaled["low"] > NO_TREND or scaled["high"] < NO_TREND


STILL_TRENDS = (
    "the scaled network still trends (its own interval excludes 0): the scaling slows the trend, it does "
    "not remove it at these depths"
)


def _trend_note(stat: dict, unit: str) -> str:
    return (
        f"unscaled {interval_text(stat['unscaled'])}, scaled {interval_text(stat['scaled'])}, scaled - "
        f"unscaled {interval_text(stat['difference'])} {unit}, over {stat['unscaled']['n']} seeds"
        + (f"; {STILL_TRENDS}" if _still_trends(stat) else "")
        + _too_few(stat["unscaled"])
    )


def alignment_trend_check(trend: dict) -> dict:
    """One row for Noci et al.'s alignment claim, read by two statistics that must both meet the rule
    (`trend` is one placement of the summary's `noci`): r_L falls with depth without the scaling (log
    r_L(L_max)/r_L(L_min) < 0) and falls less with it (scaled - unscaled > 0, seed by seed), and the token
    cosine at L grows with log L without the scaling (slope > 0) and grows less with it (scaled - unscaled
    < 0)."""
    placement, stat, cos = trend["placement"], trend["rank"], trend["cosine"]
    kind, source = _noci_kind(placement)
    shallow, deep = trend["depths"][0], trend["depths"][-1]
    falls = stat["unscaled"]["high"] < NO_TREND < stat["difference"]["low"]
    grows = cos["unscaled"]["low"] > NO_TREND > cos["difference"]["high"]
    measured = all(enough(x) for x in (stat["unscaled"], stat["difference"], cos["difference"]))
    return prediction(
        f"token alignment grows and rank collapse deepens with depth unless the branches are scaled by "
        f"1/sqrt(L) ({placement}, MLP, bidirectional, init, L={', '.join(map(str, trend['depths']))})",
        source,
        f"'{NOCI_ALIGNMENT}'. Two statistics of the one claim, both must meet the rule. (a) Per seed, the "
        "slope of the token cosine at L against log2 L: above 0 without the scaling (lower end of its 95% "
        "interval), and below the unscaled network's at the same depths with it (scaled - unscaled, seed "
        f"by seed: upper end below 0). (b) Per seed, log(r_L(L={deep}) / r_L(L={shallow})): below 0 "
        "without the scaling (upper end of its interval), and above the unscaled network's with it "
        "(scaled - unscaled: lower end above 0)",
        cos["unscaled"]["mean"],
        _decide(cos["unscaled"], falls and grows) if measured else None,
        f"(a) token cosine: {_trend_note(cos, 'per doubling of L')}. (b) r_L: "
        f"{_trend_note(stat, '(log ratio)')}",
        kind=kind,
    )


def _precision_note(gradients: Optional[dict]) -> str:
    """A note where the smallest per-layer gradient ratio of a placement (`gradients`: one of the summary's
    `gradients`) is below its precision's machine epsilon: there the slope's magnitude is not resolved."""
    if gradients is None or gradients["smallest"]["ratio"] >= gradients["epsilon"]:
        return ""
    small = gradients["smallest"]
    return (
        f". The smallest ratio, {small['ratio']:.2g} ({small['variant']}, L={small['depth']}, layer "
        f"{small['layer']}), is below the run's machine epsilon {gradients['epsilon']:.2g}: the direction "
        "of the trend is robust, the slope's magnitude is not resolved"
    )


def gradient_trend_check(trend: dict, gradients: Optional[dict] = None) -> dict:
    """The query/key gradients vanish with depth without the scaling (slope of log g on log2 L < 0) and
    vanish less with it (scaled - unscaled > 0, seed by seed); `gradients`: the placement's runs (the
    summary's `gradients`) for the precision note."""
    placement, stat = trend["placement"], trend["gradient"]
    kind, source = _noci_kind(placement)
    vanish = stat["unscaled"]["high"] < NO_TREND < stat["difference"]["low"]
    return prediction(
        f"query/key gradients vanish with depth unless the branches are scaled by 1/sqrt(L) ({placement}, "
        f"MLP, bidirectional, init, L={', '.join(map(str, trend['depths']))})",
        source,
        f"'{NOCI_GRADIENTS}'. g(L) = geometric mean over layers of ||grad W_QK|| / ||grad W_V||; per seed, "
        "the slope of log g against log2 L: below 0 without the scaling (upper end of its 95% interval), "
        "and above the unscaled network's at the same depths with it (scaled - unscaled, seed by seed: "
        "lower end above 0)",
        stat["unscaled"]["mean"],
        _decide(stat["unscaled"], vanish) if enough(stat["difference"]) else None,
        _trend_note(stat, "per doubling of L") + _precision_note(gradients),
        kind=kind,
    )


def noci_checks(summary: dict) -> list[dict]:
    rows = []
    gradients = {g["placement"]: g for g in numbers(summary["gradients"])}
    for trend in numbers(summary["noci"]):
        rows.append(alignment_trend_check(trend))
        if "gradient" in trend:
            rows.append(gradient_trend_check(trend, gradients.get(trend["placement"])))
    if not rows:
        rows.append(
            _missing(
                "depth trends with and without 1/sqrt(L) branches",
                SOURCE_NOCI,
                "r_L, cosine and gradients against depth",
                "noci_sweep with a placement of summary.NOCI_PAIRS at two depths",
            )
        )
    return rows


# --------------------------------------------------------------------------
# Wu et al. 2024


def _window_notes(windows: list[dict]) -> str:
    def one(w):
        text = f"depths {w['layers'][0]}-{w['layers'][1]}: rate {interval_text(w['rate'])}"
        if "lambda2" in w:
            text += (
                f", |lambda_2| {interval_text(w['lambda2'])}, rate / |lambda_2| {interval_text(w['ratio'])}, "
                f"entropy / log S {w['entropy']['mean']:.3f}"
            )
        if "chain_ratio" in w:
            text += f"; uniform chain: rate / (1/2) {interval_text(w['chain_ratio'])}"
        return text

    return "; ".join(one(w) for w in windows)


def exponential_check(
    collapse: dict,
    name: str,
    quote: str = WU_MASKED,
    source: str = SOURCE_WU,
    kind: str = "prediction",
    note: str = "",
) -> dict:
    """Collapse consistent with an exponential upper bound: the late window's per-layer rate below 1 and
    not rising with depth (`collapse`: `{"windows": summary.rate_windows or window_rates, "trend":
    summary.rate_trend}`)."""
    windows, trend = collapse["windows"], collapse["trend"]
    claim = (
        f"'{quote}': an upper-bound statement, so the data are consistent with it when r_l falls at a "
        f"per-layer rate below {COLLAPSE_RATE:g} in the late depth window (upper end of its 95% interval "
        "over seeds) that does not rise with depth (log late rate - log early rate, seed by seed: lower end "
        "of its interval not above 0; a rate rising toward 1 is a sub-exponential, e.g. power-law, decay)"
    )
    if not windows:
        return _unresolved(name, source, claim, kind=kind)
    late = windows[-1]["rate"]
    passed = late["high"] < COLLAPSE_RATE and trend["low"] <= NO_TREND
    return prediction(
        name,
        source,
        claim,
        late["mean"],
        _decide(late, passed) if enough(trend) else None,
        f"{_window_notes(windows)}; log late - log early rate {interval_text(trend)}{note}"
        f"{_too_few(late)}",
        kind=kind,
    )


def lambda2_check(windows: list[dict], label: str) -> dict:
    """Hypothesis (this codebase): in the asymptotic (late) window the causal rate relates to its maps'
    |λ2| as the exact uniform causal chain's rate to its |λ2| = 1/2, on the same inputs (`windows`:
    `summary.window_rates` with the chain)."""
    name = f"the causal collapse rate is the maps' |lambda_2| ({label})"
    claim = (
        "in the late depth window (the asymptotic one: early windows test the transient of a non-normal "
        "product), rate / |lambda_2| (geometric mean of the maps') equals what the exact uniform causal "
        "chain gives on the same inputs (rate / (1/2): its finite-window residue), seed by seed: "
        "two-sided, 0 inside the 95% interval of the difference"
    )
    if not windows or "excess" not in windows[-1]:
        return prediction(
            name,
            OURS,
            claim,
            None,
            None,
            f"not measured: fewer than 3 depths with r_l above {RESOLVED:g}, or no uniform chain",
            kind="hypothesis",
        )
    excess, early = windows[-1]["excess"], windows[0]
    return prediction(
        name,
        OURS,
        claim,
        excess["mean"],
        _decide(excess, contains(excess, NO_TREND)),
        f"difference {interval_text(excess)}; in the early window (depths {early['layers'][0]}-"
        f"{early['layers'][1]}, not the rule's) {interval_text(early['excess'])}. Where the maps are uniform "
        "(late window), |lambda_2| is 1/2 by construction: a residue there is a gain of the value/output "
        f"weights (W_V W_O), which the maps' |lambda_2| does not contain. {_window_notes(windows)}"
        f"{_too_few(excess)}",
        kind="hypothesis",
    )


def local_check(local: dict) -> dict:
    """Prediction: a local mask of width W slows the collapse against the full causal mask at finite depth,
    per seed on the same weights (`local`: one of the summary's `local`, `summary.local_rates`)."""
    width, rates = local["window"], local["rates"]
    name = (
        f"a local mask of width {width} slows the collapse (causal attention only, init, "
        f"L={local['depth']}, T={local['length']}, {local['seeds']} seeds)"
    )
    claim = (
        f"'{WU_LOCAL}': query t sees keys t - {width} < s <= t; a finite-depth slowdown: per seed (the "
        "same weights), at the deepest depth K resolved in both runs, log r_K - log r_K(full causal): "
        "lower end of its 95% interval above 0"
    )
    if rates is None:
        return _unresolved(name, SOURCE_WU, claim)
    difference, late = rates["difference"], rates["late"]
    return prediction(
        name,
        SOURCE_WU,
        claim,
        difference["mean"],
        _decide(difference, difference["low"] > NO_TREND),
        f"K = {rates['layers'][1]}: r_K {interval_text(rates['residual'])}, full causal "
        f"{interval_text(rates['reference_residual'])}, log difference {interval_text(difference)}. Beside "
        f"it (not a verdict), per-layer rates over depths {rates['layers'][0]}-{rates['layers'][1]}: "
        f"{interval_text(rates['rate'])} against {interval_text(rates['reference_rate'])}; in the late "
        f"window, depths {late['layers'][0]}-{late['layers'][1]}: {interval_text(late['rate'])} against "
        f"{interval_text(late['reference_rate'])} (log difference {interval_text(late['difference'])}). "
        "The claim is a delay, not a slower asymptotic rate: for any W >= 2 token 2 sees only tokens 1-2 "
        "(a_22 = 1/2 near uniform attention), so the asymptotic rate is set by the first tokens' maps, "
        "as in the uniform causal chain, and the late rates tend to the full mask's"
        f"{_too_few(difference)}",
    )


def mask_checks(summary: dict) -> list[dict]:
    checks = []
    for pair in numbers(summary["mask"]):
        if pair["architecture"] != "attention_only":
            continue
        depth, collapse = pair["depth"], pair["collapse"]
        label = f"init, L={depth}, {pair['seeds']} seeds"
        checks += [
            exponential_check(
                collapse,
                f"causal pure attention collapses exponentially ({label})",
                note=". Dong et al.'s theorem (unmasked attention) is not applied to causal runs",
            ),
            lambda2_check(collapse["windows"], label),
        ]
    checks += [local_check(local) for local in numbers(summary["local"])]
    if not checks:
        checks.append(
            _missing(
                "causal pure attention collapses exponentially",
                SOURCE_WU,
                "rate < 1, not rising",
                "mask_sweep run of attention_only",
            )
        )
    return checks


def random_layernorm_check(run: dict) -> dict:
    """Hypothesis: Wu et al.'s Figure 2 caption carried to this run (`run`: one of the summary's
    `layernorm.postln`): X -> LN(SA(X)) at random initialisation does not collapse, so r_l does not fall
    at a per-layer rate below 1 in the late window."""
    name = (
        f"LayerNorm after attention stops collapse at random initialisation (attention only, causal, "
        f"L={run['depth']}, {run['interval']['n']} seeds)"
    )
    source = f"{OURS} ({SOURCE_WU}'s Figure 2 caption carried to this setting: the figure's setting is not retrieved)"
    claim = (
        f"'{WU_RANDOM}' (X -> LN(SA(X))): r_l does not fall geometrically, i.e. the late depth window's "
        f"per-layer rate is not below {COLLAPSE_RATE:g} (upper end of its 95% interval over seeds at or above "
        f"{COLLAPSE_RATE:g}; a rate below 1 is a collapse)"
    )
    twin = run["float32"]
    float32 = (
        "no float32 run"
        if twin is None
        else f"float32 {interval_text(twin['interval'])} (min {twin['min']:.3g}; float32 resolves r only "
        "to ~1e-7)"
    )
    if not run["windows"]:
        return _unresolved(name, source, claim, kind="hypothesis")
    late = run["windows"][-1]["rate"]
    pure = (
        ""
        if not run["pure_windows"]
        else f"; pure attention of the same depth: late rate {interval_text(run['pure_windows'][-1]['rate'])}"
    )
    return prediction(
        name,
        source,
        claim,
        late["mean"],
        _decide(late, late["high"] >= COLLAPSE_RATE),
        f"{_window_notes(run['windows'])}{pure}. r_L: float64 {interval_text(run['interval'])} (min "
        f"{run['min']:.3g}); {float32}. This run (D = {run['width']}, T = {run['length']}, causal, L = "
        f"{run['depth']}, this library's initialisation) is not the figure's setting, which is not "
        f"retrieved: a failure here is not evidence against Wu et al.{_too_few(late)}",
        kind="hypothesis",
    )


def layernorm_checks(summary: dict) -> list[dict]:
    """Wu et al. 2024 on LayerNorm: two constructions (sanity) and their random-init figure's caption carried
    to this setting (a hypothesis: the figure's setting is not retrieved)."""
    checks = []
    block = config_of(summary).get("layernorm")
    layernorm = numbers(summary["layernorm"])
    orthogonal = next((c for c in layernorm["constructions"] if c["name"] == "orthogonal"), None)
    if orthogonal is not None:
        label = (
            f"LayerNorm, orthogonal W_V, causal, {block.num_tokens} tokens in {block.dim}-D, "
            f"{orthogonal['seeds']} seeds"
        )
        checks.append(
            exponential_check(
                orthogonal["collapse"],
                f"LayerNorm does not stop exponential collapse ({label})",
                WU_LAYERNORM,
                source=f"{OURS}'s construction (layernorm.py; LayerNorm there is x / ||x||), after {SOURCE_WU}",
                kind="sanity",
            )
        )
    full = layernorm["full_rank"]
    if full is not None:
        with_ln = full["with_interval"]
        checks.append(
            prediction(
                f"LayerNorm with constructed W_V keeps a full-rank equilibrium (causal, 2 tokens in 2-D, "
                f"L={full['depth']}, {with_ln['n']} seeds)",
                f"{SOURCE_WU} (a construction: layernorm.py)",
                f"'{WU_NO_COLLAPSE}': with LayerNorm the last layer's tokens have rank 2 (singular values "
                f"above {RESOLVED:g} of the largest) and consensus distance above {RESOLVED:g} in every seed; "
                f"without it the same weights reach the float64 resolution ({RESOLVED:g}) in every seed",
                with_ln["mean"],
                bool(
                    full["rank_min"] == 2
                    and full["with_min"] > RESOLVED
                    and full["without_max"] <= RESOLVED
                ),
                f"with LayerNorm {interval_text(with_ln)} (min {full['with_min']:.3g}), rank of the last layer's "
                f"tokens {_numbers(full['ranks'], '.0f')}; without {interval_text(full['without_interval'])} "
                f"(max {full['without_max']:.3g})",
                kind="sanity",
            )
        )
    for run in layernorm["postln"]:
        checks.append(random_layernorm_check(run))
    if not checks:
        checks.append(
            _missing(
                "LayerNorm and rank collapse",
                SOURCE_WU,
                "Wu et al.'s constructions",
                "layernorm block or mask_sweep run of attention_only_postln",
                kind="sanity",
            )
        )
    return checks


# --------------------------------------------------------------------------
# Training


def training_checks(summary: dict) -> list[dict]:
    """The training sanity condition (a network with skips learns recall: above the mode-of-context
    baseline in every seed) and this codebase's hypothesis on attention only (it learns the mode, no
    retrieval)."""
    checks = []
    training = numbers(summary["training"])
    baseline_source = (
        "the mode-of-context baseline (recall.py): the best strategy that ignores the query"
    )
    for run in [r for r in training if r["recall"]]:
        scores = run["baseline"]
        name = f"{run['architecture']} ({run['kind']}) learns recall at depth {run['depth']}"
        claim = (
            "held-out query accuracy above the mode-of-context baseline (predict the context's most "
            "frequent value) on the same queries, in every seed"
        )
        if scores is None:
            checks.append(_missing(name, baseline_source, claim, "recall counts", kind="sanity"))
            continue
        checks.append(
            prediction(
                f"{name}, {scores['accuracy']['n']} seeds",
                baseline_source,
                claim,
                scores["accuracy"]["mean"],
                scores["excess_min"] > NO_TREND,
                f"accuracy {interval_text(scores['accuracy'])}, mode baseline "
                f"{interval_text(scores['mode_accuracy'])}, accuracy on queries whose answer is not a "
                f"context mode {interval_text(scores['not_mode_accuracy'])}; per seed "
                f"{_numbers(run['accuracy'], '.2f')}; left the plateau at steps {run['plateau_exit']}",
                kind="sanity",
            )
        )
    for run in [r for r in training if r["architecture"] == "attention_only"]:
        scores, chance = run["baseline"], run["chance"]
        name = f"attention only ({run['kind']}) learns the context mode, not recall, at depth {run['depth']}"
        claim = (
            "trained pure attention does no better than the mode-of-context baseline (accuracy - baseline "
            "on the same queries, seed by seed: lower end of its 95% interval not above 0) and retrieves "
            "nothing: on the queries whose answer is not a context mode, accuracy below uniform guessing "
            f"over the value tokens ({chance:.3g}; upper end of its interval)"
        )
        if scores is None:
            checks.append(_missing(name, OURS, claim, "recall counts", kind="hypothesis"))
            continue
        excess, not_mode = scores["excess"], scores["not_mode_accuracy"]
        passed = excess["low"] <= NO_TREND and not_mode["high"] < chance
        checks.append(
            prediction(
                f"{name}, {excess['n']} seeds",
                OURS,
                claim,
                not_mode["mean"],
                _decide(excess, passed),
                f"accuracy {interval_text(scores['accuracy'])} against the mode baseline "
                f"{interval_text(scores['mode_accuracy'])} (difference {interval_text(excess)}) and uniform "
                f"guessing {chance:.3g}; on the {scores['not_mode_fraction']['mean']:.2f} of queries whose "
                f"answer is not a context mode: {interval_text(not_mode)}, where the mode strategy scores 0 "
                "by construction (the comparator the protocol names; uniform guessing is not a trivial "
                "strategy's score)"
                + (
                    f". Overall the model is below the mode strategy (difference {interval_text(excess)}: "
                    "upper end below 0)"
                    if excess["high"] < NO_TREND
                    else ""
                )
                + _too_few(excess),
                kind="hypothesis",
            )
        )
    if not checks:
        checks.append(
            _missing(
                "training rows",
                baseline_source,
                "skip variants above the mode baseline",
                "train_sweep runs at depth 4 (skip variants) or of attention only",
                kind="sanity",
            )
        )
    return checks


def predictions(summary: dict) -> list[dict]:
    """Every row, in the report's order."""
    return (
        regime_checks(summary)
        + dong_checks(summary)
        + noci_checks(summary)
        + mask_checks(summary)
        + layernorm_checks(summary)
        + training_checks(summary)
    )
