"""Options of the nn modules: interchangeable attention functions, dropout, initialisers."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn

F32, F64 = jnp.float32, jnp.float64


def _x(shape=(2, 6, 16), dtype=F32, seed=1):
    return jax.random.normal(jax.random.key(seed), shape, dtype)


def _config(**kwargs):
    base = dict(num_layers=2, features=16, num_heads=4, vocab_size=11, max_len=16, causal=True)
    base.update(kwargs)
    return nn.TransformerConfig(**base)


TOKENS = jax.random.randint(jax.random.key(3), (2, 7), 0, 11)


# ------------------------------------------------ interchangeable attention


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("num_kv_heads", [4, 2])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_jax_nn_attention_fn_gives_the_default_output(causal, padded, num_kv_heads, temperature):
    kwargs = dict(num_kv_heads=num_kv_heads, temperature=temperature)
    ours = nn.MultiHeadAttention(16, 4, **kwargs, rngs=nnx.Rngs(0))
    theirs = nn.MultiHeadAttention(16, 4, attention_fn=jax.nn.dot_product_attention, **kwargs, rngs=nnx.Rngs(0))
    x = _x()
    # Key padding [B, 1, 1, S]; every row keeps its first key, so no row is fully masked.
    mask = (jnp.arange(6)[None, :] < jnp.array([6, 3])[:, None])[:, None, None, :] if padded else None
    np.testing.assert_allclose(theirs(x, mask=mask, is_causal=causal), ours(x, mask=mask, is_causal=causal),
                               atol=1e-6, rtol=0)


def test_jax_nn_attention_fn_cross_attention():
    ours = nn.MultiHeadAttention(16, 4, num_kv_heads=2, rngs=nnx.Rngs(0))
    theirs = nn.MultiHeadAttention(16, 4, num_kv_heads=2, attention_fn=jax.nn.dot_product_attention, rngs=nnx.Rngs(0))
    x, context = _x(), _x((2, 9, 16), seed=2)
    np.testing.assert_allclose(theirs(x, context), ours(x, context), atol=1e-6, rtol=0)


def test_transformer_runs_on_another_attention_fn():
    calls = []

    def spy(q, k, v, bias=None, mask=None, *, scale=None, is_causal=False):
        calls.append(q.shape)
        return jax.nn.dot_product_attention(q, k, v, bias, mask, scale=scale, is_causal=is_causal)

    ours = nn.Transformer(_config(num_layers=3), rngs=nnx.Rngs(0))
    theirs = nn.Transformer(_config(num_layers=3, attention_fn=spy), rngs=nnx.Rngs(0))
    np.testing.assert_allclose(theirs(TOKENS), ours(TOKENS), atol=1e-5, rtol=0)
    assert calls == [(2, 7, 4, 4)]  # traced once for all layers: the layers are scanned


def test_weights_from_jax_nn_attention_fn_raise():
    mha = nn.MultiHeadAttention(16, 4, attention_fn=jax.nn.dot_product_attention, rngs=nnx.Rngs(0))
    message = (r"attention weights .* unavailable with attention_fn=dot_product_attention from jax\.nn: "
               r"it takes no return_weights=; use attnjax\.dot_product_attention")
    with pytest.raises(ValueError, match=message):
        mha(_x(), return_weights=True)
    with pytest.raises(ValueError, match=message):
        nnx.capture(lambda m, x: m(x, sow_weights=True), nnx.Intermediate)(mha, _x())
    model = nn.Transformer(_config(attention_fn=jax.nn.dot_product_attention), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=message):
        model(TOKENS, return_intermediates=True)


def test_attention_fn_without_the_keywords_asked_for_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"attention dropout is unavailable with attention_fn=dot_product_attention "
                                         r"from jax\.nn: it takes no dropout_rate=, dropout_rng="):
        nn.MultiHeadAttention(16, 4, dropout_rate=0.1, attention_fn=jax.nn.dot_product_attention, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"attention dropout is unavailable"):
        _config(attention_dropout_rate=0.1, attention_fn=jax.nn.dot_product_attention)

    def no_scale(q, k, v, *, mask=None, is_causal=False):
        return v

    with pytest.raises(ValueError, match=r"attention is unavailable with attention_fn=no_scale .* takes no scale="):
        nn.MultiHeadAttention(16, 4, attention_fn=no_scale, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"attention_fn must be callable"):
        nn.MultiHeadAttention(16, 4, attention_fn="jax.nn", rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"attention_fn must be callable"):
        _config(attention_fn=None)


# ------------------------------------------------------------------ dropout

RATE = 0.3


def _attention_pair(**kwargs):
    """The same parameters with dropout (on the attention weights) and without."""
    off = nn.MultiHeadAttention(16, 4, num_kv_heads=2, param_dtype=F64, rngs=nnx.Rngs(params=0), **kwargs)
    on = nn.MultiHeadAttention(16, 4, num_kv_heads=2, param_dtype=F64, dropout_rate=RATE,
                               rngs=nnx.Rngs(params=0, dropout=1), **kwargs)
    return on, off


def _block_pair(**kwargs):
    """Residual dropout only, pre-norm, no MLP: out = x + d(attn(LN x)), linear in the dropout mask."""
    common = dict(mlp=False, param_dtype=F64, **kwargs)
    off = nn.Block(16, 4, rngs=nnx.Rngs(params=0), **common)
    on = nn.Block(16, 4, dropout_rate=RATE, rngs=nnx.Rngs(params=0, dropout=1), **common)
    return (lambda x, **kw: on(x, **kw)[0]), (lambda x, **kw: off(x, **kw)[0]), on


def test_deterministic_dropout_equals_rate_zero_bitwise():
    x = _x(dtype=F64)
    on, off = _attention_pair()
    np.testing.assert_array_equal(on(x, is_causal=True, deterministic=True), off(x, is_causal=True))
    on_block, off_block, _ = _block_pair()
    np.testing.assert_array_equal(on_block(x, deterministic=True), off_block(x))
    # Constructor default, and nnx's eval() switch.
    eval_on, _ = _attention_pair(deterministic=True)
    np.testing.assert_array_equal(eval_on(x), off(x))
    model_on = nn.Transformer(_config(dropout_rate=RATE, attention_dropout_rate=RATE),
                              rngs=nnx.Rngs(params=0, dropout=1))
    model_off = nn.Transformer(_config(), rngs=nnx.Rngs(params=0))
    model_on.eval()
    np.testing.assert_array_equal(model_on(TOKENS), model_off(TOKENS))
    model_on.train()
    assert not np.array_equal(model_on(TOKENS), model_off(TOKENS))


def test_dropout_is_random_and_reproducible():
    x = _x(dtype=F64)
    on, off = _attention_pair()
    on_block, off_block, _ = _block_pair()
    for f, reference in ((on, off(x)), (on_block, off_block(x))):
        a, b = f(x, rngs=jax.random.key(1)), f(x, rngs=jax.random.key(2))
        assert not np.allclose(a, reference) and not np.allclose(a, b)
        np.testing.assert_array_equal(f(x, rngs=jax.random.key(1)), a)
        np.testing.assert_array_equal(f(x, rngs=nnx.Rngs(dropout=5)), f(x, rngs=nnx.Rngs(dropout=5)))
        assert not np.allclose(f(x), f(x))  # the stream forked at construction advances
    model = nn.Transformer(_config(dropout_rate=RATE, attention_dropout_rate=RATE), rngs=nnx.Rngs(0))
    forward = nnx.jit(lambda m, tokens, key: m(tokens, rngs=key))
    first = forward(model, TOKENS, None)
    assert not np.allclose(forward(model, TOKENS, None), first)  # the per-layer streams advance through the scan
    a = forward(model, TOKENS, jax.random.key(4))
    np.testing.assert_array_equal(forward(model, TOKENS, jax.random.key(4)), a)
    assert not np.allclose(forward(model, TOKENS, jax.random.key(5)), a)


def _mean_and_standard_error(f, x, draws):
    outs = jax.vmap(lambda key: f(x, rngs=key))(jax.random.split(jax.random.key(0), draws))
    return outs.mean(0), outs.std(0, ddof=1) / np.sqrt(draws)


@pytest.mark.parametrize("where", ["attention_weights", "residual"])
def test_dropout_mean_approaches_the_deterministic_output(where):
    """Inverted dropout is unbiased: each output entry is linear in the keep
    mask (attention weights, or a residual branch before the add), so its
    mean over N independent draws is, by the CLT, within z * sigma / sqrt(N)
    of the no-dropout output; sigma is estimated from the draws. z = 5 gives
    a per-entry false alarm rate of 6e-7. The same bound rejects the biased
    alternative that forgets the 1 / (1 - rate) rescaling, so it can fail."""
    x = _x((1, 5, 16), dtype=F64)
    if where == "attention_weights":
        on, off = _attention_pair()
        expected, forgot_rescale = off(x), (1 - RATE) * off(x)  # the biases are 0, so out is linear in the weights
    else:
        on, off, _ = _block_pair()
        expected = off(x)
        forgot_rescale = x + (1 - RATE) * (off(x) - x)
    mean, standard_error = _mean_and_standard_error(on, x, draws=2000)
    z = 5.0
    assert np.all(standard_error > 0)
    assert np.all(np.abs(mean - expected) <= z * standard_error)
    assert np.any(np.abs(mean - forgot_rescale) > z * standard_error)


@pytest.mark.parametrize("rate", [1.0, -0.1, "0.1", True])
def test_dropout_rates_are_validated(rate):
    with pytest.raises(ValueError, match=r"dropout_rate must be a number in \[0, 1\)"):
        nn.MultiHeadAttention(16, 4, dropout_rate=rate, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"^dropout_rate must be a number in \[0, 1\)"):
        nn.Block(16, 4, dropout_rate=rate, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"attention_dropout_rate must be a number in \[0, 1\)"):
        nn.Block(16, 4, attention_dropout_rate=rate, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"^dropout_rate must be a number in \[0, 1\)"):
        _config(dropout_rate=rate)
    with pytest.raises(ValueError, match=r"attention_dropout_rate must be a number in \[0, 1\)"):
        _config(attention_dropout_rate=rate)


def test_dropout_arguments_are_validated():
    with pytest.raises(ValueError, match=r"dropout on the attention weights needs attention_kind='softmax'.*"
                                         r"attention_dropout_rate=0.1"):
        _config(attention_kind="linear", attention_dropout_rate=0.1)
    with pytest.raises(ValueError, match=r"needs attention_kind='softmax'.* dropout_rate=0.1"):
        nn.MultiHeadAttention(16, 4, attention_kind="linear", dropout_rate=0.1, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"deterministic must be a bool, got 1"):
        nn.MultiHeadAttention(16, 4, deterministic=1, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"deterministic must be a bool, got 'yes'"):
        _config(deterministic="yes")
    mha = nn.MultiHeadAttention(16, 4, dropout_rate=0.1, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"deterministic must be a bool or None, got 0"):
        mha(_x(), deterministic=0)
    with pytest.raises(TypeError, match=r"rngs must be an nnx.Rngs, an nnx.RngStream, a PRNG key or None, got int"):
        mha(_x(), rngs=3)
    model = nn.Transformer(_config(), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"rngs must be an nnx.Rngs"):
        model(TOKENS, rngs="key")
    with pytest.raises(TypeError, match=r"deterministic must be a bool or None"):
        model(TOKENS, deterministic="no")


# ------------------------------------------------------------- initialisers


def test_default_initialisers_reproduce_nnx_linear_parameters():
    mha = nn.MultiHeadAttention(16, 4, num_kv_heads=2, rngs=nnx.Rngs(0))
    rngs = nnx.Rngs(0)
    for name, width in (("query", 16), ("key", 8), ("value", 8), ("out", 16)):
        expected = nnx.Linear(16, width, rngs=rngs)
        np.testing.assert_array_equal(getattr(mha, name).kernel[...], expected.kernel[...])
        np.testing.assert_array_equal(getattr(mha, name).bias[...], expected.bias[...])


def test_default_embedding_and_position_init_are_unchanged():
    model = nn.Transformer(_config(), rngs=nnx.Rngs(0))
    rngs = nnx.Rngs(0)
    embedding = nnx.Embed(11, 16, rngs=rngs).embedding[...]
    table = nnx.initializers.normal(stddev=0.02)(rngs.params(), (16, 16), F32)
    np.testing.assert_array_equal(model.embed.embedding[...], embedding)
    np.testing.assert_array_equal(model.position_table[...], table)
    real = nn.Transformer(_config(vocab_size=None, input_features=5), rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(real.embed.kernel[...], nnx.Linear(5, 16, rngs=nnx.Rngs(0)).kernel[...])


def _assert_standard_normal(sample):
    """Mean within 5 / sqrt(N) of 0 and standard deviation within 5 / sqrt(2N) of 1 (their standard errors)."""
    n = sample.size
    assert abs(float(sample.mean())) < 5 / np.sqrt(n)
    assert abs(float(sample.std()) - 1) < 5 / np.sqrt(2 * n)


def test_custom_initialisers_give_the_requested_parameters():
    mha = nn.MultiHeadAttention(256, 4, kernel_init=nnx.initializers.normal(stddev=1.0),
                                bias_init=nnx.initializers.constant(0.25),
                                out_kernel_init=nnx.initializers.zeros_init(), rngs=nnx.Rngs(0))
    _assert_standard_normal(np.asarray(mha.query.kernel[...]))
    np.testing.assert_array_equal(mha.key.bias[...], 0.25)
    np.testing.assert_array_equal(mha.out.kernel[...], 0.0)
    np.testing.assert_array_equal(mha(_x((1, 3, 256))), 0.25)  # zero W_o: the output is the bias
    fused = nn.MultiHeadAttention(16, 4, fused_qkv=True, kernel_init=nnx.initializers.ones_init(), rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(fused.qkv.kernel[...], 1.0)
    np.testing.assert_array_equal(fused.out.kernel[...], 1.0)  # out_kernel_init defaults to kernel_init
    config = _config(vocab_size=512, features=64, embedding_init=nnx.initializers.normal(stddev=1.0),
                     position_init=nnx.initializers.constant(0.5))
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    _assert_standard_normal(np.asarray(model.embed.embedding[...]))
    np.testing.assert_array_equal(model.position_table[...], 0.5)


@pytest.mark.parametrize("name", ["kernel_init", "bias_init", "out_kernel_init"])
def test_attention_initialisers_must_be_callable(name):
    with pytest.raises(TypeError, match=rf"{name} must be callable, got float"):
        nn.MultiHeadAttention(16, 4, rngs=nnx.Rngs(0), **{name: 0.02})


@pytest.mark.parametrize("name", ["embedding_init", "position_init"])
def test_transformer_initialisers_must_be_callable(name):
    with pytest.raises(TypeError, match=rf"{name} must be callable, got str"):
        _config(**{name: "normal"})


# ----------------------------------- architecture options of real checkpoints


def test_mlp_activations_match_their_formulas():
    from scipy.special import erf  # noqa: F401  (scipy ships with jax)

    x = _x((3, 8), F64)
    for activation in ("gelu", "gelu_tanh", "relu"):
        mlp = nn.Mlp(8, 12, activation=activation, param_dtype=F64, rngs=nnx.Rngs(0))
        h = np.asarray(x) @ np.asarray(mlp.fc1.kernel[...]) + np.asarray(mlp.fc1.bias[...])
        act = {"gelu": lambda z: 0.5 * z * (1 + erf(z / np.sqrt(2))),
               "gelu_tanh": lambda z: 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3))),
               "relu": lambda z: np.maximum(z, 0)}[activation](h)
        want = act @ np.asarray(mlp.fc2.kernel[...]) + np.asarray(mlp.fc2.bias[...])
        np.testing.assert_allclose(mlp(x), want, atol=1e-12, err_msg=activation)
    swiglu = nn.Mlp(8, 12, activation="swiglu", use_bias=False, param_dtype=F64, rngs=nnx.Rngs(0))
    k = {name: np.asarray(getattr(swiglu, name).kernel[...]) for name in ("gate", "up", "down")}
    g = np.asarray(x) @ k["gate"]
    np.testing.assert_allclose(swiglu(x), (g / (1 + np.exp(-g)) * (np.asarray(x) @ k["up"])) @ k["down"], atol=1e-12)
    assert not hasattr(swiglu.gate, "bias") or swiglu.gate.bias is None


def test_default_mlp_and_norm_are_unchanged():
    """The new options default to what the modules did before: tanh GELU, LayerNorm eps 1e-6."""
    block = nn.Block(16, 4, rngs=nnx.Rngs(0))
    assert block.mlp.activation == "gelu_tanh"
    assert isinstance(block.attention_norm, nnx.LayerNorm) and block.attention_norm.epsilon == 1e-6


def test_rmsnorm_blocks_and_tied_head():
    config = _config(norm_kind="rmsnorm", norm_eps=1e-5, head="tied", use_bias=False, positions=None, rope="half",
                     mlp_activation="swiglu", param_dtype=F64)
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    assert isinstance(model.final_norm, nnx.RMSNorm) and model.final_norm.epsilon == 1e-5
    assert not hasattr(model, "head")
    logits, inter = model(TOKENS, return_intermediates=True)
    h = np.asarray(inter["hidden"][-1], np.float64)
    normed = h / np.sqrt(np.mean(h * h, -1, keepdims=True) + 1e-5) * np.asarray(model.final_norm.scale[...])
    np.testing.assert_allclose(logits, normed @ np.asarray(model.embed.embedding[...]).T, atol=1e-10)


def test_encoder_without_head_with_token_types_and_embedding_norm():
    config = _config(head=None, type_vocab_size=2, embedding_norm=True, norm="post", final_norm=False, causal=False,
                     param_dtype=F64)
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    types = jnp.array([[0, 0, 0, 1, 1, 1, 1], [0] * 7], jnp.int32)
    out, inter = model(TOKENS, token_type_ids=types, return_intermediates=True)
    assert out.shape == (2, 7, 16)
    np.testing.assert_allclose(out, inter["hidden"][-1], atol=0)
    # Type 0 is the default; the embedding norm makes every input row zero-mean, unit-variance (times scale 1).
    np.testing.assert_array_equal(model(TOKENS, token_type_ids=jnp.zeros_like(types)), model(TOKENS))
    assert not np.allclose(out[0], model(TOKENS)[0])
    np.testing.assert_allclose(jnp.mean(inter["hidden"][0], -1), 0.0, atol=1e-12)


@pytest.mark.parametrize("kwargs, message", [
    (dict(norm_kind="batchnorm"), "norm_kind must be one of"),
    (dict(norm_eps=0.0), "norm_eps must be a positive number"),
    (dict(head="mlp"), "head must be one of"),
    (dict(head="tied", vocab_size=None, input_features=4), "head='tied' needs token inputs"),
    (dict(head=None, output_features=5), "head=None returns hidden states"),
    (dict(type_vocab_size=0), "type_vocab_size must be a positive int"),
    (dict(rope="neox"), "rope must be one of"),
    (dict(rope_base=-1.0), "rope_base must be a positive number"),
    (dict(mlp_activation="tanh"), "mlp_activation must be one of"),
])
def test_bad_architecture_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _config(**kwargs)


def test_token_type_errors():
    model = nn.Transformer(_config(), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="no token types"):
        model(TOKENS, token_type_ids=jnp.zeros_like(TOKENS))
    typed = nn.Transformer(_config(type_vocab_size=2), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"token_type_ids must be integers of shape \[B, T\] = \(2, 7\)"):
        typed(TOKENS, token_type_ids=jnp.zeros((2, 6), jnp.int32))
