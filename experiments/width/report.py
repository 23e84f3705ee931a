"""The width study's report: `templates/report.md.j2` rendered over the summary and its table rows."""

from __future__ import annotations

from experiments.lab import stats
from experiments.lab.render import render, rows_by_kind
from experiments.lab.study import config_of
from experiments.width.checks import MODEL_NAMES
from experiments.width.constants import MIN_UNITS, SIGMA_2_SLOPES, TAIL


def _mean(x: dict, spec: str) -> str:
    return format(stats.number(x["mean"]), spec)


def length_rows(summary: dict, model: str) -> list[list]:
    """Per length: the realised logit variance, sigma_2 / sigma_1, sigma_2 sqrt(n), the stable ranks of A,
    A Z, the fixed output and Z, and the relative residual of A Z (means over seeds; geometric for the
    positive ratios)."""
    m = summary["statistics"][model]
    per = m["per_length"]
    return [
        [
            n,
            _mean(m["logit_variance"][i], ".3g"),
            _mean(per["gap_ratio"][i], ".4g"),
            _mean(per["scaled_sigma_2"][i], ".4g"),
            _mean(per["stable_rank_map"][i], ".3f"),
            _mean(per["stable_rank_output"][i], ".3f"),
            _mean(per["stable_rank_fixed"][i], ".4g"),
            _mean(per["stable_rank_values"][i], ".4g"),
            _mean(m["residual_output"][i], ".4g"),
        ]
        for i, n in enumerate(summary["lengths"])
    ]


HEADER = [
    "n",
    "logit variance",
    "σ₂/σ₁",
    "σ₂√n",
    "sr(A)",
    "sr(A Z)",
    "sr((A − 11ᵀ/n) Z)",
    "sr(Z)",
    "‖A Z − 1 z̄ᵀ‖_F / ‖A Z‖_F",
]


def largest_distance_to_an_alternative(summary: dict) -> float:
    """Over the three claims' statistics of every model, the largest distance from a mean slope to the nearer
    of the two alternatives its rule decides between (gap: the bulk edge's exponent or 0; share: -1 or 0;
    the fix's difference: 1 or 0)."""
    distances = []
    for model in summary["models"]:
        m = summary["statistics"][model]
        pairs = [
            (m["slopes"]["gap_ratio"], (SIGMA_2_SLOPES[model], 0.0)),
            (m["slopes"]["output_rank_share"], (-1.0, 0.0)),
            (m["fix_slope_gain"], (1.0, 0.0)),
        ]
        for iv, alternatives in pairs:
            mean = stats.number(iv["mean"])
            distances.append(min(abs(mean - a) for a in alternatives))
    return max(distances)


def context(summary: dict) -> dict:
    return dict(
        summary=summary,
        config=config_of(summary),
        kinds=rows_by_kind(summary["predictions"]),
        min_units=MIN_UNITS,
        tail=TAIL,
        model_names=MODEL_NAMES,
        tables={model: length_rows(summary, model) for model in summary["models"]},
        header=HEADER,
        distance=largest_distance_to_an_alternative(summary),
    )


def markdown(summary: dict) -> str:
    """report.md of a finished study (its summary.json)."""
    return render("width", "report.md.j2", **context(summary))


README_RESULTS = "experiments/width/results"


def readme_section(summary: dict, timing: dict, results: str = README_RESULTS) -> str:
    """The results section of the study's documentation page, from the committed summary and `timing.json`
    (`{"default": ..., "smoke": ...}`)."""
    return render("width", "readme.md.j2", results=results, timing=timing, **context(summary))
