"""The softmax-scaling study's figures: `figures(summary) -> {name: Figure}`, written as `plots/<name>.png`.

Every axis is against d_k (log scale); the unscaled case is red (C3), the
scaled one blue (C0), its d_k -> infinity limit dotted.
"""

from __future__ import annotations

import numpy as np

from attnjax import plotting

UNSCALED, SCALED = "C3", "C0"


def series(summary: dict, scaling: str, stat: str) -> list[float]:
    """`[d_k]`: one saturation statistic of one scaling, read from the summary's saturation rows."""
    return [row[scaling][stat] for row in summary["saturation"]]


def variance(summary: dict):
    """Var(q.k) and Var(q.k / sqrt(d_k)) against their predictions, and their relative errors."""
    rows = summary["variance"]
    d = np.array(summary["dims"], float)
    fig = plotting.figure(10, 4)
    ax, err = fig.subplots(1, 2)
    ax.loglog(d, d, "k--", label="predicted d_k")
    ax.loglog(d, np.ones_like(d), "k:", label="predicted 1")
    ax.loglog(d, [r["unscaled"] for r in rows], "o", color=UNSCALED, label="Var(q·k)")
    ax.loglog(d, [r["scaled"] for r in rows], "s", color=SCALED, label="Var(q·k / √d_k)")
    ax.set(xlabel="d_k", ylabel="variance", title="Variance of the logits")
    ax.legend()
    se = np.array([r["relative_standard_error"] for r in rows])
    err.fill_between(d, -2 * se, 2 * se, color="0.85", label="±2 standard errors")
    err.semilogx(d, [r["rel_error_unscaled"] for r in rows], "o", color=UNSCALED, label="unscaled")
    err.semilogx(d, [r["rel_error_scaled"] for r in rows], "x", color=SCALED, label="scaled")
    tol = summary["checks"]["variance_unscaled"]["tolerance"]
    for bound in (-tol, tol):
        err.axhline(bound, color="C1", ls="--")
    err.set(
        xlabel="d_k", ylabel="measured / predicted − 1", title="Relative error (dashed: tolerance)"
    )
    err.legend()
    return fig


def saturation(summary: dict):
    """Mean max weight and mean entropy of both scalings, with the scaled limit and the uniform softmax."""
    d = np.array(summary["dims"], float)
    fig = plotting.figure(10, 4)
    titles = {"max_weight": "Mean max weight", "entropy": "Mean entropy (nats)"}
    for ax, (stat, title) in zip(fig.subplots(1, 2), titles.items()):
        ax.semilogx(
            d, series(summary, "unscaled", stat), "o-", color=UNSCALED, label="unscaled q·k"
        )
        ax.semilogx(
            d, series(summary, "scaled", stat), "s-", color=SCALED, label="scaled q·k / √d_k"
        )
        ax.axhline(summary["limit"][stat], color=SCALED, ls=":", label="scaled, d_k → ∞ limit")
        bound = summary["uniform_max_weight"] if stat == "max_weight" else summary["log_num_keys"]
        ax.axhline(
            bound, color="k", ls="--", label="uniform (1/T)" if stat == "max_weight" else "log T"
        )
        ax.set(xlabel="d_k", title=f"{title}, T = {summary['num_keys']} keys")
        ax.legend(fontsize=8)
    return fig


def jacobian(summary: dict):
    """E||J||_2 of both scalings against d_k; right: the unscaled one at the rate widths, per seed,
    with d_k^(-1/2) and the derived first-order law."""
    d = np.array(summary["dims"], float)
    fig = plotting.figure(10, 4)
    ax, rate = fig.subplots(1, 2)
    ax.loglog(
        d, series(summary, "unscaled", "jacobian_spectral"), "o-", color=UNSCALED, label="unscaled"
    )
    ax.loglog(
        d,
        series(summary, "scaled", "jacobian_spectral"),
        "s-",
        color=SCALED,
        label="scaled by 1/√d_k",
    )
    ax.axhline(
        summary["limit"]["jacobian_spectral"], color=SCALED, ls=":", label="scaled, d_k → ∞ limit"
    )
    ax.set(xlabel="d_k", ylabel="E ||J||₂", title="Softmax Jacobian diag(p) − ppᵀ")
    ax.legend(fontsize=8)
    widths = np.array(summary["rate"]["dims"], float)
    values = np.array(summary["rate"]["values"])
    for seed, v in enumerate(values):
        rate.loglog(
            widths,
            v,
            "o-",
            color=UNSCALED,
            alpha=0.6,
            label="one line per seed" if seed == 0 else None,
        )
    rate.loglog(widths, summary["rate_reference"], "k--", lw=1, label="∝ d_k^(−1/2)")
    rate.loglog(
        widths, summary["rate_predicted"], "k-", lw=1, label="f(0) (1 − a/√d_k)/√d_k (derived)"
    )
    rate.set(xlabel="d_k", ylabel="E ||J||₂", title="Unscaled, logits = |q| u (rate run)")
    rate.legend(fontsize=8)
    return fig


def _floored(intervals: list[dict], key: str) -> np.ndarray:
    """`[d_k]`: `key` of each interval over seeds, an underflowed (or undefined) value drawn at the
    axis floor."""
    values = np.array([x[key] for x in intervals], dtype=float)
    return np.maximum(np.nan_to_num(values, nan=0.0), np.finfo(float).tiny)


def gradient(summary: dict):
    """||dL/dq|| per input family against d_k, both scalings: top, the median (solid) and the mean
    (dashed) with the median's 95% band over seeds; bottom, the share of queries above tau."""
    d = np.array(summary["dims"], float)
    families = list(summary["gradient_intervals"])
    fig = plotting.figure(4 * len(families), 7)
    axes = np.asarray(fig.subplots(2, len(families), squeeze=False))
    for col, family in enumerate(families):
        top, bottom = axes[0, col], axes[1, col]
        for scaling, color in (("unscaled", UNSCALED), ("scaled", SCALED)):
            stats = summary["gradient_intervals"][family][scaling]["grad_query"]
            median, mean, above = stats["median"], stats["mean"], stats["above"]
            top.fill_between(
                d, _floored(median, "low"), _floored(median, "high"), color=color, alpha=0.25
            )
            top.loglog(d, _floored(median, "mean"), "o-", color=color, label=f"{scaling}, median")
            top.loglog(d, _floored(mean, "mean"), "s--", color=color, label=f"{scaling}, mean")
            bottom.fill_between(
                d, [x["low"] for x in above], [x["high"] for x in above], color=color, alpha=0.25
            )
            bottom.semilogx(d, [x["mean"] for x in above], "o-", color=color, label=scaling)
        top.axhline(summary["tau"]["grad_query"], color="k", ls=":", lw=1, label="tau")
        top.set(xlabel="d_k", ylabel="||∂L/∂q||", title=family)
        top.set_ylim(bottom=max(top.get_ylim()[0], 1e-8))
        top.legend(fontsize=7)
        bottom.set(xlabel="d_k", ylabel="P(||∂L/∂q|| > tau)", ylim=(0, 1))
        bottom.legend(fontsize=7)
    return fig


def figures(summary: dict) -> dict:
    return {
        "variance": variance(summary),
        "saturation": saturation(summary),
        "jacobian": jacobian(summary),
        "gradient": gradient(summary),
    }
