"""Hand mutants over `attnjax/nn`, the checkpoint loaders and the studies' checks (and the summary numbers
they read), run on demand (not part of the suite).

    python -m tests.mutation [--json out.json] [--only SUBSTRING] [--library] [--quick]

Mutants are `MUTANTS` below and those of each module in `tests/mutants/`.
Each mutant replaces one snippet of one file in a temporary copy of the
tracked tree, runs only the test files (or test ids) listed for it there,
and is *killed* when they fail. The test selections are first run unmutated
(they must pass, or a kill would mean nothing). Prints a table (mutant, the
first failing test) and writes it as JSON; exits 1 if any mutant survives.

Every verdict of experiments/rank_collapse/checks.py, experiments/power_iteration/checks.py and
experiments/softmax_scaling/summary.py (the outcome functions its checks read) is flipped by one
mutant each (rank_collapse's in `tests/mutants/rank_collapse.py`), killed by tests that hand the
checks synthetic summaries (seconds, no study run); so is every rule of experiments/width/checks.py
(`tests/mutants/width.py`).

`--library` keeps the mutants of the library (files under `attnjax/`); `--quick` runs each selection
on the quick tier alone (`-m "not slow"`), where a mutant whose selection holds no quick test
survives (its row says "no quick test").
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.mutant import Mutant

ROOT = Path(__file__).resolve().parents[1]


REF = ("tests/attnjax/nn/test_transformer.py", "tests/attnjax/nn/test_reference_transformer.py")
PRETRAINED = (
    "tests/experiments/test_pretrained.py::test_collapse_and_doubly_exponential_checks",
    "tests/experiments/test_pretrained.py::test_paired_comparisons_at_the_deepest_resolved_depth",
    "tests/experiments/test_pretrained.py::test_hit_readings_and_the_massive_checks",
)
PI = "tests/experiments/test_power_iteration.py::"
POWER_RATE = tuple(
    PI + name
    for name in (
        "test_rate_hypothesis_passes_on_a_chain_at_its_lambda_2_that_excludes_the_competitors",
        "test_rate_hypothesis_is_not_measured_when_a_competitor_fits_as_well",
        "test_the_untrained_attention_only_row_checks_the_measurement_against_u",
        "test_rate_hypothesis_ignores_the_transient_of_the_first_half",
        "test_rate_hypothesis_fails_at_dobrushins_rate_and_faster_than_lambda_2",
        "test_rate_hypothesis_is_not_measured_unresolved_or_with_too_few_seeds",
    )
)
SS = "tests/experiments/test_softmax_scaling.py::"
SOFTMAX_FALLS = (SS + "test_falls_passes_when_the_share_above_tau_falls_and_fails_otherwise",)
SOFTMAX_REMEDY = (SS + "test_remedy_passes_when_the_scale_stops_the_fall_and_fails_otherwise",)
SOFTMAX_RATE = (SS + "test_rate_check_is_two_sided_around_the_derived_slope",)
SOFTMAX_DERIVED = (SS + "test_the_summary_fits_every_rate_width_against_the_derived_slope",)
SOFTMAX_LAW = (SS + "test_the_first_order_law_matches_a_direct_monte_carlo_of_the_jacobian_norm",)
SOFTMAX_BELOW = (
    SS + "test_first_below_finds_the_smallest_d_k_where_the_unscaled_share_is_below_the_scaled",
)
SOFTMAX_TAU = (
    SS + "test_tau_is_the_scaled_gaussian_median_at_the_largest_d_k_and_shares_count_above_it",
)
POWER_CLUSTERS = (
    PI + "test_cluster_rows_pass_where_the_claims_hold",
    PI + "test_cluster_rows_fail_where_the_claims_do_not_hold",
)
HF = (
    "tests/attnjax/pretrained/test_hf.py",
)  # skips without torch / transformers: run these with the oracle extra
SWITCHES = ("tests/attnjax/nn/test_switches.py",)
GENERATE = ("tests/attnjax/nn/test_generate.py", "tests/attnjax/nn/test_generate_sampling.py")
WINDOW = ("tests/attnjax/test_masks.py::test_with_window_keeps_the_last_w_keys",)
ROPE_SCALING = (
    "tests/attnjax/test_rope.py::test_scaled_frequencies_follow_hugging_faces_definitions",
)

MUTANTS = (
    Mutant(
        "attnjax/nn/attention.py",
        "scale = default_scale(self.head_dim) / self.config.temperature",
        "scale = default_scale(self.head_dim)",
        "softmax temperature dropped",
        REF,
    ),
    Mutant(
        "attnjax/nn/attention.py",
        "if self.config.rope is None:\n            return x",
        "if True:\n            return x",
        "RoPE removed",
        REF,
    ),
    Mutant(
        "attnjax/nn/attention.py",
        "q, k = self.query_ln(q), self.key_ln(k)",
        "q, k = q, self.key_ln(k)",
        "QK-norm: the queries' LayerNorm skipped",
        REF,
    ),
    Mutant(
        "attnjax/nn/attention.py",
        "q, k = cosine_normalize(q), cosine_normalize(k)",
        "q, k = q, k",
        "QK-norm: cosine normalisation skipped",
        REF,
    ),
    Mutant(
        "attnjax/nn/attention.py",
        "norm = jnp.sqrt(jnp.sum(x32 * x32, axis=-1, keepdims=True))",
        "norm = jnp.sqrt(jnp.sum(x32 * x32, axis=-2, keepdims=True))",
        "QK-norm: cosine norm over the heads, not Dh",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "table = jnp.concatenate([jnp.sin(position * rates), jnp.cos(position * rates)], axis=-1)",
        "table = jnp.zeros((length, 2 * half), dtype)",
        "sinusoidal position table zeroed",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "x = x + table[None].astype(x.dtype)\n        elif",
        "x = x\n        elif",
        "learned positions not added",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "causal = self.config.causal",
        "causal = False",
        "causal mask dropped in the Transformer",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "h = self.final_norm(h) if self.config.final_norm else h",
        "h = h",
        "final norm skipped",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "return self.embed.attend(h)",
        "return self.embed.attend(2 * h)",
        "tied head scaled",
        REF,
    ),
    Mutant(
        "attnjax/nn/block.py",
        "y = dropped(layer_norm(x))",
        "y = dropped(x)",
        "pre-norm skipped",
        REF,
    ),
    Mutant(
        "attnjax/nn/block.py",
        "return x + self.residual_scale * y if self.config.skip else y",
        "return x + y if self.config.skip else y",
        "residual scale ignored",
        REF,
    ),
    Mutant(
        "attnjax/nn/block.py",
        'return layer_norm(y) if self.config.norm == "post" else y',
        "return y",
        "post-norm skipped",
        REF,
    ),
    Mutant(
        "attnjax/nn/block.py",
        "return self.fc2(act(self.fc1(x)))",
        "return self.fc2(self.fc1(x))",
        "MLP activation removed",
        REF,
    ),
    Mutant(
        "attnjax/nn/transformer.py",
        "check_tokens(inputs, config.vocab_size)",
        "pass",
        "out-of-vocabulary check removed",
        ("tests/attnjax/nn/test_tokens.py",),
    ),
    Mutant(
        "attnjax/nn/generate.py",
        "logits / temperature, axis=-1",
        "logits, axis=-1",
        "sampling temperature ignored",
        GENERATE,
    ),
    Mutant(
        "attnjax/nn/generate.py",
        "jax.random.fold_in(key, step)",
        "jax.random.fold_in(key, 0)",
        "same sampling key at every step",
        GENERATE,
    ),
    Mutant(
        "attnjax/nn/statistics.py",
        "q, k = module.position(q), module.position(k)\n        scale =",
        "scale =",
        "model statistics from un-rotated q, k",
        ("tests/attnjax/nn/test_statistics.py",),
    ),
    Mutant(
        "attnjax/nn/statistics.py",
        "        return out, stats",
        "        out, _ = module.attend(q, k, v, mask=mask, is_causal=is_causal)\n        return out, stats",
        "statistics forward through dense attention",
        (
            "tests/attnjax/nn/test_statistics.py::test_compiled_memory_at_4096_is_below_one_dense_attention_matrix",
        ),
    ),
    Mutant(
        "attnjax/nn/edits.py",
        "            weights = jnp.where(total > 0, weights / jnp.where(total > 0, total, 1), 0)\n",
        "",
        "remove_keys without renormalisation",
        ("tests/attnjax/nn/test_edits.py",),
    ),
    Mutant(
        "attnjax/nn/sink_cache.py",
        "query_positions = jnp.minimum(p, slots_total - 1)",
        "query_positions = p",
        "sink cache queries at absolute positions",
        ("tests/attnjax/nn/test_sink_cache.py",),
    ),
    Mutant(
        "attnjax/nn/sink_cache.py",
        "key_positions = jnp.where(s < n_sink, s, newest - (last - s) % window)",
        "key_positions = s",
        "sink cache keys at their slot index",
        ("tests/attnjax/nn/test_sink_cache.py",),
    ),
    Mutant(
        "experiments/pretrained/checks.py",
        "return within(iv, -math.inf, floor)",
        "return within(iv, floor, math.inf)",
        "collapsed_check verdict flipped",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/checks.py",
        "return bool(worst >= min_ratio)",
        "return bool(worst < min_ratio)",
        "doubly_exponential_check verdict flipped",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/checks.py",
        "return within(iv, 1.0, math.inf)",
        "return within(iv, 0.0, math.inf)",
        "slower_check against 0 instead of 1 (any ratio passes)",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/readings.py",
        "return log_interval(np.exp(a[:, depth] - b[:, depth]))",
        "return log_interval(np.exp(a[:, -1] - b[:, -1]))",
        "paired ratio read at the last depth, not the resolved one",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/activations.py",
        "top = _top_dims(dims[0::2], few)",
        "top = _top_dims(dims, few)",
        "massive dimensions chosen on the sentences they are tested on",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/activations.py",
        '"location": interval((first + first_delimiter) / total),',
        '"location": interval((first + delimiter) / total),',
        "massive location counts every delimiter, not Sun et al.'s first one",
        PRETRAINED,
    ),
    Mutant(
        "experiments/pretrained/checks.py",
        "return within(iv, MAJORITY, math.inf)",
        "return within(iv, 0.0, math.inf)",
        "most_check against 0 instead of one half",
        PRETRAINED,
    ),
    # Every verdict of the power-iteration rows (and the numbers they read) flipped or broken.
    Mutant(
        "experiments/power_iteration/checks.py",
        'bool(-eps <= x["low"] and x["high"] <= eps)',
        'not (-eps <= x["low"] and x["high"] <= eps)',
        "power_iteration: rate hypothesis verdict flipped",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        'bool(-eps <= x["low"] and x["high"] <= eps)',
        'bool(x["high"] <= eps)',
        "power_iteration: rate hypothesis one-sided (faster than |lambda_2| passes)",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        'if r["units"] < MIN_UNITS:',
        "if False:",
        "power_iteration: rate hypothesis judged on fewer than 10 seeds",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/summary.py",
        "return list(range(max(layers // 2, 1) + 1, layers + 1))",
        "return list(range(2, layers + 1))",
        "power_iteration: rate window includes the transient",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/summary.py",
        '"epsilon": max(abs(r) for r in ref) if ref_ok else None,',
        '"epsilon": min(abs(r) for r in ref) if ref_ok else None,',
        "power_iteration: rate tolerance below the reference's own transient",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/summary.py",
        "excess = log_rate - log_slem",
        'excess = log_rate - np.asarray(seeds["log_tau"], np.float64)[:, index]',
        "power_iteration: rate hypothesis against tau instead of |lambda_2|",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        "if passed and tied:",
        "if False:",
        "power_iteration: rate hypothesis passes without excluding its competitors",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/summary.py",
        "uniform_excess = log_rate - math.log(UNIFORM_CAUSAL_SLEM)",
        "uniform_excess = log_rate - math.log(0.9)",
        "power_iteration: the constant-rate competitor is not U's rate",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        "bool(distance <= LOG_RATE_RESOLUTION)",
        "bool(distance > LOG_RATE_RESOLUTION)",
        "power_iteration: the untrained attention-only chain against U flipped",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        'if is_attention_only(run["spec"]["architecture"]) and phase == "init":',
        'if is_attention_only(run["spec"]["architecture"]):',
        "power_iteration: a trained attention-only row taken for U's chain",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/summary.py",
        "return interval(np.sum(x * y, axis=1) / var)",
        "return interval(np.sum(x * x, axis=1) / var)",
        "power_iteration: slope of log-rate on log |lambda_2| miscomputed",
        POWER_RATE,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        'bool(small["final_max"] == 1)',
        'bool(small["final_max"] != 1)',
        "power_iteration: one cluster at small beta flipped",
        POWER_CLUSTERS,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        'None if few else bool(count["low"] > 0)',
        'None if few else bool(count["high"] > 0)',
        "power_iteration: more clusters at larger beta, upper end only",
        POWER_CLUSTERS,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        'passed = None if few or m["small_censored"] else bool(time["low"] > 0)',
        'passed = None if few or m["small_censored"] else bool(time["low"] <= 0)',
        "power_iteration: time to one cluster flipped",
        POWER_CLUSTERS,
    ),
    Mutant(
        "experiments/power_iteration/checks.py",
        'passed = None if few or m["small_censored"] else bool(time["low"] > 0)',
        'passed = None if few else bool(time["low"] > 0)',
        "power_iteration: time ratio judged with a censored smallest beta",
        POWER_CLUSTERS,
    ),
    Mutant(
        "experiments/power_iteration/summary.py",
        '"beats_mode": bool(margin["n"] >= MIN_UNITS and margin["low"] > 0),',
        '"beats_mode": bool(margin["mean"] > 0),',
        "power_iteration: trained model beats the mode baseline on its mean, any seeds",
        (PI + "test_training_numbers_call_a_model_below_the_mode_baseline_briefly_trained",),
    ),
    Mutant(
        "experiments/power_iteration/products.py",
        "entropy = jnp.where(rows, h / jnp.log(jnp.where(rows, keys, 2)), 0)",
        "entropy = jnp.where(rows, h / jnp.log(keys.shape[-1]), 0)",
        "power_iteration: entropy normalised by log T, not by the visible keys",
        (PI + "test_uniform_attention_over_the_visible_keys_has_entropy_one",),
    ),
    # Every verdict of the softmax-scaling rows (computed in its summary's outcome functions).
    Mutant(
        "experiments/softmax_scaling/summary.py",
        '"pass": None if units < MIN_UNITS else bool(high < 0),',
        '"pass": None if units < MIN_UNITS else bool(high >= 0),',
        "softmax_scaling: the typical gradient vanishes (share above tau falls) flipped",
        SOFTMAX_FALLS,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        "differences = {g: interval(np.subtract(by_dim[-1], by_dim[0])) for g, by_dim in above.items()}",
        "differences = {g: interval(np.subtract(by_dim[0], by_dim[-1])) for g, by_dim in above.items()}",
        "softmax_scaling: the fall measured the wrong way round",
        SOFTMAX_FALLS,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        '"pass": None if units < MIN_UNITS else bool(high < 0),',
        '"pass": bool(high < 0),',
        "softmax_scaling: the fall judged on fewer than 10 seeds",
        SOFTMAX_FALLS,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        '"pass": None if units < MIN_UNITS else bool(low > 0 and scaled_high >= 0),',
        '"pass": None if units < MIN_UNITS else bool(low <= 0 and scaled_high >= 0),',
        "softmax_scaling: the remedy flipped",
        SOFTMAX_REMEDY,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        '"pass": None if x["n"] < MIN_UNITS else contains(x, predicted),',
        '"pass": None if x["n"] < MIN_UNITS else bool(x["low"] <= predicted),',
        "softmax_scaling: the Jacobian exponent one-sided",
        SOFTMAX_RATE,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        '"pass": None if x["n"] < MIN_UNITS else contains(x, predicted),',
        '"pass": None if x["n"] < MIN_UNITS else not contains(x, predicted),',
        "softmax_scaling: the Jacobian exponent flipped",
        SOFTMAX_RATE,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        '"derived_slope": derived_slope(widths, num_keys),',
        '"derived_slope": -0.5,',
        "softmax_scaling: the exponent tested against -1/2, not the derived finite-width slope",
        SOFTMAX_DERIVED,
    ),
    Mutant(
        "experiments/softmax_scaling/rate.py",
        "return -2.0 * math.log(2.0) * slope / f0",
        "return -math.log(2.0) * slope / f0",
        "softmax_scaling: the first-order correction a without int x 2 s'(x) dx = 2 ln 2",
        SOFTMAX_LAW,
    ),
    Mutant(
        "experiments/softmax_scaling/rate.py",
        "return gap_density(num_keys)[0] * (1.0 - a / np.sqrt(d))",
        "return gap_density(num_keys)[0] * (1.0 + a / np.sqrt(d))",
        "softmax_scaling: the first-order correction with the wrong sign",
        SOFTMAX_LAW,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        '"pass": None if units < MIN_UNITS else bool(low > 0 and scaled_high >= 0),',
        '"pass": None if units < MIN_UNITS else bool(low > 0),',
        "softmax_scaling: the remedy passes while the scaled share falls",
        SOFTMAX_REMEDY,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        'all(by_dim[k]["high"] < 0 for by_dim in differences.values())',
        'all(by_dim[k]["mean"] < 0 for by_dim in differences.values())',
        "softmax_scaling: the crossing d_k read on the mean, not the interval",
        SOFTMAX_BELOW,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        "first = next((d for d, b in zip(dims, below) if b), None)",
        "first = next((d for d, b in zip(dims[::-1], below[::-1]) if b), None)",
        "softmax_scaling: the crossing read from the largest d_k down",
        SOFTMAX_BELOW,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        "g: float(np.median(np.concatenate(by_dim[-1])))",
        "g: float(np.median(np.concatenate(by_dim[0])))",
        "softmax_scaling: tau from the smallest d_k",
        SOFTMAX_TAU,
    ),
    Mutant(
        "experiments/softmax_scaling/summary.py",
        '"above": float(np.mean(v > tau)),',
        '"above": float(np.mean(v < tau)),',
        "softmax_scaling: the share below tau counted as above",
        SOFTMAX_TAU,
    ),
    Mutant(
        "attnjax/pretrained/decoder.py",
        'return {"use_bias": False, "qkv_bias": True}',
        'return {"use_bias": False, "qkv_bias": False}',
        "qwen2's q/k/v biases dropped",
        HF,
    ),
    Mutant(
        "attnjax/pretrained/gpt2.py",
        'return params.linear(get(f"{name}.weight", shape), get(f"{name}.bias", shape[1:]))',
        'w = get(f"{name}.weight", shape)\n    return params.linear(w.T if w.shape[0] == w.shape[1] else w, '
        'get(f"{name}.bias", shape[1:]))',
        "gpt2's square Conv1D weights transposed",
        HF,
    ),
    Mutant(
        "attnjax/pretrained/export.py",
        "(_half_layout(w, n) if interleaved else w).T",
        "w.T",
        "export keeps interleaved RoPE columns",
        HF,
    ),
    Mutant(
        "attnjax/masks.py",
        "left=window - 1, right=",
        "left=window, right=",
        "sliding window one key wider",
        WINDOW + SWITCHES + HF,
    ),
    Mutant(
        "attnjax/rope.py",
        "jnp.where(wavelength < original / high, inv_freq, smoothed)",
        "inv_freq",
        "llama3 RoPE scaling: no smoothed band",
        ROPE_SCALING + SWITCHES + HF,
    ),
    Mutant(
        "attnjax/rope.py",
        "return inv_freq / scaling[1]",
        "return inv_freq",
        "linear RoPE scaling ignored",
        ROPE_SCALING + SWITCHES + HF,
    ),
)


def all_mutants() -> tuple[Mutant, ...]:
    """`MUTANTS` above, then each module of `tests/mutants/` (its `MUTANTS`), in file-name order."""
    modules = sorted(
        p.stem for p in (ROOT / "tests" / "mutants").glob("*.py") if p.stem != "__init__"
    )
    found = [importlib.import_module(f"tests.mutants.{name}").MUTANTS for name in modules]
    return MUTANTS + tuple(m for group in found for m in group)


def _copy_tree(dest: Path) -> None:
    """The tracked (and untracked, not ignored) files of the repository into `dest`."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in files:
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


# pytest's exit status when no test was collected (here: the quick tier deselected every one).
NO_TESTS = 5
NO_QUICK_TEST = "no quick test"


def _pytest(tree: Path, tests, quick: bool = False) -> tuple[bool | None, str]:
    """(passed, the first failing test id or the last output line); with `quick`, the quick tier
    alone (`-m "not slow"`), and (None, NO_QUICK_TEST) when it holds none of `tests`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    tier = ["-m", "not slow"] if quick else []
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfE", *tier]
        + list(tests),
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if quick and proc.returncode == NO_TESTS:
        return None, NO_QUICK_TEST
    lines = proc.stdout.splitlines()
    failed = [
        line.split(" ", 1)[1].split(" - ")[0]
        for line in lines
        if line.startswith(("FAILED ", "ERROR "))
    ]
    return proc.returncode == 0, (
        failed[0] if failed else (lines[-1] if lines else proc.stderr[-200:])
    )


def run(mutants, out: Path, quick: bool = False) -> list[dict]:
    """Each mutant's row (file, description, killed, killed_by, tests), printed and written to `out`;
    `quick`: on the quick tier alone (a selection without a quick test does not kill)."""
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        for tests in sorted({m.tests for m in mutants}):
            ok, detail = _pytest(tree, tests, quick)
            if ok is False:
                raise SystemExit(f"unmutated tests fail, fix them first: {tests}: {detail}")
        rows = []
        for m in mutants:
            path = tree / m.file
            text = path.read_text()
            if text.count(m.original) != 1:
                raise SystemExit(
                    f"{m.file}: the snippet of mutant {m.description!r} occurs "
                    f"{text.count(m.original)} times (need exactly once)"
                )
            mutated = text.replace(m.original, m.replacement)
            if m.file.endswith(".py"):
                try:
                    compile(mutated, m.file, "exec")
                except SyntaxError as error:  # a kill by a syntax error would test nothing
                    raise SystemExit(
                        f"{m.file}: mutant {m.description!r} is not valid Python: {error}"
                    ) from None
            try:
                path.write_text(mutated)
                passed, detail = _pytest(tree, m.tests, quick)
            finally:
                path.write_text(text)
            killed = passed is False
            rows.append(
                dict(
                    file=m.file,
                    description=m.description,
                    killed=killed,
                    killed_by=detail if killed else None,
                    tests=list(m.tests),
                    **({"note": NO_QUICK_TEST} if passed is None else {}),
                )
            )
            note = detail if killed else (f"({NO_QUICK_TEST})" if passed is None else "")
            print(
                f"{'killed ' if killed else 'SURVIVED'} {m.file:40s} {m.description:45s} {note}",
                flush=True,
            )
    out.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("mutants.json"))
    parser.add_argument(
        "--only", default="", help="run the mutants whose file or description contains this"
    )
    parser.add_argument(
        "--library", action="store_true", help="only the mutants of the library (attnjax/)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help='run each selection on the quick tier alone (-m "not slow"); none there: survived',
    )
    args = parser.parse_args(argv)
    chosen = [
        m
        for m in all_mutants()
        if (args.only in m.file or args.only in m.description)
        and (not args.library or m.file.startswith("attnjax/"))
    ]
    if not chosen:
        raise SystemExit("no mutant matches --only / --library")
    rows = run(chosen, args.json, quick=args.quick)
    survived = [r for r in rows if not r["killed"]]
    killed = len(rows) - len(survived)
    print(
        f"{killed} of {len(rows)} mutants killed ({100 * killed / len(rows):.0f}%)"
        f"{' on the quick tier' if args.quick else ''}; table in {args.json}"
    )
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
