"""The long-context study's report: `templates/report.md.j2` over the summary."""

from __future__ import annotations

from experiments.lab.render import checkpoint_label, interval_text, render
from experiments.long_context.checks import DIGITS

README_RESULTS = "experiments/long_context/results"


def ci(x: dict) -> str:
    """An interval as the report prints it: 'mean [low, high]' (`interval_text`, `DIGITS`)."""
    return interval_text(x, DIGITS)


def _model_label(model: dict) -> str:
    """The checkpoint as the report names it: its path, else the bundled one's exact name."""
    return model["path"] or checkpoint_label(model["name"])


def context(summary: dict) -> dict:
    """The template's context: the summary, its predictions and sanity checks apart, and `ci`."""
    records = summary["predictions"]
    return {
        **summary,
        "ci": ci,
        "model_label": _model_label(summary["config"]["model"]),
        "predictions": [p for p in records if p.get("kind") != "sanity"],
        "sanity": [p for p in records if p.get("kind") == "sanity"],
    }


def markdown(summary: dict) -> str:
    """The Markdown report of one run (`summary.json`, with its predictions and plots)."""
    return render("long_context", "report.md.j2", **context(summary))


def readme_section(summary: dict, timing: dict, results: str = README_RESULTS) -> str:
    """The README's long-context results section, from the committed summary and `timing.json`
    (`{"default": ..., "smoke": ..., "note": ...}`)."""
    return render(
        "long_context", "readme.md.j2", results=results, timing=timing, **context(summary)
    )
