"""The rank-collapse study's figures: `figures(summary) -> {name: Figure}`, written as `plots/<name>.png`.

Per-layer metrics are drawn as `attnjax.plotting.metric_vs_depth` draws them
(mean over seeds, min-max band, log y axis for residuals), several panels to
a figure (`Panel`). The x axis is the depth l, the number of layers applied
(layers themselves count from 0, as in the API): a panel starts at 0 for
hidden-state metrics (X_0 is the input) and at 1 for attention statistics (at
depth l, those of layer l - 1, the layer into depth l): the panel says which,
nothing is read from its label.

Every number drawn is the summary's: the lines with their bands (`bands`), the
fits, ratios and medians of its sections, and, where every seed or example is
drawn, the raw per-seed values of its `runs`. The only arithmetic here is the
drawing's: the x coordinates, the y of a log-log plot, a line from a stored
slope and intercept.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np

from attnjax import plotting
from experiments.lab.stats import numbers
from experiments.rank_collapse.checks import std_label
from experiments.rank_collapse.constants import FLOOR, LOCAL_WINDOW, RESOLVED, SATURATED

HIDDEN, ATTENTION = (
    0,
    1,
)  # x (depth) of a profile's first value: X_0 (the input), or layer 0's attention
LEGEND_SIZE = 7


class Panel(NamedTuple):
    """One axes of a figure: `curves` `{label: band}` (`summary.band`: mean, min, max over seeds, and their
    number `n`) against the depths from `start`."""

    ylabel: str
    curves: dict
    log: bool = True
    start: int = HIDDEN
    xlabel: str = "depth l (layers applied)"


def _style(
    ax, xlabel: str, ylabel: Optional[str] = None, log: bool = False, legend: bool = True
) -> None:
    if log:
        ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if legend:
        ax.legend(fontsize=LEGEND_SIZE)


def _array(values) -> np.ndarray:
    """Numbers of the summary as a float64 array ('nan', 'inf' as JSON stores them read back)."""
    return np.asarray(values, dtype=np.float64)


def _metrics(summary: dict, run_id: str, phase: str) -> dict:
    """The raw metrics of a run's first phase called `phase` (`{metric: [per seed]}`)."""
    return next(p["metrics"] for p in summary["runs"][run_id]["phases"] if p["phase"] == phase)


def _draw(ax, panel: Panel, legend: bool) -> None:
    """Mean over seeds with its min-max band, one line per curve."""
    for name, band in panel.curves.items():
        mean = _array(band["mean"])
        x = np.arange(panel.start, panel.start + mean.size)
        (line,) = ax.plot(x, mean, marker="o", markersize=3, label=name)
        if band["n"] > 1:
            ax.fill_between(
                x,
                _array(band["min"]),
                _array(band["max"]),
                color=line.get_color(),
                alpha=0.2,
                linewidth=0,
            )
    _style(ax, panel.xlabel, panel.ylabel, panel.log, legend)


def panels(title: str, *items: Panel, width: float = 15, height: float = 4.2):
    """One figure of `items` side by side under `title` (the legend on the first)."""
    fig = plotting.figure(width, height)
    for i, (ax, panel) in enumerate(zip(np.atleast_1d(fig.subplots(1, len(items))), items)):
        _draw(ax, panel, legend=i == 0)
    fig.suptitle(title)
    return fig


def _label(run: dict) -> str:
    return f"{run['architecture']} (L={run['depth']})"


# --------------------------------------------------------------------------
# The figures


def init_residual(summary: dict):
    deepest, bands = summary["deepest_untrained"], summary["bands"]

    def curves(metric):
        return {_label(r): bands[r["run"]][metric] for r in deepest}

    return panels(
        "Untrained networks (bidirectional, softmax)",
        Panel("relative residual ||X - 1 x_bar^T||_F / ||X||_F", curves("residual_fro")),
        Panel("absolute residual ||X - 1 x_bar^T||_F", curves("residual_abs_fro")),
        Panel("mean token cosine", curves("token_cosine"), log=False),
    )


def init_scale(summary: dict):
    found, bands = summary["scale"], summary["bands"]
    names = [f"std {std_label(r['embedding_std'])} (L={r['depth']})" for r in found]

    def curves(metric):
        return {name: bands[r["run"]][metric] for name, r in zip(names, found)}

    return panels(
        "Attention only: the embedding std at initialisation",
        Panel("relative residual", curves("residual_fro")),
        Panel(
            "attention entropy / log S",
            curves("attention_entropy_normalized"),
            log=False,
            start=ATTENTION,
        ),
        Panel("Dobrushin tau", curves("dobrushin"), start=ATTENTION),
    )


def causal_layernorm(summary: dict):
    pairs, bands = summary["mask"], summary["bands"]
    both = [
        (f"{pair['architecture']} {mask}", pair[mask])
        for pair in pairs
        for mask in ("causal", "bidirectional")
        if pair[mask] is not None
    ]

    def curves(metric):
        return {name: bands[run_id][metric] for name, run_id in both}

    residual = curves("residual_fro")
    for pair in pairs:
        if "chain/residual_fro" in bands[pair["causal"]]:
            residual[f"uniform causal chain (inputs of {pair['architecture']})"] = bands[
                pair["causal"]
            ]["chain/residual_fro"]
    tau = {f"{pair['architecture']} causal": bands[pair["causal"]]["dobrushin"] for pair in pairs}
    return panels(
        "Causal mask x LayerNorm at initialisation (Wu et al. 2024)",
        Panel("relative residual", residual),
        Panel("mean token cosine", curves("token_cosine"), log=False),
        Panel("Dobrushin tau (causal)", tau, start=ATTENTION),
    )


def local_masks(summary: dict):
    """Wu et al.'s local masks: r_l of each width against the full causal mask (mean, min-max band)."""
    local, bands = summary["local"], summary["bands"]
    curves = {"full causal": bands[local[0]["reference"]]["residual_fro"]}
    curves.update({f"local, W={r['window']}": bands[r["run"]]["residual_fro"] for r in local})
    return panels(
        f"Local (band) masks against the full causal mask, attention only, L={local[0]['depth']}, "
        f"T={local[0]['length']}",
        Panel("relative residual", curves),
        width=7,
    )


def noci_scaling(summary: dict):
    """Noci et al.'s depth trends: r_L and the token cosine at L against L, per placement, unscaled (dashed)
    and with 1/sqrt(L) branches (means over seeds)."""
    fig = plotting.figure(11, 4.2)
    axes = fig.subplots(1, 2)
    for i, trend in enumerate(numbers(summary["noci"])):
        for variant, style in (("unscaled", "--"), ("scaled", "-")):
            means = trend["means"][variant]
            for ax, key in zip(axes, ("residual", "cosine")):
                ax.plot(
                    trend["depths"],
                    means[key],
                    style,
                    color=f"C{i}",
                    marker="o",
                    markersize=3,
                    label=f"{trend['placement']} {variant}",
                )
    for ax, ylabel in zip(axes, ("relative residual at layer L", "token cosine at layer L")):
        ax.set_xscale("log", base=2)
        _style(ax, "depth L", ylabel)
    fig.suptitle(
        "Noci et al. 2022: depth trends with 1/sqrt(L) branches (solid) and without (dashed)"
    )
    return fig


def noci_gradients(summary: dict):
    """Noci et al.'s remedy: g(L) against depth, and the per-layer ratio of the deepest runs (mean over seeds)."""
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    for i, gradients in enumerate(numbers(summary["gradients"])):
        placement = gradients["placement"]
        for found, style in zip((gradients["unscaled"], gradients["scaled"]), ("--", "-")):
            label = f"{found[0]['architecture']} ({placement})"
            ax1.plot(
                [r["depth"] for r in found],
                [r["g"]["mean"] for r in found],
                style,
                color=f"C{i}",
                marker="o",
                markersize=3,
                label=label,
            )
            ratio = _array(found[-1]["ratio_profile"])
            ax2.plot(
                np.arange(ratio.size),
                ratio,
                style,
                color=f"C{i}",
                label=f"{label} L={ratio.size}",
            )
    ax1.set_xscale("log", base=2)
    _style(ax1, "depth L", "g(L): geometric mean over layers", log=True)
    _style(ax2, "layer (from 0)", "||grad W_QK|| / ||grad W_V||", log=True)
    fig.suptitle(
        "Noci et al. 2022: query/key against value gradients at initialisation (dashed: unscaled)"
    )
    return fig


def layernorm_dynamics(summary: dict):
    """Wu et al.'s constructions: consensus distance per layer with and without LayerNorm (every seed)."""
    constructions = summary["layernorm"]["constructions"]
    fig = plotting.figure(11, 4.2)
    for ax, construction in zip(
        fig.subplots(1, len(constructions), squeeze=False)[0], constructions
    ):
        name, metrics = construction["name"], _metrics(summary, construction["run"], "init")
        for which, color, label in (
            ("consensus_ln", "C0", "with LayerNorm"),
            ("consensus_plain", "C1", "without"),
        ):
            r = _array(metrics[which])
            for seed, row in enumerate(r):
                ax.plot(
                    np.arange(row.size),
                    row,
                    color=color,
                    alpha=0.5,
                    label=label if seed == 0 else None,
                )
        ax.axhline(FLOOR, color="grey", linestyle=":", label=f"float64 rounding {FLOOR:g}")
        ax.set_title(name)
        _style(ax, "depth t (layers applied)", "||X - 1 x_bar^T||_F / ||X||_F", log=True)
        ax.set_ylim(bottom=FLOOR / 100)
    fig.suptitle("Wu et al. 2024: self-attention with LayerNorm on constructed weights (causal)")
    return fig


def dong_fit(summary: dict):
    """Dong et al.'s run: every (example, layer) pair log ||res(X_l)|| against log ||res(X_(l-1))||, the local
    window's pairs apart, with the fitted line and slope 3; and the medians of the measured residual and of
    the bound at gamma = 1 per layer."""
    dong = numbers(summary["dong"])
    exponent = dong["exponent"]
    metrics = _metrics(summary, dong["run"], "init")
    res, rel = (
        _array(metrics["dong/residual_abs"]),
        _array(metrics["dong/residual"]),
    )  # [S, B, L + 1]
    before, after = rel[..., :-1].ravel(), rel[..., 1:].ravel()
    x, y = np.log10(res[..., :-1].ravel()), np.log10(res[..., 1:].ravel())
    resolved = (before > RESOLVED) & (after > RESOLVED)
    groups = (
        (f"r_(l-1) < {LOCAL_WINDOW:g} (local window)", resolved & (before < LOCAL_WINDOW), "C1"),
        (f"r_(l-1) >= {SATURATED:g} (saturated)", resolved & (before >= SATURATED), "C0"),
        ("between", resolved & (before >= LOCAL_WINDOW) & (before < SATURATED), "C2"),
    )
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    for label, keep, color in groups:
        ax1.scatter(x[keep], y[keep], s=6, color=color, alpha=0.6, label=label)
    window = groups[0][1]
    if window.any():
        xs = np.linspace(x[window].min(), x[window].max(), 2)
        line = (exponent["intercept"] + exponent["mean"] * xs * math.log(10)) / math.log(10)
        ax1.plot(xs, line, "k-", label=f"local fit: slope {exponent['mean']:.3g}")
        anchor = np.median(y[window]) - 3 * np.median(x[window])
        ax1.plot(xs, anchor + 3 * xs, "k:", label="slope 3")
    _style(ax1, "log10 ||res(X_(l-1))||_1,inf", "log10 ||res(X_l)||_1,inf")
    layers = np.arange(res.shape[-1])
    bound, measured = _array(dong["bound_median"]), _array(dong["measured_median"])
    ax2.plot(layers, measured, marker="o", markersize=3, label="measured ||res(X_l)||_1,inf")
    ax2.plot(
        layers[1:],
        bound,
        marker="s",
        markersize=3,
        label="bound c_l ||res(X_(l-1))||^3 at gamma = 1 (gamma not retrieved)",
    )
    ax2.axhline(1.0, color="grey", linestyle=":")
    _style(ax2, "layer", log=True)
    fig.suptitle(
        f"Dong et al. 2021 in float64: attention only, L={dong['depth']} (right: median over examples)"
    )
    return fig


def training(train: list[dict]):
    """Training accuracy per seed, and the attention entropy per layer (mean over seeds), against the step
    (`train`: the summary's `training`)."""
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    for i, run in enumerate(train):
        label = f"{run['architecture']} L={run['depth']}"
        logged = run["accuracy_curve"]
        accs = _array(logged["accuracy"])  # [steps, S]
        for seed in range(accs.shape[1] if accs.size else 0):
            ax1.plot(
                logged["steps"],
                accs[:, seed],
                color=f"C{i}",
                alpha=0.8,
                label=label if seed == 0 else None,
            )
        ent = run["entropy_curve"]
        if ent["steps"]:
            e = _array(ent["mean"])  # [steps, L]
            for layer in range(e.shape[1]):
                ax2.plot(
                    ent["steps"],
                    e[:, layer],
                    color=f"C{i}",
                    alpha=0.4 + 0.6 * layer / e.shape[1],
                    label=label if layer == e.shape[1] - 1 else None,
                )
    _style(ax1, "step", "training accuracy (per seed)")
    _style(ax2, "step", "attention entropy / log S per layer (darker: deeper)")
    fig.suptitle("Training: recall plateau and entropy per layer")
    return fig


def path_length(summary: dict, run: dict):
    """Dong et al.'s path-length experiment of a trained run (`run`: one of the summary's `paths`): the
    rank-one residual of every sampled path, per length."""
    p = _array(_metrics(summary, run["run"], "final")["path_residual"])  # [S, L, N]
    data = [p[:, k].ravel() for k in range(p.shape[1])]
    fig = plotting.figure(6, 4)
    ax = fig.add_subplot()
    ax.boxplot(data)
    ax.set_xticks(range(1, len(data) + 1), [str(k + 1) for k in range(len(data))])
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("path length k (single-head attention matrices)")
    ax.set_ylabel("||P - best rank 1||_F / ||P||_F")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"Path length, trained {run['architecture']} L={run['depth']}")
    return fig


def figures(summary: dict) -> dict:
    """Every figure the summary has the runs for, by plot name."""
    out = {}
    if summary["deepest_untrained"]:
        out["init_residual"] = init_residual(summary)
    if summary["dong"] is not None:
        out["dong_fit"] = dong_fit(summary)
    if summary["scale"]:
        out["init_scale"] = init_scale(summary)
    if summary["mask"]:
        out["causal_layernorm"] = causal_layernorm(summary)
    if summary["local"]:
        out["local_masks"] = local_masks(summary)
    if summary["noci"]:
        out["noci_scaling"] = noci_scaling(summary)
    if summary["gradients"]:
        out["noci_gradients"] = noci_gradients(summary)
    if summary["layernorm"]["constructions"]:
        out["layernorm"] = layernorm_dynamics(summary)
    if summary["training"]:
        out["training"] = training(numbers(summary["training"]))
        if summary["paths"]:
            out["path_length"] = path_length(summary, summary["paths"][-1])
    return out
