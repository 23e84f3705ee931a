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

from experiments.lab.study import distinct, select
from experiments.pretrained.corpus import SINK_LABELS, SINKS, model_name
from experiments.pretrained.study import VARIANTS

# Below this relative residual float32 rounding dominates, and ratios of
# log-residuals mean nothing (as in the rank-collapse study).
RESIDUAL_FLOOR = 1e-5
# A per-sentence decay rate is fitted on at least this many resolved layers >= 1.
MIN_RATE_LAYERS = 3
VARIANT_LABELS = {
    "full": "full model",
    "no_skip": "no skips",
    "no_mlp": "no MLPs",
    "attention_only": "attention only",
    "no_norm": "attention only, no norms",
}
# The variants without skips and MLPs: the attention-only networks whose collapse the papers predict.
ATTENTION_ONLY = ("attention_only", "no_norm")
MODEL_LABELS = {"minilm": "all-MiniLM-L6-v2", "smollm2": "SmolLM2-135M"}


# --------------------------------------------------------------------------
# Rows -> summary


def sentence_rates(
    log_residual, floor: float = RESIDUAL_FLOOR, min_layers: int = MIN_RATE_LAYERS
) -> list:
    """Each sentence's decay factor per layer: exp of the least-squares slope of log r_l over layers l >= 1.

    log_residual `[S, L + 1]`. The fit uses layers 1, 2, ... while r_l >=
    `floor` (layer 0, the embeddings, is left out: the first layer's drop is
    not part of a per-layer rate); None for a sentence with fewer than
    `min_layers` such layers.
    """
    rates = []
    for logs in array(log_residual):
        resolved = logs[1:] >= np.log(floor)
        stop = int(np.argmin(resolved)) if not resolved.all() else len(resolved)
        layers, values = np.arange(1, stop + 1), logs[1 : stop + 1]
        rates.append(
            float(np.exp(np.polyfit(layers, values, 1)[0])) if stop >= min_layers else None
        )
    return rates


def _variant_summary(rows: list[dict]) -> dict:
    """`{metric: values}` of one depth run; sink masses as `{metric: {category: values}}`; per-sentence
    log-residuals as their decay `rates`."""
    out = {}
    for row in rows:
        if row["metric"] in ("model", "groups", "example"):
            continue
        if row["metric"] == "sentence_log_residual":
            out["rates"] = sentence_rates(row["values"])
        elif "sink" in row:
            out.setdefault(row["metric"], {})[row["sink"]] = row["values"]
        else:
            out[row["metric"]] = row["values"] if "values" in row else row["value"]
    return out


def _paths_summary(rows: list[dict]) -> dict | None:
    if not rows:
        return None
    paths = select(rows, metric="path_residual")
    return {
        "lengths": [r["length"] for r in paths],
        "residual": [r["values"] for r in paths],
        "input_residual": select(rows, metric="input_residual")[0]["value"],
        "sentences": select(rows, metric="path_sentences")[0]["value"],
    }


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
    model = {
        k: v
        for k, v in select(depth, metric="model")[0].items()
        if k not in ("metric", "run", "part", "variant")
    }
    groups = select(depth, metric="groups")[0]
    return _rounded(
        {
            "model": {"name": model_name(config), **model},
            "corpus": {
                "source": config.text_file
                or f"docstrings of {len(config.corpus.modules)} standard-library modules",
                "lengths": groups["lengths"],
                "counts": groups["counts"],
            },
            "sink_categories": list(SINKS[model["family"]]),
            "variants": {
                v: _variant_summary(select(depth, variant=v)) for v in distinct(depth, "variant")
            },
            "examples": [
                {k: r[k] for k in ("layer", "head", "reason", "tokens", "values")}
                for r in select(depth, metric="example")
            ],
            "paths": _paths_summary(select(rows, part="paths")),
        }
    )


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


def resolved_rates(variant: dict) -> np.ndarray:
    """The per-sentence decay factors that could be fitted (`sentence_rates`), `[S']`."""
    return array([r for r in variant["rates"] if r is not None])


def massive(variant: dict) -> dict:
    """Sun et al. 2024's readings per hidden state `[L + 1]`: `ratio` (largest |a| / median, mean over
    sentences), `value` (largest |a|, mean), `spread` (its std / mean over sentences), `count` (massive
    activations per sentence), `first`, `delimiter`, `other` (shares of sentences whose largest |a| sits there),
    `dims` (per state, `[dimension, sentences]` pairs, most sentences first)."""
    value, square = array(variant["massive_value"]), array(variant["massive_value_sq"])
    first, delimiter = array(variant["massive_first"]), array(variant["massive_delimiter"])
    spread = np.sqrt(np.maximum(square - value**2, 0)) / np.maximum(value, 1e-300)
    return {
        "ratio": array(variant["massive_ratio"]),
        "value": value,
        "spread": spread,
        "count": array(variant["massive_count"]),
        "first": first,
        "delimiter": delimiter,
        "other": 1 - first - delimiter,
        "dims": variant["massive_dims"],
    }


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
