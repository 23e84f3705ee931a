"""The power-iteration study's figures (`attnjax.plotting`, its one style), from the summary."""

from __future__ import annotations

import math

import numpy as np

from attnjax import plotting

# The products figure's lower limit: delta(P_l) is not resolved below float64 rounding.
ROUNDING = 1e-16


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
            ax.semilogy(
                k[: k1 + 1],
                d[k1] * m["slem"] ** (k[: k1 + 1] - k1),
                "--",
                color=line.get_color(),
                linewidth=0.8,
            )
        ax.axhline(run["floor"], color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(f"tau = {run['temperature']:g}")
        ax.set_xlabel("k")
        ax.grid(True, alpha=0.3)
    for ax in axes[::cols]:
        ax.set_ylabel("max_i TV(e_i A^k, pi)")
    for ax in axes[len(fixed) :]:
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
            for phase in run["phase_order"]:
                p = run["phases"][phase]
                label = p["derived"]["label"]
                layers = np.arange(1, len(p["mean"]["delta"]) + 1)
                delta = np.asarray(p["mean"]["delta"], dtype=np.float64)
                (line,) = ax.semilogy(
                    layers,
                    np.where(delta > 0, delta, np.nan),
                    marker="o",
                    markersize=3,
                    label=f"delta(P_l), {label}",
                )
                bound = np.asarray(p["mean"]["bound"], dtype=np.float64)
                ax.semilogy(
                    layers,
                    np.where(bound > 0, bound, np.nan),
                    "--",
                    color=line.get_color(),
                    label=f"prod tau, {label}",
                )
                lam = np.asarray(p["mean"]["slem_bound"], dtype=np.float64)
                ax.semilogy(
                    layers,
                    np.where(lam > 0, lam, np.nan),
                    ":",
                    color=line.get_color(),
                    label=f"prod |lambda_2|, {label}",
                )
        deepest = max(
            (run["phases"][p]["derived"]["rate"] for run in runs for p in run["phase_order"]),
            key=lambda r: -1 if r is None else len(r["reference_delta"]),
        )
        if deepest is not None:
            ref = np.asarray(deepest["reference_delta"], dtype=np.float64)
            ax.semilogy(
                np.arange(1, len(ref) + 1),
                ref,
                "k-.",
                linewidth=1,
                label="delta(U^l), uniform causal",
            )
        ax.set_ylim(ROUNDING, 10.0)  # delta <= 1
        ax.set_title(f"{arch} (head-averaged attention)")
        ax.set_xlabel("depth l (layers applied)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("delta(P_l) (solid), prod tau (dashed), prod |lambda_2| (dotted)")
    return fig


def _clusters_figure(summary):
    c = summary["config"]["clusters"]
    fig, axes = _figure(6.0, 3.8, 1, 1)
    for run in sorted(summary["clusters"], key=lambda r: r["beta"]):
        counts = np.asarray(run["clusters_curve"], dtype=np.float64)
        t = np.arange(len(counts)) * c["measure_every"] * c["dt"]
        axes[0].plot(t[1:], counts[1:], label=f"beta = {run['beta']:g}")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("time t")
    axes[0].set_ylabel("number of clusters (mean over seeds)")
    axes[0].grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"Tokens on S^{c['dim'] - 1}, {c['variant']} dynamics (Geshkovski et al. 2023), n = {c['num_tokens']}"
    )
    return fig


def figures(summary: dict) -> dict:
    out = {}
    if summary["fixed"]:
        out["fixed_matrix_rate"] = _fixed_figure(summary["fixed"])
    if summary["products"]:
        out["products_dobrushin"] = _products_figure(summary)
    if summary["clusters"]:
        out["clusters"] = _clusters_figure(summary)
    return out
