"""Benchmark rows as text: a plain table for the terminal and a Markdown report.

`markdown_report(payload)` renders `benchmark.json` (environment and rows);
the README's Performance table is `markdown_report(payload, only_headline=True)`
of the committed CPU run, and a test checks that they agree.
"""

from __future__ import annotations

from typing import Sequence

from experiments.lab.render import markdown_table


def format_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Plain-text table of `rows` restricted to `columns` (missing cells blank)."""

    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return "" if value is None else str(value)

    body = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [
        max(len(c), *(len(r[i]) for r in body)) if body else len(c) for i, c in enumerate(columns)
    ]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in body]
    return "\n".join(lines)


def _figures(row: dict) -> str:
    """The secondary numbers of a row as one cell: TFLOP/s, % of peak, tokens/s, temp memory, note."""
    parts = []
    if row.get("tflops") is not None:
        parts.append(f"{row['tflops']:.3g} TFLOP/s")
    if row.get("pct_peak") is not None and row.get("name") != "matmul peak":
        parts.append(f"{row['pct_peak']:.3g}% of matmul peak")
    if row.get("tokens_per_s") is not None:
        parts.append(f"{row['tokens_per_s']:.3g} tokens/s")
    if row.get("temp_mb") is not None:
        parts.append(f"{row['temp_mb']:.4g} MiB temp")
    if row.get("note"):
        parts.append(row["note"])
    return "; ".join(parts)


def _number(value) -> str:
    return "" if value is None else f"{value:.3g}"


def headline(row: dict) -> bool:
    """Rows for a short summary: those with a target, the peak, the crossover, all of training and the
    train step, and the real models."""
    return (
        "target" in row
        or "crossover_length" in row
        or row["section"] in ("training", "train_step", "pretrained")
        or row["name"] == "matmul peak"
    )


def markdown_report(payload: dict, *, only_headline: bool = False) -> str:
    """Markdown of a benchmark payload: one line naming device, versions and date, then a table."""
    env = payload["environment"]
    title = (
        f"Device: {env['device_kind']} ({env['backend']}, {env['device_count']} XLA devices, "
        f"{env.get('cpu_count')} CPU cores); jax {env['jax']}, jaxlib {env['jaxlib']}, "
        f"Python {env['python']}; {env['date']}."
    )
    rows = [r for r in payload["rows"] if headline(r)] if only_headline else payload["rows"]
    met = {True: "yes", False: "**no**", None: ""}
    cells = [
        [
            r["section"],
            r["name"],
            r["shape"],
            _number(r.get("seconds")),
            _number(r.get("ratio")),
            r.get("reference") or "",
            r.get("target") or "",
            met[r.get("ok")],
            _figures(r),
        ]
        for r in rows
    ]
    header = [
        "section",
        "measurement",
        "shape",
        "seconds",
        "ratio",
        "reference",
        "target",
        "met",
        "figures",
    ]
    return "\n".join([title, ""] + markdown_table(header, cells)) + "\n"
