"""The pretrained study's report and README section: `templates/*.md.j2` over `context`."""

from __future__ import annotations

from experiments.lab.render import render
from experiments.pretrained import context


def markdown(summary: dict) -> str:
    """The Markdown report of one run (`summary.json`, with its predictions and plots)."""
    return render("pretrained", "report.md.j2", **context.report(summary))


def readme_section(results: dict, times: dict | None = None) -> str:
    """Markdown of the README's "Results: pretrained models" section.

    `results`: `{results directory: its summary.json}` (MiniLM first);
    `times`: `{results directory: wall time of the run}`.
    """
    return render("pretrained", "readme.md.j2", **context.readme(results, times))
