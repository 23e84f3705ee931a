"""`nn.jit_forward`: the model's forward, compiled once, equal to the model's own call."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import key_padding_mask, nn


def small_model(rngs=None, **options):
    config = nn.TransformerConfig.create(
        num_layers=2, features=16, num_heads=2, vocab_size=13, causal=True, max_len=8, **options
    )
    return nn.Transformer(config, rngs=nnx.Rngs(0) if rngs is None else rngs)


@contextlib.contextmanager
def counted_compiles():
    """A list that receives one entry per XLA backend compile while the context is open."""
    compiles = []

    def listen(name, *_, **__):
        if name.endswith("backend_compile_duration"):
            compiles.append(name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield compiles
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


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


def test_an_eager_call_is_one_program_per_shape_and_options():
    """Outside transformations the model's call compiles once per shapes and options and is then reused
    (op by op, its layer scan compiled anew at every call); it equals the traced call, still checks
    token ids on the concrete inputs, and the dropout streams still advance from call to call."""
    model = small_model()
    tokens = jax.random.randint(jax.random.key(3), (2, 8), 0, 13)
    traced = nn.jit_forward(model)(tokens)  # the model's call traced into jit_forward's program
    first = model(tokens)
    np.testing.assert_allclose(first, traced, rtol=1e-6, atol=1e-6)
    again, shorter = jnp.array(tokens), tokens[:, :5]
    with counted_compiles() as compiles:
        np.testing.assert_array_equal(model(again), first)  # same shapes: no compile
        assert compiles == []
        model(shorter)  # a new shape compiles once
        assert len(compiles) == 1
    with pytest.raises(ValueError, match="13"):
        model(tokens.at[0, 0].set(13))
    dropout = small_model(nnx.Rngs(params=0, dropout=1), residual_dropout_rate=0.5)
    assert not np.array_equal(dropout(tokens), dropout(tokens))


def test_an_eager_decoding_call_is_one_program_per_shape_and_checks_the_cache_room():
    """Decoding outside transformations compiles once per chunk shape (op by op, every call compiled
    its layer scan anew), gives the full pass's logits position by position, advances the cache, and
    refuses a chunk that does not fit, on the concrete cache index, before any compute."""
    model = small_model()
    tokens = jax.random.randint(jax.random.key(4), (2, 8), 0, 13)
    full = model(tokens)
    model.init_cache(2, 8)
    prompt, *singles = jnp.split(tokens, [5, 6, 7], axis=1)
    steps = [model(prompt, decode=True)]
    with counted_compiles() as compiles:
        steps.append(model(singles[0], decode=True))
        assert len(compiles) == 1  # the first one-token chunk
        steps.append(model(singles[1], decode=True))
        assert len(compiles) == 1  # the same shape: reused
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full[:, :7], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.blocks.attention.cache_index[...], 7)
    with pytest.raises(ValueError, match="does not fit"):
        model(tokens[:, :2], decode=True)  # 7 filled + 2 > 8
    np.testing.assert_array_equal(model.blocks.attention.cache_index[...], 7)
    last = model(singles[2], decode=True)
    np.testing.assert_allclose(last, full[:, 7:8], rtol=1e-5, atol=1e-5)
