"""Mutants of the width study: each decision rule flipped or loosened, the fix or a metric miscomputed, an
aggregation over the wrong axis. Each is killed by `tests/experiments/test_width.py` (synthetic summaries,
controls with no outlier, NumPy from the equations; seconds, no study run)."""

from tests.mutant import Mutant

CHECKS = "experiments/width/checks.py"
SUMMARY = "experiments/width/summary.py"
MAPS = "experiments/width/maps.py"
CONSTANTS = "experiments/width/constants.py"
TESTS = ("tests/experiments/test_width.py",)

MUTANTS = (
    Mutant(
        CHECKS,
        "stats.within(gap, -math.inf, edge / 2)",
        "stats.within(gap, -math.inf, 0)",
        "width: the gap row's rule 'below 0' (passes a finite-size drift)",
        TESTS,
    ),
    Mutant(
        CHECKS,
        "stats.within(share, -math.inf, SHARE_MIDPOINT)",
        "stats.within(share, -math.inf, 0)",
        "width: the collapse row's rule 'below 0' (passes a local-window map)",
        TESTS,
    ),
    Mutant(
        CHECKS,
        "stats.within(gain, -SHARE_MIDPOINT, math.inf)",
        "stats.within(gain, -math.inf, math.inf)",
        "width: the fix row passes whatever the fix does",
        TESTS,
    ),
    Mutant(
        CONSTANTS,
        '"key_query_xavier": -1.5}',
        '"key_query_xavier": -0.5}',
        "width: Xavier's bulk edge expected at a fixed logit variance",
        TESTS,
    ),
    Mutant(
        CHECKS,
        "_enough(summary, stats.contains(iv, value))",
        '_enough(summary, stats.number(iv["low"]) <= value)',
        "width: the two-sided hypothesis rule one-sided",
        TESTS,
    ),
    Mutant(
        MAPS,
        "return output - jnp.mean(values, axis=0, keepdims=True)",
        "return output - jnp.mean(output, axis=0, keepdims=True)",
        "width: the fix centres the output instead of removing 1 1^T / n from the map",
        TESTS,
    ),
    Mutant(
        MAPS,
        "logits = std * jax.random.normal(key, (length, length), jnp.float64) - std**2 / 2",
        "logits = std**2 * jax.random.normal(key, (length, length), jnp.float64) - std**2 / 2",
        "width: the Markov model's logits with the variance as their scale",
        TESTS,
    ),
    Mutant(
        SUMMARY,
        "return (x @ (y - y.mean(axis=0))) / (x @ x)",
        "return (x @ (y - y.mean(axis=0))) / (x @ x) / 2",
        "width: the log-log slopes halved",
        TESTS,
    ),
    Mutant(
        SUMMARY,
        '"output_rank_share": lambda m, n: m["stable_rank_output"] / m["stable_rank_values"],',
        '"output_rank_share": lambda m, n: m["stable_rank_output"] / n,',
        "width: the output's share read against n, not its input's rank",
        TESTS,
    ),
)
