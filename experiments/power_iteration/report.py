"""The power-iteration study's report and README section: `templates/report.md.j2` and
`templates/readme.md.j2` over `context`."""

from __future__ import annotations

from experiments.lab.render import render
from experiments.power_iteration import context


def markdown(summary: dict) -> str:
    """The Markdown report of one run (`summary.json`, with its predictions and plots)."""
    return render("power_iteration", "report.md.j2", **context.report(summary))


def readme_section(summary: dict, times: dict) -> str:
    """The README's "Results: power iteration" section, from the committed `summary.json` and `timing.json`."""
    return render("power_iteration", "readme.md.j2", **context.readme(summary, times))
