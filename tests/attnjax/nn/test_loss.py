"""`nn.next_token_loss` against the model's logits read by a float64 NumPy log-softmax."""

import jax
import numpy as np
import pytest
from flax import nnx

from attnjax import nn

VOCAB, T = 11, 9


@pytest.fixture(scope="module")
def model():
    config = nn.TransformerConfig.create(
        num_layers=2, features=16, num_heads=2, vocab_size=VOCAB, causal=True, max_len=T
    )
    return nn.Transformer(config, rngs=nnx.Rngs(0))


def numpy_losses(logits, tokens) -> np.ndarray:
    """-log softmax(logits_t)[tokens_(t+1)] in float64, `[B, T - 1]`."""
    z = np.asarray(logits, np.float64)[:, :-1]
    log_p = z - z.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    targets = np.asarray(tokens)[:, 1:]
    return -np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]


def test_per_token_and_mean_loss_equal_numpy(model):
    tokens = jax.random.randint(jax.random.key(1), (3, T), 0, VOCAB)
    per_token, mean = nn.next_token_loss(model, tokens)
    expected = numpy_losses(model(tokens), tokens)
    assert per_token.shape == (3, T - 1)
    np.testing.assert_allclose(per_token, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(mean), expected.mean(), rtol=1e-5)
    jitted = nnx.jit(lambda m, t: nn.next_token_loss(m, t)[1])(model, tokens)
    np.testing.assert_allclose(float(jitted), float(mean), rtol=1e-6)


def test_padded_batch_counts_only_real_targets(model):
    """Right padding: each row's losses are those of its unpadded sequence alone, padding's are 0,
    and the mean is over the real targets only."""
    lengths = [T, 6, 2]
    tokens = np.asarray(jax.random.randint(jax.random.key(2), (3, T), 0, VOCAB))
    valid = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
    tokens = np.where(valid, tokens, 0)
    loss = nnx.jit(nn.next_token_loss)  # one program per shape, not an eager op each
    per_token, mean = loss(model, tokens, valid)
    singles = []
    for row, length in enumerate(lengths):
        alone = loss(model, tokens[row : row + 1, :length])[0][0]
        np.testing.assert_allclose(per_token[row, : length - 1], alone, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(per_token[row, length - 1 :], 0.0)
        singles.append(np.asarray(alone, np.float64))
    np.testing.assert_allclose(float(mean), np.concatenate(singles).mean(), rtol=1e-5)


def test_bad_inputs_name_the_argument(model):
    tokens = np.zeros((2, T), np.int32)
    with pytest.raises(TypeError, match="tokens must be integer"):
        nn.next_token_loss(model, tokens.astype(np.float32))
    with pytest.raises(
        ValueError, match=r"tokens must be \[B, T\] with T >= 2; got shape \(2, 1\)"
    ):
        nn.next_token_loss(model, tokens[:, :1])
    with pytest.raises(ValueError, match=r"valid must have the tokens' shape \(2, 9\)"):
        nn.next_token_loss(model, tokens, np.ones((2, 8), bool))
    with pytest.raises(TypeError, match="valid must be boolean"):
        nn.next_token_loss(model, tokens, np.ones((2, T), np.int32))
