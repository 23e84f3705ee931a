"""Mutants of concepts whose kill rested on a single test, slow ones among them (a fully masked row's
log-sum-exp, the decode mask's polarity and its causal bound); each now also has a quick test."""

from tests.mutant import Mutant

MASKED_LSE = (
    "tests/attnjax/test_masked_values.py::test_a_row_of_minus_inf_bias_is_a_fully_masked_row",
    "tests/attnjax/test_attention.py::test_residual_is_jax_nns_lse_including_fully_masked_rows",
)
DECODE = (
    "tests/attnjax/nn/test_modules.py::"
    "test_decoding_with_a_key_padding_mask_equals_the_masked_causal_forward",
    "tests/attnjax/nn/test_decoding.py",
)

MUTANTS = (
    Mutant(
        "attnjax/attention.py",
        "lse = jnp.where(jnp.any(mask, axis=-1), lse, jnp.asarray(MASKED_LSE, x.dtype))",
        "lse = lse",
        "return_residual: a fully masked row's lse left at the fill's",
        MASKED_LSE,
    ),
    Mutant(
        "attnjax/nn/attention.py",
        "else masks_lib.combine_masks(jnp.asarray(mask) != 0, visible)",
        "else masks_lib.combine_masks(jnp.asarray(mask) == 0, visible)",
        "decode: the key-padding mask's polarity inverted",
        DECODE,
    ),
    Mutant(
        "attnjax/nn/attention.py",
        "visible = cols <= rows if window is None else",
        "visible = cols <= rows + 1 if window is None else",
        "decode: each query also sees the next cache slot",
        DECODE,
    ),
)
