"""`nn.jit_forward`: the model's forward, compiled once, equal to the model's own call."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import key_padding_mask, nn


def small_model():
    config = nn.TransformerConfig.create(
        num_layers=2, features=16, num_heads=2, vocab_size=13, causal=True, max_len=8
    )
    return nn.Transformer(config, rngs=nnx.Rngs(0))


def test_jit_forward_equals_the_model_call_with_and_without_a_mask():
    model = small_model()
    tokens = jax.random.randint(jax.random.key(1), (2, 8), 0, 13)
    forward = nn.jit_forward(model)
    np.testing.assert_allclose(forward(tokens), model(tokens), rtol=1e-6, atol=1e-6)
    valid = jnp.arange(8)[None, :] < jnp.asarray([[8], [5]])
    mask = key_padding_mask(valid=valid)
    np.testing.assert_allclose(
        forward(tokens, mask), model(tokens, mask=mask), rtol=1e-6, atol=1e-6
    )
    logits, inter = nn.jit_forward(model, return_intermediates=True)(tokens)
    expected_logits, expected = model(tokens, return_intermediates=True)
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(inter["attention"], expected["attention"], rtol=1e-6, atol=1e-6)


def test_jit_forward_reads_the_models_current_parameters():
    """The split state holds the model's variables: after `nnx.update`, the same forward computes with the
    new parameters."""
    model = small_model()
    tokens = jax.random.randint(jax.random.key(2), (1, 8), 0, 13)
    forward = nn.jit_forward(model)
    old = forward(tokens)
    nnx.update(model, jax.tree.map(lambda p: 2.0 * p, nnx.state(model, nnx.Param)))
    new = forward(tokens)
    np.testing.assert_allclose(new, model(tokens), rtol=1e-6, atol=1e-6)
    assert not np.allclose(new, old)
