"""Pieces shared by the studies' reports: prediction records and their markdown table."""
from __future__ import annotations

import math


def check_record(name, source, prediction, measured, passed, note="") -> dict:
    """One literature check: what was predicted, what was measured, pass (True/False) or None."""
    return {"name": name, "source": source, "prediction": prediction, "measured": measured,
            "passed": passed, "note": note}


def fmt(value) -> str:
    """A number for a table: 3 decimals in [1e-3, 1e4), else scientific; 'n/a' for None."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)) and math.isfinite(value) and (value == 0 or 1e-3 <= abs(value) < 1e4):
        return f"{value:.3f}" if isinstance(value, float) else str(value)
    return f"{value:.2e}" if isinstance(value, (int, float)) and math.isfinite(value) else str(value)


def verdict(passed) -> str:
    return {True: "PASS", False: "FAIL", None: "not measured"}[passed]


def markdown_table(header, rows) -> list[str]:
    """Markdown table lines: `header` cells, then one line per row of cells ('|' inside cells escaped)."""
    line = lambda cells: "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"  # noqa: E731
    return [line(header), "|" + "---|" * len(header)] + [line(cells) for cells in rows]


def predictions_table(predictions) -> list[str]:
    """Markdown table lines of prediction records."""
    rows = [[p["name"], p["source"], p["prediction"], fmt(p["measured"]), verdict(p["passed"]), p["note"]]
            for p in predictions]
    return markdown_table(["check", "source", "prediction", "measured", "result", "note"], rows)
