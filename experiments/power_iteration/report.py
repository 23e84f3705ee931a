"""Summary, checks, report and figures of the power-iteration study.

Summarises the rows of every run and checks each prediction against the
measurements:

* fixed matrix: the decay rate of A^k -> 1 pi^T is |lambda_2| (Seneta 2006, ch. 1);
* products: delta(P_l) <= prod_i tau(A_i) and delta(P_l) non-increasing
  (sub-multiplicativity of Dobrushin's coefficient; Seneta 2006, §3.1), and
  pi_l = e_1 for causal attention;
* self-attention dynamics: one cluster at high temperature, several
  long-lived ones at low temperature, fewer as the temperature rises
  (Geshkovski, Letrouit, Polyanskiy & Rigollet 2023).
"""
from __future__ import annotations

import math

import numpy as np
from ml_collections import ConfigDict

from attnjax import plotting
from attnjax.study import by_metric, distinct, prediction, select
from experiments import models
from experiments.power_iteration.study import dtype_of, rounding_floor
from experiments.report_util import count, fmt, label, predictions_table

# Iterations at which the report tabulates the cluster count.
CLUSTER_GRID = (0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
PHASE_LABELS = {"untrained": "untrained, bidirectional", "init": "causal, at initialisation",
                "trained": "causal, trained"}
# Steps past the last fitted one shown in the fixed-matrix figure.
PLOT_MARGIN = 5


def _eps(dtype_name: str) -> float:
    return float(np.finfo(np.dtype(dtype_name)).eps)


def _phases(run) -> list[str]:
    """The phases a products run measured, in the order they happen."""
    return [p for p in PHASE_LABELS if p in run["phases"]]


# --------------------------------------------------------------------------
# Summary: one list per part, in run order


def _fixed_summary(config, rows) -> dict:
    tolerance = config.fixed.tolerance
    matrices = []
    for i in range(config.fixed.num_matrices):
        m = {k: v[0] for k, v in by_metric(rows, matrix=i).items() if k != "distance"}
        slem, rate, vector_rate = float(m["slem"]), float(m["rate"]), float(m["vector_rate"])  # "nan" -> nan
        rel = rate / slem - 1 if slem > 0 else math.nan
        matrices.append({
            "matrix": i, "slem": slem, "rate": rate, "rel_error": rel,
            "passed": bool(math.isfinite(rel) and abs(rel) <= tolerance),
            "fit_start": m["fit_start"], "fit_end": m["fit_end"], "floor_reached": m["floor_reached"],
            "vector_rate": vector_rate, "vector_rel_error": vector_rate / slem - 1 if slem > 0 else math.nan,
        })
    errors = [abs(m["rel_error"]) if math.isfinite(m["rel_error"]) else math.inf for m in matrices]
    end = max(m["fit_end"] for m in matrices) + PLOT_MARGIN
    curves = [np.asarray(d, dtype=np.float64)[:end + 1] for d in by_metric(rows, metric="distance")["distance"]]
    return {"run": rows[0]["run"], "temperature": rows[0]["temperature"], "dtype": np.dtype(dtype_of(config)).name,
            "floor": rounding_floor(config), "matrices": matrices, "worst_rel_error": max(errors), "distance": curves}


def _phase_summary(rows, phase: str) -> dict:
    """Head-averaged and per-head metrics of one phase: means over seeds, worst excesses over seeds."""
    out = {}
    for chain in ("mean", "head"):
        metrics = by_metric(rows, phase=phase, chain=chain)
        summary = {}
        for name, per_seed in metrics.items():
            values = np.asarray(per_seed, dtype=np.float64)
            worst = name.endswith("excess") or name.endswith("gap")
            summary[name] = (np.max(values, axis=0) if worst else np.mean(values, axis=0)).tolist()
        out[chain] = summary
    return out


def _products_summary(config, rows) -> dict:
    spec = {k: rows[0][k] for k in ("part", "temperature", "architecture", "trained")}
    out = {"run": rows[0]["run"], "spec": spec, "seq_len": models.make_task(config.products.task).seq_len,
           "dtype": np.dtype(dtype_of(config)).name,
           "phases": {p: _phase_summary(rows, p) for p in distinct(rows, "phase")}}
    final = by_metric([r for r in rows if "chain" not in r], phase="trained")
    if final:
        out.update(final, chance_accuracy=final["chance_accuracy"][0])
    return out


def _grid(steps: int) -> list[int]:
    return sorted({t for t in CLUSTER_GRID if t <= steps} | {steps})


def _clusters_summary(config, rows) -> dict:
    metrics = by_metric(rows)
    counts = np.asarray(metrics["clusters"], dtype=np.float64)  # [seeds, steps + 1]
    residual = np.asarray(metrics["residual"], dtype=np.float64)
    grid = _grid(config.clusters.steps)
    return {
        "run": rows[0]["run"], "temperature": rows[0]["temperature"], "iterations": grid,
        "clusters_mean": counts[:, grid].mean(axis=0).tolist(),
        "clusters_min": counts[:, grid].min(axis=0).tolist(),
        "clusters_max": counts[:, grid].max(axis=0).tolist(),
        "final_clusters": counts[:, -1].tolist(),
        "final_residual": float(np.mean(residual[:, -1])),
        "final_effective_rank": float(np.mean(np.asarray(metrics["effective_rank"], dtype=np.float64)[:, -1])),
        "clusters_curve": counts.mean(axis=0), "residual_curve": residual.mean(axis=0),  # [steps + 1]
    }


SUMMARIES = {"fixed": _fixed_summary, "products": _products_summary, "clusters": _clusters_summary}


def summarize(rows: list[dict], config) -> dict:
    summary = {part: [] for part in SUMMARIES}
    for run_id in distinct(rows, "run"):
        run_rows = select(rows, run=run_id)
        part = run_rows[0]["part"]
        summary[part].append(SUMMARIES[part](config, run_rows))
    return summary


# --------------------------------------------------------------------------
# Predictions


def _fixed_checks(config, fixed) -> list[dict]:
    checks = []
    tol = config.fixed.tolerance
    for run in fixed:
        worst = float(run["worst_rel_error"])
        failed = sum(not m["passed"] for m in run["matrices"])
        checks.append(prediction(
            f"fixed matrix: A^k -> 1 pi^T at rate |lambda_2| (tau={run['temperature']:g})",
            "Seneta 2006", f"|rate / |lambda_2| - 1| <= {tol:g} for every matrix",
            worst, bool(worst <= tol),
            f"worst of {len(run['matrices'])} matrices; {failed} outside; {run['dtype']}"))
    return checks


def _product_tolerance(run) -> float:
    """Rounding allowance of the Dobrushin checks: 2 L T eps (each product adds <= T eps per row, in l1)."""
    layers = len(run["phases"][_phases(run)[0]]["mean"]["delta"])
    return 2 * layers * run["seq_len"] * _eps(run["dtype"])


def _dobrushin_check(run, phase: str) -> dict:
    """Worst excess of both inequalities; layer 1 is left out of the bound (there delta(P_1) = tau(A_1))."""
    p = run["phases"][phase]
    if len(p["mean"]["delta"]) < 2:
        return prediction(f"Dobrushin bound ({run['spec']['architecture']}, {PHASE_LABELS[phase]})",
                           "Seneta 2006, §3.1", "delta(P_l) <= prod_i tau(A_i)", None, None,
                           "not measured: needs products.num_layers >= 2")
    bound = max(max(p[c]["bound_excess"][1:]) for c in ("mean", "head"))
    monotone = max(max(p[c]["monotone_excess"]) for c in ("mean", "head"))
    worst = max(bound, monotone)
    tol = _product_tolerance(run)
    return prediction(
        f"Dobrushin bound ({run['spec']['architecture']}, {PHASE_LABELS[phase]})", "Seneta 2006, §3.1",
        "delta(P_l) <= prod_i tau(A_i) and delta(P_l) <= delta(P_(l-1)), every layer, example and head",
        worst, bool(worst <= tol),
        f"max excess: bound {bound:.2e}, monotonicity {monotone:.2e}; rounding allowance {tol:.1e}")


def _causal_check(run, phase: str) -> dict:
    p = run["phases"][phase]
    worst = max(float(np.max(p[c]["pi_first_gap"])) for c in ("mean", "head"))
    saturated = max(float(np.max(p[c]["absorbing"])) for c in ("mean", "head")) > 1
    tol = 1e3 * run["seq_len"] * _eps(run["dtype"])
    note = f"tolerance {tol:.1e}"
    if saturated:
        note += ("; some chains have absorbing tokens besides the first (saturated rows, a_tt = 1): "
                 "their pi_l is not unique and they are left out")
    return prediction(
        f"causal attention: pi_l = e_1 ({run['spec']['architecture']}, {PHASE_LABELS[phase]})",
        "Seneta 2006 (absorbing chains)",
        "1 - pi_l(first token) ~ 0 for every layer whose only absorbing token is the first",
        worst, bool(worst <= tol), note)


def _cluster_checks(clusters) -> list[dict]:
    if not clusters:
        return []
    source = "Geshkovski et al. 2023"
    runs = sorted(clusters, key=lambda r: r["temperature"])
    hot, cold = runs[-1], runs[0]
    steps = hot["iterations"][-1]
    checks = [
        prediction(f"high temperature: one cluster (tau={hot['temperature']:g}, t={steps})", source,
                    "every seed ends with 1 cluster", max(hot["final_clusters"]),
                    bool(max(hot["final_clusters"]) == 1)),
        prediction(f"low temperature: several long-lived clusters (tau={cold['temperature']:g}, t={steps})",
                    source, "every seed still has >= 2 clusters", min(cold["final_clusters"]),
                    bool(min(cold["final_clusters"]) >= 2)),
    ]
    if len(runs) > 1:
        means = [float(np.mean(r["final_clusters"])) for r in runs]
        rise = max(b - a for a, b in zip(means, means[1:]))
        checks.append(prediction(
            f"fewer clusters at higher temperature (t={steps})", source,
            "mean final cluster count non-increasing in tau", rise, bool(rise <= 0),
            "largest increase between neighbouring temperatures; means "
            + ", ".join(f"{r['temperature']:g}: {m:.2f}" for r, m in zip(runs, means))))
    return checks


def predictions(summary: dict) -> list[dict]:
    checks = _fixed_checks(ConfigDict(summary["config"]), summary["fixed"])
    for run in summary["products"]:
        for phase in _phases(run):
            checks.append(_dobrushin_check(run, phase))
            if phase != "untrained":
                checks.append(_causal_check(run, phase))
    return checks + _cluster_checks(summary["clusters"])


# --------------------------------------------------------------------------
# Report


def _floor(fixed) -> float:
    return max((r["floor"] for r in fixed), default=math.nan)


def _fixed_section(config, fixed) -> list[str]:
    f = config.fixed
    lines = [
        "## (a) One fixed attention matrix, iterated", "",
        f"A = softmax(Q K^T / (sqrt(d) tau)) with Q, K [{f.seq_len}, {f.head_dim}] iid N(0, 1) (matrix i is the "
        "same draw at every temperature). Distance d(k) = max_i 1/2 ||e_i^T A^k - pi||_1; measured rate = "
        "exp(slope) of a least-squares line through log d(k) over k in [k1/2, k1], k1 the last step above "
        f"the rounding floor 100 T eps = {_floor(fixed):.1e}. Predicted rate |lambda_2| = `slem(A)`. The rate "
        "of the vector iteration v <- A v (`power_iteration`, v_0 ~ N(0, I)) is shown for comparison, not checked.", "",
        "| tau | matrix | abs(lambda_2) | measured rate | rel. error | pass | fit range k | v <- A v rate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in fixed:
        for m in run["matrices"]:
            fit = f"{m['fit_start']}..{m['fit_end']}" + ("" if m["floor_reached"] else " (floor not reached)")
            lines.append(f"| {run['temperature']:g} | {m['matrix']} | {m['slem']:.4f} | {float(m['rate']):.4f} | "
                         f"{float(m['rel_error']):+.4f} | {label(m['passed'])} | {fit} | "
                         f"{float(m['vector_rate']):.4f} |")
    worst = max((float(r["worst_rel_error"]) for r in fixed), default=None)
    return lines + ["", f"Worst relative error over all matrices: {fmt(worst)} (tolerance {f.tolerance:g}).", ""]


def _layer_table(run, phase: str) -> list[str]:
    p = run["phases"][phase]
    mean, head = p["mean"], p["head"]
    tol = _product_tolerance(run)
    lines = [f"**{run['spec']['architecture']}, {PHASE_LABELS[phase]}**", "",
             "| layer l | tau(A_l) | delta(P_l) | prod tau | bound holds | TV(p_l, pi_l) | absorbing tokens | "
             "per head: delta(P_l) | prod tau | bound holds | TV(p_l, pi_l) | absorbing tokens |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for layer in range(len(mean["delta"])):
        head_delta = np.asarray(head["delta"])[:, layer]
        head_bound = np.asarray(head["bound"])[:, layer]
        head_tv = np.asarray(head["tv_to_pi"])[:, layer]
        head_absorbing = np.asarray(head["absorbing"])[:, layer]
        lines.append(
            f"| {layer + 1} | {fmt(mean['tau'][layer])} | {fmt(mean['delta'][layer])} | {fmt(mean['bound'][layer])} | "
            f"{mean['bound_excess'][layer] <= tol} | {fmt(mean['tv_to_pi'][layer])} | {mean['absorbing'][layer]:.2f} | "
            f"{fmt(float(head_delta.mean()))} [{fmt(float(head_delta.min()))}, {fmt(float(head_delta.max()))}] | "
            f"{fmt(float(head_bound.mean()))} | {head['bound_excess'][layer] <= tol} | {fmt(float(head_tv.mean()))} | "
            f"{float(head_absorbing.mean()):.2f} |")
    return lines + [""]


def _products_section(config, products) -> list[str]:
    p = config.products
    lines = [
        "## (b) Products across depth", "",
        f"P_l = A_l ... A_1 for {p.num_layers}-layer models (width {p.model.features}, {p.model.num_heads} heads), "
        f"means over {p.num_seeds} seed(s) and {p.measure_batch_size} held-out {p.task.name} sequences. "
        "delta(P_l) = tau(P_l), Dobrushin's coefficient of the product; prod tau = prod_(i<=l) tau(A_i), its "
        "bound; p_l = the mean row of P_l, which every row approaches; pi_l = the stationary distribution of "
        "layer l alone. Head-averaged chain A_l = mean_h A_l^h (left) and each head's own chain "
        "A_l^h ... A_1^h (right: mean over heads [min, max]). 'bound holds' is over every example, seed "
        "(and head). Untrained models are bidirectional; the causal model is measured at initialisation "
        "(the same parameters) and after training. Causal attention is lower-triangular with a_11 = 1: "
        "the first token is absorbing, and if it is the only absorbing token (a_tt < 1 for t >= 2) every "
        "pi_l is e_1 and the products converge to the first token. 'absorbing tokens' counts tokens with "
        "a_tt = 1 (mean over examples): a saturated float32 softmax row makes a token absorbing, and then "
        "pi_l is not unique (`stationary_distribution` returns the limit from the uniform start).", "",
    ]
    for run in products:
        for phase in _phases(run):
            lines += _layer_table(run, phase)
        if "eval_accuracy" in run:
            accs = ", ".join(f"{a:.3f}" for a in run["eval_accuracy"])
            lines += [f"After {p.train.steps} training steps: held-out query accuracy {accs} per seed "
                      f"(chance {run['chance_accuracy']:.3f}).", ""]
    return lines


def _clusters_section(config, clusters) -> list[str]:
    c = config.clusters
    runs = sorted(clusters, key=lambda r: r["temperature"])
    if not runs:
        return []
    grid = runs[0]["iterations"]
    lines = [
        "## (c) Parameter-free self-attention dynamics", "",
        f"X <- softmax(X X^T / (sqrt(d) tau)) X from X_0 [{c.num_tokens}, {c.dim}] iid N(0, 1), {c.num_seeds} "
        "seeds (the same X_0 at every temperature). Cluster count: tokens closer than "
        f"{c.threshold:g} x the RMS token norm of X_0 are linked; clusters are the connected components "
        "(single linkage). Mean number of clusters [min, max over seeds] at iteration t:", "",
        "| tau | " + " | ".join(f"t={t}" for t in grid) + " | residual (final) | effective rank (final) |",
        "|---|" + "---|" * (len(grid) + 2),
    ]
    for r in runs:
        cells = [f"{m:.1f} [{lo:.0f}, {hi:.0f}]" if lo != hi else f"{m:.0f}"
                 for m, lo, hi in zip(r["clusters_mean"], r["clusters_min"], r["clusters_max"])]
        lines.append(f"| {r['temperature']:g} | " + " | ".join(cells) +
                     f" | {fmt(r['final_residual'])} | {fmt(r['final_effective_rank'])} |")
    lines += ["", "residual = ||X - 1 x_bar^T||_F / ||X||_F (Dong et al. 2021), mean over seeds; 0 means "
              "one point. Without normalisation the convex hull of the tokens only shrinks, so the low-"
              "temperature clusters are long-lived, not permanent: they keep drifting together.", ""]
    return lines


def markdown(summary: dict) -> str:
    config, checks = ConfigDict(summary["config"]), summary["predictions"]
    lines = [
        "# Attention as power iteration", "",
        f"Analysis in {'float64' if config.float64 else 'float32'}; models in float32. Seed {config.seed}.", "",
        f"## Predictions: {count(checks, 'pass')} pass, {count(checks, 'fail')} fail", "",
        *predictions_table(checks), "",
        *_fixed_section(config, summary["fixed"]),
        *_products_section(config, summary["products"]),
        *_clusters_section(config, summary["clusters"]),
        "Plots: " + (", ".join(f"`plots/{name}`" for name in summary["plots"]) or "none"), "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Figures


def _figure(width: float, height: float, rows: int, cols: int):
    """A figure and its axes `[rows * cols]`."""
    fig = plotting.figure(width, height)
    return fig, fig.subplots(rows, cols, squeeze=False).reshape(-1)


def _fixed_figure(fixed):
    cols = min(len(fixed), 2)
    rows = math.ceil(len(fixed) / cols)
    fig, axes = _figure(5.0 * cols, 3.4 * rows, rows, cols)
    for ax, run in zip(axes, fixed):
        for m, curve in zip(run["matrices"], run["distance"]):
            d = np.asarray(curve, dtype=np.float64)
            k = np.arange(len(d))
            (line,) = ax.semilogy(k, np.where(d > 0, d, np.nan), linewidth=1)
            k1 = m["fit_end"]
            ax.semilogy(k[:k1 + 1], d[k1] * m["slem"] ** (k[:k1 + 1] - k1), "--", color=line.get_color(),
                        linewidth=0.8)
        ax.axhline(run["floor"], color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(f"tau = {run['temperature']:g}")
        ax.set_xlabel("k")
        ax.grid(True, alpha=0.3)
    for ax in axes[::cols]:
        ax.set_ylabel("max_i TV(e_i A^k, pi)")
    for ax in axes[len(fixed):]:
        ax.set_visible(False)
    fig.suptitle("A^k -> 1 pi^T: measured (solid) vs |lambda_2|^k (dashed); dotted: rounding floor")
    return fig


def _products_figure(summary):
    by_arch = {}
    for run in summary["products"]:
        by_arch.setdefault(run["spec"]["architecture"], []).append(run)
    fig, axes = _figure(5.0 * len(by_arch), 3.8, 1, len(by_arch))
    for ax, (arch, runs) in zip(axes, by_arch.items()):
        for run in runs:
            for phase in _phases(run):
                p = run["phases"][phase]
                layers = np.arange(1, len(p["mean"]["delta"]) + 1)
                delta = np.asarray(p["mean"]["delta"], dtype=np.float64)
                (line,) = ax.semilogy(layers, np.where(delta > 0, delta, np.nan), marker="o", markersize=3,
                                      label=f"delta(P_l), {PHASE_LABELS[phase]}")
                bound = np.asarray(p["mean"]["bound"], dtype=np.float64)
                ax.semilogy(layers, np.where(bound > 0, bound, np.nan), "--", color=line.get_color(),
                            label=f"prod tau, {PHASE_LABELS[phase]}")
        ax.set_title(f"{arch} (head-averaged attention)")
        ax.set_xlabel("layer l")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("Dobrushin coefficient")
    return fig


def _clusters_figure(clusters):
    fig, axes = _figure(10.0, 3.8, 1, 2)
    for run in sorted(clusters, key=lambda r: r["temperature"]):
        counts = np.asarray(run["clusters_curve"], dtype=np.float64)
        residual = np.asarray(run["residual_curve"], dtype=np.float64)
        t = np.arange(len(counts))
        axes[0].plot(t + 1, counts, label=f"tau = {run['temperature']:g}")
        axes[1].plot(t + 1, np.where(residual > 0, residual, np.nan), label=f"tau = {run['temperature']:g}")
    axes[0].set_xscale("log")
    axes[0].set_ylabel("number of clusters (mean over seeds)")
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("||X - 1 x_bar^T||_F / ||X||_F")
    for ax in axes:
        ax.set_xlabel("iteration t + 1")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("X <- softmax(X X^T / (sqrt(d) tau)) X")
    return fig


def figures(summary: dict) -> dict:
    out = {}
    if summary["fixed"]:
        out["fixed_matrix_rate"] = _fixed_figure(summary["fixed"])
    if summary["products"]:
        out["products_dobrushin"] = _products_figure(summary)
    if summary["clusters"]:
        out["clusters"] = _clusters_figure(summary["clusters"])
    return out
