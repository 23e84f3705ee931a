"""The long-context study's report (`templates/report.md.j2`) and its documentation section with both models
side by side (`templates/readme.md.j2`)."""

from __future__ import annotations

from experiments.lab.render import checkpoint_label, interval_text, render, rows_by_kind
from experiments.long_context.checks import DIGITS

# The committed default runs, one per model: the results section reads both.
README_RESULTS = "experiments/long_context/results"
RESULTS = {"smollm2": README_RESULTS, "gemma3": "experiments/long_context/results_gemma3"}


def ci(x) -> str:
    """An interval as the report prints it: 'mean [low, high]' (`interval_text`, `DIGITS`)."""
    return "-" if x is None else interval_text(x, DIGITS)


def label(model_config) -> str:
    """The checkpoint as reports name it: its path, else the bundled one's exact name."""
    return model_config["path"] or checkpoint_label(model_config["name"])


def context(summary: dict) -> dict:
    """The template's context: the summary, its rows by kind, the model's name, `ci`."""
    return {
        **summary,
        "ci": ci,
        "model_label": label(summary["config"]["model"]),
        "kinds": rows_by_kind(summary["predictions"]),
    }


def markdown(summary: dict) -> str:
    """The Markdown report of one run (`summary.json`, with its predictions and plots)."""
    return render("long_context", "report.md.j2", **context(summary))


def _measured(row: dict) -> str:
    """A row's measured value as the table prints it: 'n/a' for none, a number to 3 digits."""
    value = row["measured"]
    if value is None:
        return "n/a"
    return format(value, ".3g") if isinstance(value, (int, float)) else str(value)


def side_by_side(summaries: dict) -> list[list[str]]:
    """One row per check of the first summary: its source, then per model the measured value and the
    verdict with the row's kind (a kind can differ between models: a setting one model does not offer)."""
    first = next(iter(summaries.values()))["predictions"]
    by_name = {m: {p["name"]: p for p in s["predictions"]} for m, s in summaries.items()}
    rows = []
    for p in first:
        cells = [p["name"], p["source"]]
        for m in summaries:
            other = by_name[m].get(p["name"])
            cells += (
                ["-", "-"]
                if other is None
                else [_measured(other), f"{other['verdict']} ({other['kind']})"]
            )
        rows.append(cells)
    return rows


def readme_section(summaries: dict, timings: dict, results: dict | None = None) -> str:
    """The documentation's results section from the committed summaries `{model: summary}` and their
    `timing.json`s `{model: {"default": ..., "smoke": ..., "note": ...}}`; `results` `{model: link}`."""
    results = results or RESULTS
    labels = {m: label(s["config"]["model"]) for m, s in summaries.items()}
    return render(
        "long_context",
        "readme.md.j2",
        summaries=summaries,
        timings=timings,
        results=results,
        labels=labels,
        rows=side_by_side(summaries),
        header=["check", "source"]
        + [f"{labels[m]}: {what}" for m in summaries for what in ("measured", "verdict")],
    )
