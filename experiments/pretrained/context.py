"""What the pretrained study's templates quote: numbers, named booleans and table rows, from the summary.

`report(summary)` is the context of `templates/report.md.j2`, `readme(results,
times)` that of `templates/readme.md.j2`. Every number is one the summary
holds (`summary.derive`); it arrives formatted (`fmt`) where the text prints
it so. The wording, the headings and the tables' layout are the templates'.
Wording that depends on a result is chosen in the template from a check's
verdict (`verdicts[name]`) or a named boolean of the summary.
"""

from __future__ import annotations

from experiments.lab.render import checkpoint_label, fmt, interval_text
from experiments.pretrained import checks
from experiments.pretrained.constants import (
    ATTENTION_ONLY,
    BOTTOM_LAYERS,
    CHECK_LABELS,
    CONTENT_LABELS,
    FIRST_TOLERANCE,
    MIN_LOG_RATIOS,
    QK_NORM,
    RESIDUAL_FLOOR,
    SINK_LABELS,
    VARIANT_LABELS,
)

# The thresholds the text quotes.
THRESHOLDS = {
    "RESIDUAL_FLOOR": RESIDUAL_FLOOR,
    "BOTTOM_LAYERS": BOTTOM_LAYERS,
    "FIRST_TOLERANCE": FIRST_TOLERANCE,
    "MIN_LOG_RATIOS": MIN_LOG_RATIOS,
}
# The residual sequences the text prints in full up to this many layers.
PHRASE_LAYERS = 6


def _fmt_all(values) -> list[str]:
    return [fmt(float(x)) for x in values]


def _last(values) -> str:
    """The last value of a sequence, formatted."""
    return fmt(float(values[-1]))


def sequence(values) -> dict:
    """A sequence as the text prints it: its first `PHRASE_LAYERS` values, and the last when there are more."""
    return {
        "head": _fmt_all(values[:PHRASE_LAYERS]),
        "last": _last(values) if len(values) > PHRASE_LAYERS else None,
        "length": len(values),
    }


def model_label(summary: dict) -> str:
    """The model's display name (its config name when it has none)."""
    return checkpoint_label(summary["model"]["name"])


def mask(summary: dict) -> str:
    """The model's attention mask: 'causal' or 'bidirectional'."""
    return "causal" if summary["model"]["causal"] else "bidirectional"


def sink_label(summary: dict) -> str:
    """What the sink tokens are, in words ('the first token', '[CLS], [SEP] and punctuation')."""
    return SINK_LABELS[summary["model"]["family"]]


def content_label(summary) -> str:
    """The sink tokens the sink-excluded metrics leave out ('the first token', '[CLS] and [SEP]')."""
    return CONTENT_LABELS[summary["model"]["family"]]


# --------------------------------------------------------------------------
# Findings


def _collapse(summary) -> list:
    """Per attention-only variant: its residual, norms and the rate the papers predict (Dong: bidirectional,
    Wu: causal), with the names of its checks."""
    out = []
    for name in (n for n in ATTENTION_ONLY if n in summary["collapse"]):
        c, v, label = summary["collapse"][name], summary["variants"][name], CHECK_LABELS[name]
        overflow = c["overflow"]
        out.append(
            {
                "overflow": overflow,
                "place": c["place"],
                "before": fmt(c["before"]) if overflow else None,
                "entropy": fmt(c["entropy_low"]) if overflow else None,
                "label": VARIANT_LABELS[name],
                "norms": v["norms"],
                "r": sequence(summary["geometric"][name]),
                "last": _last(summary["geometric"][name]),
                "pure": name == "no_norm",
                "qk_norm": QK_NORM in v["norms"],
                "end": None if c["end"] is None else interval_text(c["end"], ".3g"),
                "collapses": f"{label} collapses",
                "doubly": f"{label}: doubly exponential decay",
                "exponential": f"{label}: exponential collapse",
                "worst": fmt(c["worst"]),
                "ratios": len(c["log_ratios"]),
                "rate": fmt(c["rate"]),
                "median": fmt(c["median"]),
                "interval": _fmt_all(c["interval"]),
                "sentences": c["sentences"],
                "lam2": fmt(c["slem"]),
                "tau": fmt(c["tau"]),
            }
        )
    return out


def _compared(c: dict | None) -> dict | None:
    """A paired comparison (`summary.compared`) as the text quotes it."""
    if c is None:
        return None
    return {
        "slower": VARIANT_LABELS[c["slower"]],
        "faster": VARIANT_LABELS[c["faster"]],
        "depth": c["depth"],
        "ratio": interval_text(c["ratio"], ".3g"),
        "width": c.get("width"),
    }


def _surgery(summary) -> dict:
    """The paired comparisons (skips, MLPs, local masks) and the full model with and without sinks."""
    v, s = summary["variants"], summary["surgery"]
    out = {
        "counteract": _compared(s["counteract"]),
        "slows": _compared(s["slows"]),
        "bands": [{**_compared(c), "name": checks.band_name(c)} for c in s["bands"]],
        "full": None,
    }
    if "full" in v:
        full, keeps = v["full"], s["keeps"]

        def ends(m):
            return _fmt_all([full[m][0], full[m][-1]])

        out["full"] = {
            "r": ends("residual"),
            "content": ends("residual_content"),
            "cosine": ends("cosine"),
            "content_cosine": ends("cosine_content"),
            "low": fmt(keeps["low"]),
            "low_layer": keeps["low_layer"],
        }
    return out


def _absolute(summary) -> dict:
    """For each variant whose r falls: whether it is collapse or growth of the shared component."""
    absolute = summary["absolute"]
    falls = [
        {
            "variant": VARIANT_LABELS[f["variant"]],
            "factor": fmt(f["factor"]),
            "absolute_rises": f["absolute_rises"],
            "absolute": _fmt_all(f["absolute"]),
            "shared": _fmt_all(f["shared"]),
        }
        for f in absolute["falls"]
    ]
    first = absolute["first_norm"]
    if first is not None:
        first = {**first, "ratio": fmt(first["ratio"])}
    return {"falls": falls, "first_norm": first}


def _paths(summary) -> dict | None:
    paths = summary["paths"]
    if not paths:
        return None
    return {
        "medians": list(zip(paths["lengths"], _fmt_all(summary["path_readings"]["medians"]))),
        "input": fmt(paths["input_residual"]),
    }


def _sinks(summary) -> dict | None:
    sinks = summary["sinks"]
    if sinks is None:
        return None
    out = {
        "mean": fmt(sinks["mean"]),
        "uniform": fmt(sinks["uniform"]),
        "top": sinks["top"],
        "top_mass": fmt(sinks["top_mass"]),
        "perron": fmt(sinks["perron"]),
    }
    if summary["model"]["causal"]:
        out.update(
            fraction=fmt(sinks["fraction"]),
            sentence_fraction=interval_text(sinks["sentence_fraction"], ".3g"),
            bottom=_fmt_all(sinks["bottom"]),
        )
    else:
        split = sinks["categories"]
        out["split"] = [
            (cat, fmt(split[cat]["mean"]), fmt(split[cat]["middle"]))
            for cat in summary["sink_categories"][1:]
        ]
        out["middle"] = sinks["middle"]
        out["largest"] = sinks["largest"]
        out["sep_top"], out["sep_top_mass"] = sinks["sep_top"], fmt(sinks["sep_top_mass"])
    return out


def _sink_class_rows(summary) -> dict | None:
    """BERT: per layer the attention on [CLS], [SEP], punctuation and all three, mean over heads."""
    full = summary["variants"].get("full")
    if full is None or summary["model"]["causal"]:
        return None
    cats, mass = summary["sink_categories"], summary["head_means"]["full"]["attention_sink"]
    rows = [
        [str(a)] + [fmt(mass[c][a]) for c in cats[1:] + cats[:1]]
        for a in range(len(full["entropy"]))
    ]
    header = ["layer (from 0)"] + [
        f"{c} (uniform {fmt(float(full['uniform_sink'][c]))})" for c in cats[1:]
    ]
    uniform = fmt(float(full["uniform_sink"]["sinks"]))
    return {"rows": rows, "header": header + [f"all three (uniform {uniform})"]}


def _massive(summary) -> dict | None:
    """Sun et al. 2024's readings: the per-layer table and the numbers the text quotes."""
    m = summary["massive"]
    if m is None:
        return None
    per = m["per_layer"]
    columns = ("ratio", "value", "spread", "count", "first", "delimiter", "other")
    rows = [
        ["0 (embeddings)" if layer == 0 else str(layer)]
        + _fmt_all([per[k][layer] for k in columns])
        + [", ".join(f"{d} ({share:.2f})" for d, share in per["dims"][layer])]
        for layer in range(len(per["ratio"]))
    ]
    layers, hits = m["layers"], m["hits"]
    return {
        "rows": rows,
        "layers": layers,
        "top": m["top"],
        "top_ratio": fmt(m["top_ratio"]),
        "hits": None
        if hits is None
        else {
            **{k: fmt(hits[k]) for k in ("first", "first_delimiter", "delimiter", "other")},
            "count": hits["hits"],
            "sentences": hits["sentences"],
            "dims": hits["dims"],
            "location": interval_text(hits["location"], ".3g"),
            "dims_share": None
            if hits["dims_share"] is None
            else interval_text(hits["dims_share"], ".3g"),
        },
        "spread": fmt(m["spread"]) if layers else None,
        "top_value": fmt(m["top_value"]),
        "bounded": summary["model"]["norm"] == "post",
    }


def _causal(summary) -> dict | None:
    readings = summary["causal_readings"]
    if readings is None:
        return None
    full = summary["variants"]["full"]
    return {
        "diagonal": fmt(readings["diagonal"]),
        "slem": fmt(readings["slem"]),
        "distance": sequence(full["path_first_max"]),
        "first": checks.depth_or_none(readings["first"]),
        "full": _last(full["residual"]),
        "content": _last(full["residual_content"]),
        "slem_error": fmt(float(full["slem_diagonal_error"])),
    }


# --------------------------------------------------------------------------
# Tables


def _layer_rows(summary) -> dict:
    name = "full" if "full" in summary["variants"] else next(iter(summary["variants"]))
    v, causal = summary["variants"][name], summary["model"]["causal"]
    means = summary["head_means"][name]
    rows = []
    for layer in range(len(v["entropy"]) + 1):
        hidden = [
            fmt(float(v[m][layer]))
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
        cells = [fmt(means[m][a]) for m in ("entropy", "slem", "gap", "tau")]
        cells += [
            fmt(means["attention_sink"]["sinks"][a]),
            fmt(means["perron_sink"]["sinks"][a]),
            fmt(float(v["redundancy"][a])),
        ]
        extra = (
            [fmt(means["diagonal_mean"][a]), fmt(float(v["path_first_max"][a]))] if causal else []
        )
        rows.append([str(layer)] + cells + hidden + extra)
    return {
        "variant": VARIANT_LABELS[name],
        "uniform": fmt(float(v["uniform_sink"]["sinks"])),
        "rows": rows,
    }


def _head_rows(summary) -> list | None:
    heads = summary["heads"]
    if heads is None:
        return None
    return [
        [
            str(a),
            ", ".join(f"{n} {k}" for k, n in h["patterns"]),
            str(h["sink_head"]),
            fmt(h["sink_mass"]),
            str(h["sharpest_head"]),
            fmt(h["entropy"]),
        ]
        for a, h in enumerate(heads)
    ]


def _surgery_rows(summary) -> list:
    """Per layer, each variant's cell 'r / r without sinks / cosine without sinks / abs residual / entropy / tau'
    (the attention parts from layer 1)."""
    v, names = summary["variants"], summary["variant_names"]
    rows = []
    for layer in range(len(v[names[0]]["residual"])):
        cells = []
        for n in names:
            parts = [summary["geometric"][n][layer]] + [
                v[n][m][layer] for m in ("residual_content", "cosine_content", "residual_abs")
            ]
            if layer > 0:
                means = summary["head_means"][n]
                parts += [means["entropy"][layer - 1], means["tau"][layer - 1]]
            cells.append(" / ".join(_fmt_all(parts)))
        rows.append([str(layer)] + cells)
    return rows


def _path_rows(summary) -> list | None:
    if not summary["paths"]:
        return None
    readings = summary["path_readings"]
    rows = []
    for k, n, quantiles in zip(
        summary["paths"]["lengths"], readings["counts"], readings["quantiles"]
    ):
        q = _fmt_all(quantiles)
        rows.append([str(k), str(n), q[2], f"{q[1]} .. {q[3]}", f"{q[0]} .. {q[4]}"])
    return rows


# --------------------------------------------------------------------------
# Contexts


def of_kind(summary, kind: str) -> list:
    """The summary's records of one kind (`experiments.lab.study.KINDS`), in order."""
    return [p for p in summary["predictions"] if p["kind"] == kind]


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
        "predictions": of_kind(summary, "prediction"),
        "verdicts": verdicts(summary),
        "sanity": of_kind(summary, "sanity"),
        "hypotheses": of_kind(summary, "hypothesis"),
        "not_applicable": of_kind(summary, "not applicable"),
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
            "variants": [VARIANT_LABELS[n] for n in summary["variant_names"]],
            "norms": [
                (VARIANT_LABELS[n], summary["variants"][n]["norms"])
                for n in summary["variant_names"]
            ],
            "rows": _surgery_rows(summary),
        },
        "path_rows": _path_rows(summary),
        "plots": summary["plots"],
    }


def headline(summary: dict) -> dict:
    """The numbers the README quotes from one summary."""
    v, model = summary["variants"], summary["model"]
    full, medians = v["full"], summary["path_readings"]["medians"]
    lengths, causal = summary["paths"]["lengths"], summary["causal_readings"]
    return {
        "title": model_label(summary),
        "mask": mask(summary),
        "model": model,
        "predictions": of_kind(summary, "prediction"),
        "sanity": of_kind(summary, "sanity"),
        "hypotheses": of_kind(summary, "hypothesis"),
        "not_applicable": of_kind(summary, "not applicable"),
        "verdicts": verdicts(summary),
        "sentences": summary["sentences"],
        "collapse": _collapse(summary),
        "no_mlp": _last(summary["geometric"]["no_mlp"]),
        "no_skip": _last(summary["geometric"]["no_skip"]),
        "full": _last(full["residual"]),
        "content": _last(full["residual_content"]),
        "cosine": _last(full["cosine"]),
        "content_cosine": _last(full["cosine_content"]),
        "content_label": content_label(summary),
        "paths": _fmt_all([medians[0], medians[-1]]),
        "lengths": [lengths[0], lengths[-1]],
        "sink": fmt(summary["sinks"]["mean"]),
        "sink_label": sink_label(summary),
        "uniform": fmt(summary["sinks"]["uniform"]),
        "sinks": _sinks(summary),
        "first": checks.depth_or_none(causal["first"] if causal else None),
        "massive": _massive(summary),
    }


def _cell(row: dict) -> str:
    """One report row as a cell of the by-model table: 'verdict: measured'."""
    measured = row["measured"]
    shown = "" if measured is None else f": {fmt(measured)}"
    return f"{row['verdict']}{shown}"


def rows_by_model(summaries: list[dict]) -> list[dict]:
    """Every row name of any summary, in order of first appearance, with its kind(s) and one cell per
    summary ('-' where the row does not arise)."""
    names = {}
    for summary in summaries:
        for row in summary["predictions"]:
            names.setdefault(row["name"], []).append(row["kind"])
    out = []
    for name, kinds in names.items():
        cells = []
        for summary in summaries:
            row = next((r for r in summary["predictions"] if r["name"] == name), None)
            cells.append("-" if row is None else _cell(row))
        out.append({"name": name, "kind": " / ".join(dict.fromkeys(kinds)), "cells": cells})
    return out


def causal_pair(summaries: list[dict]) -> dict | None:
    """Two or more causal models side by side: the rows with a verdict in each (not applicable and not
    measured rows left out) on which they `agree` (with the rows' kinds), those on which they `differ` (with
    each verdict), and
    the rows `one_sided`: applicable to some of them only. None with fewer than two causal models."""
    causal = [s for s in summaries if s["model"]["causal"]]
    if len(causal) < 2:
        return None
    verdicts = [{r["name"]: r["verdict"] for r in s["predictions"]} for s in causal]
    kinds = [{r["name"]: r["kind"] for r in s["predictions"]} for s in causal]
    shared = [n for n in verdicts[0] if all(n in v for v in verdicts[1:])]
    decided = [n for n in shared if all(v[n] in ("pass", "fail") for v in verdicts)]
    return {
        "names": [model_label(s) for s in causal],
        "agree": [
            (n, list(dict.fromkeys(k[n] for k in kinds)))
            for n in decided
            if len({v[n] for v in verdicts}) == 1
        ],
        "differ": [
            (n, [v[n] for v in verdicts])
            for n in shared
            if len({v[n] for v in verdicts}) > 1
            and "not applicable" not in {v[n] for v in verdicts}
        ],
        "one_sided": [
            (n, [v[n] for v in verdicts])
            for n in shared
            if "not applicable" in {v[n] for v in verdicts} and len({v[n] for v in verdicts}) > 1
        ],
    }


def readme(results: dict, times: dict | None = None) -> dict:
    """The context of `readme.md.j2`: `results` `{results directory: summary}`, `times` `{directory: wall time}`."""
    summaries = list(results.values())
    return {
        "runs": [
            {"dir": d, "time": (times or {}).get(d), **headline(s)} for d, s in results.items()
        ],
        "rows_by_model": rows_by_model(summaries),
        "causal_pair": causal_pair(summaries),
        "FIRST_TOLERANCE": FIRST_TOLERANCE,
    }
