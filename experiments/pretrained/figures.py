"""The pretrained study's figures (`attnjax.plotting`, its one style), from the summary (its per-layer
means over heads: `head_means`)."""

from __future__ import annotations

import numpy as np

from attnjax import masks, plotting
from experiments.pretrained.constants import VARIANT_LABELS
from experiments.pretrained.context import model_label, sink_label


def _array(values) -> np.ndarray:
    """A summary's list (with the strings 'nan' and 'inf' of summary.json) as floats to draw."""
    return np.asarray(values, dtype=np.float64)


def _curve(summary, name: str, metric: str) -> np.ndarray:
    """Variant `name`'s `residual` as the geometric mean over sentences (it spans decades), other metrics
    as they are."""
    values = (
        summary["geometric"][name] if metric == "residual" else summary["variants"][name][metric]
    )
    return _array(values)


def _surgery_figures(summary) -> dict:
    """The relative and absolute residual of the surgery variants; the attention-only networks with their
    sliding-window masks on a figure of their own (`local_masks`)."""
    names = [n for n in summary["variant_names"] if "_band" not in n]
    out = {}
    for metric, label in (
        ("residual", "||X - 1 x_bar^T||_F / ||X||_F (geometric mean)"),
        ("residual_abs", "||X - 1 x_bar^T||_F"),
    ):
        fig = plotting.metric_vs_depth(
            {VARIANT_LABELS[n]: _curve(summary, n, metric) for n in names},
            ylabel=label,
            start=0,
            title=f"{model_label(summary)}: surgery",
        )
        out[f"surgery_{metric}"] = fig
    masked = [
        n for n in summary["variant_names"] if n.split("_band")[0] in ("attention_only", "no_norm")
    ]
    if any("_band" in n for n in masked):
        out["local_masks"] = plotting.metric_vs_depth(
            {VARIANT_LABELS[n]: _curve(summary, n, "residual") for n in masked},
            ylabel="||X - 1 x_bar^T||_F / ||X||_F (geometric mean)",
            start=0,
            title=f"{model_label(summary)}: attention only, full and sliding-window masks",
        )
    return out


def _attention_figure(summary):
    means = summary["head_means"]["full"]
    lines = {
        "entropy / log(keys)": _array(means["entropy"]),
        "abs(lambda_2)": _array(means["slem"]),
        "tau": _array(means["tau"]),
        "sink mass": _array(means["attention_sink"]["sinks"]),
        "Perron sink mass": _array(means["perron_sink"]["sinks"]),
    }
    fig = plotting.metric_vs_depth(
        lines,
        ylabel="mean over heads and sentences",
        log=False,
        title="Attention of the full model per layer",
    )
    ax = fig.axes[0]
    uniform = float(summary["variants"]["full"]["uniform_sink"]["sinks"])
    ax.axhline(uniform, color="grey", linestyle=":", label="uniform sink mass")
    ax.legend(fontsize=8)
    return fig


def _sink_heatmap(summary):
    mass = _array(summary["variants"]["full"]["attention_sink"]["sinks"])  # [L, H]
    L, H = mass.shape
    fig = plotting.figure(1.2 + 0.45 * H, 1.0 + 0.22 * L)
    ax = fig.add_subplot()
    image = ax.imshow(mass, vmin=0, vmax=1, cmap="viridis", aspect="auto", interpolation="nearest")
    ax.set_xticks(range(H))
    ax.set_yticks(range(L))
    ax.set_yticklabels([str(layer) for layer in range(L)], fontsize=7)
    ax.set_xlabel("head")
    ax.set_ylabel("layer (from 0)")
    ax.set_title(f"attention on {sink_label(summary)}", fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def _examples_figure(summary):
    examples = summary["examples"]
    heads = summary["model"]["num_heads"]
    n = len(examples[0]["tokens"])
    maps = np.zeros((heads, n, n))
    for e in examples:
        maps[e["head"]] = _array(e["values"])
    layer = examples[0]["layer"]  # from 0, as the API counts
    title = f"layer {layer}: " + "; ".join(f"head {e['head']} ({e['reason']})" for e in examples)
    tokens = [
        t.replace("\u0120", "_") for t in examples[0]["tokens"]
    ]  # the byte-level BPE space marker
    return plotting.attention_heatmaps(
        maps,
        tokens=tokens,
        heads=[e["head"] for e in examples],
        ncols=len(examples),
        title=title,
        annotate=False,
        # A causal map's future keys are masked, not weight 0: drawn grey.
        mask=masks.causal_mask(n, n) if summary["model"]["causal"] else None,
    )


def _paths_figure(paths):
    fig = plotting.figure(6.0, 4.0)
    ax = fig.add_subplot()
    data = [np.maximum(_array(r), 1e-12) for r in paths["residual"]]
    ax.boxplot(data, positions=range(len(data)), widths=0.6, showfliers=True)
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels([str(k) for k in paths["lengths"]])
    ax.axhline(paths["input_residual"], color="grey", linestyle=":", label="input embeddings")
    ax.set_yscale("log")
    ax.set_xlabel("path length k (layers)")
    ax.set_ylabel("relative residual of the path output")
    ax.set_title("Single-head paths (floored at 1e-12)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _products_figure(summary):
    v, causal = summary["variants"], summary["model"]["causal"]
    metric = "path_first_max" if causal else "path_tau"
    label = "max_i TV(row i of P_l, e_1)" if causal else "tau(P_l)"
    return plotting.metric_vs_depth(
        {VARIANT_LABELS[n]: _array(v[n][metric]) for n in summary["variant_names"]},
        ylabel=label,
        title="P_l = A_l ... A_1 (head-averaged attention)",
    )


def _massive_figure(summary):
    per_layer = summary["massive"]["per_layer"]
    return plotting.metric_vs_depth(
        {
            "largest |a| / median |a|": _array(per_layer["ratio"]),
            "largest |a|": _array(per_layer["value"]),
        },
        ylabel="mean over sentences",
        start=0,
        title=f"{model_label(summary)}: massive activations (Sun et al. 2024)",
    )


def _sink_class_figure(summary):
    mass = summary["head_means"]["full"]["attention_sink"]
    lines = {c: _array(mass[c]) for c in summary["sink_categories"][1:]}
    return plotting.metric_vs_depth(
        lines,
        ylabel="attention (mean over heads and sentences)",
        log=False,
        title=f"{model_label(summary)}: attention by sink class",
    )


def figures(summary: dict) -> dict:
    out = _surgery_figures(summary)
    out["products"] = _products_figure(summary)
    if "full" in summary["variants"]:
        out["attention_depth"] = _attention_figure(summary)
        out["sink_mass_heads"] = _sink_heatmap(summary)
        out["example_heads"] = _examples_figure(summary)
        out["massive_activations"] = _massive_figure(summary)
        if len(summary["sink_categories"]) > 1:
            out["sink_classes"] = _sink_class_figure(summary)
    if summary["paths"]:
        out["path_length"] = _paths_figure(summary["paths"])
    return out
