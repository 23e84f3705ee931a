"""`nn.attention_spectra` against the dense maps the same model gives (`capture=("weights",)`): singular
values against NumPy's SVD, received mass against column sums, |lambda_2| against the diagonal, for a
causal grouped-query model, a bidirectional one with a sliding window, a causal one with a window on
one layer only, and a padded batch."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import analysis, nn
from tests.attnjax.nn.test_reference_transformer import randomize

B, T = 2, 24
TOKENS = np.random.default_rng(0).integers(0, 13, size=(B, T)).astype(np.int32)
MODELS = {
    "causal-gqa-rope": dict(causal=True, num_kv_heads=2, rope="half", positions=None),
    "bidirectional-window": dict(causal=False, window=5, temperature=0.7),
    # Gemma 3's switches: a local layer (window 5), a global one, two rotary bases, heads of 6 != 16 / 4.
    "causal-per-layer-windows": dict(
        causal=True,
        rope="half",
        positions=None,
        head_dim=6,
        normalize_qk="rmsnorm",
        norm="sandwich",
        layer_windows=(5, None),
        layer_rope_bases=(100.0, 1e4),
    ),
}


def _model(options):
    config = nn.TransformerConfig.create(
        num_layers=2,
        features=16,
        num_heads=4,
        vocab_size=13,
        max_len=T,
        param_dtype=jnp.float64,
        **options,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    randomize(model, 0)
    return model


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("padded", [False, True])
def test_spectra_equal_those_of_the_dense_maps(name, padded):
    model = _model(MODELS[name])
    padding = np.arange(T)[None, :] < np.array([[T], [T - 7]]) if padded else None
    mask = None if padding is None else jnp.asarray(padding)[:, None, None, :]
    _, dense = model(jnp.asarray(TOKENS), mask=mask, capture=("weights",))
    weights = np.asarray(dense["weights"])  # [L, B, H, T, T]
    got = nn.attention_spectra(
        model, jnp.asarray(TOKENS), key_padding=padding, num_values=2, top_k=3
    )
    sigma = np.linalg.svd(weights, compute_uv=False)[..., :2]
    assert got.values.shape == got.bounds.shape == (2, B, 4, 2)
    np.testing.assert_allclose(np.asarray(got.values), sigma, rtol=1e-6)
    assert np.all(np.abs(np.asarray(got.values) - sigma) <= np.asarray(got.bounds) + 1e-12)
    columns = weights.sum(axis=-2)
    np.testing.assert_allclose(np.asarray(got.mass), columns, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(
        np.asarray(got.top_keys), np.argsort(-columns, axis=-1, kind="stable")[..., :3]
    )
    logs = np.log(np.where(weights > 0, weights, 1.0))
    entropy = -np.sum(weights * logs, axis=-1)  # [L, B, H, T]
    np.testing.assert_allclose(np.asarray(got.entropy), entropy, rtol=1e-10, atol=1e-12)
    visible = np.sum(weights > 0, axis=-1)  # no weight of these float64 maps underflows
    normalized = np.where(visible > 1, entropy / np.log(np.maximum(visible, 2)), 0.0)
    np.testing.assert_allclose(
        np.asarray(got.normalized_entropy), normalized, rtol=1e-10, atol=1e-12
    )
    if model.config.causal:
        want = np.sort(np.diagonal(weights, axis1=-2, axis2=-1), axis=-1)[..., -2]
        np.testing.assert_allclose(np.asarray(got.slem), want, rtol=1e-10)
        np.testing.assert_allclose(
            np.asarray(got.slem), np.asarray(analysis.triangular_slem(weights)), rtol=1e-10
        )
    else:
        assert got.slem is None


def test_linear_attention_models_raise():
    model = _model(dict(attention_kind="linear"))
    with pytest.raises(ValueError, match="attention spectra need softmax attention"):
        nn.attention_spectra(model, jnp.asarray(TOKENS))


@pytest.mark.parametrize("layers", [(1,), (1, 0)])
def test_chosen_layers_are_those_rows_of_every_layer(layers):
    """Layers of two windows asked out of order: each field's rows are those layers' rows of the
    full result, in the order asked."""
    model = _model(MODELS["causal-per-layer-windows"])
    every = nn.attention_spectra(model, jnp.asarray(TOKENS), top_k=3)
    chosen = nn.attention_spectra(model, jnp.asarray(TOKENS), top_k=3, layers=layers)
    for name, got, want in zip(every._fields, chosen, every):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want)[list(layers)], err_msg=name)


@pytest.mark.parametrize("layers", [(), (0, 0), (2,), (-1,), (True,)])
def test_layers_outside_the_model_raise(layers):
    model = _model(MODELS["causal-gqa-rope"])
    with pytest.raises(ValueError, match="layers must"):
        nn.attention_spectra(model, jnp.asarray(TOKENS), layers=layers)
