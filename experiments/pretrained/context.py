"""What the pretrained study's templates quote: numbers, named booleans and table rows, from the summary.

`report(summary)` is the context of `templates/report.md.j2`, `readme(results,
times)` that of `templates/readme.md.j2`. Numbers arrive formatted (`fmt`)
where the text prints them so; the wording, the headings and the tables'
layout are the templates'. Wording that depends on a result is chosen in the
template from a check's verdict (`verdicts[name]`) or a named boolean here.
"""

from __future__ import annotations

import numpy as np

from attnjax.analysis import PATTERN_NAMES
from experiments.lab.render import fmt
from experiments.pretrained import activations, checks
from experiments.pretrained.corpus import CONTENT_LABELS
from experiments.pretrained.summary import (
    ATTENTION_ONLY,
    VARIANT_LABELS,
    array,
    first_below,
    geometric_rate,
    geometric_residual,
    head_mean,
    mask,
    massive,
    model_label,
    path_medians,
    resolved_rates,
    sink,
    sink_label,
    uniform_sink,
    variant_names,
)

# The thresholds the text quotes.
THRESHOLDS = {
    name: getattr(checks, name)
    for name in (
        "COLLAPSE_FACTOR",
        "LONG_PATH_FACTOR",
        "BOTTOM_LAYERS",
        "FIRST_TOLERANCE",
        "MIN_LOG_RATIOS",
    )
}
# A variant whose relative residual falls below this fraction of r_0 is discussed in the text.
RELATIVE_FALL = 0.5
# A first-token norm this many times the median token's is a massive activation (Sun et al. 2024).
MASSIVE_RATIO = 10
# The residual sequences the text prints in full up to this many layers.
PHRASE_LAYERS = 6


def _fmt_all(values) -> list[str]:
    return [fmt(float(x)) for x in values]


def sequence(values) -> dict:
    """A sequence as the text prints it: its first `PHRASE_LAYERS` values, and the last when there are more."""
    v = array(values)
    return {
        "head": _fmt_all(v[:PHRASE_LAYERS]),
        "last": fmt(float(v[-1])) if len(v) > PHRASE_LAYERS else None,
        "length": len(v),
    }


# --------------------------------------------------------------------------
# Findings


def _collapse(summary) -> list:
    """Per attention-only variant: its residual, norms and the rate the papers predict (Dong: bidirectional,
    Wu: causal), with the names of its checks."""
    out = []
    for name in ATTENTION_ONLY:
        if name not in summary["variants"]:
            continue
        v, label = summary["variants"][name], checks.CHECK_LABELS[name]
        r, geometric = array(v["residual"]), geometric_residual(v)
        worst, _, ratios = checks.doubly_exponential_check(geometric)
        median, _, interval = checks.exponential_check(resolved_rates(v))
        lam2, tau = checks.map_rates(v)
        overflow = checks.overflow_layer(v)
        place = (
            None
            if median is None
            else ("below" if median < lam2 else "above" if median > tau else "between")
        )
        entropy = (
            head_mean(v["entropy"])[:overflow] if overflow else None
        )  # attention of layers 1..overflow
        out.append(
            {
                "overflow": overflow,
                "place": place,
                "before": fmt(float(r[overflow - 1])) if overflow else None,
                "entropy": fmt(float(entropy.min())) if overflow else None,
                "label": VARIANT_LABELS[name],
                "norms": v["norms"],
                "r": sequence(r),
                "last": fmt(float(r[-1])),
                "collapses": f"{label} collapses",
                "doubly": f"{label}: doubly exponential decay",
                "exponential": f"{label}: exponential collapse",
                "worst": fmt(worst),
                "ratios": len(ratios),
                "rate": fmt(geometric_rate(geometric)),
                "median": fmt(median),
                "interval": _fmt_all(interval),
                "sentences": len(resolved_rates(v)),
                "lam2": fmt(lam2),
                "tau": fmt(tau),
            }
        )
    return out


def _surgery(summary) -> dict:
    """The variants that keep skips or MLPs against attention only, and the full model with and without sinks."""
    v = summary["variants"]
    out = {"no_mlp": None, "no_skip": None, "full": None, "pure": None}
    if "attention_only" in v:
        pure = array(v["attention_only"]["residual"])
        out["pure"] = fmt(float(pure[-1]))
        if "no_mlp" in v:
            out["no_mlp"] = fmt(float(array(v["no_mlp"]["residual"])[-1]))
        if "no_skip" in v:
            _, _, layer = checks.slows_check(v["no_skip"]["residual"], pure)
            mlp = array(v["no_skip"]["residual"])
            if layer is not None:
                out["no_skip"] = {
                    "layer": layer,
                    "mlp": fmt(float(mlp[layer])),
                    "pure": fmt(float(pure[layer])),
                    "last": fmt(float(mlp[-1])),
                    "collapses": checks.collapse_check(mlp)[1],
                }
    if "full" in v:
        full = v["full"]

        def ends(m):
            return _fmt_all(array(full[m])[[0, -1]])

        content = array(full["residual_content"])
        out["full"] = {
            "r": ends("residual"),
            "content": ends("residual_content"),
            "cosine": ends("cosine"),
            "content_cosine": ends("cosine_content"),
            "low": fmt(float(content.min())),
            "low_layer": int(np.argmin(content)),
        }
    return out


def _absolute(summary) -> dict:
    """For each variant whose r falls: whether it is collapse or growth of the shared component."""
    falls = []
    for name, v in summary["variants"].items():
        r, res, shared = array(v["residual"]), array(v["residual_abs"]), array(v["shared_norm"])
        if not np.isfinite(res).all() or r[-1] >= RELATIVE_FALL * r[0]:
            continue
        falls.append(
            {
                "variant": VARIANT_LABELS[name],
                "factor": fmt(float(r[0] / max(r[-1], 1e-300))),
                "absolute_rises": bool(res[-1] >= res[0]),
                "absolute": _fmt_all(res[[0, -1]]),
                "shared": _fmt_all(shared[[0, -1]]),
            }
        )
    full = summary["variants"].get("full")
    first = None
    if full is not None:
        ratio = array(full["first_norm_ratio"])
        layer = int(np.argmax(ratio))
        first = {
            "ratio": fmt(float(ratio[layer])),
            "layer": layer,
            "massive": bool(ratio[layer] >= MASSIVE_RATIO),
        }
    return {"falls": falls, "first_norm": first}


def _paths(summary) -> dict | None:
    paths = summary["paths"]
    if not paths:
        return None
    return {
        "medians": list(zip(paths["lengths"], _fmt_all(path_medians(paths)))),
        "input": fmt(paths["input_residual"]),
    }


def _sinks(summary) -> dict | None:
    full = summary["variants"].get("full")
    if full is None:
        return None
    mass, perron = head_mean(sink(full)), head_mean(sink(full, "perron_sink"))
    top = int(np.argmax(mass))
    out = {
        "mean": fmt(float(mass.mean())),
        "uniform": fmt(uniform_sink(full)),
        "top": top + 1,
        "top_mass": fmt(float(mass[top])),
        "perron": fmt(float(perron.mean())),
    }
    if summary["model"]["causal"]:
        fraction, _ = checks.majority_check(mass[checks.BOTTOM_LAYERS :], checks.SINK_SHARE)
        out.update(fraction=fmt(fraction), bottom=_fmt_all(mass[: checks.BOTTOM_LAYERS]))
    else:
        middle = checks.middle_layers(len(mass))
        out["split"] = [
            (
                cat,
                fmt(float(head_mean(sink(full, "attention_sink", cat)).mean())),
                fmt(float(head_mean(sink(full, "attention_sink", cat))[middle].mean())),
            )
            for cat in summary["sink_categories"][1:]
        ]
        out["middle"] = [a + 1 for a in middle]
        out["largest"] = max(
            summary["sink_categories"][1:],
            key=lambda c: float(head_mean(sink(full, "attention_sink", c)).mean()),
        )
        sep = head_mean(sink(full, "attention_sink", "[SEP]"))
        out["sep_top"], out["sep_top_mass"] = int(np.argmax(sep)) + 1, fmt(float(sep.max()))
    return out


def _sink_class_rows(summary) -> dict | None:
    """BERT: per layer the attention on [CLS], [SEP], punctuation and all three, mean over heads."""
    full = summary["variants"].get("full")
    if full is None or summary["model"]["causal"]:
        return None
    cats = summary["sink_categories"]
    rows = [
        [str(a + 1)]
        + [fmt(float(head_mean(sink(full, "attention_sink", c))[a])) for c in cats[1:] + cats[:1]]
        for a in range(len(full["entropy"]))
    ]
    header = ["layer"] + [
        f"{c} (uniform {fmt(float(array(full['uniform_sink'][c])))})" for c in cats[1:]
    ]
    return {"rows": rows, "header": header + [f"all three (uniform {fmt(uniform_sink(full))})"]}


def _massive(summary) -> dict | None:
    """Sun et al. 2024's readings: the per-layer table and the numbers the text quotes."""
    full = summary["variants"].get("full")
    if full is None:
        return None
    m = massive(full)
    rows = []
    for layer in range(len(m["ratio"])):
        pairs = m["dims"][layer]
        total = sum(n for _, n in pairs) or 1
        dims = ", ".join(f"{d} ({n / total:.2f})" for d, n in pairs[:3])
        rows.append(
            ["0 (embeddings)" if layer == 0 else str(layer)]
            + _fmt_all(
                [
                    m["ratio"][layer],
                    m["value"][layer],
                    m["spread"][layer],
                    m["count"][layer],
                    m["first"][layer],
                    m["delimiter"][layer],
                    m["other"][layer],
                ]
            )
            + [dims]
        )
    _, _, layers = activations.massive_exist_check(m["ratio"], m["value"])
    top = int(np.argmax(m["ratio"][1:])) + 1
    _, _, dims = activations.massive_dims_check(m["dims"], layers)
    shares = {
        k: fmt(float(np.mean(m[k][layers]))) if layers else None for k in ("first", "delimiter")
    }
    return {
        "rows": rows,
        "layers": layers,
        "top": top,
        "top_ratio": fmt(float(m["ratio"][top])),
        "dims": dims,
        **shares,
        "spread": fmt(float(np.median(m["spread"][layers]))) if layers else None,
        "top_value": fmt(float(m["value"][top])),
        "bounded": summary["model"]["norm"] == "post",
    }


def _causal(summary) -> dict | None:
    v = summary["variants"]
    if not summary["model"]["causal"] or "full" not in v:
        return None
    full = v["full"]
    distance = array(full["path_first_max"])
    out = {
        "diagonal": fmt(float(head_mean(full["diagonal_mean"]).mean())),
        "slem": fmt(float(head_mean(full["slem"]).mean())),
        "distance": sequence(distance),
        "first": checks.layer_or_none(first_below(distance, checks.FIRST_TOLERANCE)),
        "full": fmt(float(array(full["residual"])[-1])),
        "content": fmt(float(array(full["residual_content"])[-1])),
        "slem_error": fmt(float(full["slem_diagonal_error"])),
    }
    return out


# --------------------------------------------------------------------------
# Tables


def _layer_rows(summary) -> dict:
    name = "full" if "full" in summary["variants"] else next(iter(summary["variants"]))
    v, causal = summary["variants"][name], summary["model"]["causal"]
    rows = []
    for layer in range(len(v["entropy"]) + 1):
        hidden = [
            fmt(float(array(v[m])[layer]))
            for m in (
                "residual",
                "residual_content",
                "residual_abs",
                "shared_norm",
                "cosine",
                "cosine_content",
                "effective_rank",
            )
        ]
        if layer == 0:
            rows.append(["0 (embeddings)"] + [""] * 7 + hidden + ([""] * 2 if causal else []))
            continue
        a = layer - 1
        lam2 = float(head_mean(v["slem"])[a])
        cells = [
            fmt(float(head_mean(v["entropy"])[a])),
            fmt(lam2),
            fmt(1 - lam2),
            fmt(float(head_mean(v["tau"])[a])),
        ]
        cells += [
            fmt(float(head_mean(sink(v))[a])),
            fmt(float(head_mean(sink(v, "perron_sink"))[a])),
            fmt(float(array(v["redundancy"])[a])),
        ]
        extra = (
            [
                fmt(float(head_mean(v["diagonal_mean"])[a])),
                fmt(float(array(v["path_first_max"])[a])),
            ]
            if causal
            else []
        )
        rows.append([str(layer)] + cells + hidden + extra)
    return {"variant": VARIANT_LABELS[name], "uniform": fmt(uniform_sink(v)), "rows": rows}


def _head_rows(summary) -> list | None:
    if "full" not in summary["variants"]:
        return None
    v = summary["variants"]["full"]
    rows = []
    for a, row in enumerate(np.asarray(v["pattern"], dtype=int)):
        counts = {PATTERN_NAMES[c]: int(np.sum(row == c)) for c in np.unique(row)}
        rows.append(
            [
                str(a + 1),
                ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])),
                str(int(np.argmax(sink(v)[a]))),
                fmt(float(np.max(sink(v)[a]))),
                str(int(np.argmin(array(v["entropy"])[a]))),
                fmt(float(np.min(array(v["entropy"])[a]))),
            ]
        )
    return rows


def _surgery_rows(summary) -> list:
    """Per layer, each variant's cell 'r / r without sinks / cosine without sinks / abs residual / entropy / tau'
    (the attention parts from layer 1)."""
    v, names = summary["variants"], variant_names(summary)
    rows = []
    for layer in range(len(v[names[0]]["residual"])):
        cells = []
        for n in names:
            parts = [
                array(v[n][m])[layer]
                for m in ("residual", "residual_content", "cosine_content", "residual_abs")
            ]
            if layer > 0:
                parts += [head_mean(v[n]["entropy"])[layer - 1], head_mean(v[n]["tau"])[layer - 1]]
            cells.append(" / ".join(_fmt_all(parts)))
        rows.append([str(layer)] + cells)
    return rows


def _path_rows(summary) -> list | None:
    if not summary["paths"]:
        return None
    rows = []
    for k, values in zip(summary["paths"]["lengths"], summary["paths"]["residual"]):
        q = _fmt_all(np.percentile(array(values), [10, 25, 50, 75, 90]))
        rows.append([str(k), str(len(values)), q[2], f"{q[1]} .. {q[3]}", f"{q[0]} .. {q[4]}"])
    return rows


# --------------------------------------------------------------------------
# Contexts


def only_predictions(summary) -> list:
    """The records of kind 'prediction' (the sanity checks are listed apart)."""
    return [p for p in summary["predictions"] if p["kind"] == "prediction"]


def content_label(summary) -> str:
    """The sink tokens the sink-excluded metrics leave out ('the first token', '[CLS] and [SEP]')."""
    return CONTENT_LABELS[summary["model"]["family"]]


def verdicts(summary) -> dict:
    """`{check name: verdict}` of the summary's predictions."""
    return {p["name"]: p["verdict"] for p in summary["predictions"]}


def report(summary: dict) -> dict:
    """The context of `report.md.j2`."""
    return {
        "summary": summary,
        "model": summary["model"],
        "corpus": summary["corpus"],
        "title": model_label(summary),
        "mask": mask(summary),
        "groups": list(zip(summary["corpus"]["counts"], summary["corpus"]["lengths"])),
        "sink_label": sink_label(summary),
        "predictions": only_predictions(summary),
        "verdicts": verdicts(summary),
        "sanity": [p for p in summary["predictions"] if p["kind"] == "sanity"],
        **THRESHOLDS,
        "collapse": _collapse(summary),
        "surgery_findings": _surgery(summary),
        "absolute": _absolute(summary),
        "paths": _paths(summary),
        "content_label": content_label(summary),
        "sink_classes": _sink_class_rows(summary),
        "massive": _massive(summary),
        "sinks": _sinks(summary),
        "causal": _causal(summary),
        "layers": _layer_rows(summary),
        "heads": _head_rows(summary),
        "surgery": {
            "variants": [VARIANT_LABELS[n] for n in variant_names(summary)],
            "norms": [
                (VARIANT_LABELS[n], summary["variants"][n]["norms"]) for n in variant_names(summary)
            ],
            "rows": _surgery_rows(summary),
        },
        "path_rows": _path_rows(summary),
        "plots": summary["plots"],
    }


def headline(summary: dict) -> dict:
    """The numbers the README quotes from one summary."""
    v, model = summary["variants"], summary["model"]
    full = v["full"]
    medians, lengths = path_medians(summary["paths"]), summary["paths"]["lengths"]

    def end(m):
        return fmt(float(array(full[m])[-1]))

    m = _massive(summary)
    return {
        "title": model_label(summary),
        "mask": mask(summary),
        "model": model,
        "predictions": only_predictions(summary),
        "sanity": [p for p in summary["predictions"] if p["kind"] == "sanity"],
        "verdicts": verdicts(summary),
        "sentences": sum(summary["corpus"]["counts"]),
        "collapse": _collapse(summary),
        "no_mlp": fmt(float(array(v["no_mlp"]["residual"])[-1])),
        "no_skip": fmt(float(array(v["no_skip"]["residual"])[-1])),
        "full": end("residual"),
        "content": end("residual_content"),
        "cosine": end("cosine"),
        "content_cosine": end("cosine_content"),
        "content_label": content_label(summary),
        "paths": _fmt_all(medians[[0, -1]]),
        "lengths": [lengths[0], lengths[-1]],
        "sink": fmt(float(head_mean(sink(full)).mean())),
        "sink_label": sink_label(summary),
        "uniform": fmt(uniform_sink(full)),
        "sinks": _sinks(summary),
        "first": checks.layer_or_none(first_below(full["path_first_max"], checks.FIRST_TOLERANCE)),
        "massive": m,
    }


def readme(results: dict, times: dict | None = None) -> dict:
    """The context of `readme.md.j2`: `results` `{results directory: summary}`, `times` `{directory: wall time}`."""
    return {
        "runs": [
            {"dir": d, "time": (times or {}).get(d), **headline(s)} for d, s in results.items()
        ],
        "FIRST_TOLERANCE": checks.FIRST_TOLERANCE,
    }
