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
        "return np.exp(np.mean(np.asarray(nll, np.float64), axis=-1))",
        "return np.exp(np.mean(np.asarray(nll, np.float64), axis=0))",
        "long_context aggregation: perplexity a mean over segments, not positions",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "return np.exp(np.mean(np.asarray(nll, np.float64), axis=-1))",
        "return 2 ** np.mean(np.asarray(nll, np.float64), axis=-1)",
        "long_context aggregation: perplexity in base 2 (nll in nats)",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "ppl = {v: _ppl(x[:, 1:]) for v, x in nll.items()}",
        "ppl = {v: _ppl(x) for v, x in nll.items()}",
        "long_context aggregation: stream perplexity counts the position before eviction",
        LC_TESTS,
    ),
    Mutant(
        LC,
        "return float(np.mean(np.asarray(values, np.float64)[formation:]))",
        "return float(np.mean(np.asarray(values, np.float64)))",
        "long_context aggregation: sink readings over every layer, not those from the formation layer",
        LC_TESTS,
    ),
    Mutant(
        LC,
        'ratio = [np.exp(edit[s][name]["nll"] - edit[s]["none"]["nll"]) for s in have]',
        'ratio = [np.exp(edit[s][name]["nll"] - edit[segs[0]]["none"]["nll"]) for s in have]',
        "long_context aggregation: edit ratio against the first segment's unedited run, not its own",
        LC_TESTS,
    ),
    Mutant(
        LC,
        '[spread[s][name][last[s]] / spread[s]["none"][last[s]] for s in segs]',
        '[spread[s][name][0] / spread[s]["none"][0] for s in segs]',
        "long_context aggregation: spread read at the first layer, not the last",
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
