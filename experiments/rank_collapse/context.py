"""What the rank-collapse templates see: the summary's numbers, and table rows of formatted cells.

`report_context(summary)` feeds `templates/report.md.j2`, `readme_context(...)`
feeds `templates/readme.md.j2`. Cells whose format is more than `fmt` (lists
of numbers, empty cells) are formatted here; headings, prose and table layout
live in the templates.
"""

from __future__ import annotations

from typing import Optional

from attnjax import nn
from experiments.lab.render import fmt, kind_counts
from experiments.lab.study import KINDS, config_of
from experiments.rank_collapse.checks import numbers, std_label
from experiments.rank_collapse.constants import LOCAL_WINDOW, RESOLVED, SATURATED, SWEEPS

# Layers shown in a per-layer table (the profiles are in summary.json).
PROFILE_ROWS = 9
# Layers shown in the Dong et al. table.
DONG_ROWS = 8
NOCI_ARCHITECTURES = ("skip", "skip_mlp", "post_ln")
# What each kind of row is, as the report and the README head its table.
KIND_HEADINGS = {
    "prediction": "Predictions: a paper's own claim, in the paper's setting (evidence about the paper)",
    "replication": "Replications: a paper's own number against ours, measured the same way (evidence "
    "about the paper)",
    "hypothesis": "Hypotheses: claims of this codebase, or a paper's claim in a setting the paper does "
    "not use (not evidence about a paper)",
    "sanity": "Sanity conditions: identities, constructions, resolution and training conditions; they "
    "fail only on a bug (not evidence about a paper)",
    "not applicable": "Not applicable: the paper's setting or constant is not retrieved; measured, no "
    "verdict (never evidence against the paper)",
}
NOCI_STATISTICS = (
    ("rank", "log(r_L(L_max) / r_L(L_min))"),
    ("cosine", "slope of the token cosine at L per doubling of L"),
    ("gradient", "slope of log g(L) per doubling of L"),
)
HIDDEN = ("residual_fro", "residual_l1inf", "residual_abs_fro", "mean_token_norm", "token_cosine")
ATTENTION = ("attention_entropy_normalized", "dobrushin", "logit_variance")


def _joined(values, spec: str) -> str:
    return ", ".join(format(float(v), spec) for v in values)


def _fmt_all(values) -> list[str]:
    return [fmt(float(v)) for v in values]


def _fmt_interval(x: dict) -> str:
    """An interval (`experiments.lab.stats.interval`) as 'mean [low, high]', each `fmt`."""
    return f"{fmt(x['mean'])} [{fmt(x['low'])}, {fmt(x['high'])}]"


def seed_counts(config) -> str:
    """'2 seeds', then the sweeps and architectures with their own count: '2 seeds (10 in the scale and mask
    sweeps and for attention_only in the train sweep)'."""
    sweeps, architectures = {}, {}
    for sweep in SWEEPS:
        block = config[f"{sweep}_sweep"]
        count = block.get("num_seeds")
        if count is not None and count != config.num_seeds:
            sweeps.setdefault(count, []).append(sweep)
        for architecture, seeds in block.get("architecture_seeds", ()):
            architectures.setdefault(seeds, []).append(f"{architecture} in the {sweep} sweep")

    def listed(names):
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    extra = []
    for count in dict.fromkeys([*sweeps, *architectures]):
        parts = []
        if count in sweeps:
            plural = "s" if len(sweeps[count]) > 1 else ""
            parts.append(f"in the {listed(sweeps[count])} sweep{plural}")
        if count in architectures:
            parts.append(f"for {listed(architectures[count])}")
        extra.append(f"{count} " + " and ".join(parts))
    return f"{config.num_seeds} seeds" + (f" ({'; '.join(extra)})" if extra else "")


def kind_sections(records: list[dict]) -> list[dict]:
    """The rows by kind, every kind of `KINDS` in order: `[{"kind", "heading", "rows", "counts"}]`
    (`counts`: `{verdict: n}`, `experiments.lab.render.kind_counts`)."""
    counts = kind_counts(records)
    return [
        {
            "kind": kind,
            "heading": KIND_HEADINGS[kind],
            "rows": [r for r in records if r.get("kind", "prediction") == kind],
            "counts": counts[kind],
        }
        for kind in KINDS
    ]


# --------------------------------------------------------------------------
# Report tables


def profile_rows(profile: dict) -> list[list]:
    """Per depth l (0: the input): residuals (relative, absolute), shared component, cosine, and the
    entropy, tau and logit variance of the layer into depth l, layer l - 1 (`profile`: Dong et al.'s
    run's mean per-layer metrics)."""
    hidden, attention = [profile[k] for k in HIDDEN], [profile[k] for k in ATTENTION]
    rows = []
    for layer in range(min(len(hidden[0]), PROFILE_ROWS)):
        cells = [fmt(float(m[layer - 1])) if layer else "" for m in attention]
        rows.append([layer, *[fmt(float(m[layer])) for m in hidden], *cells])
    if len(hidden[0]) > PROFILE_ROWS:
        rows.append(["...", "", "", "", "", "", "", "", ""])
    return rows


def regime_rows(summary: dict) -> list[list]:
    return [
        [
            row["architecture"],
            std_label(row["embedding_std"]),
            fmt(row["entropy"]),
            fmt(row["tau"]),
            fmt(row["logit_variance"]),
            fmt(row["predicted"]),
            fmt(row["r_1"]),
            fmt(row["r_4"]),
        ]
        for row in summary["regime_table"]
    ]


def _blank(value) -> str:
    """A number, or an empty cell for None (not resolved, undefined)."""
    return "" if value is None else fmt(float(value))


def dong_context(dong: dict) -> dict:
    """Dong et al.'s tables of the attention-only run: the per-layer medians in log space, the local
    exponent and the saturation slope, the eps-scaling identity per layer, and the bound's slack and
    looseness per resolved layer (as functions of gamma)."""
    table = dong["table"]
    rows = [
        [
            layer,
            fmt(float(table["median"][layer])),
            _blank(table["log_inverse"][layer]),
            _blank(table["growth"][layer]),
        ]
        for layer in range(min(len(table["median"]), DONG_ROWS))
    ]
    looseness = [
        [
            row["depth"],
            row["points"],
            fmt(row["slack"]),
            fmt(row["median"]),
            fmt(row["min"]),
            fmt(row["max"]),
        ]
        for row in dong["looseness"]["rows"]
    ]
    identity = dong["identity"]
    identity_rows = (
        [
            [
                row["depth"],
                *[format(v, ".5f") for v in row["slope"]],
                *[format(v, ".2g") for v in row["deviation"]],
                *[format(v, ".2g") for v in row["max_deviation"]],
            ]
            for row in identity["layers"]
        ]
        if identity
        else []
    )
    decades = (
        [f"[{b:g}, {a:g}]" for a, b in zip(identity["eps"][:-1], identity["eps"][1:])]
        if identity
        else []
    )
    return {
        "depth": dong["depth"],
        "std": std_label(dong["embedding_std"]),
        "profile_rows": profile_rows(dong["profile"]),
        "rows": rows,
        "exponent": dong["exponent"],
        "saturation": dong["saturation"],
        "identity_rows": identity_rows,
        "identity_header": (
            ["depth l"]
            + [f"slope {d}" for d in decades]
            + [f"median |slope - 3| {d}" for d in decades]
            + [f"largest |slope - 3| {d}" for d in decades]
        ),
        "looseness": looseness,
        "constant": dong["constant"],
    }


def noci_rows(summary: dict) -> list[list]:
    untrained = numbers(summary["untrained"])
    return [
        [
            arch,
            run["depth"],
            fmt(run["residual"]),
            *_fmt_all(run["absolute"]),
            *_fmt_all(run["shared"]),
            fmt(run["cosine"]),
        ]
        for arch in NOCI_ARCHITECTURES
        for run in untrained.get(arch, [])
    ]


def last_layer_table(summary: dict) -> Optional[dict]:
    """`{"depths": ["L=d", ...], "rows"}`: r_L of every architecture (rows) at every depth (columns)."""
    table = numbers(summary["last_layer"])
    if table is None:
        return None
    rows = [
        [row["architecture"], *["" if r is None else fmt(r) for r in row["residual"]]]
        for row in table["rows"]
    ]
    return {"depths": [f"L={d}" for d in table["depths"]], "rows": rows}


def mask_rows(summary: dict) -> list[list]:
    return [
        [
            row["architecture"],
            row["mask"],
            row["depth"],
            fmt(row["residual"]),
            fmt(row["cosine"]),
            format(row["rate"], ".3g"),
            fmt(row["tau"]),
        ]
        for pair in numbers(summary["mask"])
        for row in pair["rows"]
    ]


def window_rows(summary: dict) -> list[list]:
    """Per causal run and depth window: rate, maps' |λ2|, their ratio, the exact uniform chain's rate / (1/2)
    and the difference (intervals over seeds; empty without the chain), entropy."""
    return [
        [
            pair["architecture"],
            pair["depth"],
            f"{w['layers'][0]}-{w['layers'][1]}",
            _fmt_interval(w["rate"]),
            _fmt_interval(w["lambda2"]),
            _fmt_interval(w["ratio"]),
            _fmt_interval(w["chain_ratio"]) if "chain_ratio" in w else "",
            _fmt_interval(w["excess"]) if "excess" in w else "",
            fmt(w["entropy"]["mean"]),
        ]
        for pair in numbers(summary["mask"])
        for w in pair["collapse"]["windows"]
    ]


def local_rows(summary: dict) -> list[list]:
    """Per local-mask width: the deepest layer K resolved in both runs, r_K of the local and of the full
    causal run and their log difference, and the late window's per-layer rates (intervals over seeds)."""
    rows = []
    for local in numbers(summary["local"]):
        rates = local["rates"]
        cells = (
            [
                rates["layers"][1],
                _fmt_interval(rates["residual"]),
                _fmt_interval(rates["reference_residual"]),
                _fmt_interval(rates["difference"]),
                f"{rates['late']['layers'][0]}-{rates['late']['layers'][1]}",
                _fmt_interval(rates["late"]["rate"]),
                _fmt_interval(rates["late"]["reference_rate"]),
            ]
            if rates
            else [""] * 7
        )
        rows.append([local["window"], local["depth"], local["seeds"], *cells])
    return rows


def noci_trend_rows(summary: dict) -> list[list]:
    """Per placement and statistic of Noci et al.'s depth trends: unscaled, scaled and their difference
    (intervals over seeds)."""
    return [
        [
            trend["placement"],
            label,
            _fmt_interval(trend[name]["unscaled"]),
            _fmt_interval(trend[name]["scaled"]),
            _fmt_interval(trend[name]["difference"]),
        ]
        for trend in numbers(summary["noci"])
        for name, label in NOCI_STATISTICS
        if name in trend
    ]


def gradient_rows(summary: dict) -> list[list]:
    """Per Noci-sweep run: g(L) (geometric mean over layers of ||grad W_QK|| / ||grad W_V||), the ratio at
    the first and last layer, and the token cosine at L, intervals over seeds."""
    return [
        [
            placement["placement"],
            run["architecture"],
            run["depth"],
            *[_fmt_interval(run[k]) for k in ("g", "ratio_first", "ratio_last", "cosine")],
        ]
        for placement in numbers(summary["gradients"])
        for run in placement["unscaled"] + placement["scaled"]
    ]


def layernorm_rows(summary: dict) -> list[list]:
    """Per LayerNorm construction: consensus distance at layers 0, L/4, L/2 and L with and without LN."""
    return [
        [
            construction["name"],
            row["label"],
            ", ".join(f"{layer}: {fmt(value)}" for layer, value in row["at"]),
            _fmt_interval(row["last"]),
        ]
        for construction in numbers(summary["layernorm"])["constructions"]
        for row in construction["rows"]
    ]


def train_rows(summary: dict) -> list[list]:
    return [
        [
            r["architecture"],
            r["depth"],
            _joined(r["accuracy"], ".2f"),
            str(r["plateau_exit"]),
            fmt(r["residual_init"]),
            fmt(r["residual_trained"]),
            _joined(r["entropy_trained"], ".2f"),
            r["diverged"],
        ]
        for r in sorted(numbers(summary["training"]), key=lambda r: (r["architecture"], r["depth"]))
    ]


def baseline_rows(summary: dict) -> list[list]:
    """Per trained run: accuracy, the mode-of-context baseline, their difference, the accuracy on the
    queries whose answer is not a context mode (intervals over seeds), their share, and uniform guessing."""
    return [
        [
            r["architecture"],
            r["depth"],
            r["baseline"]["accuracy"]["n"],
            _fmt_interval(r["baseline"]["accuracy"]),
            _fmt_interval(r["baseline"]["mode_accuracy"]),
            _fmt_interval(r["baseline"]["excess"]),
            _fmt_interval(r["baseline"]["not_mode_accuracy"]),
            fmt(r["baseline"]["not_mode_fraction"]["mean"]),
            fmt(r["chance"]),
        ]
        for r in sorted(numbers(summary["training"]), key=lambda r: (r["architecture"], r["depth"]))
        if r["baseline"] is not None
    ]


def postln_rows(summary: dict) -> list[list]:
    """Per post-LN attention-only causal run: r_L in float64 and float32 (intervals over seeds, minima)."""
    rows = []
    for run in numbers(summary["layernorm"])["postln"]:
        twin = run["float32"]
        rows.append(
            [
                run["depth"],
                run["interval"]["n"],
                _fmt_interval(run["interval"]),
                fmt(run["min"]),
                "" if twin is None else _fmt_interval(twin["interval"]),
                "" if twin is None else fmt(twin["min"]),
            ]
        )
    return rows


def path_rows(summary: dict) -> list[list]:
    return [
        [r["architecture"], r["depth"], ", ".join(_fmt_all(r["medians"]))]
        for r in numbers(summary["paths"])
    ]


def report_context(summary: dict) -> dict:
    dong = numbers(summary["dong"])
    return {
        "summary": summary,
        "config": config_of(summary),
        "seeds": seed_counts(config_of(summary)),
        "kinds": kind_sections(summary["predictions"]),
        "position_std": nn.POSITION_INIT_STD,
        "resolved": RESOLVED,
        "local_window": LOCAL_WINDOW,
        "saturated": SATURATED,
        "regime_rows": regime_rows(summary),
        "dong": dong_context(dong) if dong else None,
        "noci_rows": noci_rows(summary),
        "noci_trend_rows": noci_trend_rows(summary),
        "last_layer": last_layer_table(summary),
        "mask_rows": mask_rows(summary),
        "window_rows": window_rows(summary),
        "local_rows": local_rows(summary),
        "gradient_rows": gradient_rows(summary),
        "layernorm_rows": layernorm_rows(summary),
        "postln_rows": postln_rows(summary),
        "train_rows": train_rows(summary),
        "baseline_rows": baseline_rows(summary),
        "path_rows": path_rows(summary),
    }


# --------------------------------------------------------------------------
# README


def readme_dong(dong: dict) -> dict:
    """The README's numbers of the attention-only run."""
    table = dong["table"]
    return {
        "std": std_label(dong["embedding_std"]),
        "depth": dong["depth"],
        "regime": dong["regime"],
        "predicted": dong["predicted_logit_variance"],
        "r": ", ".join(_fmt_all(table["median"][:6])),
        "exponent": dong["exponent"],
        "saturation": dong["saturation"],
        "identity_edge": dong["identity"]["edge"] if dong["identity"] else None,
        "slack": [(row["depth"], fmt(row["slack"])) for row in dong["looseness"]["rows"]],
    }


def readme_skips(summary: dict) -> dict:
    """The deepest skip and post-LN runs, Noci et al.'s trends, the causal windows and the local masks."""
    untrained = numbers(summary["untrained"])
    skip, post_ln = ((untrained.get(arch) or [None])[-1] for arch in ("skip", "post_ln"))
    return {
        "skip": {
            "depth": skip["depth"],
            "relative": fmt(skip["residual"]),
            "absolute": tuple(_fmt_all(skip["absolute"])),
            "shared": tuple(_fmt_all(skip["shared"])),
        }
        if skip
        else None,
        "post_ln": {"depth": post_ln["depth"], "absolute": tuple(_fmt_all(post_ln["absolute"]))}
        if post_ln
        else None,
        "noci": numbers(summary["noci"]),
        "causal": [
            (pair["depth"], pair["collapse"]["windows"])
            for pair in numbers(summary["mask"])
            if pair["architecture"] == "attention_only"
        ],
        "local": [
            (local["window"], local["rates"])
            for local in numbers(summary["local"])
            if local["rates"] is not None
        ],
    }


def readme_layernorm(summary: dict) -> dict:
    """Wu et al.'s LayerNorm numbers: the constructions' last-layer consensus distances (mean over seeds, with and
    without LN), the orthogonal construction's late rate, and r_L of the post-LN attention-only runs in both
    precisions."""
    layernorm = numbers(summary["layernorm"])
    windows = {c["name"]: c["collapse"]["windows"] for c in layernorm["constructions"]}
    return {
        "constructions": {
            c["name"]: {
                "with": fmt(c["with"]),
                "without": fmt(c["without"]),
                "layers": c["depth"],
                "rate": windows[c["name"]][-1]["rate"]["mean"] if windows[c["name"]] else None,
            }
            for c in layernorm["constructions"]
        },
        "postln": [
            (
                run["depth"],
                fmt(run["mean"]),
                None if run["float32"] is None else fmt(run["float32"]["mean"]),
            )
            for run in layernorm["postln"]
        ],
    }


def readme_context(summary: dict, timing: Optional[dict], results: str) -> dict:
    dong = numbers(summary["dong"])
    kinds = kind_sections(summary["predictions"])
    for section in kinds:
        section["table"] = [
            [c["name"], c["source"], fmt(c["measured"]), c["verdict"]] for c in section["rows"]
        ]
    return {
        "config": config_of(summary),
        "seeds": seed_counts(config_of(summary)),
        "runs": summary["runs"],
        "kinds": kinds,
        "results": results,
        "timing": timing or {},
        "dong": readme_dong(dong) if dong else None,
        "skips": readme_skips(summary),
        "layernorm": readme_layernorm(summary),
        "training": [
            {
                "architecture": r["architecture"],
                "depth": r["depth"],
                "accuracies": _joined(r["accuracy"], ".2f"),
                "exits": r["plateau_exit"],
                "baseline": r["baseline"],
                "chance": r["chance"],
            }
            for r in numbers(summary["training"])
        ],
    }
