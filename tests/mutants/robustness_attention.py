"""Mutants of exact attention's robustness: masked keys and values that cannot reach anything, -inf bias rows,
additive masks given as `mask=`, validated scalars, and a NaN chain's stationary distribution. Their
descriptions start with "robust:" (`python -m tests.mutation --only robust:`)."""

from tests.mutant import Mutant

MASKED = "tests/attnjax/test_masked_values.py::"
CROSS = MASKED + "test_non_finite_keys_and_values_at_masked_keys_change_nothing"
ATTENTION = "tests/attnjax/test_attention.py::"
STREAMING = "tests/attnjax/analysis/test_streaming.py::"

MUTANTS = (
    Mutant(
        "attnjax/attention.py",
        "key, value, None if data_mask is None else mask, reachable=reachable",
        "key, value, None, reachable=reachable",
        "robust: masked keys and values no longer zeroed",
        (CROSS + "[lengths-full-T4_S7_H4_K2]",),
    ),
    Mutant(
        "attnjax/attention.py",
        "by_head = jnp.any(jnp.reshape(by_head, by_head.shape[:-2] + grouped), axis=-2)",
        "by_head = jnp.any(by_head, axis=-2, keepdims=True)",
        "robust: a key read by any query head counts as read by all",
        (CROSS + "[full-full-T4_S7_H4_K2]",),
    ),
    Mutant(
        "attnjax/masks.py",
        "bound = min(bound, q_len)",
        "bound = min(bound, kv_len)",
        "robust: keys past the causal reach counted as reachable",
        (
            MASKED + "test_keys_past_the_causal_or_window_reach_change_nothing[causal]",
            "tests/attnjax/test_kernels.py::test_keys_no_query_reaches_cannot_make_nan",
        ),
    ),
    Mutant(
        "attnjax/attention.py",
        "    return jnp.logical_not(jnp.isneginf(bias))",
        "    return None",
        "robust: -inf bias entries not masked",
        (
            MASKED + "test_a_row_of_minus_inf_bias_is_a_fully_masked_row",
            CROSS + "[bias-full-T4_S7_H4_K2]",
        ),
    ),
    Mutant(
        "attnjax/analysis/streaming.py",
        "mask = masks_lib.combine_masks(mask, attention_lib.bias_mask(bias))",
        "mask = mask",
        "robust: statistics: -inf bias entries not masked",
        (STREAMING + "test_a_row_of_minus_inf_bias_is_a_fully_masked_row",),
    ),
    Mutant(
        "attnjax/analysis/streaming.py",
        "        data_mask,\n        reachable=",
        "        None,\n        reachable=",
        "robust: statistics: masked keys and values no longer zeroed",
        (STREAMING + "test_non_finite_keys_and_values_at_masked_keys_change_nothing",),
    ),
    Mutant(
        "attnjax/kernels.py",
        "    key, value = without_unread_keys(key, value, reachable=reachable)",
        "",
        "robust: kernels: unreachable keys no longer zeroed",
        ("tests/attnjax/test_kernels.py::test_keys_no_query_reaches_cannot_make_nan",),
    ),
    Mutant(
        "attnjax/checks.py",
        "        if other.size:",
        "        if False:",
        "robust: an additive float mask accepted as mask=",
        (MASKED + "test_an_additive_float_mask_given_as_mask_raises_naming_bias",),
    ),
    Mutant(
        "attnjax/checks.py",
        "if number is not None and not np.isfinite(number):",
        "if False:",
        "robust: a NaN or inf scale accepted",
        (ATTENTION + "test_bad_scalars_raise_naming_them",),
    ),
    Mutant(
        "attnjax/checks.py",
        "    return np.asarray(value)[()] if concrete(value) else None",
        "    return None",
        "robust: concrete array scalars left unchecked",
        (ATTENTION + "test_softmax_with_temperature_rejects_bad_temperatures",),
    ),
    Mutant(
        "attnjax/checks.py",
        "    if query.shape[-1] < 1:",
        "    if False:",
        "robust: a zero head dim accepted",
        (ATTENTION + "test_a_zero_head_dim_raises_as_jax_nn_does",),
    ),
    Mutant(
        "attnjax/softmax.py",
        "    checks.temperature(temperature)\n",
        "",
        "robust: softmax_with_temperature's temperature unchecked",
        (ATTENTION + "test_softmax_with_temperature_rejects_bad_temperatures",),
    ),
    Mutant(
        "attnjax/attention.py",
        '        ("is_causal", is_causal),\n',
        "",
        "robust: is_causal not checked to be a bool",
        (ATTENTION + "test_bad_scalars_raise_naming_them",),
    ),
    Mutant(
        "attnjax/nn/generate.py",
        "or not temperature >= 0  # NaN too",
        "or temperature < 0",
        "robust: generate accepts a NaN temperature",
        ("tests/attnjax/nn/test_generate.py",),
    ),
    Mutant(
        "attnjax/analysis/markov.py",
        "    return jnp.where(has_nan, jnp.asarray(jnp.nan, pi.dtype), pi)",
        "    return pi",
        "robust: stationary distribution of a NaN chain not NaN",
        (
            "tests/attnjax/analysis/test_markov.py::"
            "test_stationary_distribution_of_a_nan_matrix_is_nan_as_documented",
        ),
    ),
)
