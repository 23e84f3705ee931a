"""`Transformer.generate`'s argument checks (`attnjax.nn.generate.check_generate`), raised before any compute.

The sampling distribution itself is tested in `test_generate_sampling.py`, decoding in `test_decoding.py`.
"""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from attnjax import nn


@pytest.fixture(scope="module")
def model():
    config = nn.TransformerConfig.create(
        num_layers=1, features=8, num_heads=2, vocab_size=6, max_len=8, causal=True
    )
    return nn.Transformer(config, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("temperature", [float("nan"), -1.0, float("-inf")])
def test_a_nan_temperature_is_refused_like_a_negative_one(model, temperature):
    """NaN would make every sampling logit NaN: categorical then returns token 0 at every step."""
    prompt = jnp.asarray([[1, 3]], jnp.int32)
    with pytest.raises(ValueError, match=r"temperature must be a number >= 0 \(0: greedy\), got"):
        model.generate(prompt, 2, key=jax.random.key(0), temperature=temperature)
