"""The long-context study's summary: rows -> one dict of numbers, each with a 95% interval over text segments.

An interval is `experiments.lab.stats.interval` over the n segments,
`{"mean", "low", "high", "n"}`: mean +- t_{0.975, n-1} s / sqrt(n) (Student t;
s the sample standard deviation).

`summarize(rows, config)` is `derive(aggregate(rows, config))`. `aggregate` keeps:

* `statistics`: per length T, the model mean (over layers and heads) and the
  per-layer mean (over heads) of each statistic for a T-token input (mean
  over query rows 1..T-1); the growth of the model-mean sink mass from the
  shortest to the longest T; residual ratios per layer (all tokens / without
  token 0) at the longest T; the prefix check.
* `stream`: perplexity per position bin per variant (exp of the bin's mean
  nll, per segment); per window, perplexity ratios beyond the window
  (query positions p >= W) of each variant to full attention, and at the
  sampled positions of each variant to the re-computation baseline; the
  largest |nll(window variant) - nll(full)| at positions p < W (an identity).
* `ablation`: perplexity ratio to the unedited model per edited layer and for
  all layers.

`derive` adds the numbers the checks read that are not measurements
themselves: `early_gap`, the largest of the windows' early gaps.
"""

from __future__ import annotations

import math

import numpy as np

from attnjax.serialization import json_form
from experiments.lab.stats import interval
from experiments.lab.study import select
from experiments.long_context.study import STATISTICS


def _segments(rows, part):
    return sorted({r["segment"] for r in rows if r["part"] == part})


def _statistics_summary(rows, config) -> dict:
    lengths, segs = list(config.statistics.lengths), _segments(rows, "statistics")

    def arrays(metric, t):  # [segments, L, H]
        return np.asarray(
            [
                select(rows, part="statistics", segment=s, metric=metric, length=t)[0]["values"]
                for s in segs
            ],
            np.float64,
        )

    model_mean = {m: [interval(arrays(m, t).mean((1, 2))) for t in lengths] for m in STATISTICS}
    per_layer = {
        m: [[interval(a) for a in arrays(m, t).mean(2).T] for t in lengths] for m in STATISTICS
    }
    sink = [arrays("sink_mass", t) for t in (lengths[0], lengths[-1])]
    growth_layers = sink[1].mean(2) - sink[0].mean(2)  # [segments, L]
    residual = {
        tok: [
            interval(col)
            for col in np.asarray(
                [
                    select(rows, part="statistics", segment=s, metric="residual", tokens=tok)[0][
                        "values"
                    ]
                    for s in segs
                ]
            ).T
        ]
        for tok in ("all", "without_first")
    }
    gaps = [r["value"] for r in select(rows, part="statistics", metric="prefix_gap")]
    shape = arrays("sink_mass", lengths[0]).shape
    return {
        "lengths": lengths,
        "num_layers": shape[1],
        "num_heads": shape[2],
        "model_mean": model_mean,
        "per_layer": per_layer,
        "sink_growth": interval(sink[1].mean((1, 2)) - sink[0].mean((1, 2))),
        "layers_growing": int(np.sum(growth_layers.mean(0) > 0)),
        "residual": residual,
        "prefix_gap": max(gaps) if gaps else None,
    }


def _ppl(nll) -> float:
    return float(np.exp(np.mean(nll)))


def _stream_summary(rows, config) -> dict:
    s, segs = config.stream, _segments(rows, "stream")
    nll = {}  # variant -> [segments][positions]
    for r in select(rows, part="stream", metric="nll") + select(
        rows, part="stream", metric="nll_recompute"
    ):
        nll.setdefault(r["variant"], {})[r["segment"]] = np.asarray(r["values"], np.float64)
    positions = np.asarray(select(rows, part="stream", metric="positions")[0]["values"])
    variants = [v for v in nll if not v.startswith("recompute")]
    edges = list(range(0, s.length - 1, s.bin)) + [s.length - 1]
    bins = {
        v: [interval([_ppl(nll[v][g][a:b]) for g in segs]) for a, b in zip(edges[:-1], edges[1:])]
        for v in variants
    }
    windows = {}
    for w in s.windows:
        mine = [v for v in variants if v.endswith(f"window_{w}")]
        beyond = {
            v: interval([_ppl(nll[v][g][w:]) / _ppl(nll["full"][g][w:]) for g in segs])
            for v in mine
        }
        sampled = {
            v: interval([_ppl(nll[v][g][positions]) / _ppl(nll[f"recompute_{w}"][g]) for g in segs])
            for v in ["full"] + mine
        }
        ppl = {v: interval([_ppl(nll[v][g][positions]) for g in segs]) for v in ["full", *mine]}
        ppl[f"recompute_{w}"] = interval([_ppl(nll[f"recompute_{w}"][g]) for g in segs])
        early = max(
            float(np.max(np.abs(nll[v][g][:w] - nll["full"][g][:w]))) for v in mine for g in segs
        )
        windows[str(w)] = {
            "beyond_ratio": beyond,
            "sampled_ratio": sampled,
            "sampled_ppl": ppl,
            "early_gap": early,
        }
    return {
        "variants": variants,
        "bin_starts": edges[:-1],
        "ppl_bins": bins,
        "windows": windows,
        "positions": positions.tolist(),
        "full_ppl": interval([_ppl(nll["full"][g]) for g in segs]),
    }


def _ablation_summary(rows) -> dict:
    segs = _segments(rows, "ablation")

    def value(g, **match):
        return math.exp(select(rows, part="ablation", segment=g, **match)[0]["value"])

    base = [value(g, removed="none") for g in segs]
    layers = sorted({r["layer"] for r in select(rows, part="ablation", removed="layer")})
    return {
        "base_ppl": interval(base),
        "layers": layers,
        "layer_ratio": [
            interval([value(g, removed="layer", layer=ly) / b for g, b in zip(segs, base)])
            for ly in layers
        ],
        "all_ratio": interval([value(g, removed="all") / b for g, b in zip(segs, base)]),
    }


def aggregate(rows: list[dict], config) -> dict:
    """The numbers of every run's rows (see the module docstring)."""
    return {
        "statistics": _statistics_summary(rows, config),
        "stream": _stream_summary(rows, config),
        "ablation": _ablation_summary(rows),
    }


def derive(summary: dict) -> dict:
    """`summary` (an `aggregate`, or a summary.json) with `early_gap` added: the largest |nll(window
    variant) - nll(full)| at positions p < W over every window W (each window's `early_gap`)."""
    windows = summary["stream"]["windows"].values()
    return {**summary, "early_gap": max(win["early_gap"] for win in windows)}


def summarize(rows: list[dict], config) -> dict:
    """The study's summary: `derive` of the `aggregate` in its JSON form (as summary.json holds it, so that
    a committed summary derives the same numbers again)."""
    return derive(json_form(aggregate(rows, config)))
