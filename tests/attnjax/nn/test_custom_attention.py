"""A researcher's attention variant plugged in without touching the library: the example
docs/examples/custom_attention.py (softmax with one extra zero logit as an `attention_fn`) run as
written, against a float64 NumPy computation of the variant; and `MultiHeadAttention`'s public
stages composing to its call."""

import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.test_util import check_grads

from attnjax import nn
from tests import reference_transformer as ref
from tests.paths import REPO

TOL = dict(rtol=1e-10, atol=1e-10)
IDS = np.array([[1, 5, 2, 9, 4, 4, 7, 3], [8, 0, 6, 2, 10, 1, 3, 5]])
MODEL = dict(
    num_layers=2,
    features=16,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=11,
    max_len=8,
    positions=None,
    rope="half",
    temperature=0.7,
    param_dtype=jnp.float64,
)


def load_example(name: str):
    """docs/examples/<name>.py, executed as a module (the code the docs show)."""
    path = REPO / "docs" / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = load_example("custom_attention")


def softmax_one_reference(q, k, v, *, mask=None, scale, temperature=1.0):
    """float64, written from the formula: x = q.k scale / temperature over visible keys,
    p_ts = exp(x_ts) / (1 + sum_s' exp(x_ts')); query head h reads key/value head h // (H / K).
    Returns (out `[..., T, H, D]`, weights `[..., H, T, S]`) (`tests.reference`'s signature)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    groups = q.shape[-2] // k.shape[-2]
    k, v = np.repeat(k, groups, axis=-2), np.repeat(v, groups, axis=-2)
    logits = np.einsum("...thd,...shd->...hts", q, k) * scale / temperature
    visible = np.ones(logits.shape, bool) if mask is None else np.broadcast_to(mask, logits.shape)
    e = np.where(visible, np.exp(np.where(visible, logits, 0.0)), 0.0)
    weights = e / (1.0 + e.sum(-1, keepdims=True))
    return np.einsum("...hts,...shd->...thd", weights, v), weights


def randomize(model, seed):
    """Every parameter of `model` drawn afresh: N(0, 0.5^2), norm scales 1 + N(0, 0.2^2); the flat dict."""
    rng = np.random.default_rng(seed)
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        noise = rng.standard_normal(variable.shape)
        variable[...] = 1.0 + 0.2 * noise if path[-1] == "scale" else 0.5 * noise
    return {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


@pytest.mark.parametrize("num_kv_heads", [4, 2])
@pytest.mark.parametrize("kv_len", [6, 9])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_the_variant_matches_float64(num_kv_heads, kv_len, is_causal, masked):
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 6, 4, 8))
    k, v = rng.normal(size=(2, 2, kv_len, num_kv_heads, 8))
    mask = rng.random((2, 1, 6, kv_len)) < 0.6 if masked else None
    if masked:
        mask[0, 0, 2] = False  # a row with no visible key
    out, weights = example.softmax_one_attention(
        jnp.asarray(q),
        jnp.asarray(k),
        jnp.asarray(v),
        None if mask is None else jnp.asarray(mask),
        scale=0.3,
        is_causal=is_causal,
        return_weights=True,
    )
    visible = np.ones((6, kv_len), bool) if mask is None else mask
    visible = np.tril(visible) if is_causal else visible
    want_out, want_weights = softmax_one_reference(q, k, v, mask=visible, scale=0.3)
    np.testing.assert_allclose(np.asarray(out), want_out, **TOL)
    np.testing.assert_allclose(np.asarray(weights), want_weights, **TOL)
    assert np.all(np.asarray(weights).sum(-1) < 1)  # the extra logit keeps some mass: not softmax
    if masked:
        assert np.all(np.asarray(out)[0, 2] == 0)  # nothing visible: attends to nothing, no NaN
    f = functools.partial(
        example.softmax_one_attention,
        mask=None if mask is None else jnp.asarray(mask),
        scale=0.3,
        is_causal=is_causal,
    )
    check_grads(f, (jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)), order=1, modes=["rev"])


def test_the_example_model_matches_float64_and_is_not_softmax():
    model = example.build_model(nnx.Rngs(0), **MODEL)
    params = randomize(model, 1)
    logits, inter = model(jnp.asarray(IDS), return_intermediates=True)
    want, want_hidden = ref.transformer(params, model.config, IDS, attention=softmax_one_reference)
    assert logits.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(inter["hidden"]), want_hidden, **TOL)
    np.testing.assert_allclose(np.asarray(logits), want, **TOL)
    softmax, _ = ref.transformer(params, model.config, IDS)
    assert np.max(np.abs(want - softmax)) > 1e-2  # the variant changes the model
    # The returned weights are the variant's: causal, each row's mass below 1.
    weights = np.asarray(inter["attention"])  # [L, B, H, T, T]
    assert np.all(np.triu(weights, 1) == 0) and np.all(weights.sum(-1) < 1)


def test_the_example_model_decodes_as_its_forward_pass():
    model = example.build_model(nnx.Rngs(0), **MODEL)
    randomize(model, 2)
    full = model(jnp.asarray(IDS))
    model.init_cache(2, IDS.shape[1])
    chunks = [model(jnp.asarray(IDS[:, a:b]), decode=True) for a, b in ((0, 5), (5, 6), (6, 8))]
    np.testing.assert_allclose(np.asarray(jnp.concatenate(chunks, axis=1)), np.asarray(full), **TOL)


def test_a_gradient_step_on_the_example_model_lowers_its_loss():
    model = example.build_model(nnx.Rngs(3), **dict(MODEL, param_dtype=jnp.float32))
    inputs, targets = jnp.asarray(IDS[:, :-1]), jnp.asarray(IDS[:, 1:])

    def loss_fn(model):
        logp = jax.nn.log_softmax(model(inputs), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

    loss, grads = nnx.jit(nnx.value_and_grad(loss_fn))(model)
    flat = nnx.to_flat_state(grads)
    assert all(np.all(np.isfinite(g[...])) for _, g in flat)
    query_grad = [g[...] for path, g in flat if path[-2:] == ("query", "kernel")]
    assert query_grad and np.max(np.abs(query_grad[0])) > 0  # gradients reach the attention
    params = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads))
    assert float(nnx.jit(loss_fn)(model)) < float(loss)


def test_the_stages_compose_to_the_call():
    """project -> position -> attend -> merge (the class docstring's code) is `__call__`, bit for bit."""
    mha = nn.MultiHeadAttention(
        16, 4, num_kv_heads=2, rope="half", normalize_qk=True, temperature=0.8, rngs=nnx.Rngs(0)
    )
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 7, 16)), jnp.float32)
    mask = jnp.asarray(np.random.default_rng(1).random((2, 1, 7, 7)) < 0.8)
    q, k, v = mha.project(x)
    assert q.shape == (2, 7, 4, 4) and k.shape == v.shape == (2, 7, 2, 4)
    heads, weights = mha.attend(
        mha.position(q), mha.position(k), v, mask=mask, is_causal=True, need_weights=True
    )
    out, call_weights = mha(x, mask=mask, is_causal=True, return_weights=True)
    np.testing.assert_array_equal(np.asarray(mha.merge(heads)), np.asarray(out))
    np.testing.assert_array_equal(np.asarray(weights), np.asarray(call_weights))
    # Explicit positions: the last four queries at 3..6 are rows 3..6 of the queries at 0..6.
    np.testing.assert_array_equal(
        np.asarray(mha.position(q[:, 3:], jnp.arange(3, 7))), np.asarray(mha.position(q)[:, 3:])
    )
    assert np.max(np.abs(np.asarray(mha.position(q) - q))) > 0.1  # RoPE rotates
    plain = nn.MultiHeadAttention(16, 4, rngs=nnx.Rngs(0))
    assert plain.position(q) is q  # no rope: the identity
