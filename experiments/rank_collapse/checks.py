"""The rank-collapse study's literature checks: verdicts over the summary.

Checks the predictions of Dong, Cordonnier & Loukas 2021 ("Attention is not
all you need: pure attention loses rank doubly exponentially with depth"),
Noci et al. 2022 ("Signal propagation in transformers: theoretical
perspectives and the role of rank collapse") and Wu et al. 2024 ("On the
role of attention masks and LayerNorm in transformers") against the
measurements, in a regime that is reported beside every residual
(normalised attention entropy, Dobrushin coefficient τ, logit variance).
Each record's name, claim and note are the check's own words; the numbers
are the summary's (its sections, `summary.derive`): a check compares them with
its thresholds and computes nothing.
"""

from __future__ import annotations

import math

import numpy as np

from attnjax import nn
from experiments.lab.render import interval_text
from experiments.lab.study import config_of, prediction
from experiments.rank_collapse.constants import RESOLVED

# Thresholds of the checks (never relaxed to make one pass).
ENTROPY_MAX, TAU_MIN = 0.9, 0.3
LOGIT_VARIANCE_FACTOR = 2.0
NOCI_MIN_RESIDUAL = 0.9
# Dong et al.'s per-layer exponent, and the consecutive resolved layers (layer 0 included) it needs.
DONG_EXPONENT = 3.0
DONG_MIN_LAYERS = 4
RECALL_MIN_ACCURACY = 0.9
# Noci et al.'s remedy: the query/key-to-value gradient ratio at the deepest network over the shallowest one
# stays >= this with 1/sqrt(L) scaling and falls below it without.
GRADIENT_DROP = 0.5
# Wu et al.'s exponential collapse under a causal mask: the late window's log-rate within this factor of the
# early window's (a doubly exponential profile or a power law differ by a factor >= 3 over two halves).
EXPONENTIAL_FACTOR = 1.5
# The causal rate against the maps' |λ2|: rate / |λ2| within 1 +- this in every window.
LAMBDA2_TOLERANCE = 0.1
LAMBDA2_SOURCE = "Wu et al. 2024 (setting); lower-triangular maps: |lambda_2| = max_(i>=1) a_ii"
# Wu et al. 2024's statements, quoted in the checks (abstract; the last from their Figure 2's caption).
WU_MASKED = "pure masked attention still suffers from exponential collapse to a rank one subspace"
WU_LAYERNORM = "for certain classes of value matrices, collapse to a rank one subspace still happens exponentially"
WU_NO_COLLAPSE = (
    "with proper choice of value matrices, a general class of sequences may not converge to a rank one "
    "subspace"
)
WU_RANDOM = "as soon as we solely add in LayerNorm, mu(X(t)) no longer converge to zero in randomly initialized models"
# Not collapsed: the consensus distance (relative residual) at the last layer is at least this.
NO_COLLAPSE = 1e-3
# What the regime and Dong checks need (`summary.dong_run`).
DONG_RUN = "init_sweep run of attention_only (softmax)"
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def numbers(value):
    """A part of the summary with its non-finite numbers as floats: JSON stores NaN and inf as the strings
    'nan', 'inf' and '-inf' (`attnjax.serialization.to_json`); nested dicts and lists are read through."""
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers(v) for v in value]
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


def std_label(std) -> str:
    """An embedding std as the checks, the report and the figures name it."""
    return "default (1/sqrt(D))" if std is None else f"{std:g}"


def _missing(name, source, claim, need):
    return prediction(name, source, claim, None, None, f"not measured: the config has no {need}")


def _numbers(values, spec: str = ".3g") -> str:
    return ", ".join(format(v, spec) for v in values)


def regime_checks(summary: dict) -> list[dict]:
    source = "Vaswani et al. 2017 (Var(q.k / sqrt(d)) = 1); Dong et al. 2021"
    dong = numbers(summary["dong"])
    if dong is None:
        return [
            _missing(
                "attention at initialisation is not uniform",
                source,
                "layer-1 entropy / tau",
                DONG_RUN,
            )
        ]
    std, reg = dong["embedding_std"], dong["regime"]
    predicted, ratio = dong["predicted_logit_variance"], dong["logit_variance_ratio"]
    setting = f"attention only, init, embedding std {std_label(std)}"
    return [
        prediction(
            f"attention at initialisation is not uniform ({setting})",
            source,
            f"layer-1 normalised entropy <= {ENTROPY_MAX} and Dobrushin tau >= {TAU_MIN}",
            reg["entropy"],
            reg["entropy"] <= ENTROPY_MAX and reg["tau"] >= TAU_MIN,
            f"entropy {reg['entropy']:.3f} (1 = uniform), tau {reg['tau']:.3f}",
            kind="sanity",
        ),
        prediction(
            f"layer-1 logit variance = (std_e^2 + std_p^2)^2 ({setting})",
            "Vaswani et al. 2017",
            f"measured / predicted within a factor {LOGIT_VARIANCE_FACTOR:g}",
            ratio,
            1 / LOGIT_VARIANCE_FACTOR <= ratio <= LOGIT_VARIANCE_FACTOR,
            f"measured {reg['logit_variance']:.4g}, predicted {predicted:.4g} (LeCun-normal W_Q, W_K; "
            f"position std {nn.POSITION_INIT_STD})",
            kind="sanity",
        ),
    ]


def bound_check(looseness: dict, label: str, source: str = "Dong et al. 2021") -> dict:
    """Sanity (a theorem): measured <= Dong's bound (γ = 1) at every resolved layer; `looseness` is
    `summary.bound_looseness`."""
    name = f"residual <= Dong's bound at every resolved layer ({label})"
    claim = (
        "||res(X_l)||_1,inf <= c_l ||res(X_(l-1))||_1,inf^3, c_l = 4 gamma sum_h ||W_QK^h||_1 "
        "||W_V^h||_1,inf / sqrt(d_qk), gamma = 1"
    )
    if not looseness["rows"]:
        return prediction(
            name,
            source,
            claim,
            None,
            None,
            f"not measured: no layer resolved above {RESOLVED:g}",
            kind="sanity",
        )
    worst = looseness["worst"]
    per_layer = "; ".join(
        f"layer {row['layer']}: {row['median']:.3g} [{row['min']:.3g}, {row['max']:.3g}]"
        for row in looseness["rows"]
    )
    return prediction(
        name,
        source,
        claim,
        worst,
        worst <= 1,
        f"largest measured / bound; per layer median [min, max]: {per_layer}. The bound is linear "
        f"in gamma: it holds for gamma >= {worst:.3g}, and is tight there",
        kind="sanity",
    )


def exponent_check(exponent: dict, label: str, source: str = "Dong et al. 2021") -> dict:
    """Prediction: Dong's per-layer exponent is >= `DONG_EXPONENT` within its interval over seeds, from
    >= `DONG_MIN_LAYERS` consecutive resolved layers; `exponent` is `summary.cubic_exponent`."""
    name = f"Dong's cubic exponent ({label})"
    claim = (
        f"slope of log ||res(X_l)|| on log ||res(X_(l-1))|| >= {DONG_EXPONENT:g} (the theorem's "
        "||res(SA(X))|| <= c ||res(X)||^3), upper end of its 95% interval over seeds"
    )
    if exponent["layers"] < DONG_MIN_LAYERS:
        return prediction(
            name,
            source,
            claim,
            exponent["mean"],
            False,
            f"only {exponent['layers']} consecutive layers above {RESOLVED:g} (need "
            f"{DONG_MIN_LAYERS}): the regime does not resolve the exponent",
        )
    passed = bool(np.isfinite(exponent["high"])) and exponent["high"] >= DONG_EXPONENT
    return prediction(
        name,
        source,
        claim,
        exponent["mean"],
        passed,
        f"{interval_text(exponent)} over {exponent['n']} seeds; layers 0-{exponent['layers'] - 1} "
        f"resolved (every point above {RESOLVED:g}); per-seed slopes {_numbers(exponent['slopes'])}",
    )


def dong_checks(summary: dict) -> list[dict]:
    source = "Dong et al. 2021"
    dong = numbers(summary["dong"])
    if dong is None:
        return [_missing("Dong's cubic exponent", source, "slope >= 3", DONG_RUN)]
    label = (
        f"bidirectional attention only, init, L={dong['depth']}, embedding std "
        f"{std_label(dong['embedding_std'])}, float64"
    )
    exponent = dong["exponent"]
    return [
        prediction(
            f"float64 profile resolved ({label})",
            source,
            f">= {DONG_MIN_LAYERS} consecutive layers with every r > {RESOLVED:g}",
            exponent["layers"],
            exponent["layers"] >= DONG_MIN_LAYERS,
            f"layers 0-{exponent['layers'] - 1}",
            kind="sanity",
        ),
        exponent_check(exponent, label, source),
        bound_check(dong["looseness"], label, source),
    ]


def noci_check(summary: dict) -> dict:
    source = "Noci et al. 2022"
    claim = (
        f"skip scaled by 1/sqrt(L): r_L >= {NOCI_MIN_RESIDUAL} in every seed at every depth; its unscaled "
        "control's mean r_L falls below the scaled one's at the deepest"
    )
    noci = numbers(summary["noci"])
    if noci is None:
        return _missing(
            "1/sqrt(L) skips keep rank", source, claim, "init_sweep runs of skip_scaled and skip"
        )
    depths, r_scaled, r_control, lowest = (
        noci[k] for k in ("depths", "scaled", "control", "lowest")
    )
    passed = lowest >= NOCI_MIN_RESIDUAL and r_control[-1]["mean"] < r_scaled[-1]["mean"]
    return prediction(
        f"skip scaled by 1/sqrt(L) keeps rank (no LN or MLP, init, L={', '.join(map(str, depths))}, "
        f"{r_scaled[-1]['n']} seeds)",
        source,
        claim,
        lowest,
        passed,
        "lowest seed's r_L; r_L scaled / unscaled: "
        + ", ".join(
            f"L={d}: {interval_text(a)} / {interval_text(b)}"
            for d, a, b in zip(depths, r_scaled, r_control)
        ),
    )


def remedy_check(gradients: dict, source: str = "Noci et al. 2022") -> dict:
    """Prediction: with residual branches scaled by 1/sqrt(L) the query/key gradients do not vanish with depth,
    without the scaling they do (`gradients`: one placement of the summary's `gradients`)."""
    placement, drops = gradients["placement"], numbers(gradients["drop"])
    name = f"1/sqrt(L) residual scaling keeps query/key gradients ({placement}, MLP, bidirectional, init)"
    claim = (
        f"g(L) = geometric mean over layers of ||grad W_QK|| / ||grad W_V||; g(L_max) / g(L_min) per seed: "
        f"lower end of its 95% interval over seeds >= {GRADIENT_DROP:g} with the scaling, upper end < "
        f"{GRADIENT_DROP:g} without"
    )
    if drops is None:
        return prediction(
            name, source, claim, None, None, "not measured: fewer than two depths in both variants"
        )
    kept = np.isfinite(drops["scaled"]["low"]) and drops["scaled"]["low"] >= GRADIENT_DROP
    vanished = np.isfinite(drops["unscaled"]["high"]) and drops["unscaled"]["high"] < GRADIENT_DROP
    notes = "; ".join(f"{label}: {interval_text(drops[label])}" for label in ("scaled", "unscaled"))
    shallow, deep = drops["depths"]
    return prediction(
        name,
        source,
        claim,
        drops["scaled"]["mean"],
        bool(kept and vanished),
        f"g(L={deep}) / g(L={shallow}) over {drops['scaled']['n']} seeds, {notes}",
    )


def gradient_checks(summary: dict) -> list[dict]:
    checks = [remedy_check(gradients) for gradients in summary["gradients"]]
    if not checks:
        checks.append(
            _missing(
                "1/sqrt(L) residual scaling keeps query/key gradients",
                "Noci et al. 2022",
                "the scaled variant's g(L) does not fall with depth, the unscaled one's does",
                "noci_sweep with a placement of summary.NOCI_PAIRS at two depths",
            )
        )
    return checks


def _window_notes(windows: list[dict]) -> str:
    def one(w):
        text = f"layers {w['layers'][0]}-{w['layers'][1]}: rate {interval_text(w['rate'])}"
        if "lambda2" in w:
            text += (
                f", |lambda_2| {interval_text(w['lambda2'])}, ratio {interval_text(w['ratio'])}, entropy / log S "
                f"{w['entropy']['mean']:.3f}"
            )
        return text

    return "; ".join(one(w) for w in windows)


def exponential_check(
    collapse: dict,
    name: str,
    quote: str = WU_MASKED,
    source: str = "Wu et al. 2024",
    note: str = "",
) -> dict:
    """Prediction: a constant per-layer rate below 1 (`collapse`: `{"windows": summary.rate_windows or
    window_rates, "log_rate_ratio": summary.log_rate_ratio of them}`)."""
    windows, ratio = collapse["windows"], collapse["log_rate_ratio"]
    claim = (
        f"'{quote}': per-layer rate of r_l below 1 in both depth windows (upper end of its 95% interval "
        f"over seeds), the late window's log-rate within a factor {EXPONENTIAL_FACTOR:g} of the early one's"
    )
    if not windows:
        return prediction(
            name,
            source,
            claim,
            None,
            None,
            f"not measured: fewer than 3 layers above {RESOLVED:g}",
        )
    # ratio: the late window's log-rate over the early one's, NaN when the early window does not collapse
    below = all(np.isfinite(w["rate"]["high"]) and w["rate"]["high"] < 1 for w in windows)
    steady = 1 / EXPONENTIAL_FACTOR <= ratio <= EXPONENTIAL_FACTOR
    return prediction(
        name,
        source,
        claim,
        windows[-1]["rate"]["mean"],
        bool(below and steady),
        f"{_window_notes(windows)}; log-rate late / early {ratio:.3g}{note}",
    )


def lambda2_check(windows: list[dict], label: str, source: str = LAMBDA2_SOURCE) -> dict:
    """Prediction: the causal rate is the geometric mean |λ2| of the layers' maps (`windows`: `window_rates`)."""
    name = f"the causal collapse rate is the maps' |lambda_2| ({label})"
    claim = (
        f"rate / |lambda_2| (geometric mean over the window's layers) within 1 +- {LAMBDA2_TOLERANCE:g} in both "
        "depth windows, mean over seeds; uniform causal attention has |lambda_2| = a_11 = 1/2"
    )
    if not windows:
        return prediction(
            name,
            source,
            claim,
            None,
            None,
            f"not measured: fewer than 3 layers above {RESOLVED:g}",
        )
    passed = all(abs(w["ratio"]["mean"] - 1) <= LAMBDA2_TOLERANCE for w in windows)
    return prediction(
        name, source, claim, windows[-1]["ratio"]["mean"], passed, _window_notes(windows)
    )


def mask_checks(summary: dict) -> list[dict]:
    source = "Wu et al. 2024"
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
        if pair["slower"] is not None:
            at = pair["slower"]["at"]
            bidir_l, causal_l = (pair["slower"][k] for k in ("bidirectional_layer", "causal_layer"))
            checks.append(
                prediction(
                    f"the causal mask slows the collapse (attention only, init, L={depth})",
                    source,
                    f"causal r > 1e-6 at the layer where bidirectional r first falls below it (layer {bidir_l}), lower "
                    "end of its 95% interval over seeds",
                    at["mean"],
                    bool(np.isfinite(at["low"]) and at["low"] > 1e-6),
                    f"causal r there {interval_text(at)}; its mean first below 1e-6 at layer "
                    f"{causal_l if causal_l is not None else 'none'} of {depth}",
                )
            )
    if not checks:
        checks.append(
            _missing(
                "causal pure attention collapses exponentially",
                source,
                "constant rate < 1",
                "mask_sweep run of attention_only",
            )
        )
    return checks


def layernorm_checks(summary: dict) -> list[dict]:
    """Wu et al. 2024 on LayerNorm: their two statements on constructed weights, and their random-init figure."""
    source = "Wu et al. 2024"
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
            )
        )
    full = layernorm["full_rank"]
    if full is not None:
        with_ln = full["with_interval"]
        checks.append(
            prediction(
                f"LayerNorm with constructed W_V keeps a full-rank equilibrium (causal, 2 tokens in 2-D, "
                f"L={full['depth']}, {with_ln['n']} seeds)",
                source,
                f"'{WU_NO_COLLAPSE}': with LayerNorm the last layer's tokens have rank 2 and consensus distance >= "
                f"{NO_COLLAPSE:g} in every seed; without it the same weights fall below {NO_COLLAPSE:g} in every seed",
                with_ln["mean"],
                bool(
                    full["rank_min"] == 2
                    and full["with_min"] >= NO_COLLAPSE
                    and full["without_max"] < NO_COLLAPSE
                ),
                f"with LayerNorm {interval_text(with_ln)} (min {full['with_min']:.3g}), rank of the last layer's "
                f"tokens {_numbers(full['ranks'], '.0f')}; without {interval_text(full['without_interval'])} "
                f"(max {full['without_max']:.3g})",
            )
        )
    for run in layernorm["postln"]:
        interval = run["interval"]
        checks.append(
            prediction(
                f"LayerNorm after attention stops collapse at random initialisation (attention only, causal, "
                f"L={run['depth']}, {interval['n']} seeds)",
                "Wu et al. 2024 (Figure 2)",
                f"'{WU_RANDOM}': r_L >= {NO_COLLAPSE:g} in every seed (X -> LN(SA(X)))",
                interval["mean"],
                bool(run["min"] >= NO_COLLAPSE),
                f"r_L {interval_text(interval)}, min {run['min']:.3g}",
            )
        )
    if not checks:
        checks.append(
            _missing(
                "LayerNorm and rank collapse",
                source,
                "Wu et al.'s constructions",
                "layernorm block or mask_sweep run of attention_only_postln",
            )
        )
    return checks


def training_checks(summary: dict) -> list[dict]:
    source = "Dong et al. 2021 / Noci et al. 2022 (trained)"
    checks = []
    training = numbers(summary["training"])
    for run in [r for r in training if r["recall"]]:
        accs, interval = run["accuracy"], run["accuracy_interval"]
        checks.append(
            prediction(
                f"{run['architecture']} ({run['kind']}) learns recall at depth 4, {len(accs)} seeds",
                source,
                f"query accuracy >= {RECALL_MIN_ACCURACY} in every seed",
                interval["mean"],
                bool(accs) and run["accuracy_min"] >= RECALL_MIN_ACCURACY,
                f"{interval_text(interval)}; per seed: {_numbers(accs, '.2f')}; left the plateau at steps "
                f"{run['plateau_exit']}",
            )
        )
    for run in [r for r in training if r["architecture"] == "attention_only"]:
        accs, chance, interval = run["accuracy"], run["chance"], run["accuracy_interval"]
        checks.append(
            prediction(
                f"attention only ({run['kind']}) stays near chance at depth {run['depth']}, "
                f"{len(accs)} seeds",
                source,
                f"query accuracy <= 2 x chance = {2 * chance:.3f}, upper end of its 95% interval over seeds",
                interval["mean"],
                bool(np.isfinite(interval["high"]) and interval["high"] <= 2 * chance),
                f"{interval_text(interval)}; chance (uniform over value tokens) = {chance:.3f}; per seed: "
                f"{_numbers(accs, '.2f')}",
            )
        )
    if not checks:
        checks.append(
            _missing(
                "training predictions",
                source,
                "skip variants >= 0.9 at depth 4",
                "train_sweep runs at depth 4 (skip variants) or of attention only",
            )
        )
    return checks


def predictions(summary: dict) -> list[dict]:
    """Every literature check, in the report's order."""
    return (
        regime_checks(summary)
        + dong_checks(summary)
        + [noci_check(summary)]
        + gradient_checks(summary)
        + mask_checks(summary)
        + layernorm_checks(summary)
        + training_checks(summary)
    )
