"""Summary, literature checks, report and plots of the rank-collapse study.

Reads finished runs from the workdir (so it gives the same result for an
interrupted-then-resumed study as for an uninterrupted one) and checks the
predictions of Dong et al. 2021 and Noci et al. 2022 against the measurements.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from attnjax.workdir import Workdir
from experiments.report_util import check_record, fmt, predictions_table

SKIP_ARCHITECTURES = ("skip", "skip_mlp", "post_ln", "skip_scaled")
# Below this relative residual float32 rounding dominates (eps ~ 1.2e-7 per
# entry, summed over T x D entries), so ratios of log-residuals mean nothing.
RESIDUAL_FLOOR = 1e-5


# --------------------------------------------------------------------------
# Summary: per run, per phase, per metric, values [seeds, layers] or [seeds]


def _run_summary(record: dict) -> dict:
    out = {"spec": record["spec"], "profiles": {}, "scalars": {}}
    for row in record["metrics"]:
        phase = f"{row['phase']}@{row['step']}"
        if "values" in row:
            out["profiles"].setdefault(phase, {}).setdefault(row["metric"], {})[row["seed"]] = row["values"]
        else:
            out["scalars"].setdefault(phase, {}).setdefault(row["metric"], {})[row["seed"]] = row["value"]
    for group in ("profiles", "scalars"):
        for phase, metrics in out[group].items():
            for name, by_seed in metrics.items():
                metrics[name] = [by_seed[s] for s in sorted(by_seed)]
    for key in ("diverged", "chance_accuracy"):
        if key in record:
            out[key] = record[key]
    return out


def summarize(config, specs, wd: Workdir) -> dict:
    runs = {spec.run_id: _run_summary(wd.load_run(spec.run_id)) for spec in specs}
    summary = {"runs": runs}
    summary["predictions"] = check_predictions(config, runs)
    return summary


def _mean(values) -> np.ndarray:
    return np.mean(np.asarray(values, dtype=np.float64), axis=0)


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
    finals = [p for p in run["scalars"] if p.startswith("final@")]
    return ", ".join(f"{v:.2f}" for v in run["scalars"][finals[0]][name]) if finals else ""


def _final_scalar(run: dict, name: str) -> Optional[float]:
    finals = [p for p in run["scalars"] if p.startswith("final@")]
    if not finals:
        return None
    return float(_mean(run["scalars"][finals[0]][name]))


# --------------------------------------------------------------------------
# Literature predictions


def _missing(name, source, prediction, need):
    return check_record(name, source, prediction, None, None, f"not measured: the config has no {need}")


def _dong_checks(runs, kind, temperature) -> list[dict]:
    source = "Dong et al. 2021"
    run = _find(runs, "init", kind, "attention_only", 4, temperature)
    label = f"{kind}, attention only, init"
    if run is None:
        return [_missing(f"residual falls 1000x in 4 layers ({label})", source, "r_4 / r_0 <= 1e-3",
                         f"init_sweep run of attention_only ({kind}) with depth >= 4")]
    r = _mean(run["profiles"]["init@0"]["residual_fro"])
    depth = run["spec"]["depth"]
    checks = [check_record(f"residual falls 1000x within 4 layers ({label}, L={depth})", source,
                          "r_4 / r_0 <= 1e-3", float(r[4] / r[0]), bool(r[4] / r[0] <= 1e-3))]
    if depth >= 8:
        checks.append(check_record(f"residual <= 1e-4 by layer 8 ({label}, L={depth})", source, "r_8 <= 1e-4",
                                  float(r[8]), bool(r[8] <= 1e-4)))
    logs = np.log(np.maximum(r, 1e-300))
    usable = [l for l in range(1, len(r)) if r[l] >= RESIDUAL_FLOOR and r[l - 1] < 1]
    ratios = [float(logs[l] / logs[l - 1]) for l in usable]
    checks.append(check_record(
        f"doubly exponential decay ({label}, L={depth})", source,
        "log r_(l+1) / log r_l >= 2 for consecutive layers",
        min(ratios) if ratios else None, bool(ratios) and min(ratios) >= 2,
        f"layers 1..{usable[-1] if usable else 0} (r >= {RESIDUAL_FLOOR:g}; below, float32 rounding dominates); "
        f"ratios {', '.join(f'{x:.2f}' for x in ratios)}",
    ))
    return checks


def _noci_check(runs, kind, temperature) -> dict:
    source = "Noci et al. 2022"
    prediction = "r_12 >= 0.9"
    run = _find(runs, "init", kind, "skip_scaled", 12, temperature, deepest=False)
    if run is None:
        return _missing(f"skip scaled by 1/sqrt(L) keeps rank ({kind}, init)", source, prediction,
                        f"init_sweep run of skip_scaled ({kind}) with depth >= 12")
    r = _mean(run["profiles"]["init@0"]["residual_fro"])
    return check_record(f"skip scaled by 1/sqrt(L) keeps rank ({kind}, init, L={run['spec']['depth']})", source,
                       prediction, float(r[12]), bool(r[12] >= 0.9))


def _qk_over_v(run) -> float:
    s = run["scalars"]["init@0"]
    qk = np.sqrt(_mean(s["grad_norm/query"]) ** 2 + _mean(s["grad_norm/key"]) ** 2)
    return float(qk / _mean(s["grad_norm/value"]))


def _gradient_check(runs) -> dict:
    """Attention-only vs a skip architecture at the same depth, from any runs with gradients at step 0."""
    source = "Noci et al. 2022"
    prediction = "||grad W_Q,K|| / ||grad W_V|| smaller under collapse (attention only) than with skips"
    with_grads = [r for r in runs.values() if r["spec"]["kind"] == "softmax"
                  and "grad_norm/query" in r["scalars"].get("init@0", {})]
    pairs = []
    for collapsed in (r for r in with_grads if r["spec"]["architecture"] == "attention_only"):
        for arch in ("skip_scaled", "skip_mlp", "skip", "post_ln"):
            healthy = next((r for r in with_grads if r["spec"]["architecture"] == arch
                            and all(r["spec"][k] == collapsed["spec"][k] for k in ("sweep", "depth", "temperature"))),
                           None)
            if healthy is not None:
                pairs.append((collapsed, healthy))
                break
    if not pairs:
        return _missing("query/key gradients vanish under rank collapse", source, prediction,
                        "pair of attention_only and skip runs of equal depth with gradient norms at step 0")
    collapsed, healthy = max(pairs, key=lambda p: p[0]["spec"]["depth"])
    a, b = _qk_over_v(collapsed), _qk_over_v(healthy)
    spec = collapsed["spec"]
    setting = f"{spec['sweep']} sweep, {'causal' if spec['causal'] else 'bidirectional'}, L={spec['depth']}"
    return check_record(f"query/key gradients vanish under rank collapse (softmax, init, {setting})", source,
                       prediction, a, bool(a < b), f"attention only {a:.3g} vs {healthy['spec']['architecture']} {b:.3g}")


def _training_checks(runs, config) -> list[dict]:
    source = "Dong et al. 2021 / Noci et al. 2022 (trained)"
    checks = []
    skip_runs = [r for r in runs.values() if r["spec"]["sweep"] == "train" and r["spec"]["depth"] == 4
                 and r["spec"]["architecture"] in SKIP_ARCHITECTURES]
    for run in sorted(skip_runs, key=lambda r: (r["spec"]["kind"], r["spec"]["architecture"])):
        acc = _final_scalar(run, "eval_accuracy")
        checks.append(check_record(f"{run['spec']['architecture']} ({run['spec']['kind']}) learns recall at depth 4",
                                  source, "query accuracy >= 0.9 (mean over seeds)", acc,
                                  acc is not None and acc >= 0.9, f"per seed: {_per_seed(run, 'eval_accuracy')}"))
    deep = [r for r in runs.values() if r["spec"]["sweep"] == "train" and r["spec"]["depth"] >= 8
            and r["spec"]["architecture"] == "attention_only"]
    for run in sorted(deep, key=lambda r: (r["spec"]["kind"], r["spec"]["depth"])):
        acc = _final_scalar(run, "eval_accuracy")
        chance = run["chance_accuracy"]
        checks.append(check_record(
            f"attention only ({run['spec']['kind']}) stays near chance at depth {run['spec']['depth']}", source,
            f"query accuracy <= 2 x chance = {2 * chance:.3f}", acc, acc is not None and acc <= 2 * chance,
            f"chance (uniform over value tokens) = {chance:.3f}; per seed: {_per_seed(run, 'eval_accuracy')}"))
    if not checks:
        checks.append(_missing("training predictions", source, "skip variants >= 0.9 at depth 4",
                               "train_sweep runs at depth 4 (skip variants) or depth >= 8 (attention only)"))
    return checks


def check_predictions(config, runs) -> list[dict]:
    temperature = float(config.init_sweep.temperatures[0]) if config.init_sweep.temperatures else 1.0
    checks = _dong_checks(runs, "softmax", temperature)
    checks.append(_noci_check(runs, "softmax", temperature))
    checks.append(_gradient_check(runs))
    checks += _training_checks(runs, config)
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
            cells.append(fmt(float(_mean(run["profiles"]["init@0"]["residual_fro"])[-1])) if run else "")
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
        profiles = r["profiles"]
        last = max((p for p in profiles), key=lambda p: int(p.split("@")[1]))
        res_init = _mean(profiles["init@0"]["residual_fro"])[-1]
        res_trained = _mean(profiles[last]["residual_fro"])[-1]
        path = _mean(profiles[last]["path_rank_one_residual"])[-1]
        lines.append(f"| {r['spec']['kind']} | {r['spec']['architecture']} | {r['spec']['depth']} | "
                     f"{fmt(_final_scalar(r, 'eval_accuracy'))} | {fmt(_final_scalar(r, 'eval_loss'))} | "
                     f"{fmt(float(res_init))} | {fmt(float(res_trained))} | {fmt(float(path))} | "
                     f"{int(np.sum(r.get('diverged', [])))} |")
    return lines + [""]


def report_markdown(config, summary, plots=()) -> str:
    runs, predictions = summary["runs"], summary["predictions"]
    passed = sum(p["passed"] is True for p in predictions)
    failed = sum(p["passed"] is False for p in predictions)
    lines = [
        "# Rank collapse across depth", "",
        f"Task: {config.task.name} ({', '.join(f'{k}={v}' for k, v in config.task.items() if k != 'name')}); "
        f"model width {config.model.features}, {config.model.num_heads} heads; {config.num_seeds} seeds per run; "
        f"{config.train.steps} training steps. Initialisation sweep: "
        f"{'causal' if config.init_sweep.causal else 'bidirectional'} attention; training sweep: "
        f"{'causal' if config.train_sweep.causal else 'bidirectional'}.", "",
        f"## Literature predictions: {passed} pass, {failed} fail", "",
        *predictions_table(predictions), "",
        "## Initialisation", "",
        *_init_table(runs, "softmax"), *_init_table(runs, "linear"),
        "## After training", "",
        *_train_table(runs),
        "Plots: " + (", ".join(f"`plots/{name}`" for name in plots) or "none"), "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Plots

def _save(fig, wd: Workdir, name: str) -> None:
    fig.savefig(wd.file("plots", name), dpi=110, bbox_inches="tight")


def _deepest_init_profiles(runs, kind, metric) -> dict:
    curves = {}
    for arch in sorted({r["spec"]["architecture"] for r in runs.values()}):
        run = _find(runs, "init", kind, arch, 1)
        if run is not None:
            curves[f"{arch} (L={run['spec']['depth']})"] = np.asarray(run["profiles"]["init@0"][metric])
    return curves


def write_plots(summary, wd: Workdir) -> None:
    from attnjax import plotting

    runs = summary["runs"]
    for kind in ("softmax", "linear"):
        curves = _deepest_init_profiles(runs, kind, "residual_fro")
        if curves:
            fig = plotting.metric_vs_depth(curves, ylabel="relative residual (Frobenius)", start=0,
                                           title=f"Rank collapse at initialisation ({kind} attention)")
            fig.axes[0].set_xlabel("layer (0 = input)")
            _save(fig, wd, f"init_residual_{kind}.png")
    curves = _deepest_init_profiles(runs, "softmax", "path_rank_one_residual")
    if curves:
        fig = plotting.metric_vs_depth(curves, ylabel="||P_l - rank 1|| / ||P_l||",
                                       title="Attention path products A_l...A_1 approach rank one (softmax, init)")
        _save(fig, wd, "init_path_rank_one.png")
    train = [r for r in runs.values() if r["spec"]["sweep"] == "train"]
    if train:
        curves = {}
        for r in sorted(train, key=lambda r: (r["spec"]["architecture"], r["spec"]["depth"])):
            last = max(r["profiles"], key=lambda p: int(p.split("@")[1]))
            label = f"{r['spec']['architecture']} L={r['spec']['depth']} ({r['spec']['kind']})"
            curves[f"{label} init"] = np.asarray(r["profiles"]["init@0"]["residual_fro"])
            curves[f"{label} trained"] = np.asarray(r["profiles"][last]["residual_fro"])
        fig = plotting.metric_vs_depth(curves, ylabel="relative residual (Frobenius)", start=0,
                                       title="Initialisation vs trained")
        fig.axes[0].set_xlabel("layer (0 = input)")
        _save(fig, wd, "train_residual.png")
        _save(_accuracy_figure(train), wd, "accuracy_vs_depth.png")


def _accuracy_figure(train_runs):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for arch in sorted({r["spec"]["architecture"] for r in train_runs}):
        for kind in sorted({r["spec"]["kind"] for r in train_runs}):
            runs = sorted((r for r in train_runs if r["spec"]["architecture"] == arch and r["spec"]["kind"] == kind),
                          key=lambda r: r["spec"]["depth"])
            if runs:
                depths = [r["spec"]["depth"] for r in runs]
                accs = [_final_scalar(r, "eval_accuracy") for r in runs]
                ax.plot(depths, accs, marker="o", label=f"{arch} ({kind})")
    chance = train_runs[0].get("chance_accuracy")
    if chance is not None:
        ax.axhline(chance, color="grey", linestyle="--", label="chance")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("depth L")
    ax.set_ylabel("query accuracy (held out)")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Associative recall after training")
    return fig
