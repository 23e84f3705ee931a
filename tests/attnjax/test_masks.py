import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import masks


def test_causal_mask_is_lower_triangular_top_left_aligned():
    np.testing.assert_array_equal(masks.causal_mask(5), np.tril(np.ones((5, 5), bool)))
    np.testing.assert_array_equal(masks.causal_mask(3, 5), np.tril(np.ones((3, 5), bool)))


def test_local_window_mask_band():
    got = np.asarray(masks.local_window_mask(6, left=2, right=1))
    t, s = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    np.testing.assert_array_equal(got, (s >= t - 2) & (s <= t + 1))


@pytest.mark.parametrize("is_causal", [True, False])
def test_with_window_keeps_the_last_w_keys(is_causal):
    """A window of W keys: query t keeps keys t - W < s (and s < t + W unless causal, where the causal
    mask bounds the right side); combined with a given mask by logical and."""
    window = 3
    t, s = np.meshgrid(np.arange(7), np.arange(7), indexing="ij")
    got = np.asarray(masks.with_window(None, window, 7, 7, is_causal))
    want = (s > t - window) & (is_causal | (s < t + window))
    np.testing.assert_array_equal(got, want)
    given = np.random.default_rng(0).random((7, 7)) < 0.6
    np.testing.assert_array_equal(
        np.asarray(masks.with_window(jnp.asarray(given), window, 7, 7, is_causal)), want & given
    )
    assert masks.with_window(given, None, 7, 7, is_causal) is given


def test_local_window_with_right_zero_is_causal():
    np.testing.assert_array_equal(masks.local_window_mask(7, right=0), masks.causal_mask(7))


def test_key_padding_from_lengths_equals_from_valid():
    lengths = jnp.array([3, 5, 0], dtype=jnp.int32)
    valid = jnp.arange(5)[None, :] < lengths[:, None]
    a = masks.key_padding_mask(lengths=lengths, kv_len=5)
    b = masks.key_padding_mask(valid=valid)
    assert a.shape == (3, 1, 1, 5)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[0, 0, 0], [True, True, True, False, False])


def test_combine_masks_aligns_ranks_and_ands():
    pad = masks.key_padding_mask(lengths=jnp.array([2, 4], jnp.int32), kv_len=4)
    combined = masks.combine_masks(pad, masks.causal_mask(4), None)
    assert combined.shape == (2, 1, 4, 4)
    expected = (
        np.tril(np.ones((4, 4), bool))[None, None]
        & (np.arange(4) < np.array([2, 4])[:, None])[:, None, None, :]
    )
    np.testing.assert_array_equal(combined, expected)
    assert masks.combine_masks(None, None) is None


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: masks.causal_mask(0), "q_len"),
        (lambda: masks.causal_mask(3.0), "q_len"),
        (lambda: masks.local_window_mask(4, left=-1), "left"),
        (lambda: masks.key_padding_mask(lengths=jnp.array([1], jnp.int32)), "kv_len"),
        (lambda: masks.key_padding_mask(), "exactly one"),
        (lambda: masks.key_padding_mask(valid=jnp.ones((3,), jnp.int32)), "boolean"),
        (
            lambda: masks.combine_masks(jnp.ones((2, 3), bool), jnp.ones((4, 3), bool)),
            "do not broadcast",
        ),
        (lambda: masks.combine_masks(jnp.ones((2, 3), jnp.float32)), "boolean"),
    ],
)
def test_mask_errors_name_the_argument(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
