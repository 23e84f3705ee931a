"""The spectra study's figures: `figures(summary) -> {name: Figure}`, written as `plots/<name>.png`.

Lines are per layer (one colour each, from the colour map `viridis`, first layer dark): the median over
heads and segments against the context length T (log scales), with the range over heads and segments as
a band.
"""

from __future__ import annotations

import numpy as np

from attnjax import plotting
from experiments.lab import stats


def _colors(layers):
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return [cmap(i / max(len(layers) - 1, 1)) for i in range(len(layers))]


def _per_layer(ax, summary: dict, name: str) -> None:
    n = np.array(summary["lengths"], float)
    spread = summary["statistics"]["per_length"][name]
    median, low, high = (
        np.asarray(stats.numbers(spread[k]), float) for k in ("median", "min", "max")
    )
    for i, (layer, color) in enumerate(zip(summary["layers"], _colors(summary["layers"]))):
        ax.plot(n, median[:, i], "o-", color=color, label=f"layer {layer}")
        ax.fill_between(n, low[:, i], high[:, i], color=color, alpha=0.12)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")


def spectrum(summary: dict):
    """sigma_1 and sigma_2 / sigma_1 against T, per layer."""
    n = np.array(summary["lengths"], float)
    fig = plotting.figure(11, 4.5)
    top, gap = fig.subplots(1, 2)
    _per_layer(top, summary, "sigma_1")
    top.plot(n, np.sqrt(n / n[0]), "k:", label="∝ √T (guide)")
    top.set(xlabel="context length T", ylabel="σ₁", title="Largest singular value σ₁")
    _per_layer(gap, summary, "gap_ratio")
    gap.plot(n, 0.5 * np.sqrt(n[0] / n), "k:", label="∝ 1/√T (guide)")
    gap.set(xlabel="context length T", ylabel="σ₂ / σ₁", title="The gap: σ₂ / σ₁")
    for ax in (top, gap):
        ax.legend(fontsize=8)
    return fig


def sinks(summary: dict):
    """The mass on token 0 per row, and sigma_1 against its lower bound m_j / sqrt(c_j) (j the most-attended
    key, c_j the rows that see it) at the largest length, one point per head and segment."""
    fig = plotting.figure(11, 4.5)
    mass, bound = fig.subplots(1, 2)
    _per_layer(mass, summary, "sink_mass")
    mass.set(xlabel="context length T", ylabel="mean_i a_i0", title="Mass on token 0 per row")
    mass.legend(fontsize=8)
    n = summary["lengths"][-1]
    sigma = np.asarray(stats.numbers(summary["values"]["sigma_1"][-1]), float)  # [s, l, h]
    lower = np.asarray(stats.numbers(summary["statistics"]["column_bound_largest"]), float)
    for i, (layer, color) in enumerate(zip(summary["layers"], _colors(summary["layers"]))):
        bound.scatter(
            lower[:, i].ravel(), sigma[:, i].ravel(), color=color, s=14, label=f"layer {layer}"
        )
    ends = [min(lower.min(), sigma.min()), max(lower.max(), sigma.max())]
    bound.plot(ends, ends, "k:", label="σ₁ = m_j / √c_j")
    bound.set_xscale("log")
    bound.set_yscale("log")
    bound.set(
        xlabel="m_j / √c_j, j the most-attended key (a lower bound of σ₁)",
        ylabel="σ₁",
        title=f"σ₁ against the most-attended column, T = {n}",
    )
    bound.legend(fontsize=8)
    return fig


def figures(summary: dict) -> dict:
    return {"spectrum": spectrum(summary), "sinks": sinks(summary)}
