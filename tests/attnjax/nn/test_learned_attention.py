"""An attention variant with parameters of its own: the example docs/examples/learned_attention.py (a
`MultiHeadAttention` subclass with a learned temperature and output gate per head, built into every layer
through `BlockConfig.attention_module`), run as written, against a float64 NumPy computation of the
variant, decoding from its cache, and training on a task with gradients reaching its parameters."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn
from tests import reference_transformer as ref
from tests.attnjax.nn.test_custom_attention import IDS, MODEL, TOL, load_example, randomize

# The custom-attention test's model: 2 layers, 4 query and 2 key/value heads, RoPE, float64.
example = load_example("learned_attention")


def _randomized_model(seed):
    """The example model with every parameter drawn afresh (`randomize`), the learned temperatures and
    gates included; returns (model, flat parameters as NumPy)."""
    model = example.build_model(nnx.Rngs(0), **MODEL)
    return model, randomize(model, seed)


def _variant_reference(log_temperature, gate):
    """float64 attention of the variant, one layer after another (`ref.transformer` calls it once per layer,
    in order): p^h_ts = softmax_s(q^h_t . k_s scale / (temperature tau_h)) over visible s, output scaled by
    sigmoid(g_h); query head h reads key/value head h // (H / K). `log_temperature`, `gate` `[L, H]`."""
    layers = itertools.count()

    def attention(q, k, v, *, mask=None, scale, temperature=1.0):
        layer = next(layers)
        q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
        groups = q.shape[-2] // k.shape[-2]
        k, v = np.repeat(k, groups, axis=-2), np.repeat(v, groups, axis=-2)
        tau = np.exp(log_temperature[layer])[:, None, None]  # [H, 1, 1]
        logits = np.einsum("...thd,...shd->...hts", q, k) * scale / (temperature * tau)
        if mask is not None:
            logits = np.where(np.broadcast_to(mask, logits.shape), logits, -np.inf)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        gates = 1.0 / (1.0 + np.exp(-gate[layer]))  # [H]
        out = np.einsum("...hts,...shd->...thd", weights, v) * gates[:, None]
        return out, weights

    return attention


def test_every_layer_holds_its_own_parameters_and_matches_float64():
    model, params = _randomized_model(1)
    log_temperature = params[("blocks", "attention", "log_temperature")]
    gate = params[("blocks", "attention", "gate")]
    assert log_temperature.shape == gate.shape == (2, 4)  # [L, H]: one set per layer
    logits, inter = model(jnp.asarray(IDS), return_intermediates=True)
    attention = _variant_reference(log_temperature, gate)
    want, want_hidden = ref.transformer(params, model.config, IDS, attention=attention)
    np.testing.assert_allclose(np.asarray(inter["hidden"]), want_hidden, **TOL)
    np.testing.assert_allclose(np.asarray(logits), want, **TOL)
    plain, _ = ref.transformer(params, model.config, IDS)
    assert np.max(np.abs(want - plain)) > 1e-2  # the parameters change the model


def test_the_example_model_decodes_as_its_forward_pass():
    model, _ = _randomized_model(2)
    full = model(jnp.asarray(IDS))
    model.init_cache(2, IDS.shape[1])
    chunks = [model(jnp.asarray(IDS[:, a:b]), decode=True) for a, b in ((0, 5), (5, 6), (6, 8))]
    np.testing.assert_allclose(np.asarray(jnp.concatenate(chunks, axis=1)), np.asarray(full), **TOL)


def test_training_on_a_task_lowers_the_loss_and_moves_the_new_parameters():
    model, losses = example.train(steps=100)
    assert all(np.isfinite(losses))
    assert np.mean(losses[-10:]) < 0.75 * np.mean(losses[:10]), (losses[:10], losses[-10:])
    for name in ("log_temperature", "gate"):
        learned = np.asarray(getattr(model.blocks.attention, name)[...])
        assert learned.shape == (2, 4) and np.all(np.abs(learned) > 1e-4), (name, learned)


def test_gradients_reach_the_new_parameters_of_every_layer_and_head():
    model = example.build_model(nnx.Rngs(3), **dict(MODEL, param_dtype=jnp.float32))
    batch = example.tasks.AssociativeRecall(num_pairs=2, num_queries=2, vocab_size=11).batch(
        jax.random.key(0), 4
    )
    grads = nnx.jit(nnx.grad(example.recall_loss))(model, batch)
    for name in ("log_temperature", "gate"):
        g = np.asarray(getattr(grads.blocks.attention, name)[...])
        assert np.all(np.isfinite(g)) and np.all(np.abs(g) > 0), (name, g)


@pytest.mark.parametrize("module", [nnx.Linear, "MultiHeadAttention", example.build_model])
def test_an_attention_module_that_is_not_a_multi_head_attention_class_raises(module):
    with pytest.raises(TypeError, match="attention_module must be None or a subclass"):
        nn.BlockConfig(attention_module=module)
