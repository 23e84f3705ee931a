"""Mutants of the power_iteration, softmax_scaling and rank_collapse aggregation: an interval or a mean over the wrong
axis, a mean for a worst case (or the reverse), a mean for a median, a log in another base, an arithmetic
mean for a geometric one. Each is killed by the study's aggregation test on synthetic rows whose axes have
distinct sizes."""

from tests.mutant import Mutant

PI = "experiments/power_iteration/summary.py"
PI_TESTS = ("tests/experiments/test_power_iteration_aggregation.py",)
SS = "experiments/softmax_scaling/summary.py"
SS_TESTS = ("tests/experiments/test_softmax_scaling_aggregation.py",)
RC = "experiments/rank_collapse/summary.py"
RC_TESTS = ("tests/experiments/test_rank_collapse_aggregation.py",)

MUTANTS = (
    Mutant(
        PI,
        "        return np.max(values, axis=0)\n",
        "        return np.mean(values, axis=0)\n",
        "power_iteration aggregation: excesses and the pi = e_1 gap averaged over seeds, not the worst",
        PI_TESTS,
    ),
    Mutant(
        PI,
        "return np.min(values, axis=0) if name.endswith",
        "return np.mean(values, axis=0) if name.endswith",
        "power_iteration aggregation: delta_min a mean over seeds, not the least",
        PI_TESTS,
    ),
    Mutant(
        PI,
        'name.endswith("_min") else np.mean(values, axis=0)',
        'name.endswith("_min") else np.mean(values, axis=-1)',
        "power_iteration aggregation: products metrics averaged over layers, not seeds",
        PI_TESTS,
    ),
    Mutant(
        PI,
        "k: np.asarray(head[k])[:, layer] for k in",
        "k: np.asarray(head[k])[layer % len(head[k])] for k in",
        "power_iteration aggregation: per-head layer rows indexed on the head axis",
        PI_TESTS,
    ),
    Mutant(
        PI,
        '"pi_first_gap": max(float(np.max(phase[c]["pi_first_gap"])) for c in CHAINS),',
        '"pi_first_gap": max(float(np.mean(phase[c]["pi_first_gap"])) for c in CHAINS),',
        "power_iteration aggregation: derived pi = e_1 gap a mean over layers, not the worst",
        PI_TESTS,
    ),
    Mutant(
        PI,
        '"worst_rel_error": max(errors),',
        '"worst_rel_error": float(np.mean(errors)),',
        "power_iteration aggregation: fixed-matrix worst relative error a mean over matrices",
        PI_TESTS,
    ),
    Mutant(
        PI,
        '"excess": interval(excess.mean(axis=1)),',
        '"excess": interval(excess.mean(axis=0)),',
        "power_iteration aggregation: rate excess interval over the window's layers, not seeds",
        PI_TESTS,
    ),
    Mutant(
        PI,
        "layer_excess = excess.mean(axis=0)",
        "layer_excess = excess.mean(axis=1)",
        "power_iteration aggregation: per-layer rate excess averaged over layers, not seeds",
        PI_TESTS,
    ),
    Mutant(
        PI,
        '"clusters_mean": counts[:, grid].mean(axis=0).tolist(),',
        '"clusters_mean": counts[:, grid].mean(axis=1).tolist(),',
        "power_iteration aggregation: cluster counts averaged over times, not seeds",
        PI_TESTS,
    ),
    Mutant(
        PI,
        '"clusters_curve": counts.mean(axis=0),',
        '"clusters_curve": np.median(counts, axis=0),',
        "power_iteration aggregation: cluster curve the median over seeds, not the mean",
        PI_TESTS,
    ),
    Mutant(
        PI,
        'return float(np.median([math.inf if t is None else t for t in run["time_to_one"]]))',
        'return float(np.mean([math.inf if t is None else t for t in run["time_to_one"]]))',
        "power_iteration aggregation: time to one cluster a mean over seeds, not the median",
        PI_TESTS,
    ),
    Mutant(
        PI,
        '"final_max": max(run["final_clusters"]),',
        '"final_max": float(np.mean(run["final_clusters"])),',
        "power_iteration aggregation: most clusters at the horizon a mean over seeds",
        PI_TESTS,
    ),
    Mutant(
        PI,
        '"log_time_ratio": interval(np.log(tl) - np.log(ts)),',
        '"log_time_ratio": interval(np.log10(tl) - np.log10(ts)),',
        "power_iteration aggregation: metastability time ratio in base 10 (natural logs)",
        PI_TESTS,
    ),
    Mutant(
        PI,
        "metastability(by_beta[0], by_beta[-1])",
        "metastability(by_beta[0], by_beta[1])",
        "power_iteration aggregation: metastability against the second beta, not the largest",
        PI_TESTS,
    ),
    Mutant(
        SS,
        '"median": float(np.median(v)),',
        '"median": float(np.mean(v)),',
        "softmax_scaling aggregation: per-seed gradient median a mean",
        SS_TESTS,
    ),
    Mutant(
        SS,
        "g: float(np.median(np.concatenate(by_dim[-1])))",
        "g: float(np.mean(np.concatenate(by_dim[-1])))",
        "softmax_scaling aggregation: tau a mean of the gradients, not their median",
        SS_TESTS,
    ),
    Mutant(
        SS,
        "g: float(np.median(np.concatenate(by_dim[-1])))",
        "g: float(np.median(np.concatenate(by_dim[0])))",
        "softmax_scaling aggregation: tau at the smallest width, not the largest",
        SS_TESTS,
    ),
    Mutant(
        SS,
        "return {k: [[x[k] for x in seeds] for seeds in stats] for k in NORM_STATISTICS}",
        "return {k: [[x[k] for x in col] for col in zip(*stats)] for k in NORM_STATISTICS}",
        "softmax_scaling aggregation: gradient statistics laid out per seed, intervals over widths",
        SS_TESTS,
    ),
    Mutant(
        SS,
        '"above": float(np.mean(v > tau)),',
        '"above": float(np.sum(v > tau)),',
        "softmax_scaling aggregation: gradients above tau counted, not a share",
        SS_TESTS,
    ),
    Mutant(
        SS,
        'return {**{k: float(np.exp(x[k])) for k in ("mean", "low", "high")}, "n": x["n"]}',
        'return {**{k: float(10 ** x[k]) for k in ("mean", "low", "high")}, "n": x["n"]}',
        "softmax_scaling aggregation: geometric interval exponentiated in base 10 (natural logs)",
        SS_TESTS,
    ),
    Mutant(
        SS,
        "x = interval(np.log(np.asarray(values, np.float64)))",
        "x = interval(np.log(np.asarray(values, np.float64)))\n"
        '        x["mean"] = float(np.sum(np.log(np.asarray(values, np.float64))))',
        "softmax_scaling aggregation: geometric mean as exp of the summed logs",
        SS_TESTS,
    ),
    Mutant(
        SS,
        'worst = max(abs(r["saturation"]["scaled"][s] / limit[s] - 1.0) for r in records for s in STATS)',
        'worst = float(np.mean([abs(r["saturation"]["scaled"][s] / limit[s] - 1.0) for r in records for s in STATS]))',
        "softmax_scaling aggregation: saturation deviation a mean, not the worst",
        SS_TESTS,
    ),
    Mutant(
        SS,
        'start = np.array(rate["values"])[:, 0].mean()',
        'start = np.array(rate["values"])[0].mean()',
        "softmax_scaling aggregation: rate reference through one seed's mean over widths",
        SS_TESTS,
    ),
    Mutant(
        SS,
        '"rate_prefactor": (np.array(rate["values"]).mean(axis=0) * np.sqrt(widths)).tolist(),',
        '"rate_prefactor": (np.array(rate["values"]).mean(axis=1) * np.sqrt(widths)).tolist(),',
        "softmax_scaling aggregation: rate prefactor averaged over widths, not seeds",
        SS_TESTS,
    ),
    Mutant(
        SS,
        "differences = {g: interval(np.subtract(by_dim[-1], by_dim[0])) for g, by_dim in above.items()}",
        "differences = {g: interval(np.subtract(by_dim[-1], by_dim[1])) for g, by_dim in above.items()}",
        "softmax_scaling aggregation: fall measured from the second width, not the smallest",
        SS_TESTS,
    ),
    Mutant(
        RC,
        "median = np.exp(np.median(np.log(r.reshape(-1, r.shape[-1])), axis=0))",
        "median = np.exp(np.mean(np.log(r.reshape(-1, r.shape[-1])), axis=0))",
        "rank_collapse aggregation: Dong table a mean of log r over seeds and examples, not the median",
        RC_TESTS,
    ),
    Mutant(
        RC,
        "median = np.exp(np.median(np.log(r.reshape(-1, r.shape[-1])), axis=0))",
        "median = np.median(r.reshape(-1, r.shape[-1]), axis=0)",
        "rank_collapse aggregation: Dong table the median of r, not taken in log space",
        RC_TESTS,
    ),
    Mutant(
        RC,
        "median = np.exp(np.median(np.log(r.reshape(-1, r.shape[-1])), axis=0))",
        "median = np.exp(np.median(np.log(r[0]), axis=0))",
        "rank_collapse aggregation: Dong table the median over the first seed's examples only",
        RC_TESTS,
    ),
    Mutant(
        RC,
        "logs = [float(-np.log(m)) if ok",
        "logs = [float(-np.log10(m)) if ok",
        "rank_collapse aggregation: Dong table log(1/r) in base 10, not e",
        RC_TESTS,
    ),
    Mutant(
        RC,
        "    for a, r in zip(res_abs, rel):",
        "    for a, r in zip(res_abs.transpose(1, 0, 2), rel.transpose(1, 0, 2)):",
        "rank_collapse aggregation: local exponent a slope per example (interval over examples), "
        "not per seed",
        RC_TESTS,
    ),
    Mutant(
        RC,
        "window = (before > floor) & (before >= lower) & (before < upper)",
        "window = (before > floor) & (before >= lower)",
        "rank_collapse aggregation: local exponent fit over every resolved pair, not the windowed ones",
        RC_TESTS,
    ),
    Mutant(
        RC,
        '"worst": max(row["max"] for row in rows) if rows else None,',
        '"worst": float(np.mean([row["max"] for row in rows])) if rows else None,',
        "rank_collapse aggregation: bound looseness worst a mean over layers, not the largest",
        RC_TESTS,
    ),
    Mutant(
        RC,
        '"rank": np.log(residual[:, -1] / residual[:, 0]),',
        '"rank": np.log(residual[-1] / residual[0]),',
        "rank_collapse aggregation: Noci rank trend per depth (interval over depths), not per seed",
        RC_TESTS,
    ),
    Mutant(
        RC,
        "    x = np.log2(depths)",
        "    x = np.log(depths)",
        "rank_collapse aggregation: Noci trends per e-fold of depth, not per doubling (log base)",
        RC_TESTS,
    ),
    Mutant(
        RC,
        "return np.exp(np.mean(np.log(qk_value_ratio(run)), axis=1))",
        "return np.mean(qk_value_ratio(run), axis=1)",
        "rank_collapse aggregation: g(L) an arithmetic mean over layers, not the geometric one",
        RC_TESTS,
    ),
)
