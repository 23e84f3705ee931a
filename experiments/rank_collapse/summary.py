"""The rank-collapse study's summary: rows -> the raw aggregate -> every number its readers read.

`aggregate(rows)` keeps, per run, its spec and its phases in the order they
were measured: `{"runs": {run_id: {"spec": {...}, "phases": [{"phase", "step",
"metrics": {name: [per seed]}}, ...]}}}`. `derive(summary, config)` adds the
sections that the checks, the figures, the report and the README section read
(`dong`, `regime_table`, `untrained`, `deepest_untrained`, `last_layer`,
`noci`, `gradients`, `mask`, `local`, `scale`, `layernorm`, `training`,
`paths`, `bands`; see `derive`), so each number is computed here, once, and they only
read it. `summarize`, what the runner calls, is the two in turn (the runner
adds `config`, `predictions` and `plots`); `add_derived` completes a
summary.json written before `derive` existed.

Below the aggregate: reading one run, the selections of runs (`dong_run`,
`mask_pairs`, ...), the derived measurements (`regime`, `cubic_exponent`,
`identity_slopes`, `depth_trends`, `window_rates`, ...), and the sections
built from them.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from attnjax import nn
from attnjax.analysis import collapse
from attnjax.serialization import json_form
from experiments.lab import models
from experiments.lab.stats import interval
from experiments.lab.study import by_metric, config_of, distinct
from experiments.rank_collapse import chain, recall
from experiments.rank_collapse.constants import (
    EPS,
    FLOOR,
    LOCAL_WINDOW,
    RESOLVED,
    SATURATED,
)
from experiments.rank_collapse.study import SPEC_FIELDS, architecture_fields

# Noci et al. 2022's remedy, per LayerNorm placement: (unscaled, residual branches scaled by 1/sqrt(L)).
NOCI_PAIRS = {"pre-LN": ("skip_mlp", "skip_mlp_scaled"), "post-LN": ("post_ln", "post_ln_scaled")}
# A seed has left the recall plateau at the first logged step whose training
# accuracy is above the midpoint between chance and 1.
PLATEAU_FRACTION = 0.5


# --------------------------------------------------------------------------
# Rows -> the raw aggregate: per run, its phases in order, each `{metric: [per seed]}`


def _run_summary(rows: list[dict]) -> dict:
    phases = [
        {"phase": phase, "step": step, "metrics": by_metric(rows, phase=phase, step=step)}
        for phase, step in distinct(rows, "phase", "step")
    ]
    return {"spec": {f: rows[0].get(f) for f in SPEC_FIELDS}, "phases": phases}


def aggregate(rows: list[dict]) -> dict:
    """`{"runs": {run_id: {"spec", "phases"}}}` from the rows of every run."""
    return {
        "runs": {
            run_id: _run_summary([r for r in rows if r["run"] == run_id])
            for run_id in distinct(rows, "run")
        }
    }


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


# --------------------------------------------------------------------------
# Selections of runs


def runs(summary: dict, sweep: str, **match) -> list[dict]:
    """The runs of `sweep` whose spec has the `match` fields, by depth and embedding std."""
    out = [
        r
        for r in summary["runs"].values()
        if r["spec"]["sweep"] == sweep and all(r["spec"].get(k) == v for k, v in match.items())
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


def _with_twins(summary: dict, found: list[dict], twin_sweep: str, **twin_match) -> list[tuple]:
    """`[(run, the deepest softmax run of `twin_sweep` with its architecture, depth and std, or None)]`."""
    return [
        (
            run,
            deepest(
                summary,
                twin_sweep,
                kind="softmax",
                architecture=run["spec"]["architecture"],
                depth=run["spec"]["depth"],
                embedding_std=run["spec"]["embedding_std"],
                **twin_match,
            ),
        )
        for run in found
    ]


def mask_pairs(summary: dict, **match) -> list[tuple[dict, Optional[dict]]]:
    """`[(causal run, its bidirectional init-sweep twin or None)]` of the mask sweep."""
    return _with_twins(summary, runs(summary, "mask", kind="softmax", window=None, **match), "init")


def local_pairs(summary: dict) -> list[tuple[dict, Optional[dict]]]:
    """`[(local-mask run, the mask sweep's full causal run of its architecture, depth and std, or None)]`
    of the local sweep, by width."""
    found = runs(summary, "local", kind="softmax")
    found = sorted(found, key=lambda r: (r["spec"]["depth"], r["spec"]["window"]))
    return _with_twins(summary, found, "mask", window=None)


def float32_twin(summary: dict, run: dict) -> Optional[dict]:
    """The float32 sweep's run of `run`'s architecture, depth and embedding std (None: none)."""
    spec = run["spec"]
    return deepest(
        summary,
        "float32",
        kind=spec["kind"],
        architecture=spec["architecture"],
        depth=spec["depth"],
        embedding_std=spec["embedding_std"],
    )


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


def is_recall_run(run: dict) -> bool:
    """Whether a trained run is one the recall check reads: depth 4, an architecture with skips."""
    return run["spec"]["depth"] == 4 and architecture_fields(run["spec"]["architecture"])["skip"]


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


def cubic_exponent(
    res_abs, rel, lower: float = 0.0, upper: float = math.inf, floor: float = RESOLVED
) -> dict:
    """Dong et al.'s local exponent: per seed, the least-squares slope p (and intercept b) of
    log ||res(X_l)|| = p log ||res(X_(l-1))|| + b over every (example, l) pair whose relative residual
    r_(l-1) lies in [lower, upper) and above `floor`, with r_l above `floor` too (`res_abs`, `rel`:
    `[S, B, L + 1]`, absolute and relative residuals).

    With `upper` = `LOCAL_WINDOW` this is the leading-order exponent (3: see `scaling.py`); with
    `lower` = `SATURATED` the slope of initialisation-sized residuals, lowered by the next-order term.

    Returns `{"slopes": [S], "intercepts": [S], "pairs": [S], "transitions": [S] (distinct layers
    l - 1 -> l among the pairs), "unresolved": [S] (pairs whose r_(l-1) is in the window but r_l at or
    below `floor`, left out), "mean", "low", "high", "n"}`
    (`interval` over seeds; a seed with fewer than two pairs, or all at one x, has slope NaN, and
    the interval's ends are then NaN) and `"intercept"`: the mean intercept.
    """
    res_abs, rel = array(res_abs), array(rel)
    if res_abs.ndim != 3 or res_abs.shape != rel.shape or res_abs.shape[-1] < 2:
        raise ValueError(
            f"res_abs and rel must both be [S, B, L + 1] with L >= 1; got {res_abs.shape} and {rel.shape}"
        )
    slopes, intercepts, pairs, transitions, unresolved = [], [], [], [], []
    for a, r in zip(res_abs, rel):
        before = r[:, :-1]
        window = (before > floor) & (before >= lower) & (before < upper)
        keep = window & (r[:, 1:] > floor)
        x, y = np.log(a[:, :-1][keep]), np.log(a[:, 1:][keep])
        fit = np.polyfit(x, y, 1) if x.size >= 2 and np.ptp(x) > 0 else (math.nan, math.nan)
        slopes.append(float(fit[0]))
        intercepts.append(float(fit[1]))
        pairs.append(int(x.size))
        transitions.append(int(np.unique(np.nonzero(keep)[1]).size))
        unresolved.append(int(np.sum(window & ~keep)))
    return {
        "slopes": slopes,
        "intercepts": intercepts,
        "pairs": pairs,
        "transitions": transitions,
        "unresolved": unresolved,
        **interval(slopes),
        "intercept": float(np.mean(intercepts)),
    }


def dong_exponent(run: dict, lower: float = 0.0, upper: float = LOCAL_WINDOW) -> dict:
    """`cubic_exponent` of a run's `dong/residual_abs` and `dong/residual` (default: the local window)."""
    return cubic_exponent(
        init(run, "dong/residual_abs"), init(run, "dong/residual"), lower=lower, upper=upper
    )


def identity_slopes(residuals, eps=EPS) -> dict:
    """The eps-scaling identity (`scaling.py`) per layer: the slope of log ||res(layer(1 x_bar^T + eps R))||
    against log eps over each decade of `eps`, at every depth l = 1..L (the layer from X_(l-1) to X_l).

    residuals `[S, E, L, B]` (`identity/residual`), eps `[E]` (decreasing) -> `{"eps", "layers": [{"depth",
    "slope": [per decade: median over seeds and examples], "deviation": [per decade: median of
    |slope - 3|], "max_deviation": [per decade: largest |slope - 3|], "shrink": the last decade's median
    deviation over the one before (NaN where both are 0)}], "edge", "worst_shrink"}`; `edge` is the
    largest over layers of the median deviation in the last decade (the top decade of Dong's local
    window), `worst_shrink` the largest shrink (NaN if none is defined).
    """
    res, eps = array(residuals), array(eps)
    if res.ndim != 4 or res.shape[1] != eps.size or eps.size < 2:
        raise ValueError(
            f"residuals must be [S, E, L, B] with E = len(eps) >= 2; got {res.shape} for {eps.size} eps"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(res)
    slopes = (logs[:, :-1] - logs[:, 1:]) / np.log(eps[:-1] / eps[1:])[None, :, None, None]
    deviation = np.abs(slopes - 3)
    layers = []
    for layer in range(res.shape[2]):

        def over_points(values, reduce):
            return [float(reduce(values[:, d, layer])) for d in range(slopes.shape[1])]

        median = over_points(deviation, np.median)
        with np.errstate(divide="ignore", invalid="ignore"):
            shrink = float(np.divide(median[-1], median[-2]))
        layers.append(
            {
                "depth": layer + 1,
                "slope": over_points(slopes, np.median),
                "deviation": median,
                "max_deviation": over_points(deviation, np.max),
                "shrink": shrink,
            }
        )
    shrinks = [row["shrink"] for row in layers if not math.isnan(row["shrink"])]
    return {
        "eps": eps.tolist(),
        "layers": layers,
        "edge": max(row["deviation"][-1] for row in layers),
        "worst_shrink": max(shrinks) if shrinks else math.nan,
    }


def log_median_profile(rel, floor: float = RESOLVED) -> dict:
    """Per layer, the median over (seed, example) of log r_l (as r, `median`), log(1/r) of that median
    (`log_inverse`) and its growth log(1/r_l) / log(1/r_(l-1)) (`growth`), both None where the median is
    at or below `floor` (not resolved) or undefined. rel `[S, B, L + 1]`: relative residuals, spanning
    decades, so the median is taken in log space (a mean of r is set by its largest examples)."""
    r = array(rel)
    with np.errstate(divide="ignore"):
        median = np.exp(np.median(np.log(r.reshape(-1, r.shape[-1])), axis=0))
    resolved = median > floor
    logs = [float(-np.log(m)) if ok else None for m, ok in zip(median, resolved)]
    growth = [None] + [
        logs[layer] / logs[layer - 1]
        if logs[layer] is not None and logs[layer - 1] is not None and logs[layer - 1] > 0
        else None
        for layer in range(1, len(logs))
    ]
    return {"median": median.tolist(), "log_inverse": logs, "growth": growth}


def bound_looseness(bound, res_abs, rel, constant, floor: float = RESOLVED) -> dict:
    """Dong's bound at γ = 1 against the measurement, at every layer l >= 1 whose points are resolved at
    l - 1 and l.

    bound `[S, B, L]` (c_l ||res(X_(l-1))||^3 at γ = 1), res_abs and rel `[S, B, L + 1]`, constant `[S, L]`
    (c_l at γ = 1) -> `{"rows": [{"depth", "points", "median", "min", "max", "slack"}], "worst",
    "medians"}`: per resolved layer, measured / bound over its resolved (seed, example) points (median,
    min, max) and the median slack c_l ||res(X_(l-1))||^2, the bound's per-layer contraction factor
    (||res(X_l)|| <= slack ||res(X_(l-1))||: the bound guarantees a contraction only where it is < 1);
    the largest ratio of every layer (`worst`) and the smallest and largest median (`medians`), None
    without a resolved layer. Both are linear in γ (not retrieved): at γ the ratio is this / γ and the
    slack this x γ.
    """
    bound, res_abs, rel, constant = array(bound), array(res_abs), array(rel), array(constant)
    rows = []
    for layer in range(1, res_abs.shape[-1]):
        keep = (rel[..., layer - 1] > floor) & (rel[..., layer] > floor)
        if keep.any():
            ratio = res_abs[..., layer][keep] / bound[..., layer - 1][keep]
            slack = constant[:, None, layer - 1] * res_abs[..., layer - 1] ** 2
            rows.append(
                {
                    "depth": layer,
                    "points": int(keep.sum()),
                    "median": float(np.median(ratio)),
                    "min": float(ratio.min()),
                    "max": float(ratio.max()),
                    "slack": float(np.median(slack[keep])),
                }
            )
    medians = [row["median"] for row in rows]
    return {
        "rows": rows,
        "worst": max(row["max"] for row in rows) if rows else None,
        "medians": [min(medians), max(medians)] if rows else None,
    }


def dong_constant(run: dict) -> float:
    """The median over seeds, examples and layers of Dong et al.'s per-layer constant c_l (γ = 1)."""
    return float(np.median(init(run, "dong/constant")))


def dong_looseness(run: dict) -> dict:
    """`bound_looseness` of a run's `dong/bound`, `dong/residual_abs`, `dong/residual` and `dong/constant`."""
    return bound_looseness(
        init(run, "dong/bound"),
        init(run, "dong/residual_abs"),
        init(run, "dong/residual"),
        init(run, "dong/constant"),
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


def geometric(run: dict, metric: str = "residual_fro") -> collapse.RateFit:
    """`fit_geometric` of an init-phase per-layer metric (seeds as replicates)."""
    return collapse.fit_geometric(init(run, metric), floor=FLOOR)


def resolved_last(r, floor: float = RESOLVED) -> int:
    """The last layer K such that every seed's r `[S, L + 1]` is above `floor` at layers 0..K (-1: none)."""
    above = np.all(array(r) > floor, axis=0)
    return int(np.argmin(above)) - 1 if not above.all() else int(above.size) - 1


def layer_rates(r, first: int, last: int) -> np.ndarray:
    """`[S]`: per seed, exp(slope of the least-squares line of log r_l on l, l = first..last); r `[S, L + 1]`."""
    layers = np.arange(first, last + 1)
    return np.exp([np.polyfit(layers, np.log(seed[first : last + 1]), 1)[0] for seed in array(r)])


def _window_slopes(r, floor: float) -> list[tuple[int, int, np.ndarray]]:
    """`[(a, b, per-seed rate)]` of the two depth windows of `rate_windows`."""
    last = resolved_last(r, floor)
    if last < 2:
        return []
    return [(a, b, layer_rates(r, a, b)) for a, b in ((0, last // 2), (last // 2, last))]


def rate_windows(r, floor: float = RESOLVED) -> list[dict]:
    """Per-layer rates of a profile in two depth windows.

    r `[S, L + 1]`: per seed, a residual after each layer (layer 0 the input). The layers 0..K with
    every seed's r above `floor` are split into [0, K//2] and [K//2, K]; in window [a, b] the rate is
    exp(slope of the least-squares line of log r_l on l, l = a..b), per seed. Returns
    `[{"layers": [a, b], "rate": interval}]`; `[]` if fewer than layers 0-2 are resolved.
    """
    return [{"layers": [a, b], "rate": interval(rate)} for a, b, rate in _window_slopes(r, floor)]


def rate_trend(r, floor: float = RESOLVED) -> Optional[dict]:
    """`interval` over seeds of log(late window's rate) - log(early window's rate) (`rate_windows`'
    windows): > 0 where the rate rises toward 1 with depth (a power law's signature), < 0 where it falls
    (faster than exponential). None without windows."""
    windows = _window_slopes(r, floor)
    if not windows:
        return None
    (_, _, early), (_, _, late) = windows
    return interval(np.log(late) - np.log(early))


def window_rates(r, slem, entropy, floor: float = RESOLVED, reference=None) -> list[dict]:
    """`rate_windows` of a causal profile, against its maps' |λ2| (and the exact uniform causal chain).

    r `[S, L + 1]` (relative residuals); slem and entropy `[S, L]`: per seed, |λ2| and the normalised
    entropy of layer l's maps (mean over heads and examples; a causal map is lower triangular, so
    |λ2| = max_(i>=1) a_ii). In window [a, b]: lambda2 = exp(mean of log |λ2| over the maps of layers
    a+1..b), per seed (a product of maps that share their slowest mode shrinks it by |λ2| per layer).
    `reference` `[S, L + 1]`: the uniform causal chain on the same inputs (`chain.py`), whose |λ2| is
    `chain.UNIFORM_LAMBDA2`.

    Returns `[{"layers": [a, b], "rate", "lambda2", "ratio", "entropy"}]`, each number a `interval`
    (ratio = rate / lambda2 per seed), with `reference`: `"chain_rate"`, `"chain_ratio"` (its rate /
    1/2) and `"excess"` (ratio - chain_ratio, seed by seed, the same inputs); `[]` if fewer than layers
    0-2 are resolved.
    """
    slem, entropy = array(slem), array(entropy)
    out = []
    for a, b, rate in _window_slopes(r, floor):
        lambda2 = np.exp(np.mean(np.log(slem[:, a:b]), axis=1))
        window = {
            "layers": [a, b],
            "rate": interval(rate),
            "lambda2": interval(lambda2),
            "ratio": interval(rate / lambda2),
            "entropy": interval(np.mean(entropy[:, a:b], axis=1)),
        }
        if reference is not None:
            chain_ratio = layer_rates(reference, a, b) / chain.UNIFORM_LAMBDA2
            window.update(
                chain_rate=interval(chain_ratio * chain.UNIFORM_LAMBDA2),
                chain_ratio=interval(chain_ratio),
                excess=interval(rate / lambda2 - chain_ratio),
            )
        out.append(window)
    return out


def layernorm_run(summary: dict, construction: str) -> Optional[dict]:
    """The run of Wu et al.'s LayerNorm construction `construction` (None if the config has none)."""
    found = runs(summary, "layernorm", architecture=construction)
    return found[0] if found else None


def causal_windows(run: dict) -> list[dict]:
    """`window_rates` of a run's init-phase residual_fro, slem and attention_entropy_normalized, against
    its `chain/residual_fro` where measured."""
    reference = phase(run, "init").get("chain/residual_fro")
    return window_rates(
        init(run, "residual_fro"),
        init(run, "slem"),
        init(run, "attention_entropy_normalized"),
        reference=None if reference is None else array(reference),
    )


def local_rates(run: dict, reference: dict) -> Optional[dict]:
    """A local-mask run against the full causal run of the same seeds (the same weights), over the layers
    0..K resolved in both (K >= 2): the finite-depth slowdown `difference` = log r_K - log r_K(full) per
    seed (> 0: the local run is less collapsed at depth K), r_K of each, and beside it the per-layer rates
    (`layer_rates`) over 0..K and over the late window [K//2, K] with their log differences, each an
    `interval`; None if fewer than layers 0-2 are resolved in both."""
    r, ref = init(run, "residual_fro"), init(reference, "residual_fro")
    last = min(resolved_last(r), resolved_last(ref))
    if last < 2:
        return None
    rate, base = layer_rates(r, 0, last), layer_rates(ref, 0, last)
    late, late_base = layer_rates(r, last // 2, last), layer_rates(ref, last // 2, last)
    return {
        "layers": [0, last],
        "residual": interval(r[:, last]),
        "reference_residual": interval(ref[:, last]),
        "difference": interval(np.log(r[:, last]) - np.log(ref[:, last])),
        "rate": interval(rate),
        "reference_rate": interval(base),
        "rate_difference": interval(np.log(rate) - np.log(base)),
        "late": {
            "layers": [last // 2, last],
            "rate": interval(late),
            "reference_rate": interval(late_base),
            "difference": interval(np.log(late) - np.log(late_base)),
        },
    }


def depth_trends(unscaled: list[dict], scaled: list[dict]) -> Optional[dict]:
    """Noci et al.'s trends with depth, per seed (the same init keys at every depth), for the unscaled and
    the 1/sqrt(L)-scaled runs at the depths both have (at least two).

    Per seed: `rank` = log(r_L(L_max) / r_L(L_min)) (< 0: the last layer's residual falls with depth);
    `cosine` = slope of the token cosine at L against log2 L (per doubling of depth; > 0: alignment grows);
    `gradient` = slope of log g(L) against log2 L (`gradient_ratio`; < 0: the query/key gradients vanish
    with depth). Returns `{"depths", "seeds", statistic: {"unscaled", "scaled", "difference"}}`, each an
    `interval` over seeds (difference = scaled - unscaled, seed by seed), and `means`: per variant, r_L,
    the cosine and g at each depth (means over seeds); None without two common depths.
    """
    by_depth = [{r["spec"]["depth"]: r for r in found} for found in (unscaled, scaled)]
    depths = sorted(set(by_depth[0]) & set(by_depth[1]))
    if len(depths) < 2:
        return None
    x = np.log2(depths)

    def per_seed(found):
        runs_ = [found[d] for d in depths]
        residual = np.stack([last_per_seed(r) for r in runs_], axis=1)  # [S, D]
        cosine = np.stack([last_per_seed(r, "token_cosine") for r in runs_], axis=1)
        grads = [
            gradient_ratio(r) if "layer_grad_norm/query" in phase(r, "init") else None
            for r in runs_
        ]
        g = None if any(v is None for v in grads) else np.stack(grads, axis=1)
        stats = {
            "rank": np.log(residual[:, -1] / residual[:, 0]),
            "cosine": np.polyfit(x, cosine.T, 1)[0],
        }
        if g is not None:
            stats["gradient"] = np.polyfit(x, np.log(g).T, 1)[0]
        means = {
            "residual": residual.mean(axis=0).tolist(),
            "cosine": cosine.mean(axis=0).tolist(),
            "g": None if g is None else g.mean(axis=0).tolist(),
        }
        return stats, means

    (plain, plain_means), (remedy, remedy_means) = per_seed(by_depth[0]), per_seed(by_depth[1])
    if len(plain["rank"]) != len(remedy["rank"]):
        raise ValueError(
            f"depth_trends: the unscaled runs have {len(plain['rank'])} seeds and the scaled ones "
            f"{len(remedy['rank'])}; the trends are compared seed by seed"
        )
    return {
        "depths": depths,
        "seeds": len(plain["rank"]),
        **{
            name: {
                "unscaled": interval(plain[name]),
                "scaled": interval(remedy[name]),
                "difference": interval(remedy[name] - plain[name]),
            }
            for name in plain
            if name in remedy
        },
        "means": {"unscaled": plain_means, "scaled": remedy_means},
    }


def path_medians(run: dict) -> Optional[np.ndarray]:
    """`[L]`: median rank-one residual of single-head paths of length k = 1..L (None: not measured)."""
    paths = phase(run, "final").get("path_residual")
    if paths is None:
        return None
    p = array(paths)  # [S, L, N]
    return np.median(np.moveaxis(p, 1, 0).reshape(p.shape[1], -1), axis=1)


def recall_scores(run: dict) -> Optional[dict]:
    """A trained run's held-out recall against the mode-of-context baseline (`recall.py`), per seed as
    `interval`s: `accuracy`, `mode_accuracy` (the baseline on the same queries), `excess` (accuracy -
    mode_accuracy), `not_mode_accuracy` (on the queries whose answer is not a context mode) and
    `not_mode_fraction`, the per-seed lists (`per_seed`) and the smallest excess (`excess_min`); None
    without the counts."""
    final = phase(run, "final")
    if "recall/queries" not in final:
        return None
    count = {name: array(final[f"recall/{name}"]) for name in recall.COUNTS}
    values = {
        "accuracy": count["correct"] / count["queries"],
        "mode_accuracy": count["mode_correct"] / count["queries"],
        "not_mode_accuracy": count["not_mode_correct"] / np.maximum(count["not_mode_queries"], 1),
        "not_mode_fraction": count["not_mode_queries"] / count["queries"],
    }
    values["excess"] = values["accuracy"] - values["mode_accuracy"]
    return {
        **{name: interval(v) for name, v in values.items()},
        "per_seed": {name: v.tolist() for name, v in values.items()},
        "excess_min": float(values["excess"].min()),
    }


def band(values) -> dict:
    """`{"mean", "min", "max"}` over seeds (axis 0) of `values` `[S, L]` (or `[L]`, one seed), and `n` = S:
    a figure's line and its min-max band."""
    v = array(values)
    v = v[None] if v.ndim == 1 else v
    return {
        "mean": v.mean(axis=0).tolist(),
        "min": v.min(axis=0).tolist(),
        "max": v.max(axis=0).tolist(),
        "n": int(v.shape[0]),
    }


# --------------------------------------------------------------------------
# The sections of the summary (see `derive`); `summary` is `_view`'s: runs carry their "id"

# The per-layer metrics of Dong et al.'s run tabulated by the report (hidden states, then attention).
PROFILE_METRICS = (
    "residual_fro",
    "residual_l1inf",
    "residual_abs_fro",
    "mean_token_norm",
    "token_cosine",
    "attention_entropy_normalized",
    "dobrushin",
    "logit_variance",
)


def _view(summary: dict, config) -> dict:
    """The raw runs with their ids (`run["id"]`) and the config as a dict, as the selections read them."""
    runs_by_id = {run_id: {**run, "id": run_id} for run_id, run in summary["runs"].items()}
    return {"config": config.to_dict(), "runs": runs_by_id}


def _dong(summary: dict) -> Optional[dict]:
    """Dong et al.'s run (`dong_run`): its regime, the predicted logit variance and the head width d_k,
    its mean per-layer `profile` (`PROFILE_METRICS`), the per-layer medians in log space of the relative
    composite residual (`table`: `log_median_profile`), the local exponent (`exponent`: pairs with
    r_(l-1) < `LOCAL_WINDOW`) and the saturation slope beside it (`saturation`: r_(l-1) >=
    `SATURATED`), the eps-scaling identity per layer (`identity`: `identity_slopes`; None where not
    measured), the bound's looseness and slack (`dong_looseness`), the median constant c_l (γ = 1), and
    the medians over seeds and examples of the bound and of the measured residual per layer."""
    run = dong_run(summary)
    if run is None:
        return None
    config = config_of(summary)
    std = run["spec"]["embedding_std"]
    reg = regime(run)
    predicted = predicted_logit_variance(std, config.model.features)
    layers = init(run, "dong/residual").shape[-1]
    identity = phase(run, "init").get("identity/residual")
    return {
        "run": run["id"],
        "depth": run["spec"]["depth"],
        "embedding_std": std,
        "regime": reg,
        "predicted_logit_variance": predicted,
        "logit_variance_ratio": reg["logit_variance"] / predicted,
        "head_dim": config.model.features // config.model.num_heads,
        "profile": {metric: profile(run, metric).tolist() for metric in PROFILE_METRICS},
        "table": log_median_profile(init(run, "dong/residual")),
        "exponent": dong_exponent(run),
        "saturation": dong_exponent(run, lower=SATURATED, upper=math.inf),
        "identity": None if identity is None else identity_slopes(identity),
        "looseness": dong_looseness(run),
        "constant": dong_constant(run),
        "bound_median": np.median(init(run, "dong/bound").reshape(-1, layers - 1), axis=0).tolist(),
        "measured_median": np.median(
            init(run, "dong/residual_abs").reshape(-1, layers), axis=0
        ).tolist(),
    }


def _regime_table(summary: dict) -> list[dict]:
    """Per `regime_runs` run: its layer-1 `regime`, the predicted logit variance, r_1 and r_4."""
    features = config_of(summary).model.features
    rows = []
    for run in regime_runs(summary):
        std, r = run["spec"]["embedding_std"], profile(run)
        rows.append(
            {
                "architecture": run["spec"]["architecture"],
                "embedding_std": std,
                **regime(run),
                "predicted": predicted_logit_variance(std, features),
                "r_1": float(r[1]),
                "r_4": float(r[4]),
            }
        )
    return rows


def _untrained(summary: dict) -> dict:
    """`{architecture: [per `init_runs` run, by depth: r_L and the token cosine at L (`last`), and the
    absolute residual and the shared component at layers 0 and L (means over seeds)]}`."""
    out = {}
    for arch in init_architectures(summary):
        records = []
        for run in init_runs(summary, arch):
            absolute, shared = profile(run, "residual_abs_fro"), profile(run, "mean_token_norm")
            records.append(
                {
                    "run": run["id"],
                    "depth": run["spec"]["depth"],
                    "residual": last(run),
                    "cosine": last(run, "token_cosine"),
                    "absolute": [float(absolute[0]), float(absolute[-1])],
                    "shared": [float(shared[0]), float(shared[-1])],
                }
            )
        out[arch] = records
    return out


def _deepest_untrained(summary: dict) -> list[dict]:
    """The deepest `init_runs` run of each architecture (none without untrained init-sweep runs)."""
    if not runs(summary, "init", kind="softmax"):
        return []
    found = [deepest_init(summary, arch) for arch in init_architectures(summary)]
    return [
        {
            "run": r["id"],
            "architecture": r["spec"]["architecture"],
            "depth": r["spec"]["depth"],
        }
        for r in found
        if r is not None
    ]


def _last_layer(summary: dict) -> Optional[dict]:
    """`{"depths": [...], "rows": [{"architecture", "residual": [r_L at each depth, None: no run]}]}` of the
    untrained runs at the main embedding std, by architecture (None: no such run)."""
    found = untrained_runs(summary, embedding_std=main_std(summary))
    if not found:
        return None
    depths = sorted({r["spec"]["depth"] for r in found})
    at = {}
    for r in found:
        at.setdefault((r["spec"]["architecture"], r["spec"]["depth"]), r)
    return {
        "depths": depths,
        "rows": [
            {
                "architecture": arch,
                "residual": [last(at[arch, d]) if (arch, d) in at else None for d in depths],
            }
            for arch in sorted({r["spec"]["architecture"] for r in found})
        ],
    }


def _noci(summary: dict) -> list[dict]:
    """Noci et al.'s depth trends, per LayerNorm placement of `noci_pairs`: `{"placement", **depth_trends}`
    (placements without two common depths left out)."""
    out = []
    for placement, (unscaled, scaled) in noci_pairs(summary).items():
        trends = depth_trends(unscaled, scaled)
        if trends is not None:
            out.append({"placement": placement, **trends})
    return out


def _gradient_record(run: dict) -> dict:
    """One Noci-sweep run: g(L) (`gradient_ratio`), the query/key-to-value ratio at the first and the last
    layer and the token cosine at L, each an `interval` over seeds, and the ratio per layer, mean over seeds."""
    ratio = qk_value_ratio(run)
    return {
        "run": run["id"],
        "architecture": run["spec"]["architecture"],
        "depth": run["spec"]["depth"],
        "g": interval(gradient_ratio(run)),
        "ratio_first": interval(ratio[:, 0]),
        "ratio_last": interval(ratio[:, -1]),
        "cosine": interval(last_per_seed(run, "token_cosine")),
        "ratio_profile": np.mean(ratio, axis=0).tolist(),
    }


def _gradients(summary: dict) -> list[dict]:
    """Per placement of `noci_pairs`: its runs by depth (`unscaled`, `scaled`: `_gradient_record`s), the
    smallest per-layer ratio (mean over seeds) of any of them with its depth and layer (`smallest`), and
    the machine epsilon of the sweep's precision (`epsilon`: float64 or float32, as `study.measure` runs it)."""
    config = config_of(summary)
    sweep = config.noci_sweep
    float64 = config.measure_float64 if sweep.get("float64") is None else sweep.float64
    epsilon = float(np.finfo(np.float64 if float64 else np.float32).eps)
    out = []
    for placement, (unscaled, scaled) in noci_pairs(summary).items():
        records = {
            "unscaled": [_gradient_record(r) for r in unscaled],
            "scaled": [_gradient_record(r) for r in scaled],
        }
        smallest = min(
            (value, variant, record["depth"], layer)
            for variant, found in records.items()
            for record in found
            for layer, value in enumerate(record["ratio_profile"])
        )
        out.append(
            {
                "placement": placement,
                **records,
                "smallest": dict(zip(("ratio", "variant", "depth", "layer"), smallest)),
                "epsilon": epsilon,
            }
        )
    return out


def _mask_row(run: dict, mask: str) -> dict:
    """r_L, the token cosine at L, the geometric rate of r_l (`geometric`) and the mean tau of a run."""
    return {
        "mask": mask,
        "architecture": run["spec"]["architecture"],
        "depth": run["spec"]["depth"],
        "residual": last(run),
        "cosine": last(run, "token_cosine"),
        "rate": geometric(run).rate,
        "tau": mean_tau(run),
    }


def _mask(summary: dict) -> list[dict]:
    """Per `mask_pairs` pair: the causal and bidirectional run ids, the causal run's seeds, the table `rows`
    (`_mask_row` of each run), and the causal `collapse`: its `windows` (`causal_windows`, against the
    exact uniform chain where measured) and `trend` (`rate_trend`)."""
    out = []
    for run, bidir in mask_pairs(summary):
        out.append(
            {
                "architecture": run["spec"]["architecture"],
                "depth": run["spec"]["depth"],
                "causal": run["id"],
                "bidirectional": None if bidir is None else bidir["id"],
                "seeds": len(init(run, "residual_fro")),
                "rows": [
                    _mask_row(r, mask)
                    for mask, r in (("causal", run), ("bidirectional", bidir))
                    if r is not None
                ],
                "collapse": {
                    "windows": causal_windows(run),
                    "trend": rate_trend(init(run, "residual_fro")),
                },
            }
        )
    return out


def _local(summary: dict) -> list[dict]:
    """Per `local_pairs` pair with its full causal run: the width W, the sequence length T, the run ids,
    the seeds, and `local_rates` (None: too few resolved layers)."""
    length = models.make_task(config_of(summary).task).seq_len
    return [
        {
            "window": run["spec"]["window"],
            "length": length,
            "architecture": run["spec"]["architecture"],
            "depth": run["spec"]["depth"],
            "run": run["id"],
            "reference": reference["id"],
            "seeds": len(init(run, "residual_fro")),
            "rates": local_rates(run, reference),
        }
        for run, reference in local_pairs(summary)
        if reference is not None
    ]


def _scale(summary: dict) -> list[dict]:
    """The runs of the embedding-std figure (`scale_runs`)."""
    return [
        {"run": r["id"], "embedding_std": r["spec"]["embedding_std"], "depth": r["spec"]["depth"]}
        for r in scale_runs(summary)
    ]


def _construction(run: dict, name: str) -> dict:
    """One LayerNorm construction: the consensus distance with and without LN at layers 0, L/4, L/2 and L
    (means over seeds) and at L (an `interval`), its mean at L (`with`, `without`), and the `collapse`
    of the LN profile (`rate_windows` and their `rate_trend`)."""
    rows = []
    for which, label in (("consensus_ln", "with LayerNorm"), ("consensus_plain", "without")):
        r = init(run, which)
        layers = sorted({0, r.shape[1] // 4, r.shape[1] // 2, r.shape[1] - 1})
        rows.append(
            {
                "label": label,
                "at": [[layer, float(np.mean(r[:, layer]))] for layer in layers],
                "last": interval(r[:, -1]),
            }
        )
    profile_ln = init(run, "consensus_ln")
    return {
        "name": name,
        "run": run["id"],
        "depth": run["spec"]["depth"],
        "seeds": len(init(run, "consensus_ln")),
        "rows": rows,
        "with": last(run, "consensus_ln"),
        "without": last(run, "consensus_plain"),
        "collapse": {"windows": rate_windows(profile_ln), "trend": rate_trend(profile_ln)},
    }


def _full_rank(run: Optional[dict]) -> Optional[dict]:
    """The full-rank construction's last layer per seed with and without LN, its rank with LN, their
    intervals and extremes (None: no such run)."""
    if run is None:
        return None
    with_ln, plain = last_per_seed(run, "consensus_ln"), last_per_seed(run, "consensus_plain")
    ranks = init(run, "rank_ln")
    return {
        "depth": run["spec"]["depth"],
        "with": with_ln.tolist(),
        "without": plain.tolist(),
        "ranks": ranks.tolist(),
        "with_interval": interval(with_ln),
        "without_interval": interval(plain),
        "with_min": float(with_ln.min()),
        "without_max": float(plain.max()),
        "rank_min": float(ranks.min()),
    }


def _layernorm(summary: dict) -> dict:
    """Wu et al.'s LayerNorm: `constructions` (`_construction` of each the config lists and has a run),
    `full_rank` (`_full_rank`) and `postln`: per post-LN attention-only mask run (float64), its depth,
    width D and sequence length T, r_L per seed, its `interval`, lowest seed and mean (`last`), the
    per-layer rates of r_l in two depth windows (`windows`: `rate_windows`) and those of the pure
    attention run of its depth (`pure_windows`; None: no such run), and `float32`: r_L of its
    float32-sweep twin (None: no twin)."""
    config = config_of(summary)
    block = config.get("layernorm")
    names = list(block.constructions) if block is not None else []
    length = models.make_task(config.task).seq_len

    def last_layer(run):
        r = last_per_seed(run, "residual_fro")
        return {
            "run": run["id"],
            "last": r.tolist(),
            "interval": interval(r),
            "min": float(r.min()),
            "mean": last(run),
        }

    postln = []
    for run in runs(summary, "mask", kind="softmax", architecture="attention_only_postln"):
        twin = float32_twin(summary, run)
        pure = deepest(
            summary,
            "mask",
            kind="softmax",
            architecture="attention_only",
            depth=run["spec"]["depth"],
        )
        postln.append(
            {
                "depth": run["spec"]["depth"],
                "width": config.model.features,
                "length": length,
                **last_layer(run),
                "windows": rate_windows(init(run, "residual_fro")),
                "pure_windows": None if pure is None else rate_windows(init(pure, "residual_fro")),
                "float32": None if twin is None else last_layer(twin),
            }
        )
    return {
        "constructions": [
            _construction(layernorm_run(summary, name), name)
            for name in names
            if layernorm_run(summary, name) is not None
        ],
        "full_rank": _full_rank(layernorm_run(summary, "full_rank")),
        "postln": postln,
    }


def _training(summary: dict) -> list[dict]:
    """Per train-sweep run (`runs` order): held-out accuracy per seed, its `interval` and lowest seed,
    chance, `plateau_exit`, r_L at initialisation and trained, the trained entropy per layer, diverged
    seeds, whether it is a recall check's run (depth 4 with skips), the mode-of-context baseline and the
    accuracy beyond it (`baseline`: `recall_scores`, None without the counts), and the training curves:
    accuracy per seed and entropy per layer (mean over seeds) at every logged step."""
    out = []
    for run in runs(summary, "train"):
        accs = per_seed(run, "eval_accuracy")
        end = trained(run)
        logged = train_steps(run)
        entropy = [
            (p["step"], mean(p["metrics"]["attention_entropy_normalized"]).tolist())
            for p in run["phases"]
            if "attention_entropy_normalized" in p["metrics"]
        ]
        out.append(
            {
                "run": run["id"],
                "architecture": run["spec"]["architecture"],
                "kind": run["spec"]["kind"],
                "depth": run["spec"]["depth"],
                "accuracy": accs,
                "accuracy_interval": interval(accs),
                "accuracy_min": min(accs) if accs else None,
                "chance": chance(run),
                "plateau_exit": plateau_exit(run),
                "residual_init": last(run),
                "residual_trained": float(mean(end["residual_fro"])[-1]),
                "entropy_trained": mean(end["attention_entropy_normalized"]).tolist(),
                "diverged": int(np.sum(phase(run, "final").get("diverged", []))),
                "recall": is_recall_run(run),
                "baseline": recall_scores(run),
                "accuracy_curve": {
                    "steps": [step for step, _ in logged],
                    "accuracy": [acc.tolist() for _, acc in logged],
                },
                "entropy_curve": {
                    "steps": [step for step, _ in entropy],
                    "mean": [values for _, values in entropy],
                },
            }
        )
    return out


def _paths(summary: dict) -> list[dict]:
    """Per trained run with Dong et al.'s path-length experiment: `path_medians`."""
    out = []
    for run in runs(summary, "train"):
        medians = path_medians(run)
        if medians is not None:
            out.append(
                {
                    "run": run["id"],
                    "architecture": run["spec"]["architecture"],
                    "depth": run["spec"]["depth"],
                    "medians": medians.tolist(),
                }
            )
    return out


# The init-phase metrics each figure draws as lines with bands: of the deepest untrained run of each
# architecture, of the embedding-std runs, of the causal runs and of their bidirectional twins.
BAND_METRICS = {
    "untrained": ("residual_fro", "residual_abs_fro", "token_cosine"),
    "scale": ("residual_fro", "attention_entropy_normalized", "dobrushin"),
    "causal": ("residual_fro", "token_cosine", "dobrushin"),
    "bidirectional": ("residual_fro", "token_cosine"),
    "local": ("residual_fro",),
}


def _bands(summary: dict, sections: dict) -> dict:
    """`{run_id: {metric: band}}` of every line the figures draw with its band (`BAND_METRICS`)."""
    wanted = {}
    for r in sections["deepest_untrained"]:
        wanted.setdefault(r["run"], set()).update(BAND_METRICS["untrained"])
    for r in sections["scale"]:
        wanted.setdefault(r["run"], set()).update(BAND_METRICS["scale"])
    for pair in sections["mask"]:
        for mask in ("causal", "bidirectional"):
            if pair[mask] is not None:
                wanted.setdefault(pair[mask], set()).update(BAND_METRICS[mask])
        if "chain/residual_fro" in phase(summary["runs"][pair["causal"]], "init"):
            wanted[pair["causal"]].add("chain/residual_fro")
    for r in sections["local"]:
        for run_id in (r["run"], r["reference"]):
            wanted.setdefault(run_id, set()).update(BAND_METRICS["local"])
    return {
        run_id: {metric: band(init(summary["runs"][run_id], metric)) for metric in sorted(metrics)}
        for run_id, metrics in wanted.items()
    }


def derive(summary: dict, config) -> dict:
    """`summary` (the raw aggregate, or a whole summary.json) with its sections added, every number the
    checks, figures, report and README read:

    * `dong` (`_dong`; None: no run in Dong et al.'s setting) and `regime_table` (`_regime_table`);
    * `untrained` (`_untrained`), `deepest_untrained` and `last_layer`;
    * `noci` (`_noci`: Noci et al.'s depth trends per LayerNorm placement) and `gradients`
      (`_gradients`: the Noci sweep's runs);
    * `mask` (`_mask`: causal runs, their bidirectional twins and the exact uniform chain), `local`
      (`_local`: local masks against the full causal mask) and `scale` (the embedding-std runs);
    * `layernorm` (`_layernorm`: Wu et al.'s constructions and the post-LN runs in both precisions);
    * `training` (`_training`) and `paths` (`_paths`);
    * `bands` (`_bands`: the figures' lines with their min-max bands over seeds).

    `config`: the study's ConfigDict.
    """
    view = _view(summary, config)
    sections = {
        "dong": _dong(view),
        "regime_table": _regime_table(view),
        "untrained": _untrained(view),
        "deepest_untrained": _deepest_untrained(view),
        "last_layer": _last_layer(view),
        "noci": _noci(view),
        "gradients": _gradients(view),
        "mask": _mask(view),
        "local": _local(view),
        "scale": _scale(view),
        "layernorm": _layernorm(view),
        "training": _training(view),
        "paths": _paths(view),
    }
    return {**summary, **sections, "bands": _bands(view, sections)}


def summarize(rows: list[dict], config) -> dict:
    """The study's summary: the raw aggregate of every run's rows (`aggregate`) with its sections
    (`derive`)."""
    return derive(aggregate(rows), config)


def add_derived(summary: dict) -> dict:
    """A summary.json written before `derive` existed (raw aggregate, config, predictions, plots), with the
    sections added (as JSON reads them back); a summary that has them gets them anew."""
    return json_form(derive(summary, config_of(summary)))
