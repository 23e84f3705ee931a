"""The rank-collapse study's summary: rows -> one dict of numbers, and what checks, figures and report read from it.

`summarize` keeps, per run, its spec and its phases in the order they were
measured: `{"runs": {run_id: {"spec": {...}, "phases": [{"phase", "step",
"metrics": {name: [per seed]}}, ...]}}}`; the runner adds `config`,
`predictions` and `plots`. Below it, each selection of runs (`dong_run`,
`depth4_skip_runs`, `mask_pairs`, ...) and each derived number (`regime`,
`dong_fit`, `gradient_ratio`, ...) is written once, for checks, tables,
figures and README alike.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from ml_collections import ConfigDict
from scipy import stats

from attnjax import nn
from attnjax.analysis import collapse
from experiments.lab.study import by_metric, distinct
from experiments.rank_collapse.study import SPEC_FIELDS, architecture_fields

# Relative residuals at or below this are float64 rounding.
FLOOR = collapse.FLOAT64_FLOOR
# No verdict reads a point whose relative residual is at or below this (1000 x rounding).
RESOLVED = 1e-13
# Dong et al.'s exponent needs this many consecutive resolved layers (layer 0 included).
DONG_MIN_LAYERS = 4
# Noci et al. 2022's remedy, per LayerNorm placement: (unscaled, residual branches scaled by 1/sqrt(L)).
NOCI_PAIRS = {"pre-LN": ("skip_mlp", "skip_mlp_scaled"), "post-LN": ("post_ln", "post_ln_scaled")}
# A seed has left the recall plateau at the first logged step whose training
# accuracy is above the midpoint between chance and 1.
PLATEAU_FRACTION = 0.5


# --------------------------------------------------------------------------
# Summary: per run, its phases in order, each `{metric: [per seed]}`


def _run_summary(rows: list[dict]) -> dict:
    phases = [
        {"phase": phase, "step": step, "metrics": by_metric(rows, phase=phase, step=step)}
        for phase, step in distinct(rows, "phase", "step")
    ]
    return {"spec": {f: rows[0][f] for f in SPEC_FIELDS}, "phases": phases}


def summarize(rows: list[dict], config) -> dict:
    """`{"runs": {run_id: {"spec", "phases"}}}` from the rows of every run (`config` is not needed)."""
    return {
        "runs": {
            run_id: _run_summary([r for r in rows if r["run"] == run_id])
            for run_id in distinct(rows, "run")
        }
    }


def config_of(summary: dict) -> ConfigDict:
    """The study's config, from the dict the runner stored in the summary."""
    return ConfigDict(summary["config"])


# --------------------------------------------------------------------------
# Reading one run


def array(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def mean(values) -> np.ndarray:
    """Mean over seeds (axis 0)."""
    return np.mean(array(values), axis=0)


def phase(run: dict, name: str) -> dict:
    """Metrics of the run's first phase called `name` (`{}` if none)."""
    return next((p["metrics"] for p in run["phases"] if p["phase"] == name), {})


def trained(run: dict) -> dict:
    """Metrics of the last measured profile (the end of training)."""
    return [p["metrics"] for p in run["phases"] if "residual_fro" in p["metrics"]][-1]


def init(run: dict, metric: str) -> np.ndarray:
    """`[seeds, ...]` of an init-phase metric."""
    return array(phase(run, "init")[metric])


def profile(run: dict, metric: str = "residual_fro") -> np.ndarray:
    """`[layers]`: an init-phase per-layer metric, mean over seeds."""
    return mean(init(run, metric))


def last(run: dict, metric: str = "residual_fro") -> float:
    """The init-phase metric at the last layer, mean over seeds."""
    return float(profile(run, metric)[-1])


def last_per_seed(run: dict, metric: str = "residual_fro") -> np.ndarray:
    """`[S]`: an init-phase per-layer metric at the last layer, per seed."""
    return init(run, metric)[:, -1]


def mean_tau(run: dict) -> float:
    """Dobrushin coefficient at initialisation, mean over seeds and layers."""
    return float(np.mean(profile(run, "dobrushin")))


def per_seed(run: dict, name: str) -> list[float]:
    """A final-phase scalar per seed (`[]` if the run has no final phase)."""
    return [float(v) for v in phase(run, "final").get(name, [])]


def chance(run: dict) -> float:
    """Accuracy of guessing uniformly among the task's value tokens (the same for every seed)."""
    return phase(run, "final")["chance_accuracy"][0]


def train_steps(run: dict) -> list[tuple[int, np.ndarray]]:
    """`[(step, accuracy per seed)]` of the logged training phases."""
    return [
        (p["step"], array(p["metrics"]["accuracy"]))
        for p in run["phases"]
        if p["phase"] == "train" and "accuracy" in p["metrics"]
    ]


def std_label(std) -> str:
    return "default (1/sqrt(D))" if std is None else f"{std:g}"


# --------------------------------------------------------------------------
# Selections of runs


def runs(summary: dict, sweep: str, **match) -> list[dict]:
    """The runs of `sweep` whose spec has the `match` fields, by depth and embedding std."""
    out = [
        r
        for r in summary["runs"].values()
        if r["spec"]["sweep"] == sweep and all(r["spec"][k] == v for k, v in match.items())
    ]
    return sorted(out, key=lambda r: (r["spec"]["depth"], r["spec"]["embedding_std"] or 0.0))


def deepest(summary: dict, sweep: str, **match) -> Optional[dict]:
    found = runs(summary, sweep, **match)
    return found[-1] if found else None


def main_std(summary: dict) -> Optional[float]:
    """The init sweep's first embedding std: the one every architecture is compared at."""
    stds = list(config_of(summary).init_sweep.embedding_stds)
    return stds[0] if stds else None


def untrained_runs(summary: dict, **match) -> list[dict]:
    """Untrained softmax runs of the init and Noci sweeps (bidirectional, one setting, in the default config)
    with the `match` fields, by depth: one per (architecture, depth, std), the Noci sweep's where both have it."""
    found, seen = [], set()
    for run in runs(summary, "noci", kind="softmax", **match) + runs(
        summary, "init", kind="softmax", **match
    ):
        key = tuple(run["spec"][f] for f in ("architecture", "depth", "embedding_std"))
        if key not in seen:
            seen.add(key)
            found.append(run)
    return sorted(found, key=lambda r: (r["spec"]["depth"], r["spec"]["embedding_std"] or 0.0))


def init_runs(summary: dict, architecture: str) -> list[dict]:
    """Untrained softmax runs of `architecture` at the main embedding std, by depth (`untrained_runs`)."""
    return untrained_runs(summary, architecture=architecture, embedding_std=main_std(summary))


def deepest_init(summary: dict, architecture: str) -> Optional[dict]:
    found = init_runs(summary, architecture)
    return found[-1] if found else None


def init_architectures(summary: dict) -> list[str]:
    return sorted({r["spec"]["architecture"] for r in untrained_runs(summary)})


def dong_std(summary: dict) -> Optional[float]:
    """The embedding std of Dong et al.'s run: `config.dong_embedding_std` (chosen from the regime
    table before the run), else the main std."""
    config = config_of(summary)
    return config.dong_embedding_std if "dong_embedding_std" in config else main_std(summary)


def dong_run(summary: dict) -> Optional[dict]:
    """The deepest untrained bidirectional attention-only run (init or scale sweep) at `dong_std`:
    Dong et al.'s setting."""
    match = dict(
        kind="softmax", architecture="attention_only", embedding_std=dong_std(summary), causal=False
    )
    found = runs(summary, "init", **match) + runs(summary, "scale", **match)
    return max(found, key=lambda r: r["spec"]["depth"]) if found else None


def regime_runs(summary: dict) -> list[dict]:
    """One untrained run of depth >= 4 per (architecture, embedding std) of the scale and init sweeps, by std."""
    features = config_of(summary).model.features
    found = runs(summary, "scale", kind="softmax") + runs(
        summary, "init", kind="softmax", architecture="attention_only"
    )
    seen, out = set(), []
    for run in sorted(found, key=lambda r: r["spec"]["embedding_std"] or 1 / math.sqrt(features)):
        key = (run["spec"]["architecture"], run["spec"]["embedding_std"])
        if key in seen or run["spec"]["depth"] < 4:
            continue
        seen.add(key)
        out.append(run)
    return out


def scale_runs(summary: dict) -> list[dict]:
    """The scale sweep, then attention only at the main std (every depth)."""
    return runs(summary, "scale", kind="softmax") + init_runs(summary, "attention_only")


def mask_pairs(summary: dict, **match) -> list[tuple[dict, Optional[dict]]]:
    """`[(causal run, its bidirectional init-sweep twin or None)]` of the mask sweep."""
    pairs = []
    for run in runs(summary, "mask", kind="softmax", **match):
        spec = run["spec"]
        pairs.append(
            (
                run,
                deepest(
                    summary,
                    "init",
                    kind="softmax",
                    architecture=spec["architecture"],
                    depth=spec["depth"],
                    embedding_std=spec["embedding_std"],
                ),
            )
        )
    return pairs


def noci_pairs(summary: dict) -> dict[str, tuple[list[dict], list[dict]]]:
    """`{placement: (unscaled runs, 1/sqrt(L)-scaled runs)}` by depth, of the Noci sweep's architectures that
    measured per-layer gradients (`NOCI_PAIRS`; a placement with either side missing is left out)."""
    out = {}
    for placement, (plain, scaled) in NOCI_PAIRS.items():
        sides = [
            [
                r
                for r in runs(summary, "noci", kind="softmax", architecture=a)
                if "layer_grad_norm/query" in phase(r, "init")
            ]
            for a in (plain, scaled)
        ]
        if all(sides):
            out[placement] = tuple(sides)
    return out


def qk_value_ratio(run: dict) -> np.ndarray:
    """`[S, L]`: per seed and layer, ||grad W_QK|| / ||grad W_V|| at initialisation (W_Q and W_K together)."""
    s = phase(run, "init")
    q, k, v = (array(s[f"layer_grad_norm/{n}"]) for n in ("query", "key", "value"))
    return np.sqrt(q**2 + k**2) / v


def gradient_ratio(run: dict) -> np.ndarray:
    """`[S]`: per seed, the geometric mean over layers of `qk_value_ratio`."""
    return np.exp(np.mean(np.log(qk_value_ratio(run)), axis=1))


def gradient_drop(shallow: dict, deep: dict) -> dict:
    """`seed_interval` of gradient_ratio(deep) / gradient_ratio(shallow), seed by seed (the same init keys)."""
    return seed_interval(gradient_ratio(deep) / gradient_ratio(shallow))


def depth4_skip_runs(summary: dict) -> list[dict]:
    """Trained runs at depth 4 of the architectures with skips."""
    return [
        r
        for r in runs(summary, "train")
        if r["spec"]["depth"] == 4 and architecture_fields(r["spec"]["architecture"])["skip"]
    ]


def attention_train_runs(summary: dict) -> list[dict]:
    """Trained attention-only runs, by depth."""
    return runs(summary, "train", architecture="attention_only")


# --------------------------------------------------------------------------
# Derived measurements


def regime(run: dict) -> dict:
    """Layer-1 attention statistics of a run at initialisation, mean over seeds."""
    return {
        "entropy": float(profile(run, "attention_entropy_normalized")[0]),
        "tau": float(profile(run, "dobrushin")[0]),
        "logit_variance": float(profile(run, "logit_variance")[0]),
    }


def predicted_logit_variance(std: Optional[float], features: int) -> float:
    """Var(q.k / sqrt(d)) across keys for tokens with per-entry variance s^2 = std_e^2 + std_p^2
    and LeCun-normal projections: q and k entries have variance s^2, the logits s^4
    (std_p = `nn.POSITION_INIT_STD`, the learned position table's)."""
    std_e = 1.0 / math.sqrt(features) if std is None else std
    return (std_e**2 + nn.POSITION_INIT_STD**2) ** 2


def dong_residuals(run: dict) -> np.ndarray:
    """`[seeds x examples, L + 1]` per-example relative composite residuals."""
    r = init(run, "dong/residual")  # [S, B, L + 1]
    return r.reshape(-1, r.shape[-1])


def dong_fit(run: dict) -> collapse.RateFit:
    """`fit_log_log` of the per-example relative composite residuals, seeds x examples as replicates."""
    return collapse.fit_log_log(dong_residuals(run), floor=FLOOR)


def seed_interval(values, confidence: float = 0.95) -> dict:
    """Mean of per-seed values `[S]` and its Student-t interval over seeds (NaN ends with one seed)."""
    v = array(values)
    m = float(np.mean(v))
    if v.size < 2:
        return {"mean": m, "low": math.nan, "high": math.nan, "seeds": int(v.size)}
    half = float(
        stats.t.ppf(0.5 + confidence / 2, v.size - 1) * np.std(v, ddof=1) / math.sqrt(v.size)
    )
    return {"mean": m, "low": m - half, "high": m + half, "seeds": int(v.size)}


def resolved_layers(rel: np.ndarray, floor: float = RESOLVED) -> int:
    """How many consecutive layers from layer 0 have every point of `rel` `[S, B, L + 1]` above `floor`."""
    above = np.all(array(rel) > floor, axis=(0, 1))
    return int(np.argmin(above)) if not above.all() else int(above.size)


def cubic_exponent(res_abs, rel, floor: float = RESOLVED) -> dict:
    """Dong et al.'s per-layer exponent: per seed, the least-squares slope p of
    log ||res(X_l)|| = p log ||res(X_(l-1))|| + b over every (example, l) with relative residuals
    above `floor` at l - 1 and at l (`res_abs`, `rel`: `[S, B, L + 1]`).

    Returns `{"slopes": [S], "mean", "low", "high", "seeds"}` (interval over seeds, see
    `seed_interval`) and `"layers"`: `resolved_layers(rel)`.
    """
    res_abs, rel = array(res_abs), array(rel)
    if res_abs.ndim != 3 or res_abs.shape != rel.shape or res_abs.shape[-1] < 2:
        raise ValueError(
            f"res_abs and rel must both be [S, B, L + 1] with L >= 1; got {res_abs.shape} and {rel.shape}"
        )
    slopes = []
    for a, r in zip(res_abs, rel):
        keep = (r[:, :-1] > floor) & (r[:, 1:] > floor)
        x, y = np.log(a[:, :-1][keep]), np.log(a[:, 1:][keep])
        slopes.append(float(np.polyfit(x, y, 1)[0]) if x.size >= 2 and np.ptp(x) > 0 else math.nan)
    return {"slopes": slopes, **seed_interval(slopes), "layers": resolved_layers(rel, floor)}


def dong_exponent(run: dict) -> dict:
    """`cubic_exponent` of a run's `dong/residual_abs` and `dong/residual`."""
    return cubic_exponent(init(run, "dong/residual_abs"), init(run, "dong/residual"))


def bound_looseness(bound, res_abs, rel, floor: float = RESOLVED) -> list[dict]:
    """Measured / Dong's bound (γ = 1) at every layer l >= 1 whose points are resolved at l - 1 and l.

    bound `[S, B, L]`, res_abs and rel `[S, B, L + 1]` -> `[{"layer", "points", "median", "min", "max"}]`
    over the resolved (seed, example) points. The bound is linear in γ, so at γ the ratio is this / γ,
    and the bound holds for every γ >= the largest ratio.
    """
    bound, res_abs, rel = array(bound), array(res_abs), array(rel)
    out = []
    for layer in range(1, res_abs.shape[-1]):
        keep = (rel[..., layer - 1] > floor) & (rel[..., layer] > floor)
        if keep.any():
            ratio = res_abs[..., layer][keep] / bound[..., layer - 1][keep]
            out.append(
                {
                    "layer": layer,
                    "points": int(keep.sum()),
                    "median": float(np.median(ratio)),
                    "min": float(ratio.min()),
                    "max": float(ratio.max()),
                }
            )
    return out


def dong_constant(run: dict) -> float:
    """The median over seeds, examples and layers of Dong et al.'s per-layer constant c_l (γ = 1)."""
    return float(np.median(init(run, "dong/constant")))


def dong_looseness(run: dict) -> list[dict]:
    return bound_looseness(
        init(run, "dong/bound"), init(run, "dong/residual_abs"), init(run, "dong/residual")
    )


def plateau_exit(run: dict) -> list[Optional[int]]:
    """Per seed, the first logged step with training accuracy above (chance + 1) / 2 (None: never)."""
    level_chance = chance(run) if phase(run, "final") else 0.0
    level = level_chance + PLATEAU_FRACTION * (1 - level_chance)
    steps = train_steps(run)
    if not steps:
        return []
    return [
        next((step for step, acc in steps if acc[seed] > level), None)
        for seed in range(len(steps[0][1]))
    ]


def ranges(layers) -> str:
    """[1, 2, 3, 5] -> '1-3, 5' ('none' if empty)."""
    out = []
    for layer in sorted(layers):
        if out and layer == out[-1][1] + 1:
            out[-1][1] = layer
        else:
            out.append([layer, layer])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in out) or "none"


def geometric(run: dict, metric: str = "residual_fro") -> collapse.RateFit:
    """`fit_geometric` of an init-phase per-layer metric (seeds as replicates)."""
    return collapse.fit_geometric(init(run, metric), floor=FLOOR)


def _window_slopes(r, floor: float) -> list[tuple[int, int, np.ndarray]]:
    """`[(a, b, per-seed rate)]` of the two depth windows of `rate_windows`."""
    r = array(r)
    last = resolved_layers(r[:, None, :], floor) - 1
    if last < 2:
        return []
    out = []
    for a, b in ((0, last // 2), (last // 2, last)):
        layers = np.arange(a, b + 1)
        out.append(
            (a, b, np.exp([np.polyfit(layers, np.log(seed[a : b + 1]), 1)[0] for seed in r]))
        )
    return out


def rate_windows(r, floor: float = RESOLVED) -> list[dict]:
    """Per-layer rates of a profile in two depth windows.

    r `[S, L + 1]`: per seed, a residual after each layer (layer 0 the input). The layers 0..K with
    every seed's r above `floor` are split into [0, K//2] and [K//2, K]; in window [a, b] the rate is
    exp(slope of the least-squares line of log r_l on l, l = a..b), per seed. Returns
    `[{"layers": [a, b], "rate": seed_interval}]`; `[]` if fewer than layers 0-2 are resolved.
    """
    return [
        {"layers": [a, b], "rate": seed_interval(rate)} for a, b, rate in _window_slopes(r, floor)
    ]


def window_rates(r, slem, entropy, floor: float = RESOLVED) -> list[dict]:
    """`rate_windows` of a causal profile, against its maps' |λ2|.

    r `[S, L + 1]` (relative residuals); slem and entropy `[S, L]`: per seed, |λ2| and the normalised
    entropy of layer l's maps (mean over heads and examples; a causal map is lower triangular, so
    |λ2| = max_(i>=1) a_ii). In window [a, b]: lambda2 = exp(mean of log |λ2| over the maps of layers
    a+1..b), per seed (a product of maps that share their slowest mode shrinks it by |λ2| per layer).

    Returns `[{"layers": [a, b], "rate", "lambda2", "ratio", "entropy"}]`, each number a
    `seed_interval` (ratio = rate / lambda2 per seed); `[]` if fewer than layers 0-2 are resolved.
    """
    slem, entropy = array(slem), array(entropy)
    out = []
    for a, b, rate in _window_slopes(r, floor):
        lambda2 = np.exp(np.mean(np.log(slem[:, a:b]), axis=1))
        out.append(
            {
                "layers": [a, b],
                "rate": seed_interval(rate),
                "lambda2": seed_interval(lambda2),
                "ratio": seed_interval(rate / lambda2),
                "entropy": seed_interval(np.mean(entropy[:, a:b], axis=1)),
            }
        )
    return out


def layernorm_run(summary: dict, construction: str) -> Optional[dict]:
    """The run of Wu et al.'s LayerNorm construction `construction` (None if the config has none)."""
    found = runs(summary, "layernorm", architecture=construction)
    return found[0] if found else None


def causal_windows(run: dict) -> list[dict]:
    """`window_rates` of a run's init-phase residual_fro, slem and attention_entropy_normalized."""
    return window_rates(
        init(run, "residual_fro"), init(run, "slem"), init(run, "attention_entropy_normalized")
    )


def layers_to(values: np.ndarray, level: float) -> Optional[int]:
    """The first index where `values` is below `level` (None: never)."""
    below = np.nonzero(values < level)[0]
    return int(below[0]) if below.size else None


def path_medians(run: dict) -> Optional[np.ndarray]:
    """`[L]`: median rank-one residual of single-head paths of length k = 1..L (None: not measured)."""
    paths = phase(run, "final").get("path_residual")
    if paths is None:
        return None
    p = array(paths)  # [S, L, N]
    return np.median(np.moveaxis(p, 1, 0).reshape(p.shape[1], -1), axis=1)
