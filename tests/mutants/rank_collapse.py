"""Mutants of the rank-collapse study: every verdict of its rows flipped or loosened, and the summary numbers
and references the rows read broken, each killed by a synthetic control
(`tests/experiments/test_rank_collapse_rows.py`, `tests/experiments/test_rank_collapse_references.py`)."""

from tests.mutant import Mutant

CHECKS = "experiments/rank_collapse/checks.py"
SUMMARY = "experiments/rank_collapse/summary.py"
ROWS = "tests/experiments/test_rank_collapse_rows.py::"
REFERENCES = "tests/experiments/test_rank_collapse_references.py::"


def _rows(*names):
    return tuple(ROWS + name for name in names)


def _references(*names):
    return tuple(REFERENCES + name for name in names)


DONG = _rows(
    "test_dong_exponent_fails_on_decay_that_is_not_cubic_at_leading_order",
    "test_dong_exponent_passes_on_noisy_cubic_maps",
    "test_the_local_exponent_ignores_the_saturated_pairs",
    "test_dong_exponent_is_not_measured_with_fewer_than_ten_seeds",
    "test_dong_window_condition_fails_when_the_profile_skips_the_window",
    "test_log_median_profile_takes_medians_in_log_space_and_leaves_unresolved_layers_empty",
)
IDENTITY = _rows(
    "test_the_identity_row_needs_slope_3_up_to_a_shrinking_next_order_term",
    "test_the_edge_row_fails_when_the_next_order_term_exceeds_the_exponent_resolution",
    "test_identity_slopes_are_the_decade_slopes",
)
REGIME = _rows("test_the_logit_variance_row_allows_sqrt_dk_and_fails_at_a_scaling_error")
NOCI = _rows(
    "test_noci_trends_pass_when_only_the_unscaled_network_collapses_with_depth",
    "test_noci_trends_fail_unless_the_scaling_is_what_removes_the_trend",
    "test_noci_trends_are_not_measured_with_fewer_than_ten_seeds",
    "test_depth_trends_are_per_seed_regressions_on_log2_depth",
    "test_the_alignment_row_needs_both_of_its_statistics",
    "test_the_noci_notes_say_when_the_scaled_network_still_trends",
    "test_the_gradient_note_says_when_a_ratio_is_below_the_precision",
)
WU = _rows(
    "test_the_exponential_row_passes_on_collapse_at_least_exponential",
    "test_the_exponential_row_fails_on_no_collapse_or_sub_exponential_decay",
    "test_the_exponential_row_fails_when_the_interval_over_seeds_reaches_one",
    "test_the_lambda_2_hypothesis_compares_with_the_uniform_chain_in_the_late_window",
    "test_the_lambda_2_hypothesis_is_not_measured_without_the_chain",
    "test_causal_windows_split_the_resolved_layers_and_regress_each_half",
    "test_a_local_mask_row_passes_when_the_collapse_is_slower_and_fails_otherwise",
    "test_local_rates_read_the_layers_resolved_in_both_runs",
    "test_the_local_mask_row_reads_the_finite_depth_delay_not_the_late_rate",
)
LAYERNORM = _rows(
    "test_layernorm_exponential_row_passes_on_a_geometric_profile_and_fails_on_a_flat_one",
    "test_layernorm_construction_row_needs_ln_to_be_what_keeps_a_full_rank_equilibrium",
    "test_the_random_init_layernorm_hypothesis_fails_when_r_l_collapses_and_passes_when_it_does_not",
)
TRAINING = _rows(
    "test_the_recall_sanity_row_needs_every_seed_above_the_mode_baseline",
    "test_the_attention_only_hypothesis_passes_when_it_predicts_the_mode",
    "test_the_attention_only_hypothesis_fails_when_it_does_more_than_the_mode",
    "test_the_attention_only_hypothesis_is_not_measured_with_fewer_than_ten_seeds",
)
RECALL = _references(
    "test_recall_scores_count_the_mode_baseline_and_the_non_mode_queries",
    "test_recall_mode_baseline_matches_its_expectation_on_the_task",
)
CHAIN = _references(
    "test_the_uniform_causal_chain_is_row_stochastic_with_lambda_2_one_half",
    "test_chain_residuals_are_a_power_of_the_uniform_chain",
)
SCALING = _references(
    "test_scaled_inputs_keep_the_mean_token_and_set_the_relative_residual_to_eps",
    "test_every_layer_of_pure_attention_scales_as_eps_cubed",
    "test_layer_residuals_apply_each_layer_to_its_own_input",
)

MUTANTS = (
    # Every verdict of the rows, flipped or loosened, one at a time.
    Mutant(
        CHECKS,
        "1 / factor <= ratio <= factor,",
        "not 1 / factor <= ratio <= factor,",
        "rank_collapse: logit variance flipped",
        REGIME,
    ),
    Mutant(
        CHECKS,
        "min(pairs) >= MIN_PAIRS and len(pairs) >= MIN_UNITS,",
        "not (min(pairs) >= MIN_PAIRS and len(pairs) >= MIN_UNITS),",
        "rank_collapse: Dong window resolved flipped",
        DONG,
    ),
    Mutant(
        CHECKS,
        "passed = contains(exponent, DONG_EXPONENT)",
        "passed = not contains(exponent, DONG_EXPONENT)",
        "rank_collapse: Dong exponent flipped",
        DONG,
    ),
    Mutant(
        CHECKS,
        "passed = contains(exponent, DONG_EXPONENT)",
        'passed = exponent["low"] <= DONG_EXPONENT',
        "rank_collapse: Dong exponent one-sided",
        DONG,
    ),
    Mutant(
        CHECKS,
        "return bool(passed) if enough(x) else None",
        "return bool(passed)",
        "rank_collapse: verdicts without >= 10 seeds",
        DONG + NOCI + TRAINING,
    ),
    Mutant(
        CHECKS,
        'row["deviation"][-1] <= max(row["deviation"][-2] / IDENTITY_SHRINK, IDENTITY_ROUNDING)',
        'row["deviation"][-1] > max(row["deviation"][-2] / IDENTITY_SHRINK, IDENTITY_ROUNDING)',
        "rank_collapse: eps identity flipped",
        IDENTITY,
    ),
    Mutant(
        CHECKS,
        'row["deviation"][-1] <= max(row["deviation"][-2] / IDENTITY_SHRINK, IDENTITY_ROUNDING)',
        'row["deviation"][-1] <= max(row["deviation"][-2], IDENTITY_ROUNDING)',
        "rank_collapse: eps identity without the shrink",
        IDENTITY,
    ),
    Mutant(
        CHECKS,
        'identity["edge"] < resolution',
        'identity["edge"] >= resolution',
        "rank_collapse: window edge flipped",
        IDENTITY,
    ),
    Mutant(
        CHECKS,
        'falls = stat["unscaled"]["high"] < NO_TREND < stat["difference"]["low"]',
        'falls = not stat["unscaled"]["high"] < NO_TREND < stat["difference"]["low"]',
        "rank_collapse: Noci rank trend flipped",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'falls = stat["unscaled"]["high"] < NO_TREND < stat["difference"]["low"]',
        'falls = stat["unscaled"]["high"] < NO_TREND',
        "rank_collapse: Noci rank trend without the scaled comparison",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'grows = cos["unscaled"]["low"] > NO_TREND > cos["difference"]["high"]',
        'grows = not cos["unscaled"]["low"] > NO_TREND > cos["difference"]["high"]',
        "rank_collapse: Noci alignment trend flipped",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'grows = cos["unscaled"]["low"] > NO_TREND > cos["difference"]["high"]',
        'grows = cos["unscaled"]["low"] > NO_TREND',
        "rank_collapse: Noci alignment trend without the scaled comparison",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'vanish = stat["unscaled"]["high"] < NO_TREND < stat["difference"]["low"]',
        'vanish = not stat["unscaled"]["high"] < NO_TREND < stat["difference"]["low"]',
        "rank_collapse: Noci gradient trend flipped",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'vanish = stat["unscaled"]["high"] < NO_TREND < stat["difference"]["low"]',
        'vanish = NO_TREND < stat["difference"]["low"]',
        "rank_collapse: Noci gradient trend without the unscaled fall",
        NOCI,
    ),
    Mutant(
        CHECKS,
        "if placement == NOCI_PLACEMENT:",
        "if True:",
        "rank_collapse: pre-LN Noci rows counted as predictions",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'passed = late["high"] < COLLAPSE_RATE and trend["low"] <= NO_TREND',
        'passed = not (late["high"] < COLLAPSE_RATE and trend["low"] <= NO_TREND)',
        "rank_collapse: Wu exponential flipped",
        WU + LAYERNORM,
    ),
    Mutant(
        CHECKS,
        'passed = late["high"] < COLLAPSE_RATE and trend["low"] <= NO_TREND',
        'passed = trend["low"] <= NO_TREND',
        "rank_collapse: Wu exponential without the rate below 1",
        WU,
    ),
    Mutant(
        CHECKS,
        'passed = late["high"] < COLLAPSE_RATE and trend["low"] <= NO_TREND',
        'passed = late["high"] < COLLAPSE_RATE',
        "rank_collapse: Wu exponential without the trend",
        WU,
    ),
    Mutant(
        CHECKS,
        "_decide(excess, contains(excess, NO_TREND))",
        "_decide(excess, not contains(excess, NO_TREND))",
        "rank_collapse: |lambda_2| hypothesis flipped",
        WU,
    ),
    Mutant(
        CHECKS,
        'difference["low"] > NO_TREND',
        'difference["low"] <= NO_TREND',
        "rank_collapse: local mask flipped",
        WU,
    ),
    Mutant(
        CHECKS,
        '_decide(cos["unscaled"], falls and grows)',
        '_decide(cos["unscaled"], grows)',
        "rank_collapse: Noci alignment row without its r_L statistic",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'return scaled["low"] > NO_TREND or scaled["high"] < NO_TREND',
        "return True",
        "rank_collapse: Noci scaled arm always said to trend",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'gradients["smallest"]["ratio"] >= gradients["epsilon"]',
        'gradients["smallest"]["ratio"] >= 0',
        "rank_collapse: Noci gradient precision note never given",
        NOCI,
    ),
    Mutant(
        CHECKS,
        'late["high"] >= COLLAPSE_RATE',
        'late["high"] < COLLAPSE_RATE',
        "rank_collapse: random-init LayerNorm hypothesis flipped",
        LAYERNORM,
    ),
    Mutant(
        CHECKS,
        'full["rank_min"] == 2\n                    and full["with_min"] > RESOLVED\n'
        '                    and full["without_max"] <= RESOLVED',
        'not (full["rank_min"] == 2 and full["with_min"] > RESOLVED'
        ' and full["without_max"] <= RESOLVED)',
        "rank_collapse: Wu LayerNorm construction flipped",
        LAYERNORM,
    ),
    Mutant(
        CHECKS,
        'scores["excess_min"] > NO_TREND',
        'scores["excess_min"] <= NO_TREND',
        "rank_collapse: training recall sanity flipped",
        TRAINING,
    ),
    Mutant(
        CHECKS,
        'passed = excess["low"] <= NO_TREND and not_mode["high"] < chance',
        'passed = not (excess["low"] <= NO_TREND and not_mode["high"] < chance)',
        "rank_collapse: attention-only hypothesis flipped",
        TRAINING,
    ),
    Mutant(
        CHECKS,
        'passed = excess["low"] <= NO_TREND and not_mode["high"] < chance',
        'passed = not_mode["high"] < chance',
        "rank_collapse: attention-only hypothesis without the mode baseline",
        TRAINING,
    ),
    Mutant(
        CHECKS,
        'passed = excess["low"] <= NO_TREND and not_mode["high"] < chance',
        'passed = excess["low"] <= NO_TREND',
        "rank_collapse: attention-only hypothesis without the non-mode queries",
        TRAINING,
    ),
    # The summary numbers the rows read.
    Mutant(
        SUMMARY,
        "window = (before > floor) & (before >= lower) & (before < upper)",
        "window = (before > floor) & (before >= lower)",
        "rank_collapse: local exponent pools the saturated pairs",
        DONG,
    ),
    Mutant(
        SUMMARY,
        "median = np.exp(np.median(np.log(r.reshape(-1, r.shape[-1])), axis=0))",
        "median = np.mean(r.reshape(-1, r.shape[-1]), axis=0)",
        "rank_collapse: Dong table from means of r",
        DONG,
    ),
    Mutant(
        SUMMARY,
        "slopes = (logs[:, :-1] - logs[:, 1:]) / np.log(eps[:-1] / eps[1:])[None, :, None, None]",
        "slopes = logs[:, :-1] - logs[:, 1:]",
        "rank_collapse: identity slopes not per decade of eps",
        IDENTITY,
    ),
    Mutant(
        SUMMARY,
        '"cosine": np.polyfit(x, cosine.T, 1)[0],',
        '"cosine": np.polyfit(np.asarray(depths, float), cosine.T, 1)[0],',
        "rank_collapse: alignment trend against L, not log2 L",
        NOCI,
    ),
    Mutant(
        SUMMARY,
        '"difference": interval(remedy[name] - plain[name]),',
        '"difference": interval(plain[name] - remedy[name]),',
        "rank_collapse: Noci difference reversed",
        NOCI,
    ),
    Mutant(
        SUMMARY,
        "excess=interval(rate / lambda2 - chain_ratio),",
        "excess=interval(rate / lambda2 - 1),",
        "rank_collapse: |lambda_2| hypothesis without the uniform chain",
        WU,
    ),
    Mutant(
        SUMMARY,
        "last = min(resolved_last(r), resolved_last(ref))",
        "last = resolved_last(r)",
        "rank_collapse: local rates over unresolved layers",
        WU,
    ),
    Mutant(
        SUMMARY,
        '"difference": interval(np.log(r[:, last]) - np.log(ref[:, last])),',
        '"difference": interval(np.log(rate) - np.log(base)),',
        "rank_collapse: local mask row on the rate, not the delay at depth K",
        WU,
    ),
    Mutant(
        SUMMARY,
        'values["excess"] = values["accuracy"] - values["mode_accuracy"]',
        'values["excess"] = values["accuracy"] - values["not_mode_accuracy"]',
        "rank_collapse: accuracy against the wrong baseline",
        TRAINING,
    ),
    # The references computed beside the runs.
    Mutant(
        "experiments/rank_collapse/recall.py",
        "answer_count < jnp.max(counts, axis=-1, keepdims=True)",
        "answer_count <= jnp.max(counts, axis=-1, keepdims=True)",
        "rank_collapse: non-mode queries include the modes",
        RECALL,
    ),
    Mutant(
        "experiments/rank_collapse/recall.py",
        "values = inputs[..., 1 : 2 * num_pairs : 2]",
        "values = inputs[..., 0 : 2 * num_pairs : 2]",
        "rank_collapse: mode of the keys, not the values",
        RECALL,
    ),
    Mutant(
        "experiments/rank_collapse/chain.py",
        "return visible / jnp.sum(visible, axis=-1, keepdims=True)",
        "return visible / length",
        "rank_collapse: uniform chain not row-stochastic",
        CHAIN,
    ),
    Mutant(
        "experiments/rank_collapse/scaling.py",
        "scale = jnp.where(size > 0, shared_norm(x) / jnp.where(size > 0, size, 1), 0)",
        "scale = jnp.ones_like(size)",
        "rank_collapse: identity's residual not rescaled to eps",
        SCALING,
    ),
    Mutant(
        "experiments/rank_collapse/scaling.py",
        "inputs = jnp.moveaxis(scaled_inputs(hidden[:-1], eps), 0, 1)",
        "inputs = jnp.moveaxis(scaled_inputs(hidden[1:], eps), 0, 1)",
        "rank_collapse: identity feeds each layer its own output",
        SCALING,
    ),
)
