"""Markdown pieces shared by the reports: numbers, tables, prediction records (see `attnjax.study.prediction`),
and the Jinja2 environment that renders each study's `templates/`.

A study's report and README section are templates over its summary dict:
`render("rank_collapse", "report.md.j2", summary=summary, ...)`. Templates see
the filters `fmt`, `label`, `count` and `table` (rows -> Markdown table lines
joined by newlines; `table(header)`) and `predictions_table` (prediction records -> their
table), so no Python writes prose or table pipes.
"""
from __future__ import annotations

import functools
import math
import os

import jinja2

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


def table(rows, header) -> str:
    """Template filter: `rows | table(header)` -> the Markdown table as one string (no trailing newline)."""
    return "\n".join(markdown_table(header, rows))


@functools.lru_cache(maxsize=None)
def environment(study: str) -> jinja2.Environment:
    """The Jinja2 environment of `experiments/<study>/templates/` (strict: an undefined name raises)."""
    folder = os.path.join(os.path.dirname(__file__), study, "templates")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters.update(fmt=fmt, label=label, count=count, table=table,
                       predictions_table=lambda predictions: "\n".join(predictions_table(predictions)))
    return env


def render(study: str, template: str, **context) -> str:
    """Render `experiments/<study>/templates/<template>` with `context` (e.g. `summary=...`)."""
    return environment(study).get_template(template).render(**context)
