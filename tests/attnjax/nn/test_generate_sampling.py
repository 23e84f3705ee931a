"""`generate`'s sampling distribution: the first and second sampled tokens against
softmax(logits / temperature) of the model's own float64 logits, by a chi-square test.

The threshold is fixed before looking: the statistic over V categories fails above the
chi-square(V - 1) quantile at 1 - 1e-3. Fixed keys, so the verdict is reproducible.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from attnjax import nn

VOCAB, SAMPLES, P_FAIL = 6, 4000, 1e-3
THRESHOLD = stats.chi2.ppf(1 - P_FAIL, VOCAB - 1)


@pytest.fixture(scope="module")
def model():
    config = nn.TransformerConfig.create(
        num_layers=1,
        features=8,
        num_heads=2,
        vocab_size=VOCAB,
        max_len=4,
        causal=True,
        param_dtype=jnp.float64,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    model.head.kernel[...] = 4.0 * model.head.kernel[...]  # logits spread over a few nats
    return model


@pytest.fixture(scope="module")
def sampled(model):
    """temperature -> `generate`'s tokens `[SAMPLES, 4]` after the prompt [1, 3] (key 7), made once per
    temperature: token t uses fold_in(key, t), so the first new token is the same however many follow."""
    prompt = jnp.asarray(np.full((SAMPLES, 2), [1, 3], np.int32))
    return functools.cache(
        lambda temperature: np.asarray(
            model.generate(prompt, 2, key=jax.random.key(7), temperature=temperature)
        )
    )


def _probs(model, tokens, temperature):
    logits = np.asarray(model(jnp.asarray(tokens))[:, -1], np.float64)
    z = logits / temperature
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _chi_square(samples, probs):
    counts = np.bincount(samples, minlength=VOCAB)
    expected = len(samples) * probs
    return float(np.sum((counts - expected) ** 2 / expected))


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_sampled_tokens_follow_softmax_of_logits_over_temperature(model, sampled, temperature):
    out = sampled(temperature)
    first = _probs(model, out[:1, :2], temperature)[0]
    assert (
        max(first) < 0.9 and max(first) - min(first) > 0.05
    )  # a non-degenerate distribution to test
    assert _chi_square(out[:, 2], first) < THRESHOLD
    common = np.bincount(out[:, 2]).argmax()  # the second token, given the most common first token
    rows = out[:, 2] == common
    second = _probs(model, np.array([[1, 3, common]], np.int32), temperature)[0]
    assert _chi_square(out[rows, 3], second) < THRESHOLD


def test_chi_square_rejects_the_wrong_temperature(model, sampled):
    """Power: the same samples fail against the distribution of another temperature."""
    out = sampled(0.5)
    assert _chi_square(out[:, 2], _probs(model, out[:1, :2], 1.0)[0]) > THRESHOLD
