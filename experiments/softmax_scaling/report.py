"""The softmax-scaling report: `templates/report.md.j2` rendered over the summary and its table rows."""

from __future__ import annotations

from experiments.lab.render import interval_text, label, render, rows_by_kind
from experiments.lab.study import config_of
from experiments.softmax_scaling.constants import MIN_UNITS, PAPER_D_K, SCALINGS, STATS

README_RESULTS = "experiments/softmax_scaling/results"
DIGITS = {
    "max_weight": ".4f",
    "entropy": ".4f",
    "jacobian_spectral": ".4g",
    "jacobian_frobenius": ".4g",
}


def variance_rows(summary: dict) -> list[list]:
    """Per d_k: both variances, their predictions and relative errors, the standard error, the verdict."""
    return [
        [
            r["d_k"],
            format(r["unscaled"], ".4g"),
            r["d_k"],
            format(r["rel_error_unscaled"], "+.2%"),
            format(r["scaled"], ".4f"),
            1,
            format(r["rel_error_scaled"], "+.2%"),
            format(r["relative_standard_error"], ".2%"),
            label(r["pass"]),
        ]
        for r in summary["variance"]
    ]


def saturation_rows(summary: dict) -> list[list]:
    """Per d_k: each statistic unscaled then scaled."""
    return [
        [
            r["d_k"],
            *[format(r[scaling][stat], DIGITS[stat]) for stat in STATS for scaling in SCALINGS],
        ]
        for r in summary["saturation"]
    ]


def limit_cells(summary: dict) -> list[str]:
    """The d_k -> infinity limit (scaled only) in the saturation table's columns after the first."""
    return [cell for stat in STATS for cell in ("", format(summary["limit"][stat], DIGITS[stat]))]


STATISTIC_NAMES = {"mean": "mean", "median": "median", "above": "P(norm > tau)"}


def gradient_rows(summary: dict) -> list[list]:
    """Per input family, scaling, gradient and statistic: its 95% interval over seeds at each d_k
    (mean and median: geometric mean over seeds and its interval on the log scale)."""
    names = {"grad_query": "‖∂L/∂q‖", "grad_key": "‖∂L/∂K‖_F"}
    return [
        [family, scaling, names[grad], STATISTIC_NAMES[stat], *[interval_text(x) for x in by_dim]]
        for family, scalings in summary["gradient_intervals"].items()
        for scaling, grads in scalings.items()
        for grad, stats in grads.items()
        for stat, by_dim in stats.items()
    ]


def rate_rows(summary: dict) -> list[list]:
    """Per seed: E||J||_2 at each rate width, and the slope fitted over every width."""
    rate = summary["rate"]
    return [
        [seed, *[format(v, ".4g") for v in values], format(slope, ".3f")]
        for seed, (values, slope) in enumerate(zip(rate["values"], rate["slopes"]))
    ]


def prefactor_rows(summary: dict) -> list[list]:
    """Per rate width: the measured E||J||_2 sqrt(d_k) (mean over seeds) and f(0) (1 - a / sqrt(d_k))."""
    return [
        [d, format(m, ".4g"), format(p, ".4g")]
        for d, m, p in zip(
            summary["rate"]["dims"], summary["rate_prefactor"], summary["rate_predicted_prefactor"]
        )
    ]


def context(summary: dict) -> dict:
    """What both templates read."""
    return dict(
        summary=summary,
        config=config_of(summary),
        checks=summary["checks"],
        kinds=rows_by_kind(summary["predictions"]),
        min_units=MIN_UNITS,
        variance_rows=variance_rows(summary),
        saturation_rows=saturation_rows(summary),
        limit_cells=limit_cells(summary),
        gradient_rows=gradient_rows(summary),
        gradient_dims=[f"d_k={d}" for d in summary["dims"]],
        rate_rows=rate_rows(summary),
        prefactor_rows=prefactor_rows(summary),
        rate_dims=[f"d_k={d}" for d in summary["rate"]["dims"]],
        paper=summary["dims"].index(PAPER_D_K) if PAPER_D_K in summary["dims"] else None,
    )


def markdown(summary: dict) -> str:
    """report.md of a finished study (its summary.json)."""
    return render("softmax_scaling", "report.md.j2", **context(summary))


def readme_section(summary: dict, timing: dict, results: str = README_RESULTS) -> str:
    """The README's softmax-scaling results section, from the committed summary and `timing.json`
    (`{"default": ..., "smoke": ..., "note": ...}`)."""
    return render(
        "softmax_scaling", "readme.md.j2", results=results, timing=timing, **context(summary)
    )
