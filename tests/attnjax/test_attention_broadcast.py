"""Every mask / bias broadcast shape jax.nn accepts, crossed with what a user
combines: mask, bias or both x causal or not x grouped-query or full heads,
with T != S; outputs and gradients against `jax.nn.dot_product_attention`.

jax.nn gives a fully masked query row the mean of the values; attnjax gives 0
(documented). The reference is therefore jax.nn's output times the row's
validity, which leaves every other row, and every gradient, as jax.nn has them.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attnjax
from attnjax import nn
from tests import host_random

B, T, S, H, D = 2, 5, 7, 4, 8

SHAPES = [
    (S,),
    (1, S),
    (1, 1, S),
    (B, 1, 1, S),
    (1, H, 1, S),
    (B, 1, T, 1),
    (1, 1, 1, 1),
    (T, S),
    (H, T, S),
    (B, H, T, S),
]


def _inputs(num_kv, seed=0, t=T, s=S):
    rng = np.random.default_rng(seed)  # host draws: eager jax.random compiles per shape
    return tuple(
        jnp.asarray(rng.standard_normal(shape).astype(np.float32))
        for shape in ((B, t, H, D), (B, s, num_kv, D), (B, s, num_kv, D))
    )


def _mask(shape, seed):
    """Random boolean mask; where it has a key axis, key 0 is always allowed."""
    m = np.random.default_rng(seed).random(shape) < 0.7
    if shape[-1] > 1:
        m[..., 0] = True
    if not m.any():
        m.flat[0] = True
    return jnp.asarray(m)


def _rank4(x):
    return None if x is None else jnp.reshape(x, (1,) * (4 - x.ndim) + x.shape)


def _row_valid(mask, causal, t=T, s=S):
    """[B, T, H, 1]: does query row t of head h see any key (jax.nn's combined mask)?"""
    full = jnp.ones((B, H, t, s), bool)
    if mask is not None:
        full = full & _rank4(mask)
    if causal:
        full = full & jnp.tril(jnp.ones((t, s), bool))[None, None]
    return jnp.swapaxes(jnp.any(full, -1), 1, 2)[..., None]


def _outputs_and_grads(fn, q, k, v, bias, cotangent):
    def f(q, k, v, bias):
        return fn(q, k, v, bias)

    out, pullback = jax.vjp(f, q, k, v, bias)
    return out, pullback(cotangent)


@pytest.mark.parametrize("num_kv", [H, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind", ["mask", "bias", "both"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_broadcast_shapes_match_jax_nn(shape, kind, causal, num_kv):
    q, k, v = _inputs(num_kv)
    mask = _mask(shape, 1) if kind in ("mask", "both") else None
    bias = (
        host_random.normal(2, shape, jnp.float32)
        if kind in ("bias", "both")
        else jnp.zeros((), jnp.float32)
    )
    bias_arg = None if kind == "mask" else bias
    valid = _row_valid(mask, causal).astype(jnp.float32)
    cotangent = host_random.normal(3, (B, T, H, D), jnp.float32)

    def ours(q, k, v, b):
        return attnjax.dot_product_attention(
            q, k, v, None if bias_arg is None else b, mask, is_causal=causal
        )

    def theirs(q, k, v, b):
        out = jax.nn.dot_product_attention(
            q, k, v, None if bias_arg is None else _rank4(b), _rank4(mask), is_causal=causal
        )
        return out * valid

    got, got_grads = _outputs_and_grads(ours, q, k, v, bias, cotangent)
    want, want_grads = _outputs_and_grads(theirs, q, k, v, bias, cotangent)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-6)
    for name, g, w in zip(("query", "key", "value", "bias"), got_grads, want_grads):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5, err_msg=name)


def test_the_reported_padding_mask_runs_bidirectionally():
    """The reported failure: key_padding_mask [2, 1, 1, 5] with is_causal=False."""
    q = k = v = host_random.normal(4, (2, 5, 4, 8), jnp.float32)
    valid = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    m = attnjax.key_padding_mask(valid=valid)
    got = attnjax.dot_product_attention(q, k, v, mask=m)
    np.testing.assert_allclose(got, jax.nn.dot_product_attention(q, k, v, mask=m), atol=2e-6)
    # The padded keys change nothing: the first example equals attention over its 3 real keys.
    short = attnjax.dot_product_attention(q[:1], k[:1, :3], v[:1, :3])
    np.testing.assert_allclose(got[:1], short, atol=2e-6)


def test_unbatched_query_with_a_four_dimensional_mask():
    q, k, v = (x[0] for x in _inputs(2))
    mask = _mask((1, H, T, S), 5)
    got = attnjax.dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(got, jax.nn.dot_product_attention(q, k, v, mask=mask), atol=2e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_keyword_masks_match_jax_nn(causal):
    """key_value_seq_lengths, query_seq_lengths and local_window_size, alone and together."""
    q, k, v = _inputs(2, seed=6, t=7, s=7)
    kv_len = jnp.array([7, 5], jnp.int32)
    q_len = jnp.array([5, 7], jnp.int32)
    for kwargs in (
        {"key_value_seq_lengths": kv_len},
        {"query_seq_lengths": q_len},
        {"local_window_size": 2},
        {"local_window_size": (3, 1)},
        {"key_value_seq_lengths": kv_len, "query_seq_lengths": q_len, "local_window_size": (3, 0)},
    ):
        got = attnjax.dot_product_attention(q, k, v, is_causal=causal, **kwargs)
        want = jax.nn.dot_product_attention(q, k, v, is_causal=causal, **kwargs)
        np.testing.assert_allclose(got, want, atol=2e-6, err_msg=str(kwargs))


def test_keyword_masks_equal_explicit_masks():
    q, k, v = _inputs(2, seed=7)
    lengths = jnp.array([3, 7], jnp.int32)
    explicit = attnjax.dot_product_attention(
        q,
        k,
        v,
        mask=attnjax.combine_masks(
            attnjax.key_padding_mask(lengths=lengths, kv_len=S),
            attnjax.local_window_mask(T, S, left=1, right=2),
        ),
    )
    got = attnjax.dot_product_attention(
        q, k, v, key_value_seq_lengths=lengths, local_window_size=(1, 2)
    )
    np.testing.assert_array_equal(got, explicit)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32])
def test_numeric_zero_one_masks_equal_boolean_masks(dtype):
    q, k, v = _inputs(2, seed=8)
    mask = _mask((B, 1, T, S), 9)
    want = attnjax.dot_product_attention(q, k, v, mask=mask, is_causal=True)
    got = attnjax.dot_product_attention(q, k, v, mask=mask.astype(dtype), is_causal=True)
    np.testing.assert_array_equal(got, want)


def test_flax_masks_work_through_the_module():
    """flax's make_attention_mask returns float32 {0, 1} `[B, 1, T, S]`."""
    x = host_random.normal(10, (B, T, 16), jnp.float32)
    valid = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], jnp.int32)
    flax_mask = nnx.make_attention_mask(valid, valid)
    assert flax_mask.dtype == jnp.float32
    mha = nn.MultiHeadAttention(16, 4, num_kv_heads=2, rngs=nnx.Rngs(0))
    got = mha(x, mask=flax_mask)
    want = mha(x, mask=flax_mask.astype(bool))
    np.testing.assert_array_equal(got, want)
    # Padded queries see nothing and give the output projection's bias only.
    np.testing.assert_allclose(got[0, 3:], jnp.broadcast_to(mha.out.bias[...], (2, 16)), atol=1e-6)


def test_positional_call_in_jax_nn_order():
    q, k, v = _inputs(2, seed=11)
    bias = host_random.normal(12, (1, H, T, S), jnp.float32)
    mask = _mask((B, 1, 1, S), 13)
    np.testing.assert_array_equal(
        attnjax.dot_product_attention(q, k, v, bias, mask),
        attnjax.dot_product_attention(q, k, v, mask=mask, bias=bias),
    )
    np.testing.assert_allclose(
        attnjax.dot_product_attention(q, k, v, bias, mask),
        jax.nn.dot_product_attention(q, k, v, bias, mask),
        atol=2e-6,
    )


def test_padding_mask_through_a_bidirectional_transformer():
    """`Transformer(mask=key_padding_mask(...))` with causal=False: padding changes nothing."""
    config = nn.TransformerConfig.create(
        num_layers=2,
        features=16,
        num_heads=4,
        vocab_size=11,
        max_len=8,
        causal=False,
        attention=nn.AttentionConfig(num_kv_heads=2),
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    tokens = host_random.randint(14, (2, 6), 0, 11)
    lengths = jnp.array([4, 6], jnp.int32)
    mask = attnjax.key_padding_mask(lengths=lengths, kv_len=6)
    logits, inter = model(tokens, mask=mask, return_intermediates=True)
    alone = model(tokens[:1, :4])
    np.testing.assert_allclose(logits[:1, :4], alone, atol=1e-5)
    np.testing.assert_array_equal(inter["attention"][:, 0, :, :, 4:], 0.0)
    # Different padding tokens: same outputs at the real positions.
    other = tokens.at[0, 4:].set((tokens[0, 4:] + 1) % 11)
    np.testing.assert_allclose(model(other, mask=mask)[0, :4], logits[0, :4], atol=1e-6)
