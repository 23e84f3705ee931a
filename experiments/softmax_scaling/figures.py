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
    """E||J||_2 of both scalings against d_k; right: the unscaled one at the rate widths, per seed, with d_k^(-1/2)."""
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
    rate.set(xlabel="d_k", ylabel="E ||J||₂", title="Unscaled, logits = |q| u (rate run)")
    rate.legend(fontsize=8)
    return fig


def _floored(spread: list[dict], key: str) -> np.ndarray:
    """`[d_k]`: `key` of each spread over seeds, an underflowed median drawn at the axis floor."""
    return np.maximum([x[key] for x in spread], np.finfo(float).tiny)


def gradient(summary: dict):
    """Median ||dL/dq|| per input family against d_k, both scalings, min-max band over seeds."""
    d = np.array(summary["dims"], float)
    families = list(summary["gradient_spread"])
    fig = plotting.figure(4 * len(families), 4)
    for ax, family in zip(np.atleast_1d(fig.subplots(1, len(families))), families):
        for scaling, color in (("unscaled", UNSCALED), ("scaled", SCALED)):
            spread = summary["gradient_spread"][family][scaling]["grad_query"]  # [d_k]
            low, high = _floored(spread, "low"), _floored(spread, "high")
            ax.fill_between(d, low, high, color=color, alpha=0.25)
            ax.loglog(d, _floored(spread, "median"), "o-", color=color, label=f"{scaling}")
        ax.set(xlabel="d_k", ylabel="median ||∂L/∂q||", title=family)
        ax.set_ylim(bottom=max(ax.get_ylim()[0], 1e-8))
        ax.legend(fontsize=8)
    return fig


def figures(summary: dict) -> dict:
    return {
        "variance": variance(summary),
        "saturation": saturation(summary),
        "jacobian": jacobian(summary),
        "gradient": gradient(summary),
    }
