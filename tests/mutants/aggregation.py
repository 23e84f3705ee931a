"""Mutants of the studies' aggregation: an interval or a mean over the wrong axis, a mean for a worst
case (or the reverse), a log in another base, exp of a sum of logs for exp of their mean. Each is killed by
the study's aggregation test on synthetic rows whose axes have distinct sizes."""

from tests.mutant import Mutant

LC = "experiments/long_context/summary.py"
LC_TESTS = ("tests/experiments/test_long_context_aggregation.py",)
PT_TESTS = ("tests/experiments/test_pretrained_aggregation.py",)

MUTANTS = (
    Mutant(
        LC,
        '"sink_growth": interval(sink[1].mean((1, 2)) - sink[0].mean((1, 2))),',
        '"sink_growth": interval(sink[1].mean((0, 2)) - sink[0].mean((0, 2))),',
        "long_context aggregation: sink growth interval over layers, not segments",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "int(np.sum(growth_layers.mean(0) > 0))",
        "int(np.sum(growth_layers.mean(1) > 0))",
        "long_context aggregation: layers growing averaged over the wrong axis",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "[interval(arrays(m, t).mean((1, 2))) for t in lengths]",
        "[interval(arrays(m, t).mean((0, 2))) for t in lengths]",
        "long_context aggregation: model-mean interval over layers, not segments",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "[interval(a) for a in arrays(m, t).mean(2).T]",
        "[interval(a) for a in arrays(m, t).mean(1).T]",
        "long_context aggregation: per-layer means over layers, not heads",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "[interval(a) for a in arrays(m, t).mean(2).T]",
        "[interval(a) for a in arrays(m, t).mean(2)]",
        "long_context aggregation: per-layer intervals over layers, not segments",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "            ).T\n        ]\n        for tok",
        "            )\n        ]\n        for tok",
        "long_context aggregation: residual intervals over layers, not segments",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "return float(np.exp(np.mean(nll)))",
        "return float(np.exp(np.sum(nll)))",
        "long_context aggregation: perplexity as exp of the summed nll",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "return float(np.exp(np.mean(nll)))",
        "return float(2 ** np.mean(nll))",
        "long_context aggregation: perplexity in base 2 (nll in nats)",
        LC_TESTS,
    ),
    Mutant(
        LC,
        'return math.exp(select(rows, part="ablation", segment=g, **match)[0]["value"])',
        'return 10 ** select(rows, part="ablation", segment=g, **match)[0]["value"]',
        "long_context aggregation: ablation perplexity in base 10",
        LC_TESTS,
    ),
    Mutant(
        LC,
        'float(np.max(np.abs(nll[v][g][:w] - nll["full"][g][:w])))',
        'float(np.mean(np.abs(nll[v][g][:w] - nll["full"][g][:w])))',
        "long_context aggregation: early gap a mean, not the worst position",
        LC_TESTS,
    ),
    Mutant(
        LC,
        '"early_gap": max(win["early_gap"] for win in windows)}',
        '"early_gap": float(np.mean([win["early_gap"] for win in windows]))}',
        "long_context aggregation: derived early gap a mean over windows, not the worst",
        LC_TESTS,
    ),
    Mutant(
        "experiments/pretrained/readings.py",
        "return array(values).mean(axis=-1)",
        "return array(values).mean(axis=0)",
        "pretrained aggregation: head means over layers, not heads",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/readings.py",
        "return float(np.exp(np.mean(np.log(np.maximum(head_mean(x)[:layers], 1e-300)))))",
        "return float(np.exp(np.sum(np.log(np.maximum(head_mean(x)[:layers], 1e-300)))))",
        "pretrained aggregation: the maps' rates as exp of the summed logs",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/readings.py",
        'return np.exp(array(variant["log_residual"]))',
        'return 10 ** array(variant["log_residual"])',
        "pretrained aggregation: geometric residual in base 10 (logs are natural)",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/readings.py",
        "float(np.exp(np.polyfit(layers, values, 1)[0]))",
        "float(10 ** np.polyfit(layers, values, 1)[0])",
        "pretrained aggregation: sentence decay factor in base 10",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/readings.py",
        "return float(np.median(q)), ",
        "return float(np.mean(q)), ",
        "pretrained aggregation: sentence rates' mean, not their median",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/readings.py",
        "return np.asarray([np.median(array(r)) for r in paths",
        "return np.asarray([np.mean(array(r)) for r in paths",
        "pretrained aggregation: path residuals' mean, not their median",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/readings.py",
        "return float(np.mean(v > threshold)) if v.size else math.nan",
        "return float(np.sum(v > threshold)) if v.size else math.nan",
        "pretrained aggregation: sink layers counted, not a fraction",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/activations.py",
        "return float(np.median(array(spread)[layers]))",
        "return float(np.max(array(spread)[layers]))",
        "pretrained aggregation: massive spread the worst layer, not the median",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/activations.py",
        '"location": interval((first + first_delimiter) / total),',
        '"location": interval(np.full(len(total), (first + first_delimiter).sum() / total.sum())),',
        "pretrained aggregation: massive location share pooled over hits, not per sentence",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/summary.py",
        '"bound": max(float(v["slem_over_tau"]) for v in variants.values()),',
        '"bound": float(np.mean([float(v["slem_over_tau"]) for v in variants.values()])),',
        "pretrained aggregation: bound a mean over variants, not the worst",
        PT_TESTS,
    ),
    Mutant(
        "experiments/pretrained/study.py",
        "np.maximum(total[k], v)",
        "total[k] + v",
        "pretrained aggregation: worst cases summed over groups",
        PT_TESTS,
    ),
)
