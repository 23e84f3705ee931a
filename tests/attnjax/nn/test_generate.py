"""`Transformer.generate`'s argument checks (`attnjax.nn.generate.check_generate`), raised before any compute.

The sampling distribution itself is tested in `test_generate_sampling.py` (a chi-square test, slow),
decoding in `test_decoding.py`; here, quickly, that the temperature divides the logits and that each
step draws with its own key.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn


def _model(head_scale: float = 1.0):
    """A one-layer causal model over 6 tokens, its head kernel multiplied by `head_scale`."""
    config = nn.TransformerConfig.create(
        num_layers=1, features=8, num_heads=2, vocab_size=6, max_len=8, causal=True
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    model.head.kernel[...] = head_scale * model.head.kernel[...]
    return model


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.mark.parametrize("temperature", [float("nan"), -1.0, float("-inf")])
def test_a_nan_temperature_is_refused_like_a_negative_one(model, temperature):
    """NaN would make every sampling logit NaN: categorical then returns token 0 at every step."""
    prompt = jnp.asarray([[1, 3]], jnp.int32)
    with pytest.raises(ValueError, match=r"temperature must be a number >= 0 \(0: greedy\), got"):
        model.generate(prompt, 2, key=jax.random.key(0), temperature=temperature)


def test_a_tiny_temperature_samples_the_greedy_tokens():
    """softmax(logits / 1e-3) is one-hot on the argmax (logits spread over a few nats); without the
    division, sampling at temperature 1 would leave it."""
    model = _model(head_scale=4.0)
    prompt = jnp.asarray(np.random.default_rng(0).integers(0, 6, (32, 2)), jnp.int32)
    greedy = model.generate(prompt, 3, key=jax.random.key(0), temperature=0.0)
    cold = model.generate(prompt, 3, key=jax.random.key(0), temperature=1e-3)
    np.testing.assert_array_equal(np.asarray(cold), np.asarray(greedy))


def test_each_step_samples_with_its_own_key():
    """With uniform logits (a zero head) the tokens depend on the keys alone: one key for every step
    would repeat each row's first token."""
    model = _model(head_scale=0.0)
    prompt = jnp.asarray(np.full((16, 2), [1, 3]), jnp.int32)
    tokens = np.asarray(model.generate(prompt, 6, key=jax.random.key(1), temperature=1.0))[:, 2:]
    assert (tokens != tokens[:, :1]).any(axis=1).sum() >= 8
