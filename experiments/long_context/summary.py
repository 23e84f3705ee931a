"""The long-context study's summary: rows -> one dict of numbers with 95% intervals over text segments.

The unit is a text segment of one checkpoint: every interval is over inputs,
not over models. `interval` is the mean's Student-t interval; ratios and
perplexities, positive quantities spanning decades, use `log_interval` (a
geometric mean and its interval, exponentiated from the log scale).

`summarize(rows, config)` keeps:

* `statistics`: per length T, the model mean (over layers and heads) and the
  per-layer mean of each statistic; Gu et al.'s sink rate on text and on
  residual ratios; the prefix check.
* `stream`: per cache size C, each variant's perplexity over the positions
  C..C+K-1 (after eviction starts), the ratios window / (n sinks + window)
  and each variant / full attention, the re-computation ratios, and the
  largest |nll - full attention's nll| at position C-1 (nothing evicted yet).
* `edits`: per segment the formation layer, the massive activations and
  what opens the segment; Gu et al.'s sink rate on text and on random text
  tokens; per edit the perplexity ratio to the unedited
  model, the relocation r and the first-token margin d (see
  `experiments.long_context.interventions`); the spread ratio.
"""

from __future__ import annotations

import numpy as np

from attnjax.serialization import json_form
from experiments.lab.stats import interval, log_interval
from experiments.lab.study import select
from experiments.long_context.study import N_NEWLINE, STATISTICS


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

    def per_segment(metric, **match):
        return [select(rows, part="statistics", segment=s, metric=metric, **match)[0] for s in segs]

    residual = {
        tok: [
            interval(col)
            for col in np.asarray([r["values"] for r in per_segment("residual", tokens=tok)]).T
        ]
        for tok in ("all", "without_first")
    }
    gaps = [r["value"] for r in select(rows, part="statistics", metric="prefix_gap")]
    shape = arrays("sink_mass", lengths[0]).shape
    return {
        "lengths": lengths,
        "num_layers": shape[1],
        "num_heads": shape[2],
        "model_mean": {
            m: [interval(arrays(m, t).mean((1, 2))) for t in lengths] for m in STATISTICS
        },
        "per_layer": {
            m: [[interval(a) for a in arrays(m, t).mean(2).T] for t in lengths] for m in STATISTICS
        },
        "residual": residual,
        "prefix_gap": max(gaps) if gaps else None,
    }


def _ppl(nll) -> np.ndarray:
    """Perplexity per segment of nll `[S, P]`: exp of the mean over positions."""
    return np.exp(np.mean(np.asarray(nll, np.float64), axis=-1))


def _variant_nll(rows, part, cache, variant) -> np.ndarray:
    """`[S, K + 1]`: one variant's nll per segment at positions cache-1..cache+K-1 (empty if not run)."""
    found = sorted(select(rows, part=part, cache=cache, variant=variant), key=lambda r: r["index"])
    return np.asarray([r["values"] for r in found], np.float64)


def _stream_summary(rows, config) -> dict:
    s, out = config.stream, {}
    names = ["window", *(f"sink{n}" for n in s.sinks), "full", f"newline{N_NEWLINE}"]
    for c in s.caches:
        nll = {v: _variant_nll(rows, "stream", c, v) for v in names}
        if c in s.recompute:
            nll["recompute"] = _variant_nll(rows, "recompute", c, "recompute")
        nll = {v: x for v, x in nll.items() if x.size}
        ppl = {v: _ppl(x[:, 1:]) for v, x in nll.items()}  # after eviction starts: positions >= C
        sinks = f"sink{N_NEWLINE}"

        def ratios(base):
            return {v: log_interval(p / ppl[base]) for v, p in ppl.items() if v != base}

        out[str(c)] = {
            "ppl": {v: log_interval(p) for v, p in ppl.items()},
            "window_over_sinks": {
                str(n): log_interval(ppl["window"] / ppl[f"sink{n}"]) for n in s.sinks
            },
            "over_full": ratios("full") if "full" in ppl else {},
            "over_recompute": ratios("recompute") if "recompute" in ppl else {},
            "newline_over_sinks": (
                log_interval(ppl[f"newline{N_NEWLINE}"] / ppl[sinks])
                if f"newline{N_NEWLINE}" in ppl and sinks in ppl
                else None
            ),
            "pre_eviction_gap": float(
                max(
                    np.max(np.abs(x[:, 0] - nll["window"][:, 0]))
                    for v, x in nll.items()
                    if not v.startswith("newline")
                )
            ),
            "nll_by_position": {v: np.mean(x, axis=0).tolist() for v, x in nll.items()},
        }
    return {"caches": {str(c): out[str(c)] for c in s.caches}, "positions": s.positions}


def _sink_layers_mean(values, formation: int) -> float:
    return float(np.mean(np.asarray(values, np.float64)[formation:]))


def _edits_summary(rows) -> dict:
    segs = _segments(rows, "edits")
    sink = {s: select(rows, part="edits", segment=s, metric="sink")[0] for s in segs}
    edit = {
        s: {r["edit"]: r for r in select(rows, part="edits", segment=s, metric="edit")}
        for s in segs
    }
    spread = {
        s: {r["edit"]: r["values"] for r in select(rows, part="edits", segment=s, metric="spread")}
        for s in segs
    }
    names = [n for n in edit[segs[0]] if n != "none"]
    per_edit = {}
    for name in names:
        have = [s for s in segs if name in edit[s]]
        ratio = [np.exp(edit[s][name]["nll"] - edit[s]["none"]["nll"]) for s in have]
        relocation = [
            _sink_layers_mean(edit[s][name]["other_max"], sink[s]["formation_layer"])
            / _sink_layers_mean(edit[s]["none"]["key0_mass"], sink[s]["formation_layer"])
            for s in have
        ]
        margin = [
            _sink_layers_mean(
                np.subtract(edit[s][name]["key0_mass"], edit[s][name]["other_max"]),
                sink[s]["formation_layer"],
            )
            for s in have
        ]
        per_edit[name] = {
            "segments": have,
            "ppl_ratio": log_interval(ratio) if have else None,
            "ppl_ratio_values": ratio,
            "relocation": log_interval(relocation) if have else None,
            "relocation_values": relocation,
            "first_margin": interval(margin) if have else None,
            "key0_mass": [
                interval([edit[s][name]["key0_mass"][layer] for s in have])
                for layer in range(len(edit[segs[0]]["none"]["key0_mass"]))
            ]
            if have
            else None,
        }
    massive = [s for s in segs if "massive_zero" in edit[s]]
    zero_over_unigram = [
        np.exp(edit[s]["massive_zero"]["nll"] - sink[s]["unigram_nll"]) for s in massive
    ]
    # "harmless": |log ppl ratio| of the mean edit minus that of swapping in another segment's values
    mean_minus_swap = [
        abs(edit[s]["massive_mean"]["nll"] - edit[s]["none"]["nll"])
        - abs(edit[s]["massive_swap"]["nll"] - edit[s]["none"]["nll"])
        for s in massive
    ]
    value_over_removal = [
        np.exp(edit[s]["value_zero"]["nll"] - edit[s]["remove_formation"]["nll"]) for s in segs
    ]
    last = {s: len(spread[s]["none"]) - 1 for s in segs}
    rates = {
        inputs: [
            select(rows, part="edits", segment=s, metric="sink_rate", inputs=inputs)[0]["value"]
            for s in segs
        ]
        for inputs in ("text", "random")
    }
    return {
        "sink_rate": {k: {"values": v, "interval": interval(v)} for k, v in rates.items()},
        "segments": segs,
        "sink": [sink[s] for s in segs],
        "ppl": log_interval([np.exp(edit[s]["none"]["nll"]) for s in segs]),
        "unigram_ppl": log_interval([np.exp(sink[s]["unigram_nll"]) for s in segs]),
        "key0_mass": [
            interval([edit[s]["none"]["key0_mass"][layer] for s in segs])
            for layer in range(len(edit[segs[0]]["none"]["key0_mass"]))
        ],
        "sink_token_mass": [
            interval([edit[s]["none"]["sink_token_mass"][layer] for s in segs])
            for layer in range(len(edit[segs[0]]["none"]["key0_mass"]))
        ],
        "edits": per_edit,
        "massive_segments": massive,
        "sun_layer": sink[segs[0]]["sun_layer"],
        "zero_over_unigram": log_interval(zero_over_unigram) if massive else None,
        "mean_minus_swap": interval(mean_minus_swap) if massive else None,
        "value_over_removal": log_interval(value_over_removal),
        "bos": sink[segs[0]]["bos"],
        "sun_features": sink[segs[0]]["sun_features"],
        "sun_positions": float(np.median([sink[s]["sun_positions"] for s in segs])),
        "spread_ratio": {
            name: log_interval(
                [spread[s][name][last[s]] / spread[s]["none"][last[s]] for s in segs]
            )
            for name in ("remove_formation", "remove_all")
        },
        "spread": {
            name: [
                interval([spread[s][name][layer] for s in segs])
                for layer in range(last[segs[0]] + 1)
            ]
            for name in ("none", "remove_formation", "remove_all")
        },
    }


def aggregate(rows: list[dict], config) -> dict:
    """The numbers of every run's rows (see the module docstring)."""
    return {
        "statistics": _statistics_summary(rows, config),
        "stream": _stream_summary(rows, config),
        "edits": _edits_summary(rows),
    }


def summarize(rows: list[dict], config) -> dict:
    """The study's summary in its JSON form (as summary.json holds it)."""
    return json_form(aggregate(rows, config))
