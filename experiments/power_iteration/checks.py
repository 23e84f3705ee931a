"""The power-iteration study's rows, each of one kind (`experiments.lab.study.KINDS`), from the summary.

Sanity (theorems, identities and constructions whose hypotheses hold; they fail only on a bug):

* fixed matrix: d(k) decays at rate |lambda_2|, since A^k - 1 pi^T = (A - 1 pi^T)^k
  (Seneta 2006, ch. 1): a check of the fit, not of a claim;
* products: delta(P_l) <= prod_i tau(A_i) and delta(P_l) non-increasing
  (sub-multiplicativity of Dobrushin's coefficient; Seneta 2006, §3.1);
  pi_l = e_1 for causal attention (an absorbing chain);
* products: the untrained attention-only model's causal maps are U (u_ij = 1/i, j <= i), so
  its chain's rates are U's: a check of the measurement against `uniform_causal_chain`;
* sphere dynamics: a regime condition, not a theorem: the smallest beta reaches one cluster
  within the horizon, which the time-to-one-cluster row needs (a seed that never gets there
  leaves that row not measured); it fails only if the configured horizon is too short.

Hypothesis (this codebase; not in any cited paper, not evidence about one):

* products: each causal layer contracts the product at its own |lambda_2|,
  delta(P_l) / delta(P_(l-1)) ~ |lambda_2(A_l)|, once the transient is over:
  over the second half of the layers, the mean log excess lies within the
  uniform causal chain's largest excess there (`summary.rate_test`), AND the same
  statistic of each competing explanation (`COMPETITORS`: Dobrushin's tau(A_l), and U's rate
  1/2 at every layer) lies outside; if a competitor lies inside too, the window cannot tell
  them apart and the row is not measured. The slope of log-rate on log |lambda_2| over the
  window's layers is reported beside it. Two caveats: delta(P_l) >= max_t prod_i a_tt^(i) (row t
  of P_l keeps the mass prod_i a_tt^(i) on token t, row 1 keeps none), so where the slowest
  diagonal token is the same at every layer the product cannot contract faster than
  prod |lambda_2| (the fast side is then a bound); and with skip connections P_l = A_l ... A_1
  is the product of the attention maps alone: the residual stream is not part of it.
* sphere dynamics (metastability; conjectured by Geshkovski et al. 2023, proved by Geshkovski,
  Koubbi, Polyanskiy & Rigollet 2024 for well-separated multi-cluster starts: "although
  particles collapse to a single cluster in infinite time, they remain trapped near a
  configuration of several clusters for an exponentially long period of time"; the starts here
  are uniform on the sphere, outside the theorem's condition): the cluster count at a fixed
  time and the time to reach one cluster grow with beta, paired over the same starts, the
  largest beta against the smallest.

Every threshold names its source beside it; a verdict needs `MIN_UNITS` seeds.
"""

from __future__ import annotations

from experiments.architectures import is_attention_only
from experiments.lab.render import fmt, interval_text
from experiments.lab.study import config_of, prediction
from experiments.power_iteration.constants import LOG_RATE_RESOLUTION, MIN_UNITS

GESHKOVSKI = "Geshkovski et al. 2023"
# The metastability rows test a conjecture, proved only for well-separated multi-cluster starts.
METASTABILITY = (
    "this codebase, after the metastability conjectured by Geshkovski et al. 2023 (proved by "
    "Geshkovski, Koubbi, Polyanskiy & Rigollet 2024 for well-separated multi-cluster starts, "
    "not for uniform ones)"
)
HYPOTHESIS = (
    "this codebase (Seneta 2006's homogeneous rate |lambda_2| applied layer by layer); "
    "reference: the uniform causal chain"
)
# The competing explanations of the causal rate (`summary.rate_test`'s keys): a row that does not
# exclude them has not shown that the rate is |lambda_2|'s.
COMPETITORS = {
    "tau_excess": "tau(A_l), Dobrushin's rate",
    "uniform_excess": "U's rate 1/2 at every layer",
}


def _fixed_checks(config, fixed) -> list[dict]:
    checks = []
    tol = config.fixed.tolerance
    for run in fixed:
        worst = float(run["worst_rel_error"])
        failed = run["failed"]
        checks.append(
            prediction(
                f"fixed matrix: A^k -> 1 pi^T at rate |lambda_2| (tau={run['temperature']:g})",
                "Seneta 2006",
                f"|rate / |lambda_2| - 1| <= {tol:g} for every matrix (tolerance of the fit: "
                "configs/power_iteration.py)",
                worst,
                bool(worst <= tol),
                f"worst of {len(run['matrices'])} matrices; {failed} outside; {run['dtype']}; "
                "an identity, (A - 1 pi^T)^k = A^k - 1 pi^T: checks the fit",
                kind="sanity",
            )
        )
    return checks


def _label(run, phase: str) -> str:
    return f"{run['spec']['architecture']}, {run['phases'][phase]['derived']['label']}"


def _dobrushin_check(run, phase: str) -> dict:
    """Worst excess of both inequalities; layer 1 is left out of the bound (there delta(P_1) = tau(A_1))."""
    n = run["phases"][phase]["derived"]
    name = f"Dobrushin bound ({_label(run, phase)})"
    if n["layers"] < 2:
        return prediction(
            name,
            "Seneta 2006, §3.1",
            "delta(P_l) <= prod_i tau(A_i)",
            None,
            None,
            "not measured: needs at least 2 layers",
            kind="sanity",
        )
    bound, monotone, worst = n["bound_excess"], n["monotone_excess"], n["worst_excess"]
    tol = run["tolerance"]
    return prediction(
        name,
        "Seneta 2006, §3.1",
        "delta(P_l) <= prod_i tau(A_i) and delta(P_l) <= delta(P_(l-1)), every layer, example and "
        "head, to the rounding allowance 2 L T eps",
        worst,
        bool(worst <= tol),
        f"max excess: bound {bound:.2e}, monotonicity {monotone:.2e}; rounding allowance {tol:.1e}",
        kind="sanity",
    )


def _causal_check(run, phase: str) -> dict:
    n = run["phases"][phase]["derived"]
    worst, tol = n["pi_first_gap"], run["causal_tolerance"]
    note = f"tolerance {tol:.1e} (the solver's stopping rule: constants.CAUSAL_FACTOR)"
    if n["saturated"]:
        note += (
            "; some chains have absorbing tokens besides the first (saturated rows, a_tt = 1): "
            "their pi_l is not unique and they are left out"
        )
    return prediction(
        f"causal attention: pi_l = e_1 ({_label(run, phase)})",
        "Seneta 2006 (absorbing chains)",
        "1 - pi_l(first token) ~ 0 for every layer whose only absorbing token is the first",
        worst,
        bool(worst <= tol),
        note,
        kind="sanity",
    )


def _within(x: dict, eps: float) -> bool:
    """The 95% interval `x` lies within +-eps (the rule of the rate rows, and of their competitors)."""
    return bool(-eps <= x["low"] and x["high"] <= eps)


def _uniform_chain_check(run, phase: str) -> dict:
    """The untrained attention-only model's causal chain: its maps are U, so its row repeats the
    reference (a check of the measurement, not of the hypothesis)."""
    n = run["phases"][phase]["derived"]
    r = n["rate"]
    name = f"the products of U repeat the reference's rates ({_label(run, phase)})"
    source = (
        "a construction: without skip, MLP or norm the untrained model's logits are near 0, so "
        "every map is U (u_ij = 1/i, j <= i)"
    )
    claim = (
        "largest |mean over seeds of e_l - U's e_l| over the window's depths <= "
        f"{LOG_RATE_RESOLUTION:g}, the resolution of a log-rate (constants.LOG_RATE_RESOLUTION); "
        "it fails only if delta(P_l) or |lambda_2| is mismeasured, or if the maps are not U "
        "(the entropy in the note says which)"
    )
    if r is None or not r["resolved"]:
        why = "needs at least 2 layers" if r is None else "delta(P_l) below resolution"
        return prediction(name, source, claim, None, None, f"not measured: {why}", "sanity")
    distance = r["reference_distance"]
    return prediction(
        name,
        source,
        claim,
        distance,
        bool(distance <= LOG_RATE_RESOLUTION),
        f"depths {r['window'][0]}..{r['window'][1]}; excess {interval_text(r['excess'])} over "
        f"{r['units']} seeds against U's mean {r['reference_mean']:.3g}; entropy over the "
        f"visible keys {n['entropy'][0]:.4f}..{n['entropy'][1]:.4f}",
        "sanity",
    )


def _rate_check(run, phase: str) -> dict:
    """The rate hypothesis over one causal phase (`summary.rate_test`): it passes only if its
    excess lies within +-eps and every competing explanation's (`COMPETITORS`) does not; if one
    does too, the window cannot tell them apart and the row is not measured."""
    if is_attention_only(run["spec"]["architecture"]) and phase == "init":
        return _uniform_chain_check(run, phase)
    n = run["phases"][phase]["derived"]
    r = n["rate"]
    name = (
        f"delta(P_l) / delta(P_(l-1)) = |lambda_2(A_l)| after the transient ({_label(run, phase)})"
    )
    if r is None:
        return prediction(
            name, HYPOTHESIS, "", None, None, "not measured: needs at least 2 layers", "hypothesis"
        )
    (first, last), eps = r["window"], r["epsilon"]
    claim = (
        f"mean over depths l = {first}..{last} (the second half) of log(delta(P_l) / "
        "delta(P_(l-1))) - log |lambda_2(A_l)|: its 95% interval over seeds within +-eps, eps = "
        "the largest |excess| of the uniform causal chain (rate -> |lambda_2| = 1/2 exactly) "
        "at those depths; and the same statistic of each competing explanation ("
        + " and ".join(COMPETITORS.values())
        + ") outside +-eps"
    )
    x = r["excess"]
    if not r["resolved"]:
        return prediction(
            name,
            HYPOTHESIS,
            claim,
            None,
            None,
            "not measured: delta(P_l) below resolution",
            "hypothesis",
        )
    slope = r["slope"]
    note = (
        f"excess {interval_text(x)} over {x['n']} seeds; eps = {eps:.3g} (the reference's mean "
        f"excess there {r['reference_mean']:.3g}); "
        + "; ".join(
            f"with {text} in place of |lambda_2|: {interval_text(r[key])}"
            for key, text in COMPETITORS.items()
        )
        + "; slope of log-rate on log |lambda_2| over the window's depths "
        + (
            "undefined (|lambda_2| does not vary)"
            if slope is None
            else f"{interval_text(slope)} (1 if the rate follows |lambda_2|)"
        )
        + f"; largest distance of a layer's mean excess from the reference's "
        f"{r['reference_distance']:.2g}; entropy over the visible keys "
        f"{n['entropy'][0]:.4f}..{n['entropy'][1]:.4f}"
    )
    if r["units"] < MIN_UNITS:
        return prediction(
            name,
            HYPOTHESIS,
            claim,
            x["mean"],
            None,
            f"not measured: {r['units']} seeds, a verdict needs {MIN_UNITS}; {note}",
            "hypothesis",
        )
    passed = _within(x, eps)
    tied = [
        f"{text} (excess {interval_text(r[key])})"
        for key, text in COMPETITORS.items()
        if _within(r[key], eps)
    ]
    if passed and tied:
        passed = None
        note = (
            f"not measured: the window cannot resolve |lambda_2| from {' or '.join(tied)}, "
            f"within +-{eps:.3g} too; {note}"
        )
    return prediction(name, HYPOTHESIS, claim, x["mean"], passed, note, "hypothesis")


def _cluster_checks(config, summary: dict) -> list[dict]:
    """Geshkovski et al.'s rows over `summary`'s `clusters` and `metastability` (`summary.derive_clusters`)."""
    if not summary["clusters"]:
        return []
    c = config.clusters
    setting = f"{c.variant}, n={c.num_tokens}, d={c.dim}, dt={c.dt:g}"
    runs = sorted(summary["clusters"], key=lambda r: r["beta"])
    small, large = runs[0], runs[-1]
    checks = [
        prediction(
            f"one cluster at small beta (beta={small['beta']:g}; {setting})",
            "a regime condition of the time-to-one-cluster row (no theorem asserted: the beta "
            f"condition of {GESHKOVSKI}'s small-beta result is not checked for this n)",
            f"every seed reaches a single cluster by t={small['horizon']:g}, so that the time "
            "ratio below has a measured denominator; it fails only if the configured horizon "
            "is too short for the smallest beta",
            small["final_max"],
            bool(small["final_max"] == 1),
            f"times to one cluster {small['time_to_one']}",
            kind="sanity",
        )
    ]
    m = summary["metastability"]
    if m is None:
        return checks
    pair = f"beta={large['beta']:g} against beta={small['beta']:g}, paired over the same starts"
    count, time = m["count_difference"], m["log_time_ratio"]
    few = m["units"] < MIN_UNITS
    units = f"{m['units']} seeds" + (f" (a verdict needs {MIN_UNITS})" if few else "")
    checks.append(
        prediction(
            f"metastability: more clusters at larger beta (t={small['probe_time']:g}; {setting})",
            METASTABILITY,
            f"cluster count at t={small['probe_time']:g}, {pair}: the 95% interval of the "
            "difference above 0 (the claim is an inequality)",
            count["mean"],
            None if few else bool(count["low"] > 0),
            f"difference {interval_text(count)} over {units}; counts "
            + ", ".join(f"{r['beta']:g}: {interval_text(r['probe_interval'])}" for r in runs),
            "hypothesis",
        )
    )
    note = f"log ratio {interval_text(time)} over {units}; medians " + ", ".join(
        f"{r['beta']:g}: {fmt(r['median_time'])}" for r in runs
    )
    if m["lower_bound"]:
        note += f" (a seed that stays above one cluster counts as t={large['horizon']:g}: a lower bound)"
    passed = None if few or m["small_censored"] else bool(time["low"] > 0)
    if m["small_censored"]:
        note += "; not measured: a seed at the smallest beta never reached one cluster"
    checks.append(
        prediction(
            f"metastability: the time to one cluster grows with beta ({setting})",
            METASTABILITY,
            f"log(time to one cluster), {pair}: the 95% interval of the difference above 0 "
            "(the claim is an inequality)",
            time["mean"],
            passed,
            note,
            "hypothesis",
        )
    )
    return checks


def predictions(summary: dict) -> list[dict]:
    config = config_of(summary)
    checks = _fixed_checks(config, summary["fixed"])
    for run in summary["products"]:
        for phase in run["phase_order"]:
            checks.append(_dobrushin_check(run, phase))
            if run["phases"][phase]["derived"]["causal"]:
                checks += [_causal_check(run, phase), _rate_check(run, phase)]
    return checks + _cluster_checks(config, summary)
