"""The rank-collapse study's figures: `figures(summary) -> {name: Figure}`, written as `plots/<name>.png`.

Per-layer metrics are drawn as `attnjax.plotting.metric_vs_depth` draws them
(mean over seeds, min-max band, log y axis for residuals), several panels to
a figure (`Panel`). A panel's x axis starts at 0 for hidden-state metrics
(X_0 is the input) and at 1 for attention statistics (one per layer): the
panel says which, nothing is read from its label.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np

from attnjax import plotting
from experiments.rank_collapse import summary as s
from experiments.rank_collapse.checks import NOCI_MIN_RESIDUAL

HIDDEN, ATTENTION = 0, 1  # x of a profile's first value: X_0 (the input), or layer 1's attention
LEGEND_SIZE = 7


class Panel(NamedTuple):
    """One axes of a figure: `curves` `{label: [seeds, layers] or [layers]}` against the layers from `start`."""

    ylabel: str
    curves: dict
    log: bool = True
    start: int = HIDDEN
    xlabel: str = "depth (layer)"


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


def _draw(ax, panel: Panel, legend: bool) -> None:
    """Mean over seeds with its min-max band, one line per curve."""
    for name, values in panel.curves.items():
        v = s.array(values)
        v = v[None] if v.ndim == 1 else v
        x = np.arange(panel.start, panel.start + v.shape[1])
        (line,) = ax.plot(x, v.mean(axis=0), marker="o", markersize=3, label=name)
        if v.shape[0] > 1:
            ax.fill_between(
                x, v.min(axis=0), v.max(axis=0), color=line.get_color(), alpha=0.2, linewidth=0
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
    return f"{run['spec']['architecture']} (L={run['spec']['depth']})"


# --------------------------------------------------------------------------
# The figures


def init_residual(summary: dict):
    deepest = [s.deepest_init(summary, arch) for arch in s.init_architectures(summary)]

    def curves(metric):
        return {_label(r): s.init(r, metric) for r in deepest if r is not None}

    return panels(
        "Untrained networks (bidirectional, softmax)",
        Panel("relative residual ||X - 1 x_bar^T||_F / ||X||_F", curves("residual_fro")),
        Panel("absolute residual ||X - 1 x_bar^T||_F", curves("residual_abs_fro")),
        Panel("mean token cosine", curves("token_cosine"), log=False),
    )


def init_scale(summary: dict):
    found = s.scale_runs(summary)
    names = [
        f"std {s.std_label(r['spec']['embedding_std'])} (L={r['spec']['depth']})" for r in found
    ]

    def curves(metric):
        return {name: s.init(r, metric) for name, r in zip(names, found)}

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
    pairs = s.mask_pairs(summary)
    both = [
        (f"{r['spec']['architecture']} {mask}", r)
        for run, bidir in pairs
        for mask, r in (("causal", run), ("bidirectional", bidir))
        if r is not None
    ]

    def curves(metric):
        return {name: s.init(r, metric) for name, r in both}

    tau = {f"{run['spec']['architecture']} causal": s.init(run, "dobrushin") for run, _ in pairs}
    return panels(
        "Causal mask x LayerNorm at initialisation (Wu et al. 2024)",
        Panel("relative residual", curves("residual_fro")),
        Panel("mean token cosine", curves("token_cosine"), log=False),
        Panel("Dobrushin tau (causal)", tau, start=ATTENTION),
    )


def noci_scaling(summary: dict, architectures=("skip", "skip_scaled")):
    found = {
        arch: s.init_runs(summary, arch) for arch in architectures if s.init_runs(summary, arch)
    }
    depths = {arch: [r["spec"]["depth"] for r in runs] for arch, runs in found.items()}
    fig = plotting.figure(11, 4.2)
    for ax, metric, ylabel in zip(
        fig.subplots(1, 2),
        ("residual_fro", "token_cosine"),
        ("relative residual at layer L", "token cosine at layer L"),
    ):
        for arch, runs in found.items():
            ax.plot(
                depths[arch],
                [s.last(r, metric) for r in runs],
                marker="o",
                markersize=3,
                label=arch,
            )
        ax.set_xscale("log", base=2)
        _style(ax, "depth L", ylabel)
    fig.axes[0].axhline(NOCI_MIN_RESIDUAL, color="grey", linestyle="--")
    fig.suptitle("Noci et al. 2022: skips scaled by 1/sqrt(L) against the unscaled control")
    return fig


def noci_gradients(summary: dict):
    """Noci et al.'s remedy: g(L) against depth, and the per-layer ratio of the deepest runs (mean over seeds)."""
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    for i, (placement, pair) in enumerate(s.noci_pairs(summary).items()):
        for found, style in zip(pair, ("--", "-")):
            label = f"{found[0]['spec']['architecture']} ({placement})"
            ax1.plot(
                [r["spec"]["depth"] for r in found],
                [np.mean(s.gradient_ratio(r)) for r in found],
                style,
                color=f"C{i}",
                marker="o",
                markersize=3,
                label=label,
            )
            ratio = np.mean(s.qk_value_ratio(found[-1]), axis=0)
            ax2.plot(
                np.arange(1, ratio.size + 1),
                ratio,
                style,
                color=f"C{i}",
                label=f"{label} L={ratio.size}",
            )
    ax1.set_xscale("log", base=2)
    _style(ax1, "depth L", "g(L): geometric mean over layers", log=True)
    _style(ax2, "layer", "||grad W_QK|| / ||grad W_V||", log=True)
    fig.suptitle(
        "Noci et al. 2022: query/key against value gradients at initialisation (dashed: unscaled)"
    )
    return fig


def layernorm_dynamics(summary: dict):
    """Wu et al.'s constructions: consensus distance per layer with and without LayerNorm (every seed)."""
    names = [n for n in s.config_of(summary).layernorm.constructions if s.layernorm_run(summary, n)]
    fig = plotting.figure(11, 4.2)
    for ax, name in zip(fig.subplots(1, len(names), squeeze=False)[0], names):
        run = s.layernorm_run(summary, name)
        for which, color, label in (
            ("consensus_ln", "C0", "with LayerNorm"),
            ("consensus_plain", "C1", "without"),
        ):
            r = s.init(run, which)
            for seed, row in enumerate(r):
                ax.plot(
                    np.arange(row.size),
                    row,
                    color=color,
                    alpha=0.5,
                    label=label if seed == 0 else None,
                )
        ax.axhline(s.FLOOR, color="grey", linestyle=":", label=f"float64 rounding {s.FLOOR:g}")
        ax.set_title(name)
        _style(ax, "layer", "||X - 1 x_bar^T||_F / ||X||_F", log=True)
        ax.set_ylim(bottom=s.FLOOR / 100)
    fig.suptitle("Wu et al. 2024: self-attention with LayerNorm on constructed weights (causal)")
    return fig


def dong_fit(run: dict):
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    r, fit = s.dong_residuals(run), s.dong_fit(run)
    layers = np.arange(r.shape[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(np.log(1 / r))
    for row in y[:: max(1, len(y) // 16)]:
        ax1.plot(layers, row, color="C0", alpha=0.25, linewidth=0.8)
    x = np.asarray(fit.layers, dtype=np.float64)
    if x.size:
        ax1.plot(
            x,
            fit.intercept + fit.slope * x,
            color="C1",
            label=f"fit: growth {fit.rate:.3g} per layer",
        )
        ax1.plot(
            x,
            fit.intercept + fit.slope * x[0] + math.log(3) * (x - x[0]),
            "k--",
            label="Dong: growth 3",
        )
    ax1.axhline(
        math.log(math.log(1 / s.FLOOR)),
        color="grey",
        linestyle=":",
        label=f"float64 floor {s.FLOOR:g}",
    )
    _style(ax1, "layer", "log log(1 / r_l)")
    bound = np.median(s.init(run, "dong/bound").reshape(-1, r.shape[1] - 1), axis=0)
    measured = np.median(s.init(run, "dong/residual_abs").reshape(-1, r.shape[1]), axis=0)
    ax2.plot(layers, measured, marker="o", markersize=3, label="measured ||res(X_l)||_1,inf")
    ax2.plot(
        layers[1:],
        bound,
        marker="s",
        markersize=3,
        label="bound c_l ||res(X_(l-1))||^3 (gamma = 1)",
    )
    ax2.axhline(1.0, color="grey", linestyle=":")
    _style(ax2, "layer", log=True)
    fig.suptitle(
        f"Dong et al. 2021 in float64: attention only, L={run['spec']['depth']} (median over examples)"
    )
    return fig


def training(train: list[dict]):
    fig = plotting.figure(11, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    for i, run in enumerate(train):
        label = f"{run['spec']['architecture']} L={run['spec']['depth']}"
        logged = s.train_steps(run)
        accs = np.asarray([acc for _, acc in logged])
        for seed in range(accs.shape[1] if accs.size else 0):
            ax1.plot(
                [step for step, _ in logged],
                accs[:, seed],
                color=f"C{i}",
                alpha=0.8,
                label=label if seed == 0 else None,
            )
        ent = [
            (p["step"], s.mean(p["metrics"]["attention_entropy_normalized"]))
            for p in run["phases"]
            if "attention_entropy_normalized" in p["metrics"]
        ]
        if ent:
            e = np.asarray([v for _, v in ent])
            for layer in range(e.shape[1]):
                ax2.plot(
                    [step for step, _ in ent],
                    e[:, layer],
                    color=f"C{i}",
                    alpha=0.4 + 0.6 * layer / e.shape[1],
                    label=label if layer == e.shape[1] - 1 else None,
                )
    _style(ax1, "step", "training accuracy (per seed)")
    _style(ax2, "step", "attention entropy / log S per layer (darker: deeper)")
    fig.suptitle("Training: recall plateau and entropy per layer")
    return fig


def path_length(run: dict):
    p = s.array(s.phase(run, "final")["path_residual"])  # [S, L, N]
    data = [p[:, k].ravel() for k in range(p.shape[1])]
    fig = plotting.figure(6, 4)
    ax = fig.add_subplot()
    ax.boxplot(data)
    ax.set_xticks(range(1, len(data) + 1), [str(k + 1) for k in range(len(data))])
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("path length k (single-head attention matrices)")
    ax.set_ylabel("||P - best rank 1||_F / ||P||_F")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"Path length, trained {run['spec']['architecture']} L={run['spec']['depth']}")
    return fig


def figures(summary: dict) -> dict:
    """Every figure the summary has the runs for, by plot name."""
    out = {}
    if s.runs(summary, "init", kind="softmax"):
        out["init_residual"] = init_residual(summary)
    dong = s.dong_run(summary)
    if dong is not None:
        out["dong_fit"] = dong_fit(dong)
    if s.scale_runs(summary):
        out["init_scale"] = init_scale(summary)
    if s.mask_pairs(summary):
        out["causal_layernorm"] = causal_layernorm(summary)
    if any(s.init_runs(summary, arch) for arch in ("skip", "skip_scaled")):
        out["noci_scaling"] = noci_scaling(summary)
    if s.noci_pairs(summary):
        out["noci_gradients"] = noci_gradients(summary)
    if "layernorm" in s.config_of(summary) and any(s.runs(summary, "layernorm")):
        out["layernorm"] = layernorm_dynamics(summary)
    train = s.runs(summary, "train")
    if train:
        out["training"] = training(train)
        with_paths = [r for r in train if "path_residual" in s.phase(r, "final")]
        if with_paths:
            out["path_length"] = path_length(with_paths[-1])
    return out
