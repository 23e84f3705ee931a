"""The softmax-scaling report: `templates/report.md.j2` rendered over the summary and its table rows."""

from __future__ import annotations

from experiments.lab.render import label, render
from experiments.lab.study import config_of
from experiments.softmax_scaling.constants import SCALINGS, STATS

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


def _spread(x: dict) -> str:
    """A spread over seeds (`summary.spread`) as 'median [min, max]'."""
    return f"{x['median']:.3g} [{x['low']:.3g}, {x['high']:.3g}]"


def gradient_rows(summary: dict) -> list[list]:
    """Per input family, scaling and gradient: the median over samples at each d_k, as median [min, max] over seeds."""
    names = {"grad_query": "‖∂L/∂q‖", "grad_key": "‖∂L/∂K‖_F"}
    return [
        [family, scaling, names[grad], *[_spread(x) for x in by_dim]]
        for family, scalings in summary["gradient_spread"].items()
        for scaling, grads in scalings.items()
        for grad, by_dim in grads.items()
    ]


def rate_rows(summary: dict) -> list[list]:
    """Per seed: E||J||_2 at each rate width, and the fitted slope."""
    rate = summary["rate"]
    return [
        [seed, *[format(v, ".4g") for v in values], format(slope, ".3f")]
        for seed, (values, slope) in enumerate(zip(rate["values"], rate["slopes"]))
    ]


def _of_kind(summary: dict, kind: str) -> list[dict]:
    return [p for p in summary["predictions"] if p["kind"] == kind]


def context(summary: dict) -> dict:
    """What both templates read."""
    return dict(
        summary=summary,
        config=config_of(summary),
        checks=summary["checks"],
        predictions=_of_kind(summary, "prediction"),
        sanity=_of_kind(summary, "sanity"),
        variance_rows=variance_rows(summary),
        saturation_rows=saturation_rows(summary),
        limit_cells=limit_cells(summary),
        gradient_rows=gradient_rows(summary),
        gradient_dims=[f"d_k={d}" for d in summary["dims"]],
        rate_rows=rate_rows(summary),
        rate_dims=[f"d_k={d}" for d in summary["rate"]["dims"]],
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
