"""The long-context study's figures (`attnjax.plotting`, its one style), from the summary."""

from __future__ import annotations

import matplotlib
import numpy as np

from attnjax import plotting


def _errors(intervals) -> np.ndarray:
    """`[2, n]` distances from each mean to its interval's ends (0 where an end is not finite)."""
    mean = np.asarray([float(x["mean"]) for x in intervals])
    low = np.asarray([float(x["low"]) for x in intervals])
    high = np.asarray([float(x["high"]) for x in intervals])
    return np.nan_to_num(np.stack([mean - low, high - mean]))


def _sink_figure(st):
    fig = plotting.figure(6.0, 4.0)
    ax = fig.add_subplot()
    per_layer = st["per_layer"]["sink_mass"]  # [T][L] intervals
    colours = matplotlib.colormaps["viridis"](np.linspace(0, 1, st["num_layers"]))
    step = max(1, st["num_layers"] // 6)
    for layer in range(st["num_layers"]):
        ax.plot(
            st["lengths"],
            [per_layer[t][layer]["mean"] for t in range(len(st["lengths"]))],
            color=colours[layer],
            linewidth=1,
            marker=".",
            label=f"layer {layer}" if layer % step == 0 else None,
        )
    mean = st["model_mean"]["sink_mass"]
    ax.errorbar(
        st["lengths"],
        [m["mean"] for m in mean],
        yerr=_errors(mean),
        color="black",
        linewidth=2,
        label="model mean (95% interval)",
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("input length T")
    ax.set_ylabel("mean attention mass on token 0")
    ax.legend(fontsize=7)
    ax.set_title("Mass on token 0 vs input length, per layer (mean over heads and segments)")
    return fig


def _stream_figure(sm):
    caches = sm["caches"]
    fig = plotting.figure(4.0 * len(caches), 3.8)
    for i, (c, cache) in enumerate(caches.items()):
        ax = fig.add_subplot(1, len(caches), i + 1)
        names = list(cache["ppl"])
        ax.bar(
            np.arange(len(names)),
            [float(cache["ppl"][v]["mean"]) for v in names],
            yerr=_errors([cache["ppl"][v] for v in names]),
            color=["C7" if v == "full" else "C3" if v == "window" else "C0" for v in names],
        )
        ax.set_xticks(np.arange(len(names)), names, fontsize=7, rotation=30)
        ax.set_yscale("log")
        ax.set_ylabel("perplexity past the cache")
        ax.set_title(f"cache C = {c}", fontsize=9)
    fig.suptitle(
        "StreamingLLM: window (0 + C), n sinks + (C - n), full, re-computation (95% intervals)"
    )
    return fig


def _edits_figure(ed):
    fig = plotting.figure(10.0, 4.0)
    ax = fig.add_subplot(1, 2, 1)
    layers = np.arange(len(ed["key0_mass"]))
    ax.plot(layers, [float(x["mean"]) for x in ed["key0_mass"]], color="black", label="unedited")
    for name in ("remove_formation", "remove_all", "first_newline", "first_random"):
        if name not in ed["edits"]:
            continue
        masses = ed["edits"][name]["key0_mass"]
        ax.plot(layers, [float(x["mean"]) for x in masses], marker=".", linewidth=1, label=name)
    ax.set_xlabel("layer")
    ax.set_ylabel("mass on key 0 (mean over heads, rows)")
    ax.legend(fontsize=7)
    ax.set_title("Where the sink is, per edit", fontsize=9)
    ax = fig.add_subplot(1, 2, 2)
    names = [n for n, e in ed["edits"].items() if e["ppl_ratio"] is not None]
    ratios = [ed["edits"][n]["ppl_ratio"] for n in names]
    ax.bar(np.arange(len(names)), [float(r["mean"]) for r in ratios], yerr=_errors(ratios))
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(np.arange(len(names)), names, fontsize=7, rotation=30)
    ax.set_yscale("log")
    ax.set_ylabel("ppl / unedited ppl")
    ax.set_title("Effect on the loss (95% interval over segments)", fontsize=9)
    return fig


def figures(summary: dict) -> dict:
    """`{name: Figure}`: sink mass vs T per layer, perplexity per cache variant, the edits."""
    return {
        "sink_mass": _sink_figure(summary["statistics"]),
        "stream": _stream_figure(summary["stream"]),
        "edits": _edits_figure(summary["edits"]),
    }
