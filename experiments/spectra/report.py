"""The spectra study's report: `templates/report.md.j2` rendered over the summary and its tables."""

from __future__ import annotations

from experiments.lab import stats
from experiments.lab.render import checkpoint_label, render, rows_by_kind
from experiments.lab.study import config_of

COLUMNS = (
    ("sigma_1", "σ₁", ".4g"),
    ("gap_ratio", "σ₂/σ₁", ".3g"),
    ("slem", "|λ₂|", ".3g"),
    ("sink_mass", "mass on token 0", ".3f"),
    ("normalized_entropy", "entropy / log(visible keys)", ".3f"),
    ("column_ratio", "σ₁ √c_j / m_j", ".3f"),
)


def _cell(spread: dict, index, spec: str) -> str:
    """'median [min, max]' of one entry of a `summary._spread`."""
    median, low, high = (stats.number(_at(spread[k], index)) for k in ("median", "min", "max"))
    return f"{median:{spec}} [{low:{spec}}, {high:{spec}}]"


def _at(x, index):
    for i in index:
        x = x[i]
    return x


def layer_label(summary: dict, i: int) -> str:
    """The i-th analysed layer, with its sliding window where it has one."""
    window = summary["statistics"]["windows"][i]
    layer = summary["layers"][i]
    return f"{layer} (window {window:g})" if window else f"{layer}"


def length_table(summary: dict, n_index: int) -> list[list]:
    """Per layer at one length: each quantity's median over heads and segments, with its range."""
    per = summary["statistics"]["per_length"]
    return [
        [layer_label(summary, i)]
        + [_cell(per[name], (n_index, i), spec) for name, _, spec in COLUMNS]
        for i in range(len(summary["layers"]))
    ]


def slope_table(summary: dict) -> list[list]:
    """Per layer: the slopes of log sigma_1 and log(sigma_2 / sigma_1) against log T (median over heads
    and segments, with the range), and the share of heads whose most-attended key is token 0."""
    s = summary["statistics"]
    return [
        [
            layer_label(summary, i),
            _cell(s["slopes"]["sigma_1"], (i,), ".3f"),
            _cell(s["slopes"]["gap_ratio"], (i,), ".3f"),
            f"{s['sink_is_top'][i]:.2f}",
        ]
        for i in range(len(summary["layers"]))
    ]


def context(summary: dict) -> dict:
    config = config_of(summary)
    return dict(
        summary=summary,
        config=config,
        model_label=config.model.path or checkpoint_label(config.model.name),
        kinds=rows_by_kind(summary["predictions"]),
        header=["layer"] + [title for _, title, _ in COLUMNS],
        tables=[length_table(summary, i) for i in range(len(summary["lengths"]))],
        slopes=slope_table(summary),
        sanity=summary["statistics"]["sanity"],
    )


def markdown(summary: dict) -> str:
    """report.md of a finished study (its summary.json)."""
    return render("spectra", "report.md.j2", **context(summary))
