"""The power-iteration study's report and README section: `templates/report.md.j2` and
`templates/readme.md.j2` over `context`."""

from __future__ import annotations

from experiments.lab.render import render
from experiments.power_iteration import context

README_RESULTS = "experiments/power_iteration/results"


def markdown(summary: dict) -> str:
    """The Markdown report of one run (`summary.json`, with its predictions and plots)."""
    return render("power_iteration", "report.md.j2", **context.report(summary))


def readme_section(summary: dict, times: dict, results: str = README_RESULTS) -> str:
    """The "Results: power iteration" section, from the committed `summary.json` and `timing.json`;
    `results`: the committed results' directory as the page showing the section links to it."""
    return render(
        "power_iteration", "readme.md.j2", results=results, **context.readme(summary, times)
    )
