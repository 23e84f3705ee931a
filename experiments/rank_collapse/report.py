"""Summary, literature checks, report, figures and README section of the rank-collapse study.

Checks the predictions of Dong, Cordonnier & Loukas 2021 ("Attention is not
all you need: pure attention loses rank doubly exponentially with depth"),
Noci et al. 2022 ("Signal propagation in transformers: theoretical
perspectives and the role of rank collapse") and Wu et al. 2024 ("On the
role of attention masks and LayerNorm in transformers") against the
measurements, in a regime that is reported beside every residual
(normalised attention entropy, Dobrushin coefficient τ, logit variance).

A run's summary is `{"spec": {...}, "phases": [{"phase", "step", "metrics":
{name: [per seed]}}, ...]}`, the phases in the order they were measured.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
from ml_collections import ConfigDict

from attnjax import plotting
from attnjax.analysis import collapse
from attnjax.study import by_metric, distinct, prediction
from experiments.rank_collapse.study import SPEC_FIELDS, architecture_fields
from experiments.report_util import count, fmt, markdown_table, predictions_table

# The std of the learned position table at initialisation (nn.DEFAULT_POSITION_INIT):
# tokens are embedding + position, so their per-entry variance is std_e^2 + POSITION_STD^2.
POSITION_STD = 0.02
# Relative residuals at or below this are float64 rounding.
FLOOR = collapse.FLOAT64_FLOOR
# Thresholds of the checks (never relaxed to make one pass).
ENTROPY_MAX, TAU_MIN = 0.9, 0.3
LOGIT_VARIANCE_FACTOR = 2.0
NOCI_MIN_RESIDUAL = 0.9
RECALL_MIN_ACCURACY = 0.9
# A seed has left the recall plateau at the first logged step whose training
# accuracy is above the midpoint between chance and 1.
PLATEAU_FRACTION = 0.5
# Layers shown in a per-layer table (the profiles are in summary.json).
PROFILE_ROWS = 9


# --------------------------------------------------------------------------
# Summary: per run, its phases in order, each `{metric: [per seed]}`


def _run_summary(rows: list[dict]) -> dict:
    phases = [{"phase": phase, "step": step, "metrics": by_metric(rows, phase=phase, step=step)}
              for phase, step in distinct(rows, "phase", "step")]
    return {"spec": {f: rows[0][f] for f in SPEC_FIELDS}, "phases": phases}


def summarize(rows: list[dict], config) -> dict:
    return {"runs": {run_id: _run_summary([r for r in rows if r["run"] == run_id])
                     for run_id in distinct(rows, "run")}}


# --------------------------------------------------------------------------
# Reading a run's summary


def _array(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def _mean(values) -> np.ndarray:
    return np.mean(_array(values), axis=0)


def _phase(run: dict, name: str) -> dict:
    """Metrics of the run's first phase called `name` (`{}` if none)."""
    return next((p["metrics"] for p in run["phases"] if p["phase"] == name), {})


def _trained(run: dict) -> dict:
    """Metrics of the last measured profile (the end of training)."""
    return [p["metrics"] for p in run["phases"] if "residual_fro" in p["metrics"]][-1]


def _init(run: dict, metric: str) -> np.ndarray:
    """`[seeds, ...]` of an init-phase metric."""
    return _array(_phase(run, "init")[metric])


def _runs(runs: dict, sweep: str, **match) -> list[dict]:
    out = [r for r in runs.values() if r["spec"]["sweep"] == sweep
           and all(r["spec"][k] == v for k, v in match.items())]
    return sorted(out, key=lambda r: (r["spec"]["depth"], r["spec"]["embedding_std"] or 0.0))


def _deepest(runs: dict, sweep: str, **match) -> Optional[dict]:
    found = _runs(runs, sweep, **match)
    return found[-1] if found else None


def _per_seed(run: dict, name: str) -> list[float]:
    return [float(v) for v in _phase(run, "final").get(name, [])]


def _final_scalar(run: dict, name: str) -> Optional[float]:
    final = _phase(run, "final")
    return float(_mean(final[name])) if final else None


def _chance(run: dict) -> float:
    """Accuracy of guessing uniformly among the task's value tokens (the same for every seed)."""
    return _phase(run, "final")["chance_accuracy"][0]


def _std_label(std) -> str:
    return "default (1/sqrt(D))" if std is None else f"{std:g}"


def _missing(name, source, claim, need):
    return prediction(name, source, claim, None, None, f"not measured: the config has no {need}")


def _main_std(config) -> Optional[float]:
    stds = list(config.init_sweep.embedding_stds)
    return stds[0] if stds else None


def _dong_run(runs, config) -> Optional[dict]:
    return _deepest(runs, "init", kind="softmax", architecture="attention_only", embedding_std=_main_std(config))


# --------------------------------------------------------------------------
# Derived measurements (the same numbers for checks, tables and README)


def regime(run: dict) -> dict:
    """Layer-1 attention statistics of a run at initialisation, mean over seeds."""
    return {"entropy": float(_mean(_init(run, "attention_entropy_normalized"))[0]),
            "tau": float(_mean(_init(run, "dobrushin"))[0]),
            "logit_variance": float(_mean(_init(run, "logit_variance"))[0])}


def predicted_logit_variance(std: Optional[float], features: int) -> float:
    """Var(q.k / sqrt(d)) across keys for tokens with per-entry variance s^2 = std_e^2 + std_p^2
    and LeCun-normal projections: q and k entries have variance s^2, the logits s^4."""
    std_e = 1.0 / math.sqrt(features) if std is None else std
    return (std_e ** 2 + POSITION_STD ** 2) ** 2


def dong_fit(run: dict) -> collapse.RateFit:
    """`fit_log_log` of the per-example relative composite residuals, seeds x examples as replicates."""
    r = _init(run, "dong/residual")  # [S, B, L + 1]
    return collapse.fit_log_log(r.reshape(-1, r.shape[-1]), floor=FLOOR)


def dong_bound_check(run: dict) -> dict:
    """Measured ‖res(X_l)‖ against c_l ‖res(X_(l-1))‖³ wherever the bound is below 1.

    A point (seed, example, layer) is resolvable when the bound is above float64
    rounding of that layer (`FLOOR` x ‖X_l‖, estimated as FLOOR x residual / relative residual).
    """
    bound = _init(run, "dong/bound")  # [S, B, L]
    res_abs = _init(run, "dong/residual_abs")[..., 1:]  # [S, B, L]
    rel = _init(run, "dong/residual")[..., 1:]
    size = np.where(rel > 0, res_abs / np.maximum(rel, 1e-300), np.inf)  # ‖X_l‖
    below = bound < 1
    resolvable = below & (bound > FLOOR * size)
    layers = lambda mask: sorted({int(layer) + 1 for layer in np.nonzero(mask)[2]})  # noqa: E731
    ratios = res_abs[resolvable] / bound[resolvable]
    return {"below_one": layers(below), "resolvable": layers(resolvable),
            "unresolvable": sorted(set(layers(below)) - set(layers(resolvable))),
            "points": int(resolvable.sum()), "max_ratio": float(ratios.max()) if ratios.size else None,
            "constant": float(np.median(_init(run, "dong/constant")))}


def gradient_ratio(run: dict) -> float:
    """‖∇W_QK‖ / ‖∇W_V‖ at initialisation (W_Q and W_K together), mean over seeds."""
    s = _phase(run, "init")
    qk = np.sqrt(_mean(s["grad_norm/query"]) ** 2 + _mean(s["grad_norm/key"]) ** 2)
    return float(qk / _mean(s["grad_norm/value"]))


def plateau_exit(run: dict) -> list[Optional[int]]:
    """Per seed, the first logged step with training accuracy above (chance + 1) / 2 (None: never)."""
    chance = _chance(run) if _phase(run, "final") else 0.0
    level = chance + PLATEAU_FRACTION * (1 - chance)
    steps = [(p["step"], _array(p["metrics"]["accuracy"])) for p in run["phases"]
             if p["phase"] == "train" and "accuracy" in p["metrics"]]
    if not steps:
        return []
    out = []
    for seed in range(len(steps[0][1])):
        out.append(next((step for step, acc in steps if acc[seed] > level), None))
    return out


def _ranges(layers) -> str:
    """[1, 2, 3, 5] -> '1-3, 5' ('none' if empty)."""
    out, layers = [], sorted(layers)
    for layer in layers:
        if out and layer == out[-1][1] + 1:
            out[-1][1] = layer
        else:
            out.append([layer, layer])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in out) or "none"


def _geometric(run: dict, metric: str = "residual_fro") -> collapse.RateFit:
    return collapse.fit_geometric(_init(run, metric), floor=FLOOR)


def _layers_to(values: np.ndarray, level: float) -> Optional[int]:
    below = np.nonzero(values < level)[0]
    return int(below[0]) if below.size else None


# --------------------------------------------------------------------------
# Literature predictions

# What the regime and Dong checks need (`_dong_run`).
DONG_RUN = "init_sweep run of attention_only (softmax)"


def _regime_checks(runs, config) -> list[dict]:
    source = "Vaswani et al. 2017 (Var(q.k / sqrt(d)) = 1); Dong et al. 2021"
    run = _dong_run(runs, config)
    if run is None:
        return [_missing("attention at initialisation is not uniform", source, "layer-1 entropy / tau", DONG_RUN)]
    std, reg = run["spec"]["embedding_std"], regime(run)
    predicted = predicted_logit_variance(std, config.model.features)
    ratio = reg["logit_variance"] / predicted
    setting = f"attention only, init, embedding std {_std_label(std)}"
    return [
        prediction(f"attention at initialisation is not uniform ({setting})", source,
                   f"layer-1 normalised entropy <= {ENTROPY_MAX} and Dobrushin tau >= {TAU_MIN}", reg["entropy"],
                   reg["entropy"] <= ENTROPY_MAX and reg["tau"] >= TAU_MIN,
                   f"entropy {reg['entropy']:.3f} (1 = uniform), tau {reg['tau']:.3f}"),
        prediction(f"layer-1 logit variance = (std_e^2 + std_p^2)^2 ({setting})", "Vaswani et al. 2017",
                   f"measured / predicted within a factor {LOGIT_VARIANCE_FACTOR:g}", ratio,
                   1 / LOGIT_VARIANCE_FACTOR <= ratio <= LOGIT_VARIANCE_FACTOR,
                   f"measured {reg['logit_variance']:.4g}, predicted {predicted:.4g} (LeCun-normal W_Q, W_K; "
                   f"position std {POSITION_STD})"),
    ]


def _dong_checks(runs, config) -> list[dict]:
    source = "Dong et al. 2021"
    run = _dong_run(runs, config)
    if run is None:
        return [_missing("doubly exponential decay", source, "growth of log(1/r) >= 2 per layer", DONG_RUN)]
    depth = run["spec"]["depth"]
    label = f"attention only, init, L={depth}, float64"
    fit = dong_fit(run)
    interval = f"[{fit.rate_low:.3g}, {fit.rate_high:.3g}]"
    checks = [
        prediction(f"float64 profile resolved ({label})", source, f">= 3 consecutive layers with r > {FLOOR:g}",
                   len(fit.layers), len(fit.layers) >= 3,
                   f"layers {', '.join(map(str, fit.layers))} (every example of every seed above the floor)"),
        prediction(f"doubly exponential decay ({label})", source,
                   f"log(1/r_l) grows by >= {collapse.DOUBLY_EXPONENTIAL_MIN_GROWTH:g} per layer (Dong: 3): every "
                   "step and the lower end of the fitted factor's 95% interval", fit.rate,
                   collapse.is_doubly_exponential(fit),
                   f"fitted growth {fit.rate:.3g}, 95% interval {interval}, vs Dong's 3; steps "
                   f"{', '.join(f'{g:.3g}' for g in fit.step_growth)}; composite-norm relative residual, "
                   f"mean-centred, {fit.num_points} points"),
    ]
    bound = dong_bound_check(run)
    if not bound["below_one"]:
        checks.append(prediction(f"residual <= Dong's bound where it is < 1 ({label})", source,
                                 "||res(X_l)|| <= c_l ||res(X_(l-1))||^3", None, None,
                                 "not measured: the bound is >= 1 at every layer"))
    else:
        passed = None if bound["max_ratio"] is None else bound["max_ratio"] <= 1
        checks.append(prediction(
            f"residual <= Dong's bound where it is < 1 ({label})", source,
            "||res(X_l)||_1,inf <= c_l ||res(X_(l-1))||_1,inf^3, c_l = 4 gamma sum_h ||W_QK^h||_1 "
            "||W_V^h||_1,inf / sqrt(d_qk), gamma = 1", bound["max_ratio"], passed,
            f"max measured / bound over {bound['points']} resolvable points; bound < 1 at layers "
            f"{_ranges(bound['below_one'])}; resolvable (bound above float64 rounding of X_l) at layers "
            f"{_ranges(bound['resolvable'])}" + (f"; at layers {_ranges(bound['unresolvable'])} the bound is below "
                                                  "float64 rounding, so not testable" if bound["unresolvable"] else "")
            + f"; median c_l {bound['constant']:.3g}"))
    return checks


def _noci_check(runs, config) -> dict:
    source = "Noci et al. 2022"
    claim = f"skip scaled by 1/sqrt(L): r_L >= {NOCI_MIN_RESIDUAL} at every depth; its unscaled control falls below"
    std = _main_std(config)
    scaled = {r["spec"]["depth"]: r for r in _runs(runs, "init", kind="softmax", architecture="skip_scaled",
                                                    embedding_std=std)}
    control = {r["spec"]["depth"]: r for r in _runs(runs, "init", kind="softmax", architecture="skip",
                                                     embedding_std=std)}
    depths = sorted(set(scaled) & set(control))
    if not depths:
        return _missing("1/sqrt(L) skips keep rank", source, claim, "init_sweep runs of skip_scaled and skip")
    r_scaled = {d: float(_mean(_init(scaled[d], "residual_fro"))[-1]) for d in depths}
    r_control = {d: float(_mean(_init(control[d], "residual_fro"))[-1]) for d in depths}
    deepest = depths[-1]
    passed = min(r_scaled.values()) >= NOCI_MIN_RESIDUAL and r_control[deepest] < r_scaled[deepest]
    return prediction(f"skip scaled by 1/sqrt(L) keeps rank (init, L={', '.join(map(str, depths))})", source, claim,
                      min(r_scaled.values()), passed,
                      "r_L scaled / unscaled: " + ", ".join(f"L={d}: {r_scaled[d]:.3g} / {r_control[d]:.3g}"
                                                             for d in depths))


def _gradient_checks(runs) -> list[dict]:
    source = "Noci et al. 2022"
    checks = []
    for arch in sorted({r["spec"]["architecture"] for r in runs.values() if r["spec"]["sweep"] == "grad"}):
        found = [r for r in _runs(runs, "grad", architecture=arch, kind="softmax") if "grad_norm/query" in
                 _phase(r, "init")]
        if len(found) < 2:
            continue
        shallow, deep = found[0], found[-1]
        a, b = gradient_ratio(shallow), gradient_ratio(deep)
        d1, d2 = shallow["spec"]["depth"], deep["spec"]["depth"]
        mask = "causal" if deep["spec"]["causal"] else "bidirectional"
        checks.append(prediction(
            f"query/key gradients shrink with depth ({arch}, {mask}, init)", source,
            f"||grad W_QK|| / ||grad W_V|| smaller at L={d2} than at L={d1} (same architecture)", b, b < a,
            f"L={d1}: {a:.3g}, L={d2}: {b:.3g} (ratio {b / a:.3g})"))
    if not checks:
        checks.append(_missing("query/key gradients shrink with depth", source, "ratio falls with depth",
                               "grad_sweep with two depths of one architecture"))
    return checks


def _mask_checks(runs, config) -> list[dict]:
    source = "Wu et al. 2024"
    checks = []
    for run in _runs(runs, "mask", kind="softmax", architecture="attention_only"):
        fit = _geometric(run)
        bidir = _deepest(runs, "init", kind="softmax", architecture="attention_only", depth=run["spec"]["depth"],
                         embedding_std=run["spec"]["embedding_std"])
        checks.append(prediction(
            f"causal pure attention still collapses exponentially (init, L={run['spec']['depth']})", source,
            "geometric fit of r_l: rate < 1 (95% interval below 1)", fit.rate,
            bool(np.isfinite(fit.rate_high)) and fit.rate_high < 1,
            f"rate {fit.rate:.3g} [{fit.rate_low:.3g}, {fit.rate_high:.3g}] over layers {fit.layers[0]}.."
            f"{fit.layers[-1]}; mean Dobrushin tau {float(np.mean(_mean(_init(run, 'dobrushin')))):.3g}"))
        bidir_l = None if bidir is None else _layers_to(_mean(_init(bidir, "residual_fro")), 1e-6)
        if bidir_l is not None:
            causal_r = _mean(_init(run, "residual_fro"))
            causal_l = _layers_to(causal_r, 1e-6)
            checks.append(prediction(
                f"the causal mask slows the collapse (attention only, init, L={run['spec']['depth']})", source,
                f"causal r > 1e-6 at the layer where bidirectional r first falls below it (layer {bidir_l})",
                float(causal_r[bidir_l]), bool(causal_r[bidir_l] > 1e-6),
                f"causal r first below 1e-6 at layer {causal_l if causal_l is not None else 'none'} of "
                f"{run['spec']['depth']}"))
    if not checks:
        checks.append(_missing("causal pure attention collapses exponentially", source, "rate < 1",
                               "mask_sweep run of attention_only"))
    return checks


def _training_checks(runs) -> list[dict]:
    source = "Dong et al. 2021 / Noci et al. 2022 (trained)"
    checks = []
    skip_runs = [r for r in _runs(runs, "train") if r["spec"]["depth"] == 4
                 and architecture_fields(r["spec"]["architecture"])["skip"]]
    for run in skip_runs:
        accs = _per_seed(run, "eval_accuracy")
        checks.append(prediction(
            f"{run['spec']['architecture']} ({run['spec']['kind']}) learns recall at depth 4", source,
            f"query accuracy >= {RECALL_MIN_ACCURACY} in every seed", min(accs) if accs else None,
            bool(accs) and min(accs) >= RECALL_MIN_ACCURACY,
            f"per seed: {', '.join(f'{a:.2f}' for a in accs)}; left the plateau at steps "
            f"{plateau_exit(run)}"))
    deep = [r for r in _runs(runs, "train", architecture="attention_only") if r["spec"]["depth"] >= 8]
    for run in deep:
        accs, chance = _per_seed(run, "eval_accuracy"), _chance(run)
        acc = float(np.mean(accs))
        checks.append(prediction(
            f"attention only ({run['spec']['kind']}) stays near chance at depth {run['spec']['depth']}", source,
            f"query accuracy <= 2 x chance = {2 * chance:.3f}", acc, acc <= 2 * chance,
            f"chance (uniform over value tokens) = {chance:.3f}; per seed: {', '.join(f'{a:.2f}' for a in accs)}"))
    if not checks:
        checks.append(_missing("training predictions", source, "skip variants >= 0.9 at depth 4",
                               "train_sweep runs at depth 4 (skip variants) or depth >= 8 (attention only)"))
    return checks


def predictions(summary: dict) -> list[dict]:
    config, runs = ConfigDict(summary["config"]), summary["runs"]
    return (_regime_checks(runs, config) + _dong_checks(runs, config) + [_noci_check(runs, config)]
            + _gradient_checks(runs) + _mask_checks(runs, config) + _training_checks(runs))


# --------------------------------------------------------------------------
# Report


def _profile_table(run: dict) -> list[str]:
    """Per layer: residuals (relative, absolute), shared component, cosine, entropy, tau, logit variance."""
    m = {k: _mean(_init(run, k)) for k in ("residual_fro", "residual_l1inf", "residual_abs_fro", "mean_token_norm",
                                           "token_cosine", "attention_entropy_normalized", "dobrushin",
                                           "logit_variance")}
    rows = []
    for layer in range(min(len(m["residual_fro"]), PROFILE_ROWS)):
        att = (lambda k: fmt(float(m[k][layer - 1])) if layer else "")  # noqa: E731
        rows.append([layer, fmt(float(m["residual_fro"][layer])), fmt(float(m["residual_l1inf"][layer])),
                     fmt(float(m["residual_abs_fro"][layer])), fmt(float(m["mean_token_norm"][layer])),
                     fmt(float(m["token_cosine"][layer])), att("attention_entropy_normalized"), att("dobrushin"),
                     att("logit_variance")])
    if len(m["residual_fro"]) > PROFILE_ROWS:
        rows.append(["...", "", "", "", "", "", "", "", ""])
    header = ["layer", "r (Frobenius)", "r (l1,inf)", "||X - 1 x_bar^T||_F", "||1 x_bar^T||_F", "token cosine",
              "entropy / log S", "tau", "logit variance"]
    return markdown_table(header, rows) + [""]


def _scale_table(runs, config) -> list[str]:
    found = _runs(runs, "scale", kind="softmax") + _runs(runs, "init", kind="softmax", architecture="attention_only")
    seen, rows = set(), []
    for run in sorted(found, key=lambda r: (r["spec"]["embedding_std"] or 1 / math.sqrt(config.model.features))):
        key = (run["spec"]["architecture"], run["spec"]["embedding_std"])
        if key in seen or run["spec"]["depth"] < 4:
            continue
        seen.add(key)
        reg = regime(run)
        r = _mean(_init(run, "residual_fro"))
        rows.append([run["spec"]["architecture"], _std_label(run["spec"]["embedding_std"]), fmt(reg["entropy"]),
                     fmt(reg["tau"]), fmt(reg["logit_variance"]),
                     fmt(predicted_logit_variance(run["spec"]["embedding_std"], config.model.features)),
                     fmt(float(r[1])), fmt(float(r[4]))])
    if not rows:
        return []
    return markdown_table(["architecture", "embedding std", "layer-1 entropy / log S", "layer-1 tau",
                           "layer-1 logit variance", "predicted", "r_1", "r_4"], rows) + [""]


def _dong_section(runs, config) -> list[str]:
    run = _dong_run(runs, config)
    if run is None:
        return []
    fit, bound = dong_fit(run), dong_bound_check(run)
    r = _mean(_init(run, "dong/residual").reshape(-1, len(_init(run, "dong/residual")[0][0])))
    logs = -np.log(np.maximum(r, 1e-300))
    lines = [f"Attention only, L={run['spec']['depth']}, embedding std {_std_label(run['spec']['embedding_std'])}, "
             "float64 (relative composite-norm residual, mean-centred, mean over seeds and examples):", "",
             *markdown_table(["layer", "r_l", "log(1/r_l)", "growth log(1/r_l) / log(1/r_(l-1))"],
                             [[layer, fmt(float(r[layer])), fmt(float(logs[layer])),
                               fmt(float(logs[layer] / logs[layer - 1])) if layer and logs[layer - 1] > 0 else ""]
                              for layer in range(min(len(r), 8))]), "",
             f"Fit of log log(1/r_l) over layers {', '.join(map(str, fit.layers))} (above {FLOOR:g}): growth "
             f"factor {fit.rate:.3g} per layer, 95% interval [{fit.rate_low:.3g}, {fit.rate_high:.3g}]; Dong et al.'s "
             f"bound has 3. Bound constant c_l (gamma = 1) median {bound['constant']:.3g}; the bound "
             f"c_l ||res(X_(l-1))||^3 is below 1 at layers {_ranges(bound['below_one'])}, of which "
             f"{_ranges(bound['resolvable'])} are above float64 rounding; there the largest measured / bound is "
             f"{fmt(bound['max_ratio'])}. Below float64 rounding the bound cannot be tested.", ""]
    return lines


def _noci_table(runs, config) -> list[str]:
    std = _main_std(config)
    rows = []
    for arch in ("skip", "skip_scaled", "skip_mlp", "post_ln"):
        for run in _runs(runs, "init", kind="softmax", architecture=arch, embedding_std=std):
            r = _mean(_init(run, "residual_fro"))
            absr = _mean(_init(run, "residual_abs_fro"))
            mean = _mean(_init(run, "mean_token_norm"))
            cos = _mean(_init(run, "token_cosine"))
            rows.append([arch, run["spec"]["depth"], fmt(float(r[-1])), fmt(float(absr[0])), fmt(float(absr[-1])),
                         fmt(float(mean[0])), fmt(float(mean[-1])), fmt(float(cos[-1]))])
    if not rows:
        return []
    return markdown_table(["architecture", "L", "r_L (relative)", "||res X_0||_F", "||res X_L||_F",
                           "||1 x_bar_0^T||_F", "||1 x_bar_L^T||_F", "token cosine at L"], rows) + [""]


def _init_table(runs, config) -> list[str]:
    std = _main_std(config)
    init = _runs(runs, "init", kind="softmax", embedding_std=std)
    if not init:
        return []
    depths = sorted({r["spec"]["depth"] for r in init})
    rows = []
    for arch in sorted({r["spec"]["architecture"] for r in init}):
        cells = []
        for d in depths:
            run = next((r for r in init if r["spec"]["architecture"] == arch and r["spec"]["depth"] == d), None)
            cells.append(fmt(float(_mean(_init(run, "residual_fro"))[-1])) if run else "")
        rows.append([arch, *cells])
    return markdown_table(["architecture", *[f"L={d}" for d in depths]], rows) + [""]


def _mask_table(runs, config) -> list[str]:
    rows = []
    for run in _runs(runs, "mask", kind="softmax"):
        bidir = _deepest(runs, "init", kind="softmax", architecture=run["spec"]["architecture"],
                         depth=run["spec"]["depth"], embedding_std=run["spec"]["embedding_std"])
        for label, r in (("causal", run), ("bidirectional", bidir)):
            if r is None:
                continue
            fit = _geometric(r)
            res = _mean(_init(r, "residual_fro"))
            rows.append([r["spec"]["architecture"], label, r["spec"]["depth"], fmt(float(res[-1])),
                         fmt(float(_mean(_init(r, "token_cosine"))[-1])), f"{fit.rate:.3g}",
                         fmt(float(np.mean(_mean(_init(r, "dobrushin")))))])
    if not rows:
        return []
    return markdown_table(["architecture", "mask", "L", "r_L", "token cosine at L", "geometric rate of r_l",
                           "mean tau"], rows) + [""]


def _gradient_table(runs) -> list[str]:
    rows = [[r["spec"]["architecture"], r["spec"]["depth"], "causal" if r["spec"]["causal"] else "bidirectional",
             fmt(gradient_ratio(r))] for r in _runs(runs, "grad", kind="softmax") if "grad_norm/query" in
            _phase(r, "init")]
    if not rows:
        return []
    return markdown_table(["architecture", "L", "mask", "||grad W_QK|| / ||grad W_V||"], rows) + [""]


def _train_table(runs) -> list[str]:
    train = _runs(runs, "train")
    if not train:
        return []
    rows = []
    for r in sorted(train, key=lambda r: (r["spec"]["architecture"], r["spec"]["depth"])):
        trained = _trained(r)
        ent = _mean(trained["attention_entropy_normalized"])
        rows.append([r["spec"]["architecture"], r["spec"]["depth"],
                     ", ".join(f"{a:.2f}" for a in _per_seed(r, "eval_accuracy")),
                     str(plateau_exit(r)), fmt(float(_mean(_init(r, "residual_fro"))[-1])),
                     fmt(float(_mean(trained["residual_fro"])[-1])), ", ".join(f"{e:.2f}" for e in ent),
                     int(np.sum(_phase(r, "final").get("diverged", [])))])
    return markdown_table(["architecture", "L", "eval accuracy per seed", "plateau left at step", "r_L (init)",
                           "r_L (trained)", "entropy / log S per layer (trained)", "diverged seeds"], rows) + [""]


def _path_table(runs) -> list[str]:
    rows = []
    for r in _runs(runs, "train"):
        paths = _phase(r, "final").get("path_residual")
        if paths is None:
            continue
        p = _array(paths)  # [S, L, N]
        med = np.median(np.moveaxis(p, 1, 0).reshape(p.shape[1], -1), axis=1)
        rows.append([r["spec"]["architecture"], r["spec"]["depth"], ", ".join(fmt(float(m)) for m in med)])
    if not rows:
        return []
    return markdown_table(["architecture", "L", "median rank-one residual of single-head paths, k = 1..L"],
                          rows) + [""]


def _setting(config) -> str:
    task = ", ".join(f"{k}={v}" for k, v in config.task.items() if k != "name")
    return (f"Task: {config.task.name} ({task}); model width {config.model.features}, {config.model.num_heads} "
            f"heads; {config.num_seeds} seeds per run; {config.train.steps} training steps (learning rate "
            f"{config.train.learning_rate:g}, warmup {config.train.warmup_steps}, cosine to 0.1x). Untrained sweeps in "
            f"{'float64' if config.measure_float64 else 'float32'}, bidirectional unless marked causal; training "
            f"{'causal' if config.train_sweep.causal else 'bidirectional'}.")


def markdown(summary: dict) -> str:
    config, runs, checks = ConfigDict(summary["config"]), summary["runs"], summary["predictions"]
    dong = _dong_run(runs, config)
    lines = [
        "# Rank collapse across depth", "", _setting(config), "",
        f"## Literature predictions: {count(checks, 'pass')} pass, {count(checks, 'fail')} fail", "",
        *predictions_table(checks), "",
        "## The regime at initialisation", "",
        "Layer-1 attention statistics against the embedding std (entropy over log S: 1 is uniform; tau: "
        "Dobrushin coefficient, 0 when every query attends alike). Predicted logit variance "
        f"(std_e^2 + {POSITION_STD}^2)^2:", "",
        *_scale_table(runs, config),
        *((["Per layer, attention only, L=" + str(dong["spec"]["depth"]) + ":", "", *_profile_table(dong)])
          if dong else []),
        "## Dong et al.: doubly exponential decay and the bound", "", *_dong_section(runs, config),
        "## Skips: relative residual, absolute residual and the shared component", "",
        "The relative residual r = ||X - 1 x_bar^T|| / ||X|| falls when the component shared by every token, "
        "1 x_bar^T, grows, even when the tokens do not contract; the absolute residual tells the two apart.", "",
        *_noci_table(runs, config),
        "Relative residual at the last layer, every architecture at initialisation:", "",
        *_init_table(runs, config),
        "## Causal mask x LayerNorm (Wu et al. 2024)", "", *_mask_table(runs, config),
        "## Gradients at initialisation (same architecture, two depths)", "", *_gradient_table(runs),
        "## After training", "", *_train_table(runs),
        "Dong et al.'s path-length experiment on the trained networks with skips (Frobenius rank-one residual "
        "of the product of k single-head attention matrices, k layers sampled without replacement):", "",
        *_path_table(runs),
        "Plots: " + (", ".join(f"`plots/{name}`" for name in summary["plots"]) or "none"), "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# README


README_RESULTS = "experiments/results/rank_collapse"


def readme_section(summary: dict, timing: Optional[dict] = None, results: str = README_RESULTS) -> str:
    """Markdown of the README's rank-collapse "## Results" section, from the default run's summary.

    `timing`: `{"default": wall time of the default run, "smoke": of the smoke
    variant, "note": how it was measured}` (`results/timing.json`); `results`:
    where the summary, report and plots are committed.
    """
    config, runs, checks = ConfigDict(summary["config"]), summary["runs"], summary["predictions"]
    by_name = {c["name"].split(" (")[0]: c for c in checks}
    timing = timing or {}
    when = f", {timing['default']} on a 2-core CPU" if "default" in timing else ""
    lines = ["## Results", "",
             f"The default `rank_collapse` study (the README's first command): {len(runs)} runs, "
             f"{config.num_seeds} seeds each{when}. Full report: [`{results}/report.md`]({results}/report.md).", "",
             f"Literature predictions: {count(checks, 'pass')} pass, {count(checks, 'fail')} fail.", "",
             *markdown_table(["prediction", "source", "measured", "verdict"],
                             [[c["name"], c["source"], fmt(c["measured"]), c["verdict"]] for c in checks]), ""]
    dong = _dong_run(runs, config)
    if dong is not None:
        reg, fit, bound = regime(dong), dong_fit(dong), dong_bound_check(dong)
        r = _mean(_init(dong, "residual_fro"))
        lines += [f"![Rank collapse at initialisation]({results}/plots/init_residual.png)", "",
                  "What it shows:", "",
                  f"* With unit-variance tokens (embedding std {_std_label(dong['spec']['embedding_std'])}) attention "
                  f"at initialisation is not uniform: layer-1 entropy / log S = {reg['entropy']:.3f}, Dobrushin tau "
                  f"= {reg['tau']:.3f}, logit variance {reg['logit_variance']:.3g} (predicted "
                  f"{predicted_logit_variance(dong['spec']['embedding_std'], config.model.features):.3g}). With "
                  "`nnx.Embed`'s default std 1/sqrt(D) the logits have variance ~1/D^2 and attention is uniform, so "
                  "a pure-attention network averages its tokens in one step (see the report's regime table).",
                  f"* Pure attention in float64: r = {', '.join(fmt(float(v)) for v in r[:6])} over layers 0-5. "
                  f"log(1/r) grows by {', '.join(f'{g:.3g}' for g in fit.step_growth)} per layer over layers "
                  f"{fit.layers[0]}-{fit.layers[-1]}; the fitted factor is {fit.rate:.3g} "
                  f"[{fit.rate_low:.3g}, {fit.rate_high:.3g}] against Dong et al.'s 3 (verdict: "
                  f"{by_name.get('doubly exponential decay', {}).get('verdict', 'n/a')}). Dong's bound (gamma = 1, "
                  f"c_l ~ {bound['constant']:.3g}) is below 1 only from layer "
                  f"{bound['below_one'][0] if bound['below_one'] else 'n/a'} on; where it is also above float64 "
                  f"rounding the largest measured / bound is {fmt(bound['max_ratio'])}.",
                  *_skip_reading(runs, config), ""]
    train = [r for r in _runs(runs, "train") if r["spec"]["depth"] == 4
             and architecture_fields(r["spec"]["architecture"])["skip"]]
    for run in train:
        lines.append(f"* Training ({config.train.steps} steps): {run['spec']['architecture']} at depth 4 reaches "
                     f"query accuracy {', '.join(f'{a:.2f}' for a in _per_seed(run, 'eval_accuracy'))} per seed, "
                     f"leaving the recall plateau at steps {plateau_exit(run)}.")
    for run in [r for r in _runs(runs, "train", architecture="attention_only") if r["spec"]["depth"] >= 8]:
        lines.append(f"* Attention only at depth {run['spec']['depth']}: "
                     f"{', '.join(f'{a:.2f}' for a in _per_seed(run, 'eval_accuracy'))} per seed "
                     f"(chance {_chance(run):.3f}).")
    if "smoke" in timing:
        note = f" {timing['note']}" if "note" in timing else ""
        lines += ["", f"The `smoke` variant takes {timing['smoke']}.{note}"]
    lines += ["", f"The section is rendered from `{results}/summary.json` by "
              "`experiments.rank_collapse.report.readme_section`.", ""]
    return "\n".join(lines)


def _skip_reading(runs, config) -> list[str]:
    """README lines on skips: relative vs absolute residual and the shared component, from the deepest runs."""
    std, out = _main_std(config), []
    deep = {arch: _deepest(runs, "init", kind="softmax", architecture=arch, embedding_std=std)
            for arch in ("skip", "post_ln", "skip_scaled")}
    skip, post, scaled = deep["skip"], deep["post_ln"], deep["skip_scaled"]
    if skip is not None:
        v = {k: _mean(_init(skip, k)) for k in ("residual_fro", "residual_abs_fro", "mean_token_norm")}
        out.append(f"* Skips without LayerNorm (L={skip['spec']['depth']}): the relative residual falls to "
                   f"{fmt(float(v['residual_fro'][-1]))} while the absolute residual ||X - 1 x_bar^T||_F goes from "
                   f"{fmt(float(v['residual_abs_fro'][0]))} to {fmt(float(v['residual_abs_fro'][-1]))} and the shared "
                   f"component ||1 x_bar^T||_F from {fmt(float(v['mean_token_norm'][0]))} to "
                   f"{fmt(float(v['mean_token_norm'][-1]))}: the shared component grows, the tokens do not contract "
                   "(relative residual alone would read as a geometric collapse).")
    if post is not None:
        a = _mean(_init(post, "residual_abs_fro"))
        out.append(f"* Post-LN (L={post['spec']['depth']}) does contract the tokens: the absolute residual goes from "
                   f"{fmt(float(a[0]))} to {fmt(float(a[-1]))} (LayerNorm holds the token norm fixed).")
    if scaled is not None:
        out.append("* Skips scaled by 1/sqrt(L) keep r_L = "
                   + ", ".join(f"{float(_mean(_init(r, 'residual_fro'))[-1]):.3g} (L={r['spec']['depth']})"
                               for r in _runs(runs, "init", kind="softmax", architecture="skip_scaled",
                                              embedding_std=std)) + " (Noci et al. 2022).")
    grads = {}
    for run in _runs(runs, "grad", kind="softmax"):
        if "grad_norm/query" in _phase(run, "init"):
            grads.setdefault(run["spec"]["architecture"], []).append((run["spec"]["depth"], gradient_ratio(run)))
    if grads:
        out.append("* ||grad W_QK|| / ||grad W_V|| at initialisation (causal), same architecture at two depths: "
                   + "; ".join(f"{arch} " + " -> ".join(f"{v:.3g} (L={d})" for d, v in pairs)
                               for arch, pairs in grads.items()) + " (Noci et al. 2022: shrinks under collapse).")
    for run in _runs(runs, "mask", kind="softmax", architecture="attention_only"):
        fit = _geometric(run)
        out.append(f"* Causal pure attention (L={run['spec']['depth']}) collapses only geometrically: fitted rate "
                   f"{fit.rate:.3g} per layer, against a mean Dobrushin tau of "
                   f"{float(np.mean(_mean(_init(run, 'dobrushin')))):.3g} (Wu et al. 2024).")
    return out


# --------------------------------------------------------------------------
# Figures


def _curves(runs, sweep, metric, **match) -> dict:
    return {f"{r['spec']['architecture']} (L={r['spec']['depth']})": _init(r, metric)
            for r in _runs(runs, sweep, **match)}


def _deepest_per_arch(runs, config, metric) -> dict:
    std = _main_std(config)
    curves = {}
    for arch in sorted({r["spec"]["architecture"] for r in _runs(runs, "init", kind="softmax")}):
        run = _deepest(runs, "init", kind="softmax", architecture=arch, embedding_std=std)
        if run is not None:
            curves[f"{arch} (L={run['spec']['depth']})"] = _init(run, metric)
    return curves


def _three_panels(fig_title, panels) -> object:
    fig = plotting.figure(15, 4.2)
    axes = fig.subplots(1, len(panels))
    for ax, (ylabel, curves, log) in zip(np.atleast_1d(axes), panels):
        for name, values in curves.items():
            v = _array(values)
            v = v[None] if v.ndim == 1 else v
            start = 0 if "residual" in ylabel or "cosine" in ylabel or "||" in ylabel else 1
            ax.plot(np.arange(start, start + v.shape[1]), v.mean(axis=0), marker="o", markersize=2, label=name)
        if log:
            ax.set_yscale("log", nonpositive="mask")
        ax.set_xlabel("layer")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.suptitle(fig_title)
    return fig


def figures(summary: dict) -> dict:
    config, runs, out = ConfigDict(summary["config"]), summary["runs"], {}
    if _runs(runs, "init", kind="softmax"):
        out["init_residual"] = _three_panels("Untrained networks (bidirectional, softmax)", [
            ("relative residual ||X - 1 x_bar^T||_F / ||X||_F", _deepest_per_arch(runs, config, "residual_fro"), True),
            ("absolute residual ||X - 1 x_bar^T||_F", _deepest_per_arch(runs, config, "residual_abs_fro"), True),
            ("mean token cosine", _deepest_per_arch(runs, config, "token_cosine"), False)])
    dong = _dong_run(runs, config)
    if dong is not None:
        out["dong_fit"] = _dong_figure(dong)
    scale = _runs(runs, "scale", kind="softmax") + _runs(runs, "init", kind="softmax", architecture="attention_only",
                                                         embedding_std=_main_std(config))
    if scale:
        curves = {f"std {_std_label(r['spec']['embedding_std'])} (L={r['spec']['depth']})": _init(r, "residual_fro")
                  for r in scale}
        ent = {k: _init(r, "attention_entropy_normalized") for k, r in zip(curves, scale)}
        tau = {k: _init(r, "dobrushin") for k, r in zip(curves, scale)}
        out["init_scale"] = _three_panels("Attention only: the embedding std at initialisation", [
            ("relative residual", curves, True), ("attention entropy / log S", ent, False),
            ("Dobrushin tau", tau, True)])
    mask = _runs(runs, "mask", kind="softmax")
    if mask:
        res, cos = {}, {}
        for run in mask:
            bidir = _deepest(runs, "init", kind="softmax", architecture=run["spec"]["architecture"],
                             depth=run["spec"]["depth"], embedding_std=run["spec"]["embedding_std"])
            for label, r in (("causal", run), ("bidirectional", bidir)):
                if r is not None:
                    res[f"{r['spec']['architecture']} {label}"] = _init(r, "residual_fro")
                    cos[f"{r['spec']['architecture']} {label}"] = _init(r, "token_cosine")
        tau = {f"{r['spec']['architecture']} causal": _init(r, "dobrushin") for r in mask}
        out["causal_layernorm"] = _three_panels("Causal mask x LayerNorm at initialisation (Wu et al. 2024)", [
            ("relative residual", res, True), ("mean token cosine", cos, False), ("Dobrushin tau (causal)", tau, True)])
    noci = {}
    for arch in ("skip", "skip_scaled"):
        found = _runs(runs, "init", kind="softmax", architecture=arch, embedding_std=_main_std(config))
        if found:
            noci[arch] = ([r["spec"]["depth"] for r in found],
                          [float(_mean(_init(r, "residual_fro"))[-1]) for r in found],
                          [float(_mean(_init(r, "token_cosine"))[-1]) for r in found])
    if noci:
        out["noci_scaling"] = _noci_figure(noci)
    train = _runs(runs, "train")
    if train:
        out["training"] = _training_figure(train)
        with_paths = [r for r in train if "path_residual" in _phase(r, "final")]
        if with_paths:
            out["path_length"] = _path_figure(with_paths[-1])
    return out


def _dong_figure(run):
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    r = _init(run, "dong/residual")
    r = r.reshape(-1, r.shape[-1])
    fit = dong_fit(run)
    layers = np.arange(r.shape[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(np.log(1 / r))
    for row in y[:: max(1, len(y) // 16)]:
        ax1.plot(layers, row, color="C0", alpha=0.25, linewidth=0.8)
    x = np.asarray(fit.layers, dtype=np.float64)
    if x.size:
        ax1.plot(x, fit.intercept + fit.slope * x, color="C1", label=f"fit: growth {fit.rate:.3g} per layer")
        ax1.plot(x, fit.intercept + fit.slope * x[0] + math.log(3) * (x - x[0]), "k--", label="Dong: growth 3")
    ax1.axhline(math.log(math.log(1 / FLOOR)), color="grey", linestyle=":", label=f"float64 floor {FLOOR:g}")
    ax1.set_xlabel("layer")
    ax1.set_ylabel("log log(1 / r_l)")
    ax1.legend(fontsize=7)
    ax1.grid(True, alpha=0.3)
    bound = np.median(_init(run, "dong/bound").reshape(-1, r.shape[1] - 1), axis=0)
    measured = np.median(_init(run, "dong/residual_abs").reshape(-1, r.shape[1]), axis=0)
    ax2.plot(layers, measured, marker="o", markersize=3, label="measured ||res(X_l)||_1,inf")
    ax2.plot(layers[1:], bound, marker="s", markersize=3, label="bound c_l ||res(X_(l-1))||^3 (gamma = 1)")
    ax2.axhline(1.0, color="grey", linestyle=":")
    ax2.set_yscale("log", nonpositive="mask")
    ax2.set_xlabel("layer")
    ax2.legend(fontsize=7)
    ax2.grid(True, alpha=0.3)
    fig.suptitle(f"Dong et al. 2021 in float64: attention only, L={run['spec']['depth']} (median over examples)")
    return fig


def _noci_figure(noci):
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    for arch, (depths, res, cos) in noci.items():
        ax1.plot(depths, res, marker="o", label=arch)
        ax2.plot(depths, cos, marker="o", label=arch)
    for ax, label in ((ax1, "relative residual at layer L"), (ax2, "token cosine at layer L")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("depth L")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax1.axhline(NOCI_MIN_RESIDUAL, color="grey", linestyle="--")
    fig.suptitle("Noci et al. 2022: skips scaled by 1/sqrt(L) against the unscaled control")
    return fig


def _training_figure(train):
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    for i, run in enumerate(train):
        steps = [p["step"] for p in run["phases"] if p["phase"] == "train" and "accuracy" in p["metrics"]]
        accs = np.asarray([_array(p["metrics"]["accuracy"]) for p in run["phases"]
                           if p["phase"] == "train" and "accuracy" in p["metrics"]])
        label = f"{run['spec']['architecture']} L={run['spec']['depth']}"
        for seed in range(accs.shape[1] if accs.size else 0):
            ax1.plot(steps, accs[:, seed], color=f"C{i}", alpha=0.8, label=label if seed == 0 else None)
        ent = [(p["step"], _mean(p["metrics"]["attention_entropy_normalized"])) for p in run["phases"]
               if "attention_entropy_normalized" in p["metrics"]]
        if ent:
            e = np.asarray([v for _, v in ent])
            for layer in range(e.shape[1]):
                ax2.plot([s for s, _ in ent], e[:, layer], color=f"C{i}", alpha=0.4 + 0.6 * layer / e.shape[1],
                         label=f"{label}" if layer == e.shape[1] - 1 else None)
    ax1.set_xlabel("step")
    ax1.set_ylabel("training accuracy (per seed)")
    ax1.legend(fontsize=7)
    ax1.grid(True, alpha=0.3)
    ax2.set_xlabel("step")
    ax2.set_ylabel("attention entropy / log S per layer (darker: deeper)")
    ax2.legend(fontsize=7)
    ax2.grid(True, alpha=0.3)
    fig.suptitle("Training: recall plateau and entropy per layer")
    return fig


def _path_figure(run):
    p = _array(_phase(run, "final")["path_residual"])  # [S, L, N]
    data = [p[:, k].ravel() for k in range(p.shape[1])]
    fig = plotting.figure(6, 4)
    ax = fig.add_subplot()
    ax.boxplot(data)
    ax.set_xticks(range(1, len(data) + 1), [str(k + 1) for k in range(len(data))])
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("path length k (single-head attention matrices)")
    ax.set_ylabel("||P - best rank 1||_F / ||P||_F")
    ax.grid(True, alpha=0.3)
    ax.set_title(f"Path length, trained {run['spec']['architecture']} L={run['spec']['depth']}")
    return fig
