"""What the rank-collapse templates see: the summary's numbers, and table rows of formatted cells.

`report_context(summary)` feeds `templates/report.md.j2`, `readme_context(...)`
feeds `templates/readme.md.j2`. Cells whose format is more than `fmt` (lists
of numbers, empty cells) are formatted here; headings, prose and table layout
live in the templates.
"""

from __future__ import annotations

from typing import Optional

from attnjax import nn
from experiments.lab.render import fmt
from experiments.lab.study import config_of
from experiments.rank_collapse.checks import numbers, std_label
from experiments.rank_collapse.constants import RESOLVED, SWEEPS

# Layers shown in a per-layer table (the profiles are in summary.json).
PROFILE_ROWS = 9
# Layers shown in the Dong et al. table.
DONG_ROWS = 8
NOCI_ARCHITECTURES = ("skip", "skip_scaled", "skip_mlp", "post_ln")
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
    """'2 seeds', then the sweeps with their own count: '2 seeds (10 in the scale and mask sweeps)'."""
    own = {}
    for sweep in SWEEPS:
        count = config[f"{sweep}_sweep"].get("num_seeds")
        if count is not None and count != config.num_seeds:
            own.setdefault(count, []).append(sweep)
    extra = "; ".join(
        f"{count} in the {' and '.join(sweeps)} sweep{'s' if len(sweeps) > 1 else ''}"
        for count, sweeps in own.items()
    )
    return f"{config.num_seeds} seeds" + (f" ({extra})" if extra else "")


def split_kinds(records: list[dict]) -> dict:
    """`{"checks": literature predictions, "sanity": theorems, identities and regime conditions}`."""
    return {
        "checks": [c for c in records if c.get("kind", "prediction") == "prediction"],
        "sanity": [c for c in records if c.get("kind") == "sanity"],
    }


# --------------------------------------------------------------------------
# Report tables


def profile_rows(profile: dict) -> list[list]:
    """Per layer: residuals (relative, absolute), shared component, cosine, entropy, tau, logit variance
    (`profile`: Dong et al.'s run's mean per-layer metrics)."""
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


def dong_context(dong: dict) -> dict:
    """Dong et al.'s table (mean over seeds and examples), exponent and bound looseness of the attention-only run."""
    looseness = [
        [row["layer"], row["points"], fmt(row["median"]), fmt(row["min"]), fmt(row["max"])]
        for row in dong["looseness"]["rows"]
    ]
    r, logs, growth = dong["residual"], dong["log_inverse"], dong["growth"]
    rows = [
        [
            layer,
            fmt(float(r[layer])),
            fmt(float(logs[layer])),
            fmt(float(growth[layer])) if growth[layer] is not None else "",
        ]
        for layer in range(min(len(r), DONG_ROWS))
    ]
    return {
        "depth": dong["depth"],
        "std": std_label(dong["embedding_std"]),
        "profile_rows": profile_rows(dong["profile"]),
        "rows": rows,
        "exponent": dong["exponent"],
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
    """Per causal run and depth window: rate, maps' |λ2|, their ratio (intervals over seeds), entropy."""
    return [
        [
            pair["architecture"],
            pair["depth"],
            f"{w['layers'][0]}-{w['layers'][1]}",
            _fmt_interval(w["rate"]),
            _fmt_interval(w["lambda2"]),
            _fmt_interval(w["ratio"]),
            fmt(w["entropy"]["mean"]),
        ]
        for pair in numbers(summary["mask"])
        for w in pair["collapse"]["windows"]
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
        **split_kinds(summary["predictions"]),
        "position_std": nn.POSITION_INIT_STD,
        "resolved": RESOLVED,
        "regime_rows": regime_rows(summary),
        "dong": dong_context(dong) if dong else None,
        "noci_rows": noci_rows(summary),
        "last_layer": last_layer_table(summary),
        "mask_rows": mask_rows(summary),
        "window_rows": window_rows(summary),
        "gradient_rows": gradient_rows(summary),
        "layernorm_rows": layernorm_rows(summary),
        "train_rows": train_rows(summary),
        "path_rows": path_rows(summary),
    }


# --------------------------------------------------------------------------
# README


def readme_dong(summary: dict, dong: dict) -> dict:
    """The README's numbers of the attention-only run."""
    by_name = {c["name"].rsplit(" (", 1)[0]: c for c in summary["predictions"]}
    return {
        "std": std_label(dong["embedding_std"]),
        "depth": dong["depth"],
        "regime": dong["regime"],
        "predicted": dong["predicted_logit_variance"],
        "r": ", ".join(_fmt_all(dong["profile"]["residual_fro"][:6])),
        "exponent": dong["exponent"],
        "verdict": by_name.get("Dong's cubic exponent", {}).get("verdict", "n/a"),
        "loose": dong["looseness"]["medians"],
        "constant": dong["constant"],
    }


def readme_skips(summary: dict) -> dict:
    """The deepest skip and post-LN runs, the 1/sqrt(L) runs, the gradient ratios and the causal fits."""
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
        "scaled": [(r["residual"], r["depth"]) for r in untrained.get("skip_scaled", [])],
        "grads": {
            placement["placement"]: [
                (r["architecture"], r["depth"], r["g"]["mean"])
                for r in placement["unscaled"] + placement["scaled"]
            ]
            for placement in numbers(summary["gradients"])
        },
        "causal": [
            (pair["depth"], pair["collapse"]["windows"])
            for pair in numbers(summary["mask"])
            if pair["architecture"] == "attention_only"
        ],
    }


def readme_layernorm(summary: dict) -> dict:
    """Wu et al.'s LayerNorm numbers: the constructions' last-layer consensus distances (mean over seeds, with and
    without LN), the orthogonal construction's late rate, and r_L of the post-LN attention-only runs."""
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
        "postln": [(run["depth"], fmt(run["mean"])) for run in layernorm["postln"]],
    }


def readme_context(summary: dict, timing: Optional[dict], results: str) -> dict:
    dong = numbers(summary["dong"])
    kinds = split_kinds(summary["predictions"])
    return {
        "config": config_of(summary),
        "seeds": seed_counts(config_of(summary)),
        "runs": summary["runs"],
        **kinds,
        "results": results,
        "timing": timing or {},
        "check_rows": [
            [c["name"], c["source"], fmt(c["measured"]), c["verdict"]] for c in kinds["checks"]
        ],
        "sanity_rows": [[c["name"], fmt(c["measured"]), c["verdict"]] for c in kinds["sanity"]],
        "dong": readme_dong(summary, dong) if dong else None,
        "skips": readme_skips(summary),
        "layernorm": readme_layernorm(summary),
        "recall": [
            (r["architecture"], _joined(r["accuracy"], ".2f"), r["plateau_exit"])
            for r in numbers(summary["training"])
            if r["recall"]
        ],
        "attention": [
            (r["depth"], _joined(r["accuracy"], ".2f"), r["chance"])
            for r in numbers(summary["training"])
            if r["architecture"] == "attention_only"
        ],
    }
