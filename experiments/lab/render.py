"""Markdown pieces shared by the reports: numbers, tables, prediction records (see `experiments.lab.study.prediction`),
and the Jinja2 environment that renders each study's `templates/`.

A study's report and README section are templates over its summary dict:
`render("rank_collapse", "report.md.j2", summary=summary, ...)`. Templates see
the filters `fmt`, `num` (`x | num(".3g")` is `format(x, ".3g")`), `label`,
`count`, `table` (rows -> Markdown table lines joined by newlines;
`table(header)`), `interval` (`interval_text`) and `predictions_table`, so no Python writes prose or table pipes.
"""

from __future__ import annotations

import functools
import math
import os

import jinja2

from experiments.lab.stats import number
from experiments.lab.study import KINDS, VERDICTS, verdict

LABELS = {
    "pass": "PASS",
    "fail": "FAIL",
    "not measured": "not measured",
    "not applicable": "not applicable",
}


def fmt(value) -> str:
    """A number for a table: 3 decimals in [1e-3, 1e4), else scientific; 'n/a' for None."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if (
        isinstance(value, (int, float))
        and math.isfinite(value)
        and (value == 0 or 1e-3 <= abs(value) < 1e4)
    ):
        return f"{value:.3f}" if isinstance(value, float) else str(value)
    return (
        f"{value:.2e}" if isinstance(value, (int, float)) and math.isfinite(value) else str(value)
    )


def label(passed) -> str:
    """A verdict as the reports print it: PASS, FAIL or 'not measured' (from True/False/None or a verdict)."""
    return LABELS[passed if isinstance(passed, str) else verdict(passed)]


ALIGNMENTS = {"l": "---|", "r": "---:|", "c": ":---:|"}


def _cell(value, pad_empty: bool) -> str:
    """One cell between two pipes: ' value ' with '|' escaped; ' ' for an empty one unless `pad_empty`."""
    text = str(value).replace("|", "\\|")
    return " " if text == "" and not pad_empty else f" {text} "


def markdown_table(header, rows, align: str | None = None, pad_empty: bool = True) -> list[str]:
    """Markdown table lines: `header` cells, then one line per row of cells ('|' inside cells escaped).

    `align`: one letter per column, `l`, `r` or `c` (`---`, `---:`, `:---:`);
    default `---` for every column. `pad_empty=False` writes an empty cell as
    `| |` rather than `|  |`.
    """
    if align is not None and (len(align) != len(header) or set(align) - set(ALIGNMENTS)):
        raise ValueError(
            f"align must give one of l, r, c for each of the {len(header)} columns; got {align!r}"
        )

    def line(cells):
        return "|" + "|".join(_cell(c, pad_empty) for c in cells) + "|"

    rule = "|" + "".join(ALIGNMENTS[a] for a in (align or "l" * len(header)))
    return [line(header), rule] + [line(cells) for cells in rows]


def count(predictions, which: str) -> int:
    """How many prediction records have verdict `which`."""
    return sum(p["verdict"] == which for p in predictions)


def kind_counts(records) -> dict[str, dict[str, int]]:
    """`{kind: {verdict: count}}` over the row records, for every kind of `KINDS` (a record
    without a kind is a prediction): what a report heading says of each kind."""
    counts = {kind: {v: 0 for v in VERDICTS} for kind in KINDS}
    for p in records:
        counts[p.get("kind", "prediction")][p["verdict"]] += 1
    return counts


def rows_by_kind(records) -> list[dict]:
    """The row records grouped by kind, in `KINDS` order (a record without a kind is a prediction):
    `[{"kind", "counts": {verdict: count}, "records": [...]}]`, every kind listed, empty or not."""
    counts = kind_counts(records)
    return [
        {
            "kind": kind,
            "counts": counts[kind],
            "records": [p for p in records if p.get("kind", "prediction") == kind],
        }
        for kind in KINDS
    ]


def predictions_table(predictions) -> list[str]:
    """Markdown table lines of prediction records."""
    rows = [
        [
            p["name"],
            p["source"],
            p["prediction"],
            fmt(p["measured"]),
            label(p["verdict"]),
            p["note"],
        ]
        for p in predictions
    ]
    return markdown_table(["check", "source", "prediction", "measured", "result", "note"], rows)


def interval_text(x: dict, spec: str = ".3g") -> str:
    """An interval dict (`experiments.lab.stats.interval`, or its JSON form with 'nan' ends) as
    'mean [low, high]', each `format(., spec)`."""
    mean, low, high = (number(x[k]) for k in ("mean", "low", "high"))
    return f"{mean:{spec}} [{low:{spec}}, {high:{spec}}]"


def num(value, spec: str) -> str:
    """Template filter: `value | num(spec)` -> `format(value, spec)` (e.g. `num(".3g")`, `num("+.2%")`)."""
    return format(value, spec)


def table(rows, header, **options) -> str:
    """Template filter: `rows | table(header)` -> the Markdown table as one string (no trailing newline);
    `options` as `markdown_table`'s (`table(header, align="lrr")`)."""
    return "\n".join(markdown_table(header, rows, **options))


# The bundled checkpoints by their config names, named exactly as their packages hold them
# (all-MiniLM-L6-v2; SmolLM2-135M-Instruct quantised to Q4_1, GGUF; Gemma 3 270M, the base
# model, quantised to Q4_K_M, GGUF).
CHECKPOINT_LABELS = {
    "minilm": "all-MiniLM-L6-v2",
    "smollm2": "SmolLM2-135M-Instruct Q4_1",
    "gemma3": "Gemma 3 270M Q4_K_M",
}


def checkpoint_label(name: str) -> str:
    """A model's display name: the bundled checkpoint's exact name, else its config name."""
    return CHECKPOINT_LABELS.get(name, name)


# One numbering in every report (the API's): templates read it as `numbering`.
NUMBERING = (
    "Numbering: layers count from 0, as in the API (layer i is `model.blocks[i]`, the figures' titles "
    "and captured stacks count alike); a depth l counts the layers applied: X_0 is the input and X_l the "
    "output of layer l - 1, so r_l, a product of the first l layers' maps and every depth window are "
    "indexed by depth."
)


@functools.lru_cache(maxsize=None)
def environment(study: str) -> jinja2.Environment:
    """The Jinja2 environment of `experiments/<study>/templates/` (strict: an undefined name raises)."""
    folder = os.path.join(os.path.dirname(os.path.dirname(__file__)), study, "templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(
        fmt=fmt,
        num=num,
        label=label,
        count=count,
        table=table,
        interval=interval_text,
        predictions_table=lambda checks: "\n".join(predictions_table(checks)),
    )
    env.globals["numbering"] = NUMBERING
    return env


def render(study: str, template: str, **context) -> str:
    """Render `experiments/<study>/templates/<template>` with `context` (e.g. `summary=...`)."""
    return environment(study).get_template(template).render(**context)
