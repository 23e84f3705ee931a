"""The pretrained-attention study's summary: rows -> one dict of every number its readers quote.

`summarize(rows, config)` is two steps. `aggregate` keeps, per surgery
variant, every metric of `study.depth_run` (means over sentences: `[L, H]` per
head, `[L + 1]` per hidden state, `[L]` per layer; sink masses as `{metric:
{category: values}}`; each sentence's decay `rates`), the heatmap examples and
the single-head paths, rounded to 5 significant digits (the summary is
committed). `derive` reads that (as summary.json holds it) and adds what the
checks, the figures and the report quote (`readings.py`, `activations.py`):

* `sentences`: how many sentences the model read (over every group);
* `variant_names`: the measured variants in `study.VARIANTS` order;
* `head_means`: per variant, each per-head metric's mean over heads `[L]`
  (`gap` = 1 - |lambda_2|; sink masses per category);
* `geometric`: per variant, r_l as the geometric mean over sentences `[L + 1]`
  (the average the tables and figures print, since r spans decades);
* `collapse`: per attention-only variant, the overflow layer, r_L / r_0, the
  log-ratios of Dong et al.'s rate, the per-sentence rates of Wu et al.'s and
  the maps' |lambda_2| and tau;
* `surgery`: the variants with skips or MLPs against attention only, and the
  full model without its sinks; `absolute`: the variants whose r falls, and
  the first token's norm;
* `path_readings`, `sinks`, `massive`, `causal_readings`, `heads` and
  `bound`: the single-head paths, the sink masses, Sun et al.'s readings,
  the products of causal maps, each head of the full model, and the largest
  |lambda_2| - tau.

The derived numbers are not rounded: the report prints them as they are.
"""

from __future__ import annotations

import numpy as np

from attnjax.analysis import PATTERN_NAMES
from attnjax.serialization import json_form
from experiments.lab.stats import interval, log_interval
from experiments.lab.study import distinct, select
from experiments.pretrained import activations
from experiments.pretrained.constants import (
    ATTENTION_ONLY,
    BOTTOM_LAYERS,
    FIRST_TOLERANCE,
    MASSIVE_RATIO,
    RELATIVE_FALL,
    RESIDUAL_FLOOR,
    SINK_SHARE,
)
from experiments.pretrained.corpus import SINKS, model_name
from experiments.pretrained.readings import (
    array,
    connecting_depth,
    end_ratio,
    first_below,
    fraction_above,
    geometric_rate,
    geometric_residual,
    growth_factor,
    head_mean,
    largest_rise,
    log_ratios,
    map_rates,
    middle_layers,
    overflow_layer,
    paired_ratio,
    path_medians,
    rate_quantiles,
    resolved_depth,
    resolved_rates,
    sentence_rates,
    sink,
    uniform_sink,
)
from experiments.pretrained.study import PER_HEAD, VARIANTS

# --------------------------------------------------------------------------
# Rows -> the aggregate


# The per-sentence rows each variant keeps (the paired comparisons read them; `readings.paired_ratio`):
# log r_l for every variant compared at a depth, log ||X_l - 1 x_bar^T|| for the skips' comparison.
PER_SENTENCE_KEPT = {
    "sentence_log_residual": lambda variant: variant not in ("full", "no_mlp"),
    "sentence_log_residual_abs": lambda variant: variant in ("no_mlp", "attention_only"),
    "sentence_hits": lambda variant: variant == "full",
    "sentence_sink": lambda variant: variant == "full",
    "sentence_hit_dims": lambda variant: variant == "full",
}


def _variant_summary(rows: list[dict]) -> dict:
    """`{metric: values}` of one depth run; sink masses as `{metric: {category: values}}`; per-sentence
    log-residuals as their decay `rates`, and the per-sentence rows of `PER_SENTENCE_KEPT` where kept."""
    out = {}
    for row in rows:
        if row["metric"] in ("model", "groups", "example"):
            continue
        if row["metric"] == "sentence_log_residual":
            out["rates"] = sentence_rates(row["values"])
        if row["metric"] in PER_SENTENCE_KEPT:
            if PER_SENTENCE_KEPT[row["metric"]](row["variant"]):
                out[row["metric"]] = row["values"]
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


def aggregate(rows: list[dict], config) -> dict:
    """Every run's rows as one dict (see the module docstring), rounded (`_rounded`)."""
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
                "first_tokens": groups["first_tokens"],
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
# The aggregate -> the derived numbers


def _head_means(variant: dict) -> dict:
    """`{metric: [L]}` of each per-head metric (sink masses `{category: [L]}`), and `gap` = 1 - |lambda_2|."""
    out = {}
    for metric in PER_HEAD:
        values = variant[metric]
        if isinstance(values, dict):
            out[metric] = {c: head_mean(v).tolist() for c, v in values.items()}
        else:
            out[metric] = head_mean(values).tolist()
    out["gap"] = [1 - x for x in out["slem"]]
    return out


def _collapse(variant: dict) -> dict:
    """An attention-only variant's collapse: `overflow` (the first hidden state that is not finite, or None;
    then `growth`, the token differences' factor per layer before it, `before`, r (geometric mean) the layer
    before, and
    `entropy_low`, the lowest head-mean entropy of the layers before); `ratio` r_L / r_0 (None on overflow);
    Dong et al.'s `log_ratios` of the geometric-mean residual and their `worst` (smallest) and `rate`, the mean
    factor per layer (`geometric_rate`); Wu et al.'s per-sentence factors: `median`, `interval` (quantiles),
    `sentences` (how many could be fitted); the maps' `slem` and `tau` (`map_rates`), and where the median
    factor lies: `place` 'below' |lambda_2|, 'above' tau or 'between'; `end`: r_L per sentence as a
    geometric mean and its interval (`lab.stats.log_interval`; None on overflow)."""
    r, geometric = array(variant["residual"]), geometric_residual(variant)
    overflow = overflow_layer(variant)
    ratios = log_ratios(geometric)
    rates = resolved_rates(variant)
    median, interval = rate_quantiles(rates)
    lam2, tau = map_rates(variant)
    place = (
        None
        if median is None
        else ("below" if median < lam2 else "above" if median > tau else "between")
    )
    return {
        "overflow": overflow,
        "growth": growth_factor(variant, overflow) if overflow is not None else None,
        "before": float(geometric[overflow - 1]) if overflow else None,
        "entropy_low": float(head_mean(variant["entropy"])[:overflow].min()) if overflow else None,
        "ratio": end_ratio(r) if overflow is None else None,
        "end": log_interval(np.exp(array(variant["sentence_log_residual"])[:, -1]))
        if overflow is None
        else None,
        "log_ratios": ratios,
        "worst": min(ratios) if ratios else None,
        "rate": geometric_rate(geometric),
        "median": median,
        "interval": interval,
        "sentences": len(rates),
        "slem": lam2,
        "tau": tau,
        "place": place,
    }


def compared(variants: dict, slower: str, faster: str, metric: str = "sentence_log_residual"):
    """Whether `slower` keeps its tokens apart longer than `faster`, sentence by sentence: at the deepest
    depth where `faster` is resolved (`resolved_depth`), each sentence's `metric` (relative residual, or
    `sentence_log_residual_abs`: the absolute one) of `slower` over `faster`'s, as a geometric mean and its
    interval over sentences (`paired_ratio`). None when either variant was not run."""
    if slower not in variants or faster not in variants:
        return None
    depth = resolved_depth(variants[faster])
    return {
        "slower": slower,
        "faster": faster,
        "depth": depth,
        "ratio": paired_ratio(variants[slower][metric], variants[faster][metric], depth),
    }


def band_variants(variants: dict) -> list[tuple[str, str, int]]:
    """`(band variant, its full-mask base, window W)` of every band-masked variant that was run."""
    return [
        (name, name.split("_band")[0], int(name.split("_band")[1]))
        for name in variants
        if "_band" in name
    ]


def _surgery(summary: dict) -> dict:
    """The variants with skips, MLPs or a local mask against the same network without (`compared`), and
    the full model without its sinks:

    `counteract`: no MLPs (skips kept) against attention only, on the absolute residual (Dong et al.'s
    skips); `slows`: no skips (MLPs kept) against attention only; `bands`: each band-masked variant
    against its base with the model's own mask, with its `width` and `reach`, the layers the window needs
    before every two rows of the longest sentence share a key (`connecting_depth`; Wu et al.'s local
    masks); `keeps`
    (full): `ratio` r_L / r_0 without the sinks, `all_tokens` the same over every token, `low` and
    `low_layer` the lowest r without the sinks and where. None for a comparison not run."""
    variants, tokens = summary["variants"], max(summary["corpus"]["lengths"])
    out = {
        "counteract": compared(variants, "no_mlp", "attention_only", "sentence_log_residual_abs"),
        "slows": compared(variants, "no_skip", "attention_only"),
        "bands": [
            {
                **compared(variants, band, base),
                "width": width,
                "reach": connecting_depth(tokens, width, summary["model"]["causal"]),
            }
            for band, base, width in band_variants(variants)
            if base in variants
        ],
        "keeps": None,
    }
    if "full" in variants:
        full = variants["full"]
        content = array(full["residual_content"])
        out["keeps"] = {
            "ratio": end_ratio(content),
            "all_tokens": end_ratio(full["residual"]),
            "low": float(content.min()),
            "low_layer": int(np.argmin(content)),
        }
    return out


def _absolute(variants: dict) -> dict:
    """`falls`: each variant (finite hidden states) whose r_L < RELATIVE_FALL x r_0, with the `factor` r
    falls, whether the absolute residual rises (`absolute_rises`), and the absolute residual and the shared
    component at layers 0 and L; `first_norm`: the full model's largest first-token norm over the median
    token's, its `layer`, and whether it is `massive` (>= MASSIVE_RATIO); None without the full model."""
    falls = []
    for name, v in variants.items():
        r, res, shared = geometric_residual(v), array(v["residual_abs"]), array(v["shared_norm"])
        if not np.isfinite(res).all() or r[-1] >= RELATIVE_FALL * r[0]:
            continue
        falls.append(
            {
                "variant": name,
                "factor": float(r[0] / max(r[-1], 1e-300)),
                "absolute_rises": bool(res[-1] >= res[0]),
                "absolute": res[[0, -1]].tolist(),
                "shared": shared[[0, -1]].tolist(),
            }
        )
    first = None
    if "full" in variants:
        ratio = array(variants["full"]["first_norm_ratio"])
        layer = int(np.argmax(ratio))
        first = {
            "ratio": float(ratio[layer]),
            "layer": layer,
            "massive": bool(ratio[layer] >= MASSIVE_RATIO),
        }
    return {"falls": falls, "first_norm": first}


def _path_readings(paths: dict | None) -> dict | None:
    """Per path length: the `medians` and the `quantiles` (10, 25, 50, 75, 90%) of the paths' residuals and
    their `counts`; `rise`, the largest rise of the medians >= RESIDUAL_FLOOR (float32 rounding below it);
    `long_ratio`, the longest paths' median over the shortest's. None without the paths run."""
    if not paths:
        return None
    medians = path_medians(paths)
    return {
        "medians": medians.tolist(),
        "rise": largest_rise(medians[medians >= RESIDUAL_FLOOR]),
        "long_ratio": float(medians[-1] / medians[0]) if medians[0] > 0 else float("nan"),
        "quantiles": [
            np.percentile(array(r), [10, 25, 50, 75, 90]).tolist() for r in paths["residual"]
        ],
        "counts": [len(r) for r in paths["residual"]],
    }


def _sinks(summary: dict) -> dict | None:
    """The full model's attention on its sinks (mean over heads): `mean` over layers, `uniform` (what uniform
    attention gives), `top` (the layer with the most, counted from 0) and `top_mass`, `perron` (the Perron vectors' mean
    mass). Causal: `fraction` of the layers past the bottom BOTTOM_LAYERS above SINK_SHARE (head means over
    sentences), `sentence_fraction` (the same fraction per sentence: mean and interval), `bottom` (those
    layers' masses). Bidirectional: `middle` (the middle layers, counted from 0), per category (after the union)
    `categories` `{category: {"mean", "middle"}}` (over all layers, over the middle ones), `largest` (the
    category with the most), `sep_top` and `sep_top_mass` ([SEP]'s layer with the most, from 0, and its mass). None
    without the full model."""
    full = summary["variants"].get("full")
    if full is None:
        return None
    mass, perron = head_mean(sink(full)), head_mean(sink(full, "perron_sink"))
    top = int(np.argmax(mass))
    out = {
        "mean": float(mass.mean()),
        "uniform": uniform_sink(full),
        "top": top,
        "top_mass": float(mass[top]),
        "perron": float(perron.mean()),
    }
    if summary["model"]["causal"]:
        per_sentence = array(full["sentence_sink"])[:, BOTTOM_LAYERS:]  # [S, L - BOTTOM_LAYERS]
        # No layer past the bottom ones (a model of at most BOTTOM_LAYERS layers): NaN, not measured,
        # as fraction_above gives, without averaging an empty slice.
        shares = (
            np.mean(per_sentence > SINK_SHARE, axis=1)
            if per_sentence.shape[1]
            else np.full(per_sentence.shape[0], np.nan)
        )
        out.update(
            fraction=fraction_above(mass[BOTTOM_LAYERS:], SINK_SHARE),
            sentence_fraction=interval(shares),
            bottom=mass[:BOTTOM_LAYERS].tolist(),
        )
        return out
    middle = middle_layers(len(mass))
    means = {c: head_mean(sink(full, "attention_sink", c)) for c in summary["sink_categories"][1:]}
    out["middle"] = [int(a) for a in middle]
    out["categories"] = {
        c: {"mean": float(m.mean()), "middle": float(np.mean(m[middle]))} for c, m in means.items()
    }
    out["largest"] = max(means, key=lambda c: float(means[c].mean()))
    sep = means["[SEP]"]
    out["sep_top"], out["sep_top_mass"] = int(np.argmax(sep)), float(sep.max())
    return out


def _causal_readings(summary: dict) -> dict | None:
    """A causal model's full-model maps: `diagonal` and `slem`, the mean over layers and heads of a_ii (i >= 2)
    and of |lambda_2|; `first`, the first layer whose product P_l has every row within FIRST_TOLERANCE of
    e_1 (0-based, or None). None for a bidirectional model or without the full model."""
    full = summary["variants"].get("full")
    if not summary["model"]["causal"] or full is None:
        return None
    return {
        "diagonal": float(head_mean(full["diagonal_mean"]).mean()),
        "slem": float(head_mean(full["slem"]).mean()),
        "first": first_below(full["path_first_max"], FIRST_TOLERANCE),
    }


def _heads(summary: dict) -> list | None:
    """Per layer of the full model: `patterns` (`[class name, heads]`, most heads first), the head with the
    most sink mass (`sink_head`, `sink_mass`) and the one with the lowest entropy (`sharpest_head`,
    `entropy`). None without the full model."""
    v = summary["variants"].get("full")
    if v is None:
        return None
    rows = []
    for a, row in enumerate(np.asarray(v["pattern"], dtype=int)):
        counts = {PATTERN_NAMES[c]: int(np.sum(row == c)) for c in np.unique(row)}
        rows.append(
            {
                "patterns": [[k, n] for k, n in sorted(counts.items(), key=lambda kv: -kv[1])],
                "sink_head": int(np.argmax(sink(v)[a])),
                "sink_mass": float(np.max(sink(v)[a])),
                "sharpest_head": int(np.argmin(array(v["entropy"])[a])),
                "entropy": float(np.min(array(v["entropy"])[a])),
            }
        )
    return rows


def derive(summary: dict) -> dict:
    """`summary` (an `aggregate` as summary.json holds it, or a summary.json) with the derived numbers added
    (see the module docstring)."""
    variants = summary["variants"]
    return {
        **summary,
        "sentences": sum(summary["corpus"]["counts"]),
        "variant_names": [n for n in VARIANTS if n in variants],
        "head_means": {name: _head_means(v) for name, v in variants.items()},
        "geometric": {name: geometric_residual(v).tolist() for name, v in variants.items()},
        "collapse": {n: _collapse(variants[n]) for n in ATTENTION_ONLY if n in variants},
        "surgery": _surgery(summary),
        "absolute": _absolute(variants),
        "path_readings": _path_readings(summary["paths"]),
        "sinks": _sinks(summary),
        "massive": activations.readings(variants["full"]) if "full" in variants else None,
        "causal_readings": _causal_readings(summary),
        "heads": _heads(summary),
        "bound": max(float(v["slem_over_tau"]) for v in variants.values()),
    }


def summarize(rows: list[dict], config) -> dict:
    """The study's summary: `derive` of the `aggregate` in its JSON form (as summary.json holds it, so that
    a committed summary derives the same numbers again)."""
    return derive(json_form(aggregate(rows, config)))
