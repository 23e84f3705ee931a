"""The softmax-scaling report: `templates/report.md.j2` rendered over the summary and its table rows."""
from __future__ import annotations

from experiments.report_util import label, render
from experiments.softmax_scaling.summary import config_of

STATS_SHOWN = ("max_weight", "entropy", "jacobian_spectral", "jacobian_frobenius")
DIGITS = {"max_weight": ".4f", "entropy": ".4f", "jacobian_spectral": ".4g", "jacobian_frobenius": ".4g"}


def variance_rows(summary: dict) -> list[list]:
    """Per d_k: both variances, their predictions and relative errors, the standard error, the verdict."""
    return [[r["d_k"], format(r["unscaled"], ".4g"), r["d_k"], format(r["rel_error_unscaled"], "+.2%"),
             format(r["scaled"], ".4f"), 1, format(r["rel_error_scaled"], "+.2%"),
             format(r["relative_standard_error"], ".2%"), label(r["pass"])] for r in summary["variance"]]


def saturation_rows(summary: dict) -> list[list]:
    """Per d_k: each statistic unscaled then scaled."""
    return [[r["d_k"], *[format(r[scaling][stat], DIGITS[stat]) for stat in STATS_SHOWN
                         for scaling in ("unscaled", "scaled")]] for r in summary["saturation"]]


def limit_cells(summary: dict) -> list[str]:
    """The d_k -> infinity limit (scaled only) in the saturation table's columns after the first."""
    return [cell for stat in STATS_SHOWN for cell in ("", format(summary["limit"][stat], DIGITS[stat]))]


def markdown(summary: dict) -> str:
    """report.md of a finished study (its summary.json)."""
    return render("softmax_scaling", "report.md.j2", summary=summary, config=config_of(summary),
                  checks=summary["checks"], dims=[r["d_k"] for r in summary["variance"]],
                  worst_se=max(r["relative_standard_error"] for r in summary["variance"]),
                  variance_rows=variance_rows(summary), saturation_rows=saturation_rows(summary),
                  limit_cells=limit_cells(summary))
