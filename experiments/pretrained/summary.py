"""The pretrained-attention study's summary: rows -> one dict of numbers, and the named readings of it.

`summarize` keeps, per surgery variant, every metric of `study.depth_run`
(means over sentences: `[L, H]` per head, `[L + 1]` per hidden state, `[L]`
per layer; sink masses as `{metric: {category: values}}`), the heatmap
examples and the single-head paths. The readers below (`head_mean`, `sink`,
`geometric_residual`, ...) are the one definition of each number that the
checks, the report and the figures quote.
"""
from __future__ import annotations

import numpy as np

from attnjax.study import distinct, select
from experiments.pretrained.corpus import SINK_LABELS, SINKS
from experiments.pretrained.study import VARIANTS

# Below this relative residual float32 rounding dominates, and ratios of
# log-residuals mean nothing (as in the rank-collapse study).
RESIDUAL_FLOOR = 1e-5
VARIANT_LABELS = {"full": "full model", "no_skip": "no skips", "no_mlp": "no MLPs", "attention_only": "attention only"}
MODEL_LABELS = {"minilm": "all-MiniLM-L6-v2", "smollm2": "SmolLM2-135M"}


# --------------------------------------------------------------------------
# Rows -> summary


def _variant_summary(rows: list[dict]) -> dict:
    """`{metric: values}` of one depth run; sink masses as `{metric: {category: values}}`."""
    out = {}
    for row in rows:
        if row["metric"] in ("model", "groups", "example"):
            continue
        if "sink" in row:
            out.setdefault(row["metric"], {})[row["sink"]] = row["values"]
        else:
            out[row["metric"]] = row["values"] if "values" in row else row["value"]
    return out


def _paths_summary(rows: list[dict]) -> dict | None:
    if not rows:
        return None
    paths = select(rows, metric="path_residual")
    return {"lengths": [r["length"] for r in paths], "residual": [r["values"] for r in paths],
            "input_residual": select(rows, metric="input_residual")[0]["value"],
            "sentences": select(rows, metric="path_sentences")[0]["value"]}


def _rounded(value, digits: int = 5):
    """Every float of a nested list / dict to `digits` significant digits (the summary is committed)."""
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_rounded(v, digits) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(f"{value:.{digits}g}")
    return value


def summarize(rows: list[dict], config) -> dict:
    depth = select(rows, part="depth")
    model = {k: v for k, v in select(depth, metric="model")[0].items() if k not in ("metric", "run", "part", "variant")}
    groups = select(depth, metric="groups")[0]
    return _rounded({
        "model": {"name": config.model.name, **model},
        "corpus": {"source": config.text_file or f"docstrings of {len(config.corpus.modules)} standard-library modules",
                   "lengths": groups["lengths"], "counts": groups["counts"]},
        "sink_categories": list(SINKS[model["family"]]),
        "variants": {v: _variant_summary(select(depth, variant=v)) for v in distinct(depth, "variant")},
        "examples": [{k: r[k] for k in ("layer", "head", "reason", "tokens", "values")}
                     for r in select(depth, metric="example")],
        "paths": _paths_summary(select(rows, part="paths")),
    })


# --------------------------------------------------------------------------
# Named selections


def array(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def model_label(summary: dict) -> str:
    """The model's display name (its config name when it has none)."""
    name = summary["model"]["name"]
    return MODEL_LABELS.get(name, name)


def mask(summary: dict) -> str:
    """The model's attention mask: 'causal' or 'bidirectional'."""
    return "causal" if summary["model"]["causal"] else "bidirectional"


def sink_label(summary: dict) -> str:
    """What the sink tokens are, in words ('the first token', '[CLS], [SEP] and punctuation')."""
    return SINK_LABELS[summary["model"]["family"]]


def variant_names(summary: dict) -> list[str]:
    """The measured surgery variants, in `VARIANTS` order."""
    return [n for n in VARIANTS if n in summary["variants"]]


def head_mean(values) -> np.ndarray:
    """`[L, H]` -> `[L]`: mean over heads."""
    return array(values).mean(axis=-1)


def sink(variant: dict, metric: str = "attention_sink", category: str = "sinks") -> np.ndarray:
    return array(variant[metric][category])


def uniform_sink(variant: dict) -> float:
    """The sink mass uniform attention would give (mean over queries)."""
    return float(array(variant["uniform_sink"]["sinks"]))


def geometric_residual(variant: dict) -> np.ndarray:
    """`[L + 1]`: the geometric mean over sentences of r_l. If every sentence decays with
    log r_(l+1) >= c log r_l, so does this mean (it is linear in the logs); the arithmetic mean need not."""
    return np.exp(array(variant["log_residual"]))


def path_medians(paths: dict) -> np.ndarray:
    return np.asarray([np.median(array(r)) for r in paths["residual"]])


# --------------------------------------------------------------------------
# Derived numbers


def first_below(values, level: float):
    """The first index whose value is <= level, or None."""
    hits = np.nonzero(array(values) <= level)[0]
    return int(hits[0]) if hits.size else None


def geometric_rate(residual, floor: float = RESIDUAL_FLOOR):
    """Mean factor per layer, (r_b / r_a)^(1 / (b - a)), between layer a = 0 and the last layer b above `floor`."""
    r = array(residual)
    above = np.nonzero(r >= floor)[0]
    b = int(above[-1]) if above.size else 0
    return float((r[b] / r[0]) ** (1 / b)) if b > 0 and r[0] > 0 else None
