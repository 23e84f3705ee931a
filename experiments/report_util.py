"""Markdown pieces shared by the reports: numbers, tables, prediction records (see `attnjax.study.prediction`)."""
from __future__ import annotations

import math

from attnjax.study import verdict

LABELS = {"pass": "PASS", "fail": "FAIL", "not measured": "not measured"}


def fmt(value) -> str:
    """A number for a table: 3 decimals in [1e-3, 1e4), else scientific; 'n/a' for None."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)) and math.isfinite(value) and (value == 0 or 1e-3 <= abs(value) < 1e4):
        return f"{value:.3f}" if isinstance(value, float) else str(value)
    return f"{value:.2e}" if isinstance(value, (int, float)) and math.isfinite(value) else str(value)


def label(passed) -> str:
    """A verdict as the reports print it: PASS, FAIL or 'not measured' (from True/False/None or a verdict)."""
    return LABELS[passed if isinstance(passed, str) else verdict(passed)]


def markdown_table(header, rows) -> list[str]:
    """Markdown table lines: `header` cells, then one line per row of cells ('|' inside cells escaped)."""
    line = lambda cells: "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"  # noqa: E731
    return [line(header), "|" + "---|" * len(header)] + [line(cells) for cells in rows]


def count(predictions, which: str) -> int:
    """How many prediction records have verdict `which`."""
    return sum(p["verdict"] == which for p in predictions)


def predictions_table(predictions) -> list[str]:
    """Markdown table lines of prediction records."""
    rows = [[p["name"], p["source"], p["prediction"], fmt(p["measured"]), label(p["verdict"]), p["note"]]
            for p in predictions]
    return markdown_table(["check", "source", "prediction", "measured", "result", "note"], rows)
