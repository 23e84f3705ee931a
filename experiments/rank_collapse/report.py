"""Summary, literature checks, report and figures of the rank-collapse study.

Checks the predictions of Dong, Cordonnier & Loukas 2021 ("Attention is not
all you need: pure attention loses rank doubly exponentially with depth")
and Noci et al. 2022 ("Signal propagation in transformers: theoretical
perspectives and the role of rank collapse") against the measurements.

A run's summary is `{"spec": {...}, "phases": [{"phase", "step", "metrics":
{name: [per seed]}}, ...]}`, the phases in the order they were measured.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from ml_collections import ConfigDict

from attnjax import nn, plotting
from attnjax.study import by_metric, distinct, prediction
from experiments.rank_collapse.study import SPEC_FIELDS
from experiments.report_util import count, fmt, predictions_table

# Below this relative residual float32 rounding dominates (eps ~ 1.2e-7 per
# entry, summed over T x D entries), so ratios of log-residuals mean nothing.
RESIDUAL_FLOOR = 1e-5
# Healthy references for the gradient check, in order of preference (the
# first is the collapsed network plus scaled skips, nothing else).
GRADIENT_REFERENCES = ("skip_scaled", "skip_mlp", "skip", "post_ln")


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


def _mean(values) -> np.ndarray:
    return np.mean(np.asarray(values, dtype=np.float64), axis=0)


def _phase(run: dict, name: str) -> dict:
    """Metrics of the run's first phase called `name` (`{}` if none)."""
    return next((p["metrics"] for p in run["phases"] if p["phase"] == name), {})


def _trained(run: dict) -> dict:
    """Metrics of the last measured profile (the end of training)."""
    return [p["metrics"] for p in run["phases"] if "residual_fro" in p["metrics"]][-1]


def _init_profile(run: dict, metric: str) -> np.ndarray:
    return np.asarray(_phase(run, "init")[metric], dtype=np.float64)


def _find(runs: dict, sweep: str, kind: str, arch: str, min_depth: int, temperature: Optional[float] = None,
          deepest: bool = True) -> Optional[dict]:
    """The deepest (or shallowest) run with depth >= min_depth matching the rest."""
    matches = [
        r for r in runs.values()
        if r["spec"]["sweep"] == sweep and r["spec"]["kind"] == kind and r["spec"]["architecture"] == arch
        and r["spec"]["depth"] >= min_depth
        and (temperature is None or r["spec"]["temperature"] == temperature)
    ]
    if not matches:
        return None
    return sorted(matches, key=lambda r: r["spec"]["depth"])[-1 if deepest else 0]


def _per_seed(run: dict, name: str) -> str:
    final = _phase(run, "final")
    return ", ".join(f"{v:.2f}" for v in final[name]) if final else ""


def _final_scalar(run: dict, name: str) -> Optional[float]:
    final = _phase(run, "final")
    return float(_mean(final[name])) if final else None


def _chance(run: dict) -> float:
    """Accuracy of guessing uniformly among the task's value tokens (the same for every seed)."""
    return _phase(run, "final")["chance_accuracy"][0]


# --------------------------------------------------------------------------
# Literature predictions


def _missing(name, source, claim, need):
    return prediction(name, source, claim, None, None, f"not measured: the config has no {need}")


def _dong_checks(runs, kind, temperature) -> list[dict]:
    source = "Dong et al. 2021"
    run = _find(runs, "init", kind, "attention_only", 4, temperature)
    label = f"{kind}, attention only, init"
    if run is None:
        return [_missing(f"residual falls 1000x in 4 layers ({label})", source, "r_4 / r_0 <= 1e-3",
                         f"init_sweep run of attention_only ({kind}) with depth >= 4")]
    r = _mean(_phase(run, "init")["residual_fro"])
    depth = run["spec"]["depth"]
    checks = [prediction(f"residual falls 1000x within 4 layers ({label}, L={depth})", source,
                         "r_4 / r_0 <= 1e-3", float(r[4] / r[0]), bool(r[4] / r[0] <= 1e-3))]
    if depth >= 8:
        checks.append(prediction(f"residual <= 1e-4 by layer 8 ({label}, L={depth})", source, "r_8 <= 1e-4",
                                 float(r[8]), bool(r[8] <= 1e-4)))
    logs = np.log(np.maximum(r, 1e-300))
    usable = [layer for layer in range(1, len(r)) if r[layer] >= RESIDUAL_FLOOR and r[layer - 1] < 1]
    ratios = [float(logs[layer] / logs[layer - 1]) for layer in usable]
    checks.append(prediction(
        f"doubly exponential decay ({label}, L={depth})", source,
        "log r_(l+1) / log r_l >= 2 for consecutive layers",
        min(ratios) if ratios else None, bool(ratios) and min(ratios) >= 2,
        f"layers 1..{usable[-1] if usable else 0} (r >= {RESIDUAL_FLOOR:g}; below, float32 rounding dominates); "
        f"ratios {', '.join(f'{x:.2f}' for x in ratios)}",
    ))
    return checks


def _noci_check(runs, kind, temperature) -> dict:
    source = "Noci et al. 2022"
    claim = "r_12 >= 0.9"
    run = _find(runs, "init", kind, "skip_scaled", 12, temperature, deepest=False)
    if run is None:
        return _missing(f"skip scaled by 1/sqrt(L) keeps rank ({kind}, init)", source, claim,
                        f"init_sweep run of skip_scaled ({kind}) with depth >= 12")
    r = _mean(_phase(run, "init")["residual_fro"])
    return prediction(f"skip scaled by 1/sqrt(L) keeps rank ({kind}, init, L={run['spec']['depth']})", source,
                      claim, float(r[12]), bool(r[12] >= 0.9))


def _qk_over_v(run) -> float:
    s = _phase(run, "init")
    qk = np.sqrt(_mean(s["grad_norm/query"]) ** 2 + _mean(s["grad_norm/key"]) ** 2)
    return float(qk / _mean(s["grad_norm/value"]))


def _gradient_check(runs) -> dict:
    """Attention-only vs a skip architecture at the same depth, from any runs with gradients at step 0."""
    source = "Noci et al. 2022"
    claim = "||grad W_Q,K|| / ||grad W_V|| smaller under collapse (attention only) than with skips"
    with_grads = [r for r in runs.values() if r["spec"]["kind"] == "softmax" and "grad_norm/query" in _phase(r, "init")]
    pairs = []
    for collapsed in (r for r in with_grads if r["spec"]["architecture"] == "attention_only"):
        for arch in GRADIENT_REFERENCES:
            healthy = next((r for r in with_grads if r["spec"]["architecture"] == arch
                            and all(r["spec"][k] == collapsed["spec"][k] for k in ("sweep", "depth", "temperature"))),
                           None)
            if healthy is not None:
                pairs.append((collapsed, healthy))
                break
    if not pairs:
        return _missing("query/key gradients vanish under rank collapse", source, claim,
                        "pair of attention_only and skip runs of equal depth with gradient norms at step 0")
    collapsed, healthy = max(pairs, key=lambda p: p[0]["spec"]["depth"])
    a, b = _qk_over_v(collapsed), _qk_over_v(healthy)
    spec = collapsed["spec"]
    setting = f"{spec['sweep']} sweep, {'causal' if spec['causal'] else 'bidirectional'}, L={spec['depth']}"
    return prediction(f"query/key gradients vanish under rank collapse (softmax, init, {setting})", source,
                      claim, a, bool(a < b), f"attention only {a:.3g} vs {healthy['spec']['architecture']} {b:.3g}")


def _training_checks(runs) -> list[dict]:
    source = "Dong et al. 2021 / Noci et al. 2022 (trained)"
    checks = []
    skip_runs = [r for r in runs.values() if r["spec"]["sweep"] == "train" and r["spec"]["depth"] == 4
                 and nn.architecture(r["spec"]["architecture"])["skip"]]
    for run in sorted(skip_runs, key=lambda r: (r["spec"]["kind"], r["spec"]["architecture"])):
        acc = _final_scalar(run, "eval_accuracy")
        checks.append(prediction(f"{run['spec']['architecture']} ({run['spec']['kind']}) learns recall at depth 4",
                                 source, "query accuracy >= 0.9 (mean over seeds)", acc,
                                 acc is not None and acc >= 0.9, f"per seed: {_per_seed(run, 'eval_accuracy')}"))
    deep = [r for r in runs.values() if r["spec"]["sweep"] == "train" and r["spec"]["depth"] >= 8
            and r["spec"]["architecture"] == "attention_only"]
    for run in sorted(deep, key=lambda r: (r["spec"]["kind"], r["spec"]["depth"])):
        acc = _final_scalar(run, "eval_accuracy")
        chance = _chance(run)
        checks.append(prediction(
            f"attention only ({run['spec']['kind']}) stays near chance at depth {run['spec']['depth']}", source,
            f"query accuracy <= 2 x chance = {2 * chance:.3f}", acc, acc is not None and acc <= 2 * chance,
            f"chance (uniform over value tokens) = {chance:.3f}; per seed: {_per_seed(run, 'eval_accuracy')}"))
    if not checks:
        checks.append(_missing("training predictions", source, "skip variants >= 0.9 at depth 4",
                               "train_sweep runs at depth 4 (skip variants) or depth >= 8 (attention only)"))
    return checks


def predictions(summary: dict) -> list[dict]:
    config, runs = ConfigDict(summary["config"]), summary["runs"]
    temperature = float(config.init_sweep.temperatures[0]) if config.init_sweep.temperatures else 1.0
    checks = _dong_checks(runs, "softmax", temperature)
    checks.append(_noci_check(runs, "softmax", temperature))
    checks.append(_gradient_check(runs))
    checks += _training_checks(runs)
    if "linear" in config.init_sweep.attention_kinds:
        for check in _dong_checks(runs, "linear", temperature) + [_noci_check(runs, "linear", temperature)]:
            check["note"] = ("observation (the papers treat softmax attention). " + check["note"]).strip()
            checks.append(check)
    return checks


# --------------------------------------------------------------------------
# Report


def _init_table(runs, kind) -> list[str]:
    init = [r for r in runs.values() if r["spec"]["sweep"] == "init" and r["spec"]["kind"] == kind]
    depths = sorted({r["spec"]["depth"] for r in init})
    archs = sorted({r["spec"]["architecture"] for r in init})
    if not init:
        return []
    lines = [f"Relative residual ||X_L - 1 x_bar^T||_F / ||X_L||_F at the last layer, at initialisation ({kind}):",
             "", "| architecture | " + " | ".join(f"L={d}" for d in depths) + " |",
             "|---|" + "---|" * len(depths)]
    for arch in archs:
        cells = []
        for d in depths:
            run = next((r for r in init if r["spec"]["architecture"] == arch and r["spec"]["depth"] == d), None)
            cells.append(fmt(float(_mean(_phase(run, "init")["residual_fro"])[-1])) if run else "")
        lines.append(f"| {arch} | " + " | ".join(cells) + " |")
    return lines + [""]


def _train_table(runs) -> list[str]:
    train = sorted((r for r in runs.values() if r["spec"]["sweep"] == "train"),
                   key=lambda r: (r["spec"]["kind"], r["spec"]["architecture"], r["spec"]["depth"]))
    if not train:
        return []
    lines = ["| kind | architecture | L | eval accuracy | eval loss | residual (init) | residual (trained) | "
             "path rank-1 residual (trained) | diverged seeds |", "|---|---|---|---|---|---|---|---|---|"]
    for r in train:
        trained = _trained(r)
        res_init = _mean(_phase(r, "init")["residual_fro"])[-1]
        res_trained = _mean(trained["residual_fro"])[-1]
        path = _mean(trained["path_rank_one_residual"])[-1]
        lines.append(f"| {r['spec']['kind']} | {r['spec']['architecture']} | {r['spec']['depth']} | "
                     f"{fmt(_final_scalar(r, 'eval_accuracy'))} | {fmt(_final_scalar(r, 'eval_loss'))} | "
                     f"{fmt(float(res_init))} | {fmt(float(res_trained))} | {fmt(float(path))} | "
                     f"{int(np.sum(_phase(r, 'final').get('diverged', [])))} |")
    return lines + [""]


def markdown(summary: dict) -> str:
    config, runs, checks = ConfigDict(summary["config"]), summary["runs"], summary["predictions"]
    lines = [
        "# Rank collapse across depth", "",
        f"Task: {config.task.name} ({', '.join(f'{k}={v}' for k, v in config.task.items() if k != 'name')}); "
        f"model width {config.model.features}, {config.model.num_heads} heads; {config.num_seeds} seeds per run; "
        f"{config.train.steps} training steps. Initialisation sweep: "
        f"{'causal' if config.init_sweep.causal else 'bidirectional'} attention; training sweep: "
        f"{'causal' if config.train_sweep.causal else 'bidirectional'}.", "",
        f"## Literature predictions: {count(checks, 'pass')} pass, {count(checks, 'fail')} fail", "",
        *predictions_table(checks), "",
        "## Initialisation", "",
        *_init_table(runs, "softmax"), *_init_table(runs, "linear"),
        "## After training", "",
        *_train_table(runs),
        "Plots: " + (", ".join(f"`plots/{name}`" for name in summary["plots"]) or "none"), "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Figures


def _deepest_init_profiles(runs, kind, metric) -> dict:
    curves = {}
    for arch in sorted({r["spec"]["architecture"] for r in runs.values()}):
        run = _find(runs, "init", kind, arch, 1)
        if run is not None:
            curves[f"{arch} (L={run['spec']['depth']})"] = _init_profile(run, metric)
    return curves


def figures(summary: dict) -> dict:
    runs, out = summary["runs"], {}
    for kind in ("softmax", "linear"):
        curves = _deepest_init_profiles(runs, kind, "residual_fro")
        if curves:
            fig = plotting.metric_vs_depth(curves, ylabel="relative residual (Frobenius)", start=0,
                                           title=f"Rank collapse at initialisation ({kind} attention)")
            fig.axes[0].set_xlabel("layer (0 = input)")
            out[f"init_residual_{kind}"] = fig
    curves = _deepest_init_profiles(runs, "softmax", "path_rank_one_residual")
    if curves:
        out["init_path_rank_one"] = plotting.metric_vs_depth(
            curves, ylabel="||P_l - rank 1|| / ||P_l||",
            title="Attention path products A_l...A_1 approach rank one (softmax, init)")
    train = [r for r in runs.values() if r["spec"]["sweep"] == "train"]
    if train:
        curves = {}
        for r in sorted(train, key=lambda r: (r["spec"]["architecture"], r["spec"]["depth"])):
            label = f"{r['spec']['architecture']} L={r['spec']['depth']} ({r['spec']['kind']})"
            curves[f"{label} init"] = _init_profile(r, "residual_fro")
            curves[f"{label} trained"] = np.asarray(_trained(r)["residual_fro"], dtype=np.float64)
        fig = plotting.metric_vs_depth(curves, ylabel="relative residual (Frobenius)", start=0,
                                       title="Initialisation vs trained")
        fig.axes[0].set_xlabel("layer (0 = input)")
        out["train_residual"] = fig
        out["accuracy_vs_depth"] = _accuracy_figure(train)
    return out


def _accuracy_figure(train_runs):
    fig = plotting.figure(6, 4)
    ax = fig.add_subplot()
    for arch in sorted({r["spec"]["architecture"] for r in train_runs}):
        for kind in sorted({r["spec"]["kind"] for r in train_runs}):
            runs = sorted((r for r in train_runs if r["spec"]["architecture"] == arch and r["spec"]["kind"] == kind),
                          key=lambda r: r["spec"]["depth"])
            if runs:
                depths = [r["spec"]["depth"] for r in runs]
                accs = [_final_scalar(r, "eval_accuracy") for r in runs]
                ax.plot(depths, accs, marker="o", label=f"{arch} ({kind})")
    if _phase(train_runs[0], "final"):
        ax.axhline(_chance(train_runs[0]), color="grey", linestyle="--", label="chance")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("depth L")
    ax.set_ylabel("query accuracy (held out)")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Associative recall after training")
    return fig
