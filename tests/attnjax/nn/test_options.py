"""Options of the nn modules: AttentionConfig, interchangeable attention functions, dropout, initialisers."""

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn
from attnjax.nn.configs import ATTENTION_OPTIONS, BLOCK_OPTIONS, MODEL_OPTIONS
from tests import host_random

F32, F64 = jnp.float32, jnp.float64


def _x(shape=(2, 6, 16), dtype=F32, seed=1):
    return host_random.normal(seed, shape, dtype)


def _config(**kwargs):
    base = dict(num_layers=2, features=16, num_heads=4, vocab_size=11, max_len=16, causal=True)
    base.update(kwargs)
    return nn.TransformerConfig.create(**base)


TOKENS = host_random.randint(3, (2, 7), 0, 11)


# ------------------------------------------------------ one AttentionConfig

BAD_FIELDS = [
    ("num_kv_heads", 0, ValueError, r"num_kv_heads must be a positive int, got 0"),
    ("num_kv_heads", 2.0, ValueError, r"num_kv_heads must be a positive int, got 2.0"),
    ("fused_qkv", 1, TypeError, r"fused_qkv must be a bool, got 1"),
    ("temperature", 0.0, ValueError, r"temperature must be a positive number, got 0.0"),
    ("temperature", "2", ValueError, r"temperature must be a positive number, got '2'"),
    (
        "normalize_qk",
        "l2",
        ValueError,
        r"normalize_qk must be one of \(None, 'layernorm', 'rmsnorm', 'cosine'\) or a bool",
    ),
    ("qk_norm_eps", 0.0, ValueError, r"qk_norm_eps must be a positive number, got 0.0"),
    ("qk_norm_eps", float("inf"), ValueError, r"qk_norm_eps must be a finite number, got inf"),
    ("head_dim", 0, ValueError, r"head_dim must be a positive int, got 0"),
    ("head_dim", 8.0, ValueError, r"head_dim must be a positive int, got 8.0"),
    (
        "attention_kind",
        "sparse",
        ValueError,
        r"attention_kind must be one of \('softmax', 'linear'\), got 'sparse'",
    ),
    ("attention_fn", None, TypeError, r"attention_fn must be callable, got NoneType"),
    ("feature_map", "gelu", ValueError, r"feature_map must be one of .*, got 'gelu'"),
    ("num_features", 0, ValueError, r"num_features must be a positive int, got 0"),
    (
        "rope",
        "neox",
        ValueError,
        r"rope must be one of \('half', 'interleaved'\) or None, got 'neox'",
    ),
    ("rope_base", -1.0, ValueError, r"rope_base must be a positive number, got -1.0"),
    (
        "rope_scaling",
        ("yarn", 2.0),
        ValueError,
        r"rope_scaling must be None or a tuple \(type, \*parameters\)",
    ),
    ("window", 0, ValueError, r"window must be a positive int, got 0"),
    ("qkv_bias", 1, TypeError, r"qkv_bias must be a bool or None, got 1"),
    ("dropout_rate", 1.0, ValueError, r"dropout_rate must be a number in \[0, 1\), got 1.0"),
    ("kernel_init", 0.02, TypeError, r"kernel_init must be callable, got float"),
    ("bias_init", "zeros", TypeError, r"bias_init must be callable, got str"),
    ("out_kernel_init", 1, TypeError, r"out_kernel_init must be callable, got int"),
]


def test_every_attention_option_has_a_validation_case():
    assert {name for name, *_ in BAD_FIELDS} == set(ATTENTION_OPTIONS)
    assert ATTENTION_OPTIONS == tuple(f.name for f in dataclasses.fields(nn.AttentionConfig))


@pytest.mark.parametrize("name, value, error, message", BAD_FIELDS)
def test_attention_config_validates_each_field(name, value, error, message):
    """Each bad field raises, naming it, from AttentionConfig, the module's keyword and a replace alike."""
    with pytest.raises(error, match=message):
        nn.AttentionConfig(**{name: value})
    with pytest.raises(error, match=message):
        nn.MultiHeadAttention(16, 4, rngs=nnx.Rngs(0), **{name: value})
    with pytest.raises(error, match=message):
        dataclasses.replace(nn.AttentionConfig(), **{name: value})


def test_options_that_need_the_head_count_are_checked_with_it():
    config = nn.AttentionConfig(num_kv_heads=3, rope="half")  # valid alone
    with pytest.raises(
        ValueError, match=r"num_heads \(4\) must be divisible by num_kv_heads \(3\)"
    ):
        nn.MultiHeadAttention(16, 4, config=config, rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError, match=r"num_heads \(4\) must be divisible by num_kv_heads \(3\)"
    ):
        _config(attention=config)
    with pytest.raises(
        ValueError, match=r"rope needs an even head dim, got head dim 3 \(num_heads=4\)"
    ):
        _config(features=12, attention=nn.AttentionConfig(rope="half"))
    assert (
        nn.AttentionConfig(num_kv_heads=2).kv_heads(4) == 2
        and nn.AttentionConfig().kv_heads(4) == 4
    )


def test_unknown_options_raise_a_type_error_listing_the_valid_ones():
    with pytest.raises(
        TypeError,
        match=r"unknown keyword argument\(s\) temprature; valid: the AttentionConfig "
        r"fields num_kv_heads, fused_qkv, temperature, .*, out_kernel_init",
    ):
        nn.MultiHeadAttention(16, 4, temprature=2.0, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"config must be an AttentionConfig, got dict"):
        nn.MultiHeadAttention(16, 4, config={"temperature": 2.0}, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"attention must be an AttentionConfig, got dict"):
        nn.BlockConfig(features=16, num_heads=4, attention={"temperature": 2.0})
    with pytest.raises(TypeError, match=r"attention must be an AttentionConfig, got dict"):
        _config(attention={"temperature": 2.0})
    with pytest.raises(
        TypeError, match=r"temperature"
    ):  # not a BlockConfig or TransformerConfig field
        nn.BlockConfig(features=16, num_heads=4, temperature=2.0)
    with pytest.raises(TypeError, match=r"temperature"):
        nn.TransformerConfig(vocab_size=11, temperature=2.0)
    with pytest.raises(TypeError, match=r"unknown keyword argument\(s\) temprature"):
        _config(temprature=2.0)


def _declared_twice(*configs) -> set:
    """Field names that more than one of the dataclasses `configs` declares."""
    seen, twice = set(), set()
    for config in configs:
        names = {f.name for f in dataclasses.fields(config)}
        twice |= seen & names
        seen |= names
    return twice


def test_no_field_is_declared_in_two_configs():
    """AttentionConfig, BlockConfig and TransformerConfig declare disjoint fields; Block takes its config whole."""
    assert _declared_twice(nn.AttentionConfig, nn.BlockConfig, nn.TransformerConfig) == set()
    assert set(ATTENTION_OPTIONS) | set(BLOCK_OPTIONS) | set(MODEL_OPTIONS) == (
        {
            f.name
            for c in (nn.AttentionConfig, nn.BlockConfig, nn.TransformerConfig)
            for f in dataclasses.fields(c)
        }
    )
    assert set(inspect.signature(nn.Block.__init__).parameters) == {"self", "config", "rngs"}
    mha_arguments = set(inspect.signature(nn.MultiHeadAttention.__init__).parameters)
    assert (
        "num_heads" in mha_arguments and not set(ATTENTION_OPTIONS) & mha_arguments
    )  # only through **options
    # The check fails on a mirrored field (a dataclass declaring `norm` beside BlockConfig's).
    mirror = dataclasses.make_dataclass("Mirror", [("norm", object, None)])
    assert _declared_twice(nn.AttentionConfig, nn.BlockConfig, mirror) == {"norm"}
    # Residual dropout and dropout on the attention weights are two fields, and create sorts them.
    off, on = _config(), _config(residual_dropout_rate=0.1)
    assert on.block.attention == off.block.attention and on.block.attention.dropout_rate == 0.0
    assert _config(dropout_rate=0.1).block.attention.dropout_rate == 0.1


def test_config_and_keyword_options_build_the_same_module_bitwise():
    x = _x()
    for options in (
        dict(temperature=2.0),
        dict(num_kv_heads=2, rope="half", normalize_qk="cosine", fused_qkv=True),
        dict(attention_kind="linear", num_features=8, temperature=0.5),
    ):
        by_config = nn.MultiHeadAttention(
            16, 4, config=nn.AttentionConfig(**options), rngs=nnx.Rngs(0)
        )
        by_keyword = nn.MultiHeadAttention(16, 4, rngs=nnx.Rngs(0), **options)
        assert by_config.config == by_keyword.config
        for (path, a), (_, b) in zip(
            nnx.to_flat_state(nnx.state(by_config)), nnx.to_flat_state(nnx.state(by_keyword))
        ):
            np.testing.assert_array_equal(a[...], b[...], err_msg=str(path))
        np.testing.assert_array_equal(by_config(x, is_causal=True), by_keyword(x, is_causal=True))


def test_keywords_override_single_fields_of_the_config():
    base = nn.AttentionConfig(temperature=2.0, num_kv_heads=2)
    mha = nn.MultiHeadAttention(16, 4, config=base, temperature=0.5, rngs=nnx.Rngs(0))
    assert mha.config == dataclasses.replace(base, temperature=0.5)
    assert (mha.config.num_kv_heads, mha.num_kv_heads, base.temperature) == (2, 2, 2.0)
    assert nn.MultiHeadAttention(16, 4, config=base, rngs=nnx.Rngs(0)).config is base
    # True is QK-norm with LayerNorm, stored as its name.
    assert nn.AttentionConfig(normalize_qk=True) == nn.AttentionConfig(normalize_qk="layernorm")
    assert nn.AttentionConfig(normalize_qk=False).normalize_qk is None


def test_block_and_transformer_pass_the_config_whole():
    attention = nn.AttentionConfig(num_kv_heads=2, temperature=0.7, rope="interleaved")
    model = nn.Transformer(_config(attention=attention, positions=None), rngs=nnx.Rngs(0))
    assert model.config.block.attention is attention and model.blocks.attention.config is attention
    block = nn.Block(
        nn.BlockConfig(features=16, num_heads=4, attention=attention), rngs=nnx.Rngs(0)
    )
    assert block.attention.config is attention
    assert model.blocks.attention.query.kernel.shape == (2, 16, 16)
    assert model.blocks.attention.key.kernel.shape == (2, 16, 8)  # K = 2 heads of Dh = 4


# ------------------------------------------------ interchangeable attention


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("num_kv_heads", [4, 2])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_jax_nn_attention_fn_gives_the_default_output(causal, padded, num_kv_heads, temperature):
    kwargs = dict(num_kv_heads=num_kv_heads, temperature=temperature)
    ours = nn.MultiHeadAttention(16, 4, **kwargs, rngs=nnx.Rngs(0))
    theirs = nn.MultiHeadAttention(
        16, 4, attention_fn=jax.nn.dot_product_attention, **kwargs, rngs=nnx.Rngs(0)
    )
    x = _x()
    # Key padding [B, 1, 1, S]; every row keeps its first key, so no row is fully masked.
    mask = (
        (jnp.arange(6)[None, :] < jnp.array([6, 3])[:, None])[:, None, None, :] if padded else None
    )
    np.testing.assert_allclose(
        theirs(x, mask=mask, is_causal=causal),
        ours(x, mask=mask, is_causal=causal),
        atol=1e-6,
        rtol=0,
    )


def test_jax_nn_attention_fn_cross_attention():
    ours = nn.MultiHeadAttention(16, 4, num_kv_heads=2, rngs=nnx.Rngs(0))
    theirs = nn.MultiHeadAttention(
        16, 4, num_kv_heads=2, attention_fn=jax.nn.dot_product_attention, rngs=nnx.Rngs(0)
    )
    x, context = _x(), _x((2, 9, 16), seed=2)
    np.testing.assert_allclose(theirs(x, context), ours(x, context), atol=1e-6, rtol=0)


def test_transformer_runs_on_another_attention_fn():
    calls = []

    def spy(q, k, v, bias=None, mask=None, *, scale=None, is_causal=False):
        calls.append(q.shape)
        return jax.nn.dot_product_attention(q, k, v, bias, mask, scale=scale, is_causal=is_causal)

    ours = nn.Transformer(_config(num_layers=3), rngs=nnx.Rngs(0))
    theirs = nn.Transformer(
        _config(num_layers=3, attention=nn.AttentionConfig(attention_fn=spy)), rngs=nnx.Rngs(0)
    )
    np.testing.assert_allclose(theirs(TOKENS), ours(TOKENS), atol=1e-5, rtol=0)
    assert calls == [(2, 7, 4, 4)]  # traced once for all layers: the layers are scanned


def test_weights_from_jax_nn_attention_fn_raise():
    mha = nn.MultiHeadAttention(16, 4, attention_fn=jax.nn.dot_product_attention, rngs=nnx.Rngs(0))
    message = (
        r"attention weights .* unavailable with attention_fn=dot_product_attention from jax\.nn: "
        r"it takes no return_weights=; use attnjax\.dot_product_attention"
    )
    with pytest.raises(ValueError, match=message):
        mha(_x(), return_weights=True)
    with pytest.raises(ValueError, match=message):
        nnx.capture(lambda m, x: m(x, sow_weights=True), nnx.Intermediate)(mha, _x())
    model = nn.Transformer(
        _config(attention=nn.AttentionConfig(attention_fn=jax.nn.dot_product_attention)),
        rngs=nnx.Rngs(0),
    )
    with pytest.raises(ValueError, match=message):
        model(TOKENS, return_intermediates=True)


def test_attention_fn_without_the_keywords_asked_for_is_refused_at_construction():
    with pytest.raises(
        ValueError,
        match=r"attention dropout is unavailable with attention_fn=dot_product_attention "
        r"from jax\.nn: it takes no dropout_rate=, dropout_rng=",
    ):
        nn.MultiHeadAttention(
            16, 4, dropout_rate=0.1, attention_fn=jax.nn.dot_product_attention, rngs=nnx.Rngs(0)
        )
    with pytest.raises(ValueError, match=r"attention dropout is unavailable"):
        nn.AttentionConfig(dropout_rate=0.1, attention_fn=jax.nn.dot_product_attention)

    def no_scale(q, k, v, *, mask=None, is_causal=False):
        return v

    with pytest.raises(
        ValueError, match=r"attention is unavailable with attention_fn=no_scale .* takes no scale="
    ):
        nn.MultiHeadAttention(16, 4, attention_fn=no_scale, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"attention_fn must be callable"):
        nn.MultiHeadAttention(16, 4, attention_fn="jax.nn", rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"attention_fn must be callable"):
        nn.AttentionConfig(attention_fn=None)


# ------------------------------------------------------------------ dropout

RATE = 0.3


def _attention_pair(**kwargs):
    """The same parameters with dropout (on the attention weights) and without."""
    off = nn.MultiHeadAttention(
        16, 4, num_kv_heads=2, param_dtype=F64, rngs=nnx.Rngs(params=0), **kwargs
    )
    on = nn.MultiHeadAttention(
        16,
        4,
        num_kv_heads=2,
        param_dtype=F64,
        dropout_rate=RATE,
        rngs=nnx.Rngs(params=0, dropout=1),
        **kwargs,
    )
    return on, off


def _block_pair(**kwargs):
    """Residual dropout only, pre-norm, no MLP: out = x + d(attn(LN x)), linear in the dropout mask."""
    common = dict(features=16, num_heads=4, mlp=False, param_dtype=F64, **kwargs)
    off = nn.Block(nn.BlockConfig(**common), rngs=nnx.Rngs(params=0))
    on = nn.Block(
        nn.BlockConfig(residual_dropout_rate=RATE, **common), rngs=nnx.Rngs(params=0, dropout=1)
    )
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
    model_on = nn.Transformer(
        _config(residual_dropout_rate=RATE, attention=nn.AttentionConfig(dropout_rate=RATE)),
        rngs=nnx.Rngs(params=0, dropout=1),
    )
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
        np.testing.assert_array_equal(
            f(x, rngs=nnx.Rngs(dropout=5)), f(x, rngs=nnx.Rngs(dropout=5))
        )
        assert not np.allclose(f(x), f(x))  # the stream forked at construction advances
    model = nn.Transformer(
        _config(residual_dropout_rate=RATE, attention=nn.AttentionConfig(dropout_rate=RATE)),
        rngs=nnx.Rngs(0),
    )
    forward = nnx.jit(lambda m, tokens, key: m(tokens, rngs=key))
    first = forward(model, TOKENS, None)
    assert not np.allclose(
        forward(model, TOKENS, None), first
    )  # the per-layer streams advance through the scan
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
        expected, forgot_rescale = (
            off(x),
            (1 - RATE) * off(x),
        )  # the biases are 0, so out is linear in the weights
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
    with pytest.raises(ValueError, match=r"^residual_dropout_rate must be a number in \[0, 1\)"):
        nn.BlockConfig(residual_dropout_rate=rate)
    with pytest.raises(ValueError, match=r"^dropout_rate must be a number in \[0, 1\)"):
        nn.AttentionConfig(dropout_rate=rate)
    with pytest.raises(ValueError, match=r"^residual_dropout_rate must be a number in \[0, 1\)"):
        _config(residual_dropout_rate=rate)


def test_dropout_arguments_are_validated():
    with pytest.raises(
        ValueError,
        match=r"dropout on the attention weights needs attention_kind='softmax'.*"
        r"dropout_rate=0.1",
    ):
        nn.AttentionConfig(attention_kind="linear", dropout_rate=0.1)
    with pytest.raises(ValueError, match=r"needs attention_kind='softmax'.* dropout_rate=0.1"):
        nn.MultiHeadAttention(16, 4, attention_kind="linear", dropout_rate=0.1, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"deterministic must be a bool, got 1"):
        nn.MultiHeadAttention(16, 4, deterministic=1, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"deterministic must be a bool, got 'yes'"):
        _config(deterministic="yes")
    mha = nn.MultiHeadAttention(16, 4, dropout_rate=0.1, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"deterministic must be a bool or None, got 0"):
        mha(_x(), deterministic=0)
    with pytest.raises(
        TypeError, match=r"rngs must be an nnx.Rngs, an nnx.RngStream, a PRNG key or None, got int"
    ):
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
    np.testing.assert_array_equal(
        real.embed.kernel[...], nnx.Linear(5, 16, rngs=nnx.Rngs(0)).kernel[...]
    )


def _assert_standard_normal(sample):
    """Mean within 5 / sqrt(N) of 0 and standard deviation within 5 / sqrt(2N) of 1 (their standard errors)."""
    n = sample.size
    assert abs(float(sample.mean())) < 5 / np.sqrt(n)
    assert abs(float(sample.std()) - 1) < 5 / np.sqrt(2 * n)


def test_custom_initialisers_give_the_requested_parameters():
    mha = nn.MultiHeadAttention(
        256,
        4,
        kernel_init=nnx.initializers.normal(stddev=1.0),
        bias_init=nnx.initializers.constant(0.25),
        out_kernel_init=nnx.initializers.zeros_init(),
        rngs=nnx.Rngs(0),
    )
    _assert_standard_normal(np.asarray(mha.query.kernel[...]))
    np.testing.assert_array_equal(mha.key.bias[...], 0.25)
    np.testing.assert_array_equal(mha.out.kernel[...], 0.0)
    np.testing.assert_array_equal(mha(_x((1, 3, 256))), 0.25)  # zero W_o: the output is the bias
    fused = nn.MultiHeadAttention(
        16, 4, fused_qkv=True, kernel_init=nnx.initializers.ones_init(), rngs=nnx.Rngs(0)
    )
    np.testing.assert_array_equal(fused.qkv.kernel[...], 1.0)
    np.testing.assert_array_equal(
        fused.out.kernel[...], 1.0
    )  # out_kernel_init defaults to kernel_init
    config = _config(
        vocab_size=512,
        features=64,
        embedding_init=nnx.initializers.normal(stddev=1.0),
        position_init=nnx.initializers.constant(0.5),
    )
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
        act = {
            "gelu": lambda z: 0.5 * z * (1 + erf(z / np.sqrt(2))),
            "gelu_tanh": lambda z: (
                0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
            ),
            "relu": lambda z: np.maximum(z, 0),
        }[activation](h)
        want = act @ np.asarray(mlp.fc2.kernel[...]) + np.asarray(mlp.fc2.bias[...])
        np.testing.assert_allclose(mlp(x), want, atol=1e-12, err_msg=activation)
    swiglu = nn.Mlp(8, 12, activation="swiglu", use_bias=False, param_dtype=F64, rngs=nnx.Rngs(0))
    k = {name: np.asarray(getattr(swiglu, name).kernel[...]) for name in ("gate", "up", "down")}
    g = np.asarray(x) @ k["gate"]
    np.testing.assert_allclose(
        swiglu(x), (g / (1 + np.exp(-g)) * (np.asarray(x) @ k["up"])) @ k["down"], atol=1e-12
    )
    assert not hasattr(swiglu.gate, "bias") or swiglu.gate.bias is None


def test_default_mlp_and_norm_are_unchanged():
    """The new options default to what the modules did before: tanh GELU, LayerNorm eps 1e-6."""
    block = nn.Block(nn.BlockConfig(features=16, num_heads=4), rngs=nnx.Rngs(0))
    assert block.mlp.activation == "gelu_tanh"
    assert isinstance(block.attention_norm, nnx.LayerNorm) and block.attention_norm.epsilon == 1e-6


def test_rmsnorm_blocks_and_tied_head():
    config = _config(
        norm_kind="rmsnorm",
        norm_eps=1e-5,
        head="tied",
        use_bias=False,
        positions=None,
        attention=nn.AttentionConfig(rope="half"),
        mlp_activation="swiglu",
        param_dtype=F64,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    assert isinstance(model.final_norm, nnx.RMSNorm) and model.final_norm.epsilon == 1e-5
    assert not hasattr(model, "head")
    logits, inter = model(TOKENS, return_intermediates=True)
    h = np.asarray(inter["hidden"][-1], np.float64)
    normed = (
        h
        / np.sqrt(np.mean(h * h, -1, keepdims=True) + 1e-5)
        * np.asarray(model.final_norm.scale[...])
    )
    np.testing.assert_allclose(
        logits, normed @ np.asarray(model.embed.embedding[...]).T, atol=1e-10
    )


def test_encoder_without_head_with_token_types_and_embedding_norm():
    config = _config(
        head=None,
        type_vocab_size=2,
        embedding_norm=True,
        norm="post",
        final_norm=False,
        causal=False,
        param_dtype=F64,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    types = jnp.array([[0, 0, 0, 1, 1, 1, 1], [0] * 7], jnp.int32)
    out, inter = model(TOKENS, token_type_ids=types, return_intermediates=True)
    assert out.shape == (2, 7, 16)
    np.testing.assert_allclose(out, inter["hidden"][-1], atol=0)
    # Type 0 is the default; the embedding norm makes every input row zero-mean, unit-variance (times scale 1).
    np.testing.assert_array_equal(
        model(TOKENS, token_type_ids=jnp.zeros_like(types)), model(TOKENS)
    )
    assert not np.allclose(out[0], model(TOKENS)[0])
    np.testing.assert_allclose(jnp.mean(inter["hidden"][0], -1), 0.0, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(norm_kind="batchnorm"), "norm_kind must be one of"),
        (dict(norm_eps=0.0), "norm_eps must be a positive number"),
        (dict(head="mlp"), "head must be one of"),
        (dict(head="tied", vocab_size=None, input_features=4), "head='tied' needs token inputs"),
        (dict(head=None, output_features=5), "head=None returns hidden states"),
        (dict(type_vocab_size=0), "type_vocab_size must be a positive int"),
        (dict(mlp_activation="tanh"), "mlp_activation must be one of"),
    ],
)
def test_bad_architecture_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _config(**kwargs)


def test_token_type_errors():
    model = nn.Transformer(_config(), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="no token types"):
        model(TOKENS, token_type_ids=jnp.zeros_like(TOKENS))
    typed = nn.Transformer(_config(type_vocab_size=2), rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError, match=r"token_type_ids must be integers of shape \[B, T\] = \(2, 7\)"
    ):
        typed(TOKENS, token_type_ids=jnp.zeros((2, 6), jnp.int32))
