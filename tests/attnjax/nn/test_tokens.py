"""Token ids outside [0, vocab_size): a ValueError on concrete inputs; under jit NaN exactly where
documented, or an error through checkify."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.experimental import checkify

from attnjax import nn

VOCAB = 10


@pytest.fixture(scope="module")
def model():
    config = nn.TransformerConfig.create(
        num_layers=1, features=16, num_heads=2, vocab_size=VOCAB, max_len=8, causal=True
    )
    return nn.Transformer(config, rngs=nnx.Rngs(0))


def test_eager_out_of_vocab_raises_naming_ids(model):
    tokens = jnp.array([[1, 2, 50], [3, -1, 4]], jnp.int32)
    with pytest.raises(
        ValueError, match=r"vocab_size=10.*2 outside: 50 at \(0, 2\), -1 at \(1, 1\)"
    ):
        model(tokens)


def test_eager_in_vocab_passes(model):
    logits = model(jnp.array([[0, 9, 5]], jnp.int32))
    assert logits.shape == (1, 3, VOCAB) and bool(jnp.all(jnp.isfinite(logits)))


def test_generate_prompt_out_of_vocab_raises(model):
    with pytest.raises(ValueError, match="50 at"):
        model.generate(jnp.array([[1, 50]], jnp.int32), 2)


def test_jit_bad_sequence_is_nan_others_exact(model):
    """Under jit a sequence holding an out-of-range id has NaN logits everywhere (its NaN key and value
    reach every query: masked weights are 0 and 0 * NaN = NaN); the other sequences are unchanged."""
    tokens = jnp.array([[1, 2, 50, 3], [4, 5, 6, 7]], jnp.int32)
    logits = nnx.jit(lambda m, x: m(x))(model, tokens)
    assert bool(jnp.all(jnp.isnan(logits[0])))
    np.testing.assert_allclose(logits[1:], model(tokens[1:]), rtol=1e-6, atol=1e-6)


def test_checkify_raises_under_jit(model):
    graphdef, state = nnx.split(model)
    check = checkify.checkify(lambda tokens: nn.check_tokens(tokens, VOCAB))

    @jax.jit
    def forward(state, tokens):
        err, _ = check(tokens)
        return err, nnx.merge(graphdef, state)(tokens)

    err, _ = forward(state, jnp.array([[1, 2, 50]], jnp.int32))
    with pytest.raises(checkify.JaxRuntimeError, match=r"outside \[0, 10\): min 1, max 50"):
        err.throw()
    err, logits = forward(state, jnp.array([[1, 2, 3]], jnp.int32))
    err.throw()
    assert bool(jnp.all(jnp.isfinite(logits)))
