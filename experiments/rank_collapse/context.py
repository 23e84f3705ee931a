"""What the rank-collapse templates see: the summary's numbers, and table rows of formatted cells.

`report_context(summary)` feeds `templates/report.md.j2`, `readme_context(...)`
feeds `templates/readme.md.j2`. Cells whose format is more than `fmt` (lists
of numbers, empty cells) are formatted here; headings, prose and table layout
live in the templates.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from attnjax import nn
from experiments.lab.render import fmt
from experiments.rank_collapse import summary as s
from experiments.rank_collapse.study import SWEEPS

# Layers shown in a per-layer table (the profiles are in summary.json).
PROFILE_ROWS = 9
# Layers shown in the Dong et al. table.
DONG_ROWS = 8
NOCI_ARCHITECTURES = ("skip", "skip_scaled", "skip_mlp", "post_ln")


def _joined(values, spec: str) -> str:
    return ", ".join(format(float(v), spec) for v in values)


def _fmt_all(values) -> list[str]:
    return [fmt(float(v)) for v in values]


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


def profile_rows(run: dict) -> list[list]:
    """Per layer: residuals (relative, absolute), shared component, cosine, entropy, tau, logit variance."""
    hidden = [
        s.profile(run, k)
        for k in (
            "residual_fro",
            "residual_l1inf",
            "residual_abs_fro",
            "mean_token_norm",
            "token_cosine",
        )
    ]
    attention = [
        s.profile(run, k) for k in ("attention_entropy_normalized", "dobrushin", "logit_variance")
    ]
    rows = []
    for layer in range(min(len(hidden[0]), PROFILE_ROWS)):
        cells = [fmt(float(m[layer - 1])) if layer else "" for m in attention]
        rows.append([layer, *[fmt(float(m[layer])) for m in hidden], *cells])
    if len(hidden[0]) > PROFILE_ROWS:
        rows.append(["...", "", "", "", "", "", "", "", ""])
    return rows


def regime_rows(summary: dict) -> list[list]:
    features = s.config_of(summary).model.features
    rows = []
    for run in s.regime_runs(summary):
        std, reg, r = run["spec"]["embedding_std"], s.regime(run), s.profile(run)
        rows.append(
            [
                run["spec"]["architecture"],
                s.std_label(std),
                fmt(reg["entropy"]),
                fmt(reg["tau"]),
                fmt(reg["logit_variance"]),
                fmt(s.predicted_logit_variance(std, features)),
                fmt(float(r[1])),
                fmt(float(r[4])),
            ]
        )
    return rows


def dong_context(run: dict) -> dict:
    """Dong et al.'s table (mean over seeds and examples), exponent and bound looseness of the attention-only run."""
    looseness = [
        [row["layer"], row["points"], fmt(row["median"]), fmt(row["min"]), fmt(row["max"])]
        for row in s.dong_looseness(run)
    ]
    r = np.mean(s.dong_residuals(run), axis=0)
    logs = -np.log(np.maximum(r, 1e-300))
    rows = [
        [
            layer,
            fmt(float(r[layer])),
            fmt(float(logs[layer])),
            fmt(float(logs[layer] / logs[layer - 1])) if layer and logs[layer - 1] > 0 else "",
        ]
        for layer in range(min(len(r), DONG_ROWS))
    ]
    return {
        "depth": run["spec"]["depth"],
        "std": s.std_label(run["spec"]["embedding_std"]),
        "profile_rows": profile_rows(run),
        "rows": rows,
        "exponent": s.dong_exponent(run),
        "looseness": looseness,
        "constant": s.dong_constant(run),
    }


def noci_rows(summary: dict) -> list[list]:
    rows = []
    for arch in NOCI_ARCHITECTURES:
        for run in s.init_runs(summary, arch):
            absr = s.profile(run, "residual_abs_fro")
            shared = s.profile(run, "mean_token_norm")
            rows.append(
                [
                    arch,
                    run["spec"]["depth"],
                    fmt(s.last(run)),
                    *_fmt_all([absr[0], absr[-1]]),
                    *_fmt_all([shared[0], shared[-1]]),
                    fmt(s.last(run, "token_cosine")),
                ]
            )
    return rows


def last_layer_table(summary: dict) -> Optional[dict]:
    """`{"depths": ["L=d", ...], "rows"}`: r_L of every architecture (rows) at every depth (columns)."""
    found = s.untrained_runs(summary, embedding_std=s.main_std(summary))
    if not found:
        return None
    depths = sorted({r["spec"]["depth"] for r in found})
    at = {}
    for r in found:
        at.setdefault((r["spec"]["architecture"], r["spec"]["depth"]), r)
    rows = [
        [arch, *[fmt(s.last(at[arch, d])) if (arch, d) in at else "" for d in depths]]
        for arch in sorted({r["spec"]["architecture"] for r in found})
    ]
    return {"depths": [f"L={d}" for d in depths], "rows": rows}


def mask_rows(summary: dict) -> list[list]:
    rows = []
    for run, bidir in s.mask_pairs(summary):
        for mask, r in (("causal", run), ("bidirectional", bidir)):
            if r is not None:
                rows.append(
                    [
                        r["spec"]["architecture"],
                        mask,
                        r["spec"]["depth"],
                        fmt(s.last(r)),
                        fmt(s.last(r, "token_cosine")),
                        format(s.geometric(r).rate, ".3g"),
                        fmt(s.mean_tau(r)),
                    ]
                )
    return rows


def _interval(x: dict) -> str:
    return f"{fmt(x['mean'])} [{fmt(x['low'])}, {fmt(x['high'])}]"


def window_rows(summary: dict) -> list[list]:
    """Per causal run and depth window: rate, maps' |λ2|, their ratio (intervals over seeds), entropy."""
    return [
        [
            run["spec"]["architecture"],
            run["spec"]["depth"],
            f"{w['layers'][0]}-{w['layers'][1]}",
            _interval(w["rate"]),
            _interval(w["lambda2"]),
            _interval(w["ratio"]),
            fmt(w["entropy"]["mean"]),
        ]
        for run, _ in s.mask_pairs(summary)
        for w in s.causal_windows(run)
    ]


def gradient_rows(summary: dict) -> list[list]:
    """Per Noci-sweep run: g(L) (geometric mean over layers of ||grad W_QK|| / ||grad W_V||), the ratio at
    the first and last layer, and the token cosine at L, intervals over seeds."""
    rows = []
    for placement, pair in s.noci_pairs(summary).items():
        for run in [r for found in pair for r in found]:
            ratio = s.qk_value_ratio(run)
            rows.append(
                [
                    placement,
                    run["spec"]["architecture"],
                    run["spec"]["depth"],
                    _interval(s.seed_interval(s.gradient_ratio(run))),
                    _interval(s.seed_interval(ratio[:, 0])),
                    _interval(s.seed_interval(ratio[:, -1])),
                    _interval(s.seed_interval(s.last_per_seed(run, "token_cosine"))),
                ]
            )
    return rows


def layernorm_rows(summary: dict) -> list[list]:
    """Per LayerNorm construction: consensus distance at layers 0, L/4, L/2 and L with and without LN."""
    rows = []
    for name in s.config_of(summary).layernorm.constructions:
        run = s.layernorm_run(summary, name)
        if run is None:
            continue
        for which, label in (("consensus_ln", "with LayerNorm"), ("consensus_plain", "without")):
            r = s.init(run, which)
            layers = sorted({0, r.shape[1] // 4, r.shape[1] // 2, r.shape[1] - 1})
            rows.append(
                [
                    name,
                    label,
                    ", ".join(f"{layer}: {fmt(float(np.mean(r[:, layer])))}" for layer in layers),
                    _interval(s.seed_interval(r[:, -1])),
                ]
            )
    return rows


def train_rows(summary: dict) -> list[list]:
    rows = []
    for r in sorted(
        s.runs(summary, "train"), key=lambda r: (r["spec"]["architecture"], r["spec"]["depth"])
    ):
        trained = s.trained(r)
        rows.append(
            [
                r["spec"]["architecture"],
                r["spec"]["depth"],
                _joined(s.per_seed(r, "eval_accuracy"), ".2f"),
                str(s.plateau_exit(r)),
                fmt(s.last(r)),
                fmt(float(s.mean(trained["residual_fro"])[-1])),
                _joined(s.mean(trained["attention_entropy_normalized"]), ".2f"),
                int(np.sum(s.phase(r, "final").get("diverged", []))),
            ]
        )
    return rows


def path_rows(summary: dict) -> list[list]:
    rows = []
    for r in s.runs(summary, "train"):
        medians = s.path_medians(r)
        if medians is not None:
            rows.append(
                [r["spec"]["architecture"], r["spec"]["depth"], ", ".join(_fmt_all(medians))]
            )
    return rows


def report_context(summary: dict) -> dict:
    dong = s.dong_run(summary)
    return {
        "summary": summary,
        "config": s.config_of(summary),
        "seeds": seed_counts(s.config_of(summary)),
        **split_kinds(summary["predictions"]),
        "position_std": nn.POSITION_INIT_STD,
        "resolved": s.RESOLVED,
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


def readme_dong(summary: dict, run: dict) -> dict:
    """The README's numbers of the attention-only run."""
    by_name = {c["name"].rsplit(" (", 1)[0]: c for c in summary["predictions"]}
    looseness = s.dong_looseness(run)
    return {
        "std": s.std_label(run["spec"]["embedding_std"]),
        "depth": run["spec"]["depth"],
        "regime": s.regime(run),
        "predicted": s.predicted_logit_variance(
            run["spec"]["embedding_std"], s.config_of(summary).model.features
        ),
        "r": ", ".join(_fmt_all(s.profile(run)[:6])),
        "exponent": s.dong_exponent(run),
        "verdict": by_name.get("Dong's cubic exponent", {}).get("verdict", "n/a"),
        "loose": (min(row["median"] for row in looseness), max(row["median"] for row in looseness))
        if looseness
        else None,
        "constant": s.dong_constant(run),
    }


def _ends(run: dict, metric: str) -> tuple[str, str]:
    """An init-phase per-layer metric at the input and at the last layer (mean over seeds, `fmt`)."""
    values = s.profile(run, metric)
    return fmt(float(values[0])), fmt(float(values[-1]))


def readme_skips(summary: dict) -> dict:
    """The deepest skip and post-LN runs, the 1/sqrt(L) runs, the gradient ratios and the causal fits."""
    skip, post_ln = s.deepest_init(summary, "skip"), s.deepest_init(summary, "post_ln")
    return {
        "skip": {
            "depth": skip["spec"]["depth"],
            "relative": fmt(s.last(skip)),
            "absolute": _ends(skip, "residual_abs_fro"),
            "shared": _ends(skip, "mean_token_norm"),
        }
        if skip
        else None,
        "post_ln": {
            "depth": post_ln["spec"]["depth"],
            "absolute": _ends(post_ln, "residual_abs_fro"),
        }
        if post_ln
        else None,
        "scaled": [(s.last(r), r["spec"]["depth"]) for r in s.init_runs(summary, "skip_scaled")],
        "grads": {
            placement: [
                (r["spec"]["architecture"], r["spec"]["depth"], float(np.mean(s.gradient_ratio(r))))
                for found in pair
                for r in found
            ]
            for placement, pair in s.noci_pairs(summary).items()
        },
        "causal": [
            (run["spec"]["depth"], s.causal_windows(run))
            for run, _ in s.mask_pairs(summary, architecture="attention_only")
        ],
    }


def readme_layernorm(summary: dict) -> dict:
    """Wu et al.'s LayerNorm numbers: the constructions' last-layer consensus distances (mean over seeds, with and
    without LN), the orthogonal construction's late rate, and r_L of the post-LN attention-only runs."""
    out = {"constructions": {}, "postln": []}
    for name in s.config_of(summary).layernorm.constructions:
        run = s.layernorm_run(summary, name)
        if run is not None:
            windows = s.rate_windows(s.init(run, "consensus_ln"))
            out["constructions"][name] = {
                "with": fmt(s.last(run, "consensus_ln")),
                "without": fmt(s.last(run, "consensus_plain")),
                "layers": run["spec"]["depth"],
                "rate": windows[-1]["rate"]["mean"] if windows else None,
            }
    for run in s.runs(summary, "mask", kind="softmax", architecture="attention_only_postln"):
        out["postln"].append((run["spec"]["depth"], fmt(s.last(run))))
    return out


def readme_context(summary: dict, timing: Optional[dict], results: str) -> dict:
    dong = s.dong_run(summary)
    kinds = split_kinds(summary["predictions"])
    return {
        "config": s.config_of(summary),
        "seeds": seed_counts(s.config_of(summary)),
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
            (
                r["spec"]["architecture"],
                _joined(s.per_seed(r, "eval_accuracy"), ".2f"),
                s.plateau_exit(r),
            )
            for r in s.depth4_skip_runs(summary)
        ],
        "attention": [
            (r["spec"]["depth"], _joined(s.per_seed(r, "eval_accuracy"), ".2f"), s.chance(r))
            for r in s.attention_train_runs(summary)
        ],
    }
