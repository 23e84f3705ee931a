"""The power-iteration study's report: `templates/report.md.j2` over `context`."""
from __future__ import annotations

from experiments.power_iteration import context
from experiments.report_util import render


def markdown(summary: dict) -> str:
    """The Markdown report of one run (`summary.json`, with its predictions and plots)."""
    return render("power_iteration", "report.md.j2", **context.report(summary))
