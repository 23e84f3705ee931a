"""`analysis.causal_eigenvalues` and `causal_slem`: the spectrum of causal maps from q, k and the rows' lse,
against the dense map's diagonal (its eigenvalues) and NumPy's eigenvalues of the dense map in float64."""

import jax.numpy as jnp
import numpy as np
import pytest

import attnjax
from attnjax import analysis

OPTIONS = dict(scale=0.3, temperature=0.7)


def _inputs(dtype, batch=2, t=256, heads=4, kv_heads=2, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(batch, t, heads, dim))
    k = rng.normal(size=(batch, t, kv_heads, dim))
    return jnp.asarray(q, dtype), jnp.asarray(k, dtype)


def _dense_weights(q, k):
    """The causal maps `[B, H, T, T]` (grouped-query heads) by `dot_product_attention`."""
    _, weights = attnjax.dot_product_attention(
        q, k, k, is_causal=True, return_weights=True, **OPTIONS
    )
    return np.asarray(weights, np.float64)


def _streaming_lse(q, k):
    return analysis.attention_statistics(q, k, is_causal=True, chunk_size=64, **OPTIONS).lse


@pytest.mark.parametrize("dtype, tol", [(jnp.float64, 1e-12), (jnp.float32, 1e-5)])
def test_the_eigenvalues_are_the_dense_diagonal(dtype, tol):
    q, k = _inputs(dtype)
    eigenvalues = analysis.causal_eigenvalues(q, k, _streaming_lse(q, k), **OPTIONS)
    weights = _dense_weights(q, k)
    assert eigenvalues.shape == (2, 4, 256) and eigenvalues.dtype == dtype
    np.testing.assert_allclose(
        np.asarray(eigenvalues), np.diagonal(weights, axis1=-2, axis2=-1), rtol=tol, atol=tol
    )
    np.testing.assert_allclose(
        np.asarray(analysis.causal_slem(eigenvalues)),
        np.asarray(analysis.triangular_slem(jnp.asarray(weights))),
        rtol=tol,
        atol=tol,
    )


def test_padded_keys_have_no_weight_on_their_own_row():
    """With key padding (and a window, so a padded row can be fully masked), a_ii is the dense
    diagonal: 0 for padded keys; without the padding the formula gives them weight."""
    q, k = _inputs(jnp.float64, t=32)
    padding = jnp.arange(32)[None, :] < jnp.asarray([[32], [25]])
    window = (3, 3)
    options = dict(OPTIONS, is_causal=True, key_padding=padding, local_window=window)
    lse = analysis.attention_statistics(q, k, chunk_size=8, **options).lse
    mask = (
        attnjax.key_padding_mask(valid=padding)
        & attnjax.local_window_mask(32, left=3, right=3)[None, None]
    )
    _, weights = attnjax.dot_product_attention(
        q, k, k, mask=mask, is_causal=True, return_weights=True, **OPTIONS
    )
    diagonal = np.diagonal(np.asarray(weights), axis1=-2, axis2=-1)
    got = analysis.causal_eigenvalues(q, k, lse, key_padding=padding, **OPTIONS)
    np.testing.assert_allclose(np.asarray(got), diagonal, rtol=1e-12, atol=1e-12)
    assert np.all(np.asarray(got)[1, :, 25:] == 0)
    unpadded = np.asarray(analysis.causal_eigenvalues(q, k, lse, **OPTIONS))
    assert not np.all(np.isfinite(unpadded[1, :, 25:]) & (unpadded[1, :, 25:] == 0))


def test_lambda_2_is_numpys_second_largest_eigenvalue_modulus():
    q, k = _inputs(jnp.float64, batch=1, t=48, seed=1)
    slem = np.asarray(
        analysis.causal_slem(analysis.causal_eigenvalues(q, k, _streaming_lse(q, k), **OPTIONS))
    )
    weights = _dense_weights(q, k)[0]  # [H, T, T]
    for head in range(4):
        moduli = np.sort(np.abs(np.linalg.eigvals(weights[head])))
        assert moduli[-1] == pytest.approx(1.0, abs=1e-12)
        assert slem[0, head] == pytest.approx(moduli[-2], rel=1e-9, abs=1e-12)


def test_a_bias_on_the_diagonal_enters_the_eigenvalues():
    q, k = _inputs(jnp.float64, batch=1, t=32, seed=2)
    bias = np.zeros((1, 4, 32, 32))
    bias[..., np.arange(32), np.arange(32)] = 1.5  # a self-attention bonus
    lse = analysis.attention_statistics(q, k, is_causal=True, bias=jnp.asarray(bias), **OPTIONS).lse
    eigenvalues = analysis.causal_eigenvalues(
        q, k, lse, bias_diagonal=jnp.full((1, 4, 32), 1.5), **OPTIONS
    )
    _, weights = attnjax.dot_product_attention(
        q, k, k, jnp.asarray(bias), is_causal=True, return_weights=True, **OPTIONS
    )
    np.testing.assert_allclose(
        np.asarray(eigenvalues), np.diagonal(np.asarray(weights), axis1=-2, axis2=-1), rtol=1e-12
    )


def test_one_token_has_no_second_eigenvalue():
    assert float(analysis.causal_slem(jnp.ones((1,)))) == 0.0


@pytest.mark.parametrize(
    "key_shape, lse_shape, message",
    [
        ((2, 8, 3, 16), (2, 4, 8), "K dividing H"),
        ((2, 9, 2, 16), (2, 4, 8), "query's T and D"),
        ((2, 8, 2, 16), (2, 8, 4), r"lse must be \[..., H, T\] = \(2, 4, 8\)"),
    ],
)
def test_shapes_that_do_not_match_raise_naming_them(key_shape, lse_shape, message):
    q = jnp.zeros((2, 8, 4, 16))
    with pytest.raises(ValueError, match=message):
        analysis.causal_eigenvalues(q, jnp.zeros(key_shape), jnp.zeros(lse_shape))
