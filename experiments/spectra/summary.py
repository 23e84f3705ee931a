"""The spectra study's summary: every metric per length, segment, layer and head, then the statistics the
report and the rows read.

`aggregate(rows, config)` gathers `{metric: [length][segment][layer][head]}`;
`derive` adds, per length and layer, the median and the range over heads and
segments of each quantity, the per-head slopes of log sigma_1 and of
log(sigma_2 / sigma_1) against log T, and the sanity statistics. `summarize`
is `derive` of the aggregate's JSON form, so that a committed summary derives
the same numbers again.

The segments are inputs to one checkpoint, not independent models: the
ranges describe this model on this text.
"""

from __future__ import annotations

import numpy as np

from attnjax.serialization import json_form
from experiments.lab import stats
from experiments.lab.study import select
from experiments.spectra.study import METRICS


def aggregate(rows: list[dict], config) -> dict:
    """`{"lengths", "segments", "layers", "heads", "values": {metric: [n][segment][layer][head]}}`."""
    lengths = sorted(config.lengths)
    layers = sorted({r["layer"] for r in rows}, key=lambda layer: _order(config, layer))
    heads = sorted({r["head"] for r in rows})
    values = {metric: [] for metric in METRICS}
    for n in lengths:
        per = {metric: [] for metric in METRICS}
        for s in range(config.text.num_segments):
            run = {
                (r["layer"], r["head"], r["metric"]): r["value"]
                for r in select(rows, segment=s, length=n)
            }
            for metric in METRICS:
                per[metric].append([[run[(layer, h, metric)] for h in heads] for layer in layers])
        for metric in METRICS:
            values[metric].append(per[metric])
    return {
        "lengths": lengths,
        "segments": config.text.num_segments,
        "layers": layers,
        "heads": len(heads),
        "values": values,
    }


def _order(config, layer: int) -> int:
    """A layer's place: config.layers' order, or the layer itself when every layer is analysed."""
    chosen = tuple(config.layers)
    return chosen.index(layer) if chosen else layer


def log_slopes(lengths, values) -> np.ndarray:
    """The least-squares slope of log values `[n, ...]` against log n -> `[...]`."""
    x = np.log(np.asarray(lengths, np.float64))
    y = np.log(np.asarray(values, np.float64))
    x = x - x.mean()
    return np.tensordot(x, y - y.mean(axis=0), axes=1) / (x @ x)


def _spread(x: np.ndarray) -> dict:
    """Median, min and max of `x` `[..., segment, head]` over its last two axes."""
    flat = x.reshape(x.shape[:-2] + (-1,))
    return {
        "median": np.median(flat, axis=-1).tolist(),
        "min": flat.min(axis=-1).tolist(),
        "max": flat.max(axis=-1).tolist(),
    }


def _column_counts(v: dict, lengths) -> np.ndarray:
    """Per map `[n, s, l, h]`, the rows that can see its most-attended key j: min(W, T - j) in a causal
    layer of sliding window W (rows j..j + W - 1), T - j without one."""
    n = np.asarray(lengths, np.float64)[:, None, None, None]
    seen = n - v["top_key"]
    return np.where(v["window"] > 0, np.minimum(v["window"], seen), seen)


def quantities(v: dict, lengths) -> dict:
    """Per length, segment, layer and head `[n, s, l, h]`, the quantities the report reads."""
    top = v["top_mass"] * np.asarray(lengths, np.float64)[:, None, None, None]  # max_j m_j
    return {
        "sigma_1": v["sigma_1"],
        "gap_ratio": v["sigma_2"] / v["sigma_1"],
        "slem": v["slem"],
        "sink_mass": v["sink_mass"],
        "top_mass": v["top_mass"],
        "entropy": v["entropy"],
        "normalized_entropy": v["normalized_entropy"],
        # sigma_1 over its lower bound m_j / sqrt(c_j), j the most-attended key and c_j the rows that see
        # it: ||A|| >= ||A e_j|| >= m_j / sqrt(c_j) (Cauchy-Schwarz), equal when every row that sees j
        # gives it the same weight and that column carries the norm, as a sink does.
        "column_ratio": v["sigma_1"] * np.sqrt(_column_counts(v, lengths)) / top,
    }


def _growth_excess(x: np.ndarray, allowance: np.ndarray) -> float:
    """max over consecutive lengths of (x_T - x_T' - allowance_T') / x_T' `[n, ...]`: > 0 where x falls."""
    return float(np.max((x[:-1] - x[1:] - allowance[1:]) / x[1:]))


def sanity(v: dict, lengths) -> dict:
    """The sanity rows' statistics. The subspace iteration's values are Rayleigh-Ritz values, never
    above the true ones; a lower limit is checked at the value plus its bound."""
    top = v["top_mass"] * np.asarray(lengths, np.float64)[:, None, None, None]
    sigma_1, sigma_2 = v["sigma_1"] + v["bound_1"], v["sigma_2"] + v["bound_2"]
    return {
        "sigma_1_min": float(np.min(sigma_1)),
        # ||A||^2 <= ||A||_1 ||A||_inf = max_j m_j (row sums 1).
        "norm_ratio_max": float(np.max(v["sigma_1"] / np.sqrt(top))),
        "column_ratio_min": float(np.min(sigma_1 * np.sqrt(_column_counts(v, lengths)) / top)),
        # |lambda_1 lambda_2| <= sigma_1 sigma_2 (Weyl), with lambda_1 = a_00 = 1.
        "weyl_ratio_max": float(np.max(v["slem"] / (sigma_1 * sigma_2))),
        # A_T is the leading block of A_T' (T < T', the same segment): sigma_1 and |lambda_2| cannot fall.
        "growth_excess": max(
            _growth_excess(v["sigma_1"], v["bound_1"]),
            _growth_excess(v["slem"], np.zeros_like(v["slem"])),
        ),
        "relative_bound_max": [
            float(np.max(v["bound_1"] / v["sigma_1"])),
            float(np.max(v["bound_2"] / v["sigma_2"])),
        ],
        "tolerance": float(max(lengths) * np.finfo(np.float32).eps),
    }


def derive(aggregated: dict) -> dict:
    """The aggregate (JSON form) with `statistics`."""
    lengths = aggregated["lengths"]
    v = {m: np.asarray(stats.numbers(x), np.float64) for m, x in aggregated["values"].items()}
    q = quantities(v, lengths)
    per_length = {name: _spread(x.transpose(0, 2, 1, 3)) for name, x in q.items()}  # [n, l, (s, h)]
    slopes = {
        name: _spread(log_slopes(lengths, q[name]).transpose(1, 0, 2))  # [l, (s, h)]
        for name in ("sigma_1", "gap_ratio")
    }
    largest = v["top_key"][-1]  # [s, l, h]
    return {
        **aggregated,
        "statistics": {
            "per_length": per_length,
            "slopes": slopes,
            # Per layer, at the largest length: the share of heads and segments whose most-attended key is
            # token 0.
            "sink_is_top": np.mean(largest == 0, axis=(0, 2)).tolist(),
            # Per segment, layer and head at the largest length: sigma_1's lower bound m_j / sqrt(c_j).
            "column_bound_largest": (q["sigma_1"] / q["column_ratio"])[-1].tolist(),
            "sanity": sanity(v, lengths),
            "windows": v["window"][0, 0, :, 0].tolist(),  # per layer, 0 for none
            "max_len": float(v["max_len"].max()),
        },
    }


def summarize(rows: list[dict], config) -> dict:
    """`derive` of the aggregate in its JSON form (as summary.json holds it)."""
    return derive(json_form(aggregate(rows, config)))
