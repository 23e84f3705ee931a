"""The softmax-scaling study's figures: `figures(summary) -> {name: Figure}`, written as `plots/<name>.png`.

Every axis is against d_k (log scale); the unscaled case is red (C3), the
scaled one blue (C0), its d_k -> infinity limit dotted.
"""
from __future__ import annotations

import numpy as np

from attnjax import plotting
from experiments.softmax_scaling.summary import dims, series

UNSCALED, SCALED = "C3", "C0"


def variance(summary: dict):
    """Var(q.k) and Var(q.k / sqrt(d_k)) against their predictions, and their relative errors."""
    rows = summary["variance"]
    d = np.array([r["d_k"] for r in rows], float)
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
    err.set(xlabel="d_k", ylabel="measured / predicted − 1", title="Relative error (dashed: tolerance)")
    err.legend()
    return fig


def saturation(summary: dict):
    """Mean max weight and mean entropy of both scalings, with the scaled limit and the uniform softmax."""
    d = dims(summary)
    fig = plotting.figure(10, 4)
    titles = {"max_weight": "Mean max weight", "entropy": "Mean entropy (nats)"}
    for ax, (stat, title) in zip(fig.subplots(1, 2), titles.items()):
        ax.semilogx(d, series(summary, "unscaled", stat), "o-", color=UNSCALED, label="unscaled q·k")
        ax.semilogx(d, series(summary, "scaled", stat), "s-", color=SCALED, label="scaled q·k / √d_k")
        ax.axhline(summary["limit"][stat], color=SCALED, ls=":", label="scaled, d_k → ∞ limit")
        bound = 1.0 / summary["num_keys"] if stat == "max_weight" else summary["log_num_keys"]
        ax.axhline(bound, color="k", ls="--", label="uniform (1/T)" if stat == "max_weight" else "log T")
        ax.set(xlabel="d_k", title=f"{title}, T = {summary['num_keys']} keys")
        ax.legend(fontsize=8)
    return fig


def jacobian(summary: dict):
    """E||J||_2 of both scalings, with the d_k^(-1/2) law over the fit range."""
    d = dims(summary)
    fig = plotting.figure(6, 4.5)
    ax = fig.subplots()
    unscaled = series(summary, "unscaled", "jacobian_spectral")
    ax.loglog(d, unscaled, "o-", color=UNSCALED, label="unscaled")
    ax.loglog(d, series(summary, "scaled", "jacobian_spectral"), "s-", color=SCALED, label="scaled by 1/√d_k")
    ax.axhline(summary["limit"]["jacobian_spectral"], color=SCALED, ls=":", label="scaled, d_k → ∞ limit")
    fit = d >= summary["checks"]["unscaled_jacobian_vanishes"]["fit_min_dim"]
    ax.loglog(d[fit], unscaled[-1] * np.sqrt(d[-1] / d[fit]), "k--", lw=1, label="∝ d_k^(−1/2) (fit range)")
    ax.set(xlabel="d_k", ylabel="E ||J||₂", title="Spectral norm of the softmax Jacobian diag(p) − ppᵀ")
    ax.legend()
    return fig


def figures(summary: dict) -> dict:
    return {"variance": variance(summary), "saturation": saturation(summary), "jacobian": jacobian(summary)}
