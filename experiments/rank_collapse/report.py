"""The rank-collapse report and README section: `templates/*.md.j2` rendered over the summary (see `context.py`)."""

from __future__ import annotations

from typing import Optional

from experiments.lab.render import render
from experiments.rank_collapse.context import readme_context, report_context

README_RESULTS = "experiments/rank_collapse/results"


def markdown(summary: dict) -> str:
    """report.md of a finished study (its summary.json)."""
    return render("rank_collapse", "report.md.j2", **report_context(summary))


def readme_section(
    summary: dict, timing: Optional[dict] = None, results: str = README_RESULTS
) -> str:
    """Markdown of the README's rank-collapse "## Results" section, from the default run's summary.

    `timing`: `{"default": wall time of the default run, "smoke": of the smoke
    variant, "note": how it was measured}` (`results/timing.json`); `results`:
    where the summary, report and plots are committed.
    """
    return render("rank_collapse", "readme.md.j2", **readme_context(summary, timing, results))
