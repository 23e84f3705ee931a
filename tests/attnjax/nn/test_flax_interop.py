"""Interop with flax: attnjax's attention as `flax.nnx.MultiHeadAttention`'s `attention_fn` (`to_flax`),
flax's `nnx.dot_product_attention` as attnjax's (`from_flax`), each against flax's own module with the
same parameters; array-like inputs to the pure functions, as jax.nn accepts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attnjax
from attnjax import nn
from attnjax.nn.attention_fn import from_flax, to_flax

F, H, T = 16, 4, 5
TOL = dict(rtol=1e-6, atol=1e-6)


def _x(seed=0):
    return jax.random.normal(jax.random.key(seed), (2, T, F), jnp.float32)


def _mask():
    mask = np.random.default_rng(0).random((2, 1, T, T)) < 0.6
    mask[..., 0] = True
    return jnp.asarray(mask)


def _flax_mha(attention_fn=nnx.dot_product_attention):
    return nnx.MultiHeadAttention(
        H, F, qkv_features=F, decode=False, attention_fn=attention_fn, rngs=nnx.Rngs(3)
    )


def _copy_into_attnjax(flax_mha, **options):
    """An attnjax MultiHeadAttention holding flax_mha's parameters (flax kernels `[F, H, Dh]`, `[H, Dh, F]`)."""
    mha = nn.MultiHeadAttention(F, H, rngs=nnx.Rngs(0), **options)
    for name in ("query", "key", "value"):
        src = getattr(flax_mha, name)
        getattr(mha, name).kernel[...] = src.kernel[...].reshape(F, F)
        getattr(mha, name).bias[...] = src.bias[...].reshape(F)
    mha.out.kernel[...] = flax_mha.out.kernel[...].reshape(F, F)
    mha.out.bias[...] = flax_mha.out.bias[...]
    return mha


@pytest.mark.parametrize("masked", [False, True])
def test_to_flax_gives_flax_modules_output_and_weights(masked):
    mask = _mask() if masked else None
    reference, ours = _flax_mha(), _flax_mha(to_flax())  # the same seed: the same parameters
    np.testing.assert_array_equal(reference.query.kernel[...], ours.query.kernel[...])

    def sown(m):  # the output and the weights sown by the attention function, flax's way
        return nnx.capture(lambda m: m(_x(), mask=mask, sow_weights=True), nnx.Intermediate)(m)

    (want, want_sown), (got, got_sown) = sown(reference), sown(ours)
    np.testing.assert_allclose(got, want, **TOL)
    weights = got_sown["attention_weights"][0]
    assert weights.shape == (2, H, T, T)
    np.testing.assert_allclose(weights, want_sown["attention_weights"][0], **TOL)


def test_to_flax_refuses_what_it_cannot_honour():
    mha = nnx.MultiHeadAttention(
        H, F, decode=False, dropout_rate=0.1, attention_fn=to_flax(), rngs=nnx.Rngs(0)
    )
    with pytest.raises(ValueError, match="broadcast_dropout=True"):
        mha(_x(), deterministic=False)
    with pytest.raises(ValueError, match="precision"):
        to_flax()(_x()[..., None], _x()[..., None], _x()[..., None], precision="highest")


@pytest.mark.parametrize("masked", [False, True])
def test_from_flax_in_attnjax_module_gives_flax_modules_output(masked):
    mask = _mask() if masked else None
    flax_mha = _flax_mha()
    want = flax_mha(_x(), mask=mask)
    for fn in (from_flax(nnx.dot_product_attention), attnjax.dot_product_attention):
        got = _copy_into_attnjax(flax_mha, attention_fn=fn)(_x(), mask=mask)
        np.testing.assert_allclose(got, want, **TOL)


def test_from_flax_honours_scale_and_causality():
    """temperature != 1 reaches flax's function through the query scaling; is_causal through its keyword."""
    flax_mha = _flax_mha()
    native = _copy_into_attnjax(flax_mha, temperature=0.4)
    adapted = _copy_into_attnjax(
        flax_mha, temperature=0.4, attention_fn=from_flax(nnx.dot_product_attention)
    )
    for causal in (False, True):
        np.testing.assert_allclose(
            adapted(_x(), is_causal=causal), native(_x(), is_causal=causal), **TOL
        )
    assert not np.allclose(native(_x()), _copy_into_attnjax(flax_mha)(_x()), atol=1e-3)


@pytest.mark.slow
def test_array_like_inputs_as_jax_nn():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 3, 2, 4)).astype(np.float32) for _ in range(3))
    want = jax.nn.dot_product_attention(q, k, v)
    for cast in (np.asarray, lambda a: a.tolist()):
        np.testing.assert_allclose(
            attnjax.dot_product_attention(cast(q), cast(k), cast(v)), want, **TOL
        )
    phi = attnjax.features.elu_plus_one
    want = attnjax.linear_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), feature_map=phi)
    got = attnjax.linear_attention(q.tolist(), k, v.tolist(), feature_map=phi)
    np.testing.assert_allclose(got, want, **TOL)
