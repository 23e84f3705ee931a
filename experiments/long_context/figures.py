"""The long-context study's figures (`attnjax.plotting`, its one style), from the summary."""

from __future__ import annotations

import matplotlib
import numpy as np

from attnjax import plotting


def _sink_figure(st):
    fig = plotting.figure(6.0, 4.0)
    ax = fig.add_subplot()
    per_layer = st["per_layer"]["sink_mass"]  # [T][L] intervals
    colours = matplotlib.colormaps["viridis"](np.linspace(0, 1, st["num_layers"]))
    for layer in range(st["num_layers"]):
        ax.plot(
            st["lengths"],
            [per_layer[t][layer]["mean"] for t in range(len(st["lengths"]))],
            color=colours[layer],
            linewidth=1,
            marker=".",
            label=f"layer {layer}" if layer % 5 == 0 else None,
        )
    mean = st["model_mean"]["sink_mass"]
    ax.errorbar(
        st["lengths"],
        [m["mean"] for m in mean],
        yerr=[[m["mean"] - m["low"] for m in mean], [m["high"] - m["mean"] for m in mean]],
        color="black",
        linewidth=2,
        label="model mean (95% interval)",
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("input length T")
    ax.set_ylabel("mean attention mass on token 0")
    ax.legend(fontsize=7)
    ax.set_title("Sink mass vs context length, per layer (mean over heads and segments)")
    return fig


def _stream_figure(sm):
    fig = plotting.figure(7.0, 4.0)
    ax = fig.add_subplot()
    x = np.asarray(sm["bin_starts"])
    for v in sm["variants"]:
        ax.plot(x, [b["mean"] for b in sm["ppl_bins"][v]], marker=".", linewidth=1, label=v)
    for w, win in sm["windows"].items():
        ppl = win["sampled_ppl"][f"recompute_{w}"]
        ax.scatter(
            sm["positions"],
            [ppl["mean"]] * len(sm["positions"]),
            marker="x",
            s=12,
            label=f"recompute_{w} (sampled positions, mean)",
        )
    ax.set_yscale("log")
    ax.set_xlabel("query position p (bin start)")
    ax.set_ylabel("perplexity")
    ax.legend(fontsize=7)
    ax.set_title("Perplexity vs position per attention variant (mean over segments)")
    return fig


def _ablation_figure(ab):
    fig = plotting.figure(7.0, 3.6)
    ax = fig.add_subplot()
    ratios = ab["layer_ratio"] + [ab["all_ratio"]]
    labels = [str(i) for i in ab["layers"]] + ["all"]
    mean = np.asarray([r["mean"] for r in ratios])
    err = np.nan_to_num(
        np.asarray(
            [[r["mean"] - r["low"] for r in ratios], [r["high"] - r["mean"] for r in ratios]]
        )
    )
    ax.bar(np.arange(len(ratios)), mean, yerr=err, color=["C0"] * (len(ratios) - 1) + ["C3"])
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(np.arange(len(ratios)), labels, fontsize=6)
    ax.set_xlabel("layer whose attention to token 0 is removed")
    ax.set_ylabel("ppl / unedited ppl")
    ax.set_yscale("log")
    ax.set_title("Removing the sink: perplexity ratio per layer (95% interval over segments)")
    return fig


def figures(summary: dict) -> dict:
    """`{name: Figure}`: sink mass vs T per layer, perplexity vs position per variant, the ablation bars."""
    return {
        "sink_mass": _sink_figure(summary["statistics"]),
        "stream_ppl": _stream_figure(summary["stream"]),
        "ablation": _ablation_figure(summary["ablation"]),
    }
