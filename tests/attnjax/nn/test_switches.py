"""The `attnjax.nn` switches that checkpoint families need: sliding window, q/k/v biases, RoPE scaling,
a bias-free head; each validated once in the configs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn, rope


def _model(**options):
    config = nn.TransformerConfig.create(
        num_layers=2,
        features=16,
        num_heads=4,
        vocab_size=11,
        positions=None,
        rope="half",
        causal=True,
        param_dtype=jnp.float64,
        **options,
    )
    return nn.Transformer(config, rngs=nnx.Rngs(0))


def test_sliding_window_masks_old_keys_in_the_forward_pass_and_when_decoding():
    model = _model(window=3, num_kv_heads=2)
    ids = jax.random.randint(jax.random.key(1), (2, 9), 0, 11)
    logits, inter = model(ids, return_intermediates=True)
    weights = np.asarray(inter["attention"])  # [L, B, H, T, T]
    t, s = np.meshgrid(np.arange(9), np.arange(9), indexing="ij")
    assert np.all(weights[..., (s <= t - 3) | (s > t)] == 0)
    assert np.all(weights[..., (s > t - 3) & (s <= t)] > 0)
    model.init_cache(2, 9)
    steps = [model(ids[:, :4], decode=True)] + [
        model(ids[:, i : i + 1], decode=True) for i in range(4, 9)
    ]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), np.asarray(logits), atol=1e-12)
    full = _model(num_kv_heads=2)
    assert not np.allclose(
        np.asarray(full(ids)), np.asarray(logits)
    )  # the window changes the model


def test_bidirectional_window_is_a_band():
    config = nn.TransformerConfig.create(
        num_layers=1, features=8, num_heads=2, vocab_size=5, window=2
    )
    _, inter = nn.Transformer(config, rngs=nnx.Rngs(0))(
        jnp.zeros((1, 5), jnp.int32), return_intermediates=True
    )
    t, s = np.meshgrid(np.arange(5), np.arange(5), indexing="ij")
    assert np.all((np.asarray(inter["attention"])[0, 0, 0] > 0) == (np.abs(t - s) < 2))


def test_qkv_bias_and_head_bias_switches_set_which_parameters_exist():
    model = _model(use_bias=False, qkv_bias=True, head_bias=False)
    state = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    attention = state["blocks"]["attention"]
    assert all("bias" in attention[n] for n in ("query", "key", "value"))
    assert "bias" not in attention["out"] and "bias" not in state["head"]
    assert "bias" not in state["blocks"]["mlp"]["fc1"]
    none = nnx.to_pure_dict(nnx.state(_model(qkv_bias=False), nnx.Param))["blocks"]["attention"]
    assert "bias" not in none["query"] and "bias" in none["out"]


def test_linear_rope_scaling_divides_the_positions():
    x = jax.random.normal(jax.random.key(0), (2, 7, 3, 8), jnp.float64)
    positions = jnp.arange(7)
    scaled = rope.rotary_embedding(x, positions, base=100.0, scaling=("linear", 4.0))
    np.testing.assert_allclose(
        scaled, rope.rotary_embedding(x, positions / 4.0, base=100.0), atol=1e-13
    )


def test_llama3_scaling_keeps_high_frequencies_and_divides_low_ones():
    plain = np.asarray(rope.inverse_frequencies(64, 5e5, dtype=jnp.float64))
    scaled = np.asarray(
        rope.inverse_frequencies(64, 5e5, ("llama3", 8.0, 1.0, 4.0, 8192.0), jnp.float64)
    )
    wavelength = 2 * np.pi / plain
    high, low = wavelength < 8192 / 4, wavelength > 8192 / 1
    assert high.any() and low.any() and (~high & ~low).any()
    np.testing.assert_array_equal(scaled[high], plain[high])
    np.testing.assert_allclose(scaled[low], plain[low] / 8, rtol=1e-15)
    middle = ~high & ~low
    assert np.all((scaled[middle] < plain[middle]) & (scaled[middle] > plain[middle] / 8))


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"rope_scaling": ("linear", 2.0)}, ValueError, "needs rope='half' or 'interleaved'"),
        (
            {"rope": "half", "rope_scaling": ("yarn", 2.0)},
            ValueError,
            "type one of \\('linear', 'llama3'\\)",
        ),
        (
            {"rope": "half", "rope_scaling": ("linear",)},
            ValueError,
            "type 'linear' takes parameters \\('factor',\\)",
        ),
        (
            {"rope": "half", "rope_scaling": ("llama3", 8.0, 4.0, 1.0, 8192.0)},
            ValueError,
            "high_freq_factor must exceed",
        ),
        ({"window": 0}, ValueError, "window"),
        (
            {"window": 4, "attention_kind": "linear"},
            ValueError,
            "window=4 needs attention_kind='softmax'",
        ),
        ({"qkv_bias": 1}, TypeError, "qkv_bias must be a bool or None"),
    ],
)
def test_invalid_switches_are_named(options, error, message):
    with pytest.raises(error, match=message):
        nn.AttentionConfig(**options)


def test_head_bias_must_be_a_bool():
    with pytest.raises(TypeError, match="head_bias must be a bool"):
        nn.TransformerConfig.create(vocab_size=5, head_bias="no")
