"""Autoregressive decoding: K/V caches, the recurrent state of linear attention, generate.

Every decoding path is checked against the full causal forward pass in
float64, position by position.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn

F64 = jnp.float64
TOL = 1e-10
B, T = 2, 7
# One step at index 0, a chunk of 3 in the middle, a chunk of 2, one more step.
CHUNKS = [1, 3, 2, 1]


def _x(shape=(B, T, 16), dtype=F64, seed=1):
    return jax.random.normal(jax.random.key(seed), shape, dtype)


def _decode_in_chunks(module, inputs, sizes, **kwargs):
    """Feed `inputs` `[B, T, ...]` in chunks of `sizes` through `module(chunk, decode=True)`; concatenate."""
    step = nnx.jit(lambda m, chunk: m(chunk, decode=True, **kwargs))
    starts = np.cumsum([0] + sizes)
    return jnp.concatenate(
        [step(module, inputs[:, a:b]) for a, b in zip(starts[:-1], starts[1:])], axis=1
    )


def _forward(module, inputs, **kwargs):
    """The full forward as one jitted program (eager dispatch would compile each of its operations alone)."""
    return nnx.jit(lambda m, x: m(x, **kwargs))(module, inputs)


# ------------------------------------------------------------------ module


MODULES = {
    "softmax_gqa": dict(num_kv_heads=2),
    "softmax_fused_qknorm": dict(
        num_kv_heads=2, fused_qkv=True, normalize_qk=True, temperature=0.8
    ),
    "linear_favor_gqa": dict(
        num_kv_heads=2, attention_kind="linear", feature_map="favor_plus", num_features=32
    ),
    "linear_elu": dict(attention_kind="linear", feature_map="elu_plus_one", temperature=2.0),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_decoding_equals_the_causal_forward(name):
    mha = nn.MultiHeadAttention(16, 4, param_dtype=F64, rngs=nnx.Rngs(0), **MODULES[name])
    x = _x()
    full = _forward(mha, x, is_causal=True)  # linear attention: the chunked causal form
    mha.init_cache(B, T + 2)
    np.testing.assert_allclose(_decode_in_chunks(mha, x, CHUNKS), full, atol=TOL, rtol=0)
    assert int(mha.cache_index[...]) == T


def test_cache_holds_only_the_key_value_heads():
    mha = nn.MultiHeadAttention(16, 4, num_kv_heads=2, param_dtype=F64, rngs=nnx.Rngs(0))
    mha.init_cache(B, 10)
    assert mha.cached_key.shape == mha.cached_value.shape == (B, 10, 2, 4)
    assert mha.cached_key.dtype == F64 and mha.cache_index[...].dtype == jnp.int32
    x = _x()
    mha(x[:, :3], decode=True)
    k = mha.key(x[:, :3]).reshape(B, 3, 2, 4)
    np.testing.assert_array_equal(mha.cached_key[...][:, :3], k)
    np.testing.assert_array_equal(mha.cached_key[...][:, 3:], 0.0)
    linear = nn.MultiHeadAttention(
        16,
        4,
        num_kv_heads=2,
        attention_kind="linear",
        num_features=32,
        param_dtype=F64,
        rngs=nnx.Rngs(0),
    )
    linear.init_cache(B, 10)
    assert linear.cached_kv.shape == (B, 2, 32, 4) and linear.cached_normalizer.shape == (B, 2, 32)


def test_decode_weights_are_the_causal_weights_padded_to_the_cache():
    mha = nn.MultiHeadAttention(16, 4, num_kv_heads=2, param_dtype=F64, rngs=nnx.Rngs(0))
    x = _x()
    _, full = _forward(mha, x, is_causal=True, return_weights=True)
    mha.init_cache(B, T + 3)
    mha(x[:, :4], decode=True)
    _, w = mha(x[:, 4:6], decode=True, return_weights=True)
    assert w.shape == (B, 4, 2, T + 3)
    np.testing.assert_allclose(w[..., :6], full[:, :, 4:6, :6], atol=TOL, rtol=0)
    np.testing.assert_array_equal(w[..., 6:], 0.0)


def test_decode_combines_a_key_padding_mask_with_the_cache_mask():
    mha = nn.MultiHeadAttention(16, 4, num_kv_heads=2, param_dtype=F64, rngs=nnx.Rngs(0))
    x = _x()
    valid = (
        jnp.arange(T + 2)[None, :] != jnp.array([1, 2])[:, None]
    )  # drop key 1 of sequence 0, key 2 of sequence 1
    padding = valid[:, None, None, :]
    full = _forward(mha, x, mask=padding[..., :T], is_causal=True)
    mha.init_cache(B, T + 2)
    np.testing.assert_allclose(
        _decode_in_chunks(mha, x, CHUNKS, mask=padding), full, atol=TOL, rtol=0
    )


def test_decode_through_jax_nn_attention():
    """The cache mask is handed to attention_fn: jax.nn's function decodes too (float32)."""
    mha = nn.MultiHeadAttention(
        16, 4, num_kv_heads=2, attention_fn=jax.nn.dot_product_attention, rngs=nnx.Rngs(0)
    )
    x = _x(dtype=jnp.float32)
    full = _forward(mha, x, is_causal=True)
    mha.init_cache(B, T)
    np.testing.assert_allclose(_decode_in_chunks(mha, x, CHUNKS), full, atol=1e-6, rtol=0)


def test_overflow_under_jit_gives_nan_not_a_wrong_answer():
    mha = nn.MultiHeadAttention(16, 4, param_dtype=F64, rngs=nnx.Rngs(0))
    mha.init_cache(B, 4)
    step = nnx.jit(lambda m, chunk: m(chunk, decode=True))
    x = _x()
    assert np.all(np.isfinite(step(mha, x[:, :3])))
    assert np.all(np.isnan(step(mha, x[:, 3:5])))  # 3 + 2 > 4: the index is unknown while tracing


def test_module_decoding_errors():
    mha = nn.MultiHeadAttention(16, 4, param_dtype=F64, rngs=nnx.Rngs(0))
    x = _x()
    with pytest.raises(
        ValueError,
        match=r"decode=True needs a cache: call init_cache\(batch_size, max_len\) first "
        r"\(inputs of shape \(2, 1, 16\)\)",
    ):
        mha(x[:, :1], decode=True)
    mha.init_cache(B, 4)
    with pytest.raises(
        ValueError, match=r"inputs of shape \(3, 1, 16\) have batch size 3, .*batch_size=2"
    ):
        mha(jnp.ones((3, 1, 16), F64), decode=True)
    with pytest.raises(
        ValueError,
        match=r"chunk of 5 positions \(inputs of shape \(2, 5, 16\)\) does not fit "
        r"in the cache of max_len=4 with 0 positions filled",
    ):
        mha(x[:, :5], decode=True)
    mha(x[:, :3], decode=True)
    with pytest.raises(
        ValueError, match=r"chunk of 2 positions .* max_len=4 with 3 positions filled"
    ):
        mha(x[:, 3:5], decode=True)
    with pytest.raises(
        ValueError, match=r"decode=True is self-attention only; got a context of shape \(2, 1, 16\)"
    ):
        mha(x[:, :1], x[:, :1], decode=True)
    with pytest.raises(
        ValueError, match=r"decode=True needs x of shape \[B, C, 16\], got \(1, 2, 1, 16\)"
    ):
        mha(x[None, :, :1], decode=True)
    with pytest.raises(TypeError, match=r"decode must be a bool"):
        mha(x, decode="yes")
    linear = nn.MultiHeadAttention(
        16, 4, attention_kind="linear", param_dtype=F64, rngs=nnx.Rngs(0)
    )
    linear.init_cache(B, 4)
    with pytest.raises(
        ValueError, match=r"decoding linear attention takes no mask and gives no weights"
    ):
        linear(x[:, :1], decode=True, return_weights=True)
    with pytest.raises(
        ValueError, match=r"decoding linear attention takes no mask .*mask=\(2, 1, 1, 1\)"
    ):
        linear(x[:, :1], decode=True, mask=jnp.ones((B, 1, 1, 1), bool))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(batch_size=0, max_len=4), ValueError, r"batch_size must be a positive int, got 0"),
        (dict(batch_size=2, max_len=2.5), ValueError, r"max_len must be a positive int, got 2.5"),
        (
            dict(batch_size=2, max_len=4, dtype=jnp.int32),
            TypeError,
            r"dtype must be a floating-point dtype, got int32",
        ),
    ],
)
def test_init_cache_validates_its_arguments(kwargs, error, message):
    mha = nn.MultiHeadAttention(16, 4, rngs=nnx.Rngs(0))
    with pytest.raises(error, match=message):
        mha.init_cache(**kwargs)


# ------------------------------------------------------------- transformer


def _model(**kwargs):
    """A causal model with GQA (K = 2); `attention` holds extra AttentionConfig fields. Two layers: the second
    attends to a cache filled from the first's decoded outputs, and each more layer only adds compile time."""
    attention = nn.AttentionConfig(num_kv_heads=2, **kwargs.pop("attention", {}))
    base = dict(
        num_layers=2,
        features=16,
        num_heads=4,
        attention=attention,
        vocab_size=11,
        max_len=16,
        causal=True,
        param_dtype=F64,
    )
    base.update(kwargs)
    return nn.Transformer(nn.TransformerConfig.create(**base), rngs=nnx.Rngs(0))


TOKENS = jax.random.randint(jax.random.key(2), (B, 9), 0, 11)
MODELS = {
    "softmax_learned": dict(),
    "softmax_sinusoidal": dict(positions="sinusoidal"),
    "linear_learned": dict(
        attention=dict(attention_kind="linear", feature_map="favor_plus", num_features=16)
    ),
}


PREFILL_THEN_STEPS, STEPS = [4] + [1] * 5, [1] * 9


@pytest.mark.parametrize(
    "name, sizes",
    [
        ("softmax_learned", STEPS),
        ("softmax_learned", PREFILL_THEN_STEPS),
        ("softmax_sinusoidal", PREFILL_THEN_STEPS),
        ("linear_learned", PREFILL_THEN_STEPS),
    ],
)
def test_transformer_decoding_equals_the_full_forward(name, sizes):
    """Decoding in chunks of `sizes`: every layer reads its cache, positions are offset by the cache index."""
    model = _model(**MODELS[name])
    full = _forward(model, TOKENS)
    model.init_cache(B, 12)
    if name.startswith("softmax"):
        assert model.blocks.attention.cached_key.shape == (2, B, 12, 2, 4)  # stacked over layers
    decoded = _decode_in_chunks(model, TOKENS, sizes)
    np.testing.assert_allclose(decoded, full, atol=TOL, rtol=0)
    np.testing.assert_array_equal(model.blocks.attention.cache_index[...], [9, 9])


@pytest.mark.parametrize("name", ["softmax_learned", "linear_learned"])
def test_greedy_generate_equals_argmax_of_the_uncached_forward(name):
    """Every new token is the argmax of the uncached forward at the position before it. One forward of the
    generated sequence checks them all: the model is causal, so position t - 1 sees only tokens 0..t - 1, as
    in a forward of the sequence grown to length t (and one program instead of one per length)."""
    model = _model(**MODELS[name])
    prompt = TOKENS[:, :3]
    generated = model.generate(prompt, 5)
    assert generated.shape == (B, 8) and generated.dtype == prompt.dtype
    np.testing.assert_array_equal(generated[:, :3], prompt)
    greedy = jnp.argmax(_forward(model, generated)[:, 2:-1], axis=-1).astype(prompt.dtype)
    np.testing.assert_array_equal(generated[:, 3:], greedy)
    assert getattr(model.blocks.attention, "cache_index", None) is None  # the model is not modified


def test_sampling_is_reproducible_per_key():
    """5 new tokens, as in the greedy test above: its greedy program is reused (same model structure)."""
    model = _model()
    prompt = TOKENS[:, :3]
    a = model.generate(prompt, 5, key=jax.random.key(0), temperature=1.0)
    np.testing.assert_array_equal(
        model.generate(prompt, 5, key=jax.random.key(0), temperature=1.0), a
    )
    assert np.any(model.generate(prompt, 5, key=jax.random.key(1), temperature=1.0) != a)
    np.testing.assert_array_equal(a[:, :3], prompt)
    assert np.all((a >= 0) & (a < 11))
    # A vanishing temperature samples the argmax.
    np.testing.assert_array_equal(
        model.generate(prompt, 5, key=jax.random.key(1), temperature=1e-9),
        model.generate(prompt, 5),
    )


def test_transformer_decoding_errors():
    model = _model(max_len=8)
    with pytest.raises(ValueError, match=r"decode=True needs a cache: call init_cache"):
        model(TOKENS[:, :1], decode=True)
    with pytest.raises(
        ValueError,
        match=r"max_len=9 exceeds the learned position table's TransformerConfig.max_len=8",
    ):
        model.init_cache(B, 9)
    with pytest.raises(ValueError, match=r"batch_size must be a positive int, got 0"):
        model.init_cache(0, 4)
    model.init_cache(B, 4)
    with pytest.raises(
        ValueError, match=r"inputs of shape \(1, 1\) have batch size 1, .*batch_size=2"
    ):
        model(TOKENS[:1, :1], decode=True)
    model(TOKENS[:, :3], decode=True)
    with pytest.raises(
        ValueError, match=r"chunk of 2 positions \(inputs of shape \(2, 2\)\) .* 3 positions filled"
    ):
        model(TOKENS[:, 3:5], decode=True)
    with pytest.raises(
        ValueError, match=r"decode=True needs a causal model \(TransformerConfig.causal=True\)"
    ):
        _model(causal=False)(TOKENS[:, :1], decode=True)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((TOKENS[:, :3].astype(F64), 2), {}, r"prompt_tokens must be integer tokens \[B, P\]"),
        ((TOKENS[0, :3], 2), {}, r"prompt_tokens must be integer tokens \[B, P\]"),
        ((TOKENS[:, :3], 0), {}, r"max_new_tokens must be a positive int, got 0"),
        (
            (TOKENS[:, :3], 2),
            dict(temperature=-1.0),
            r"temperature must be a number >= 0 \(0: greedy\), got -1.0",
        ),
        (
            (TOKENS[:, :3], 2),
            dict(temperature=1.0),
            r"sampling \(temperature=1.0\) needs key=, a PRNG key; got None",
        ),
        (
            (TOKENS[:, :3], 14),
            {},
            r"prompt_tokens of shape \(2, 3\) plus max_new_tokens=14 exceed max_len 16",
        ),
    ],
)
def test_generate_validates_its_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        _model().generate(*args, **kwargs)


def test_generate_needs_a_causal_token_model():
    for kwargs in (
        dict(causal=False),
        dict(output_features=5),
        dict(vocab_size=None, input_features=3),
    ):
        with pytest.raises(ValueError, match=r"generate needs a causal token model"):
            _model(**kwargs).generate(TOKENS[:, :3], 2)
