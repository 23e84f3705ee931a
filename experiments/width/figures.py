"""The width study's figures: `figures(summary) -> {name: Figure}`, written as `plots/<name>.png`.

Every axis is against the context length n (log scale); each point is the geometric mean over seeds with
its 95% interval as an error bar. The random Markov model is blue (C0), key-query attention orange (C1),
with Xavier's initialisation purple (C4).
"""

from __future__ import annotations

import numpy as np

from attnjax import plotting
from experiments.lab import stats

COLORS = {"markov": "C0", "key_query": "C1", "key_query_xavier": "C4"}
LABELS = {
    "markov": "random Markov",
    "key_query": "key-query",
    "key_query_xavier": "key-query, Xavier",
}


def _plot(ax, n, intervals, style: str, color: str, label: str) -> None:
    """Geometric means over seeds with their 95% intervals as error bars."""
    mean = np.array([stats.number(x["mean"]) for x in intervals])
    low = np.array([stats.number(x["low"]) for x in intervals])
    high = np.array([stats.number(x["high"]) for x in intervals])
    ax.errorbar(n, mean, yerr=[mean - low, high - mean], fmt=style, color=color, label=label)


def spectrum(summary: dict):
    """sigma_2 / sigma_1 and sigma_2 sqrt(n) against n, every model."""
    n = np.array(summary["lengths"], float)
    fig = plotting.figure(10, 4)
    gap, scaled = fig.subplots(1, 2)
    for model in summary["models"]:
        m, color, label = summary["statistics"][model], COLORS[model], LABELS[model]
        _plot(gap, n, m["per_length"]["gap_ratio"], "o-", color, label)
        _plot(scaled, n, m["per_length"]["scaled_sigma_2"], "o-", color, label)
    gap.loglog(n, n[0] ** 0.5 * n**-0.5 * 0.5, "k:", label="slope −1/2 (guide)")
    gap.set(xlabel="context length n", ylabel="σ₂ / σ₁", title="The gap opens: σ₂ / σ₁")
    scaled.set_xscale("log")
    scaled.set_yscale("log")
    scaled.set(xlabel="context length n", ylabel="σ₂ √n", title="The bulk edge, scaled: σ₂ √n")
    for ax in (gap, scaled):
        ax.legend()
    return fig


def stable_rank(summary: dict):
    """sr(A Z), sr((A - (1/n) 1 1^T) Z) and sr(Z) against n, one panel per model."""
    n = np.array(summary["lengths"], float)
    models = summary["models"]
    fig = plotting.figure(5 * len(models), 4)
    axes = np.atleast_1d(fig.subplots(1, len(models)))
    for ax, model in zip(axes, models):
        per = summary["statistics"][model]["per_length"]
        _plot(ax, n, per["stable_rank_values"], "s--", "0.5", "Z (identity attention)")
        _plot(ax, n, per["stable_rank_fixed"], "^-", "C2", "(A − 11ᵀ/n) Z (the fix)")
        _plot(ax, n, per["stable_rank_output"], "o-", COLORS[model], "A Z")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set(
            xlabel="context length n",
            ylabel="stable rank ‖·‖_F² / ‖·‖₂²",
            title=f"Layer output, {LABELS[model]}",
        )
        ax.legend()
    return fig


def figures(summary: dict) -> dict:
    return {"spectrum": spectrum(summary), "stable_rank": stable_rank(summary)}
