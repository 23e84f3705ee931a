"""attention_statistics: chunked per-row statistics against the dense weights (float64 NumPy reference)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp, xlogy

import attnjax
from attnjax.analysis import AttentionStatistics, attention_statistics
from attnjax.attention import MASKED_LSE
from tests import host_random

B, T, S, H, D = 2, 12, 37, 4, 8
SINKS = (0, 5)
WINDOW = 4
FIELDS = AttentionStatistics._fields


def inputs(dtype, t=T, s=S, h=H, k=H, seed=0):
    rng = np.random.default_rng(seed)  # host draws: eager jax.random compiles per shape and dtype

    def draw(shape, scale):
        return jnp.asarray((scale * rng.standard_normal(shape)).astype(jnp.dtype(dtype)))

    return draw((B, t, h, D), 1.5), draw((B, s, k, D), 1.5), draw((B, 1, 1, s), 1.0)


def visible_matrix(case, t=T, s=S):
    """The case's mask as a dense `[B, H, T, S]` bool array, and the keywords that say the same."""
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    visible = np.ones((B, H, t, s), bool)
    kwargs = {}
    if "causal" in case:
        visible &= j <= i
        kwargs["is_causal"] = True
    if "window" in case:  # local window (2, 1); with causal some rows keep one key
        visible &= (j >= i - 2) & (j <= i + 1)
        kwargs["local_window"] = (2, 1)
    if "padding" in case:  # batch 1 has no keys at all: every row of it is fully masked
        padding = np.stack([np.arange(s) < s - 6, np.zeros(s, bool)])
        visible &= padding[:, None, None, :]
        kwargs["key_padding"] = jnp.asarray(padding)
    if "mask" in case:  # a full mask, with some fully masked rows
        full = np.array(host_random.bernoulli(7, 0.6, (B, H, t, s)))
        full[:, :, 3] = False
        visible &= full
        kwargs["mask"] = jnp.asarray(full)
    return visible, kwargs


def numpy_logits(q, key, bias, scale, temperature):
    q, key = np.asarray(q, np.float64), np.asarray(key, np.float64)
    key = np.repeat(key, q.shape[-2] // key.shape[-2], axis=-2)
    x = np.einsum("bthd,bshd->bhts", q, key) * scale
    if bias is not None:
        x = x + np.asarray(bias, np.float64)
    return x / temperature


@jax.jit
def dense_weights(q, key, bias, mask, temperature):
    return attnjax.attention_weights(q, key, bias, mask, temperature=temperature)


def dense_statistics(q, key, visible, bias=None, temperature=1.0, sinks=SINKS, window=WINDOW):
    """Reference: every statistic from the dense weights of `attnjax.attention_weights` (float64)."""
    q64, k64 = (jnp.asarray(x, jnp.float64) for x in (q, key))
    b64 = (
        jnp.zeros((1, 1, 1, 1), jnp.float64) if bias is None else jnp.asarray(bias, jnp.float64)
    )  # one compile
    with jax.default_matmul_precision("highest"):
        p = np.asarray(dense_weights(q64, k64, b64, jnp.asarray(visible), temperature))
    x = numpy_logits(q, key, bias, 1 / np.sqrt(q.shape[-1]), temperature)
    has, count = visible.any(-1), visible.sum(-1)
    distance = np.abs(np.arange(p.shape[-2])[:, None] - np.arange(p.shape[-1])[None, :])
    entropy = -xlogy(p, p).sum(-1)
    return dict(
        lse=np.where(has, logsumexp(np.where(visible, x, -1e300), axis=-1), MASKED_LSE),
        entropy=entropy,
        normalized_entropy=np.where(count > 1, entropy / np.log(np.maximum(count, 2)), 0),
        max_weight=p.max(-1),
        argmax=np.where(has, p.argmax(-1), -1),
        sink_mass=p[..., list(sinks)].sum(-1),
        window_mass=(p * (distance < window)).sum(-1),
        mean_distance=(p * distance).sum(-1),
    )


def assert_statistics_equal(got, want, atol):
    for name in FIELDS:
        value = np.asarray(getattr(got, name))
        assert value.shape == want[name].shape, name
        assert np.all(np.isfinite(value)), name
        if name == "argmax":
            np.testing.assert_array_equal(value, want[name])
        else:
            scale = 1 + np.abs(want[name]) if name == "lse" else 1  # lse of masked rows is -2.4e38
            np.testing.assert_array_less(np.abs(value - want[name]) / scale, atol, err_msg=name)


def stats_fn(chunk_size, query_chunk_size=128, **kwargs):
    """attention_statistics jitted in (q, k, bias), the case's masks and options fixed."""
    return jax.jit(
        lambda q, k, bias: attention_statistics(
            q,
            k,
            bias=bias,
            sink_positions=SINKS,
            window=WINDOW,
            chunk_size=chunk_size,
            query_chunk_size=query_chunk_size,
            **kwargs,
        )
    )


# (mask case, key heads, bias, key chunk, query block): 5 and 8 do not divide S = 37, 64 exceeds it; query
# blocks of 5 and 7 do not divide T = 12 (padded queries), 4 and 1 do; with causal or a window some blocks
# skip whole key chunks; 12 is one block.
CASES = [
    ("bidirectional", H, False, 5, 5),
    ("causal_window", 2, True, 8, 4),
    ("padding", 1, True, 37, 12),
    ("window_padding", H, False, 64, 1),
    ("causal_padding_mask", 2, True, 1, 7),
]


@pytest.mark.parametrize(
    "dtype, atol", [(jnp.float32, 1e-5), (jnp.float64, 1e-12)], ids=["f32", "f64"]
)
@pytest.mark.parametrize(
    "case, heads_kv, use_bias, chunk_size, query_chunk_size", CASES, ids=[c[0] for c in CASES]
)
def test_statistics_equal_the_dense_weights(
    case, heads_kv, use_bias, chunk_size, query_chunk_size, dtype, atol
):
    q, key, bias = inputs(dtype, k=heads_kv)
    bias = bias if use_bias else None
    visible, kwargs = visible_matrix(case)
    with jax.default_matmul_precision("highest"):
        got = stats_fn(chunk_size, query_chunk_size, **kwargs)(q, key, bias)
    assert got.argmax.dtype == jnp.int32 and got.entropy.dtype == dtype
    assert_statistics_equal(got, dense_statistics(q, key, visible, bias), atol)


@pytest.mark.parametrize(
    "is_causal, mask_shape, chunks",
    [
        (
            True,
            (2, 1, 1, 13),
            (3, 5),
        ),  # padding keys; blocks of 5 queries skip the key chunks after them
        (False, (2, 4, 11, 13), (4, 1)),  # a full mask sliced per block of one query
        (True, None, (13, 11)),  # one chunk, one block
    ],
    ids=["causal-padding", "full-mask", "one-block"],
)
def test_output_from_the_same_pass_equals_dot_product_attention(is_causal, mask_shape, chunks):
    """`value=`: the attention output accumulated online beside the statistics, float64, GQA; its statistics are
    those of the call without values."""
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (2, 11, 4, 8), jnp.float64)
    k, v = (jax.random.normal(key, (2, 13, 2, d), jnp.float64) for key, d in zip(keys[1:3], (8, 5)))
    mask = (
        None
        if mask_shape is None
        else jax.random.bernoulli(keys[3], 0.7, mask_shape).at[..., 0].set(True)
    )
    kwargs = dict(is_causal=is_causal, scale=0.3, chunk_size=chunks[0], query_chunk_size=chunks[1])

    @jax.jit  # one program for the three calls
    def run(q, k, v, mask):
        return (
            attention_statistics(q, k, value=v, mask=mask, **kwargs),
            attention_statistics(q, k, mask=mask, **kwargs),
            attnjax.dot_product_attention(q, k, v, mask=mask, is_causal=is_causal, scale=0.3),
        )

    (stats, out), alone, want = run(q, k, v, mask)
    assert out.shape == (2, 11, 4, 5)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=0, atol=1e-12)
    for name in FIELDS:
        np.testing.assert_array_equal(
            np.asarray(getattr(stats, name)), np.asarray(getattr(alone, name))
        )


def test_fully_masked_rows_get_the_documented_values():
    q, key, _ = inputs(jnp.float64)
    visible, kwargs = visible_matrix("padding")
    got = stats_fn(8, **kwargs)(q, key, None)
    masked = ~visible.any(-1)
    assert masked[1].all() and not masked[0].any()
    for name in FIELDS:
        want = {"lse": MASKED_LSE, "argmax": -1}.get(name, 0)
        np.testing.assert_array_equal(np.asarray(getattr(got, name))[masked], want)


def test_square_causal_with_temperature_and_a_full_bias():
    """T = S (the diagonal, one visible key in row 0: normalized entropy 0), a full [H, T, S] bias, t = 0.7."""
    q, key, _ = inputs(jnp.float64, t=16, s=16)
    bias = host_random.normal(3, (H, 16, 16), jnp.float64)
    visible, kwargs = visible_matrix("causal", t=16, s=16)
    got = stats_fn(6, 5, temperature=0.7, **kwargs)(
        q, key, bias
    )  # the bias sliced per block of 5 queries
    assert_statistics_equal(
        got, dense_statistics(q, key, visible, bias[None], temperature=0.7), 1e-12
    )
    assert np.all(np.asarray(got.normalized_entropy)[..., 0] == 0)


@pytest.mark.parametrize(
    "lse_dtype", [jnp.float32, jnp.bfloat16], ids=["lse_f32", "lse_bf16_rounded"]
)
def test_lse_from_jax_nn_return_residual_gives_the_same_statistics(lse_dtype):
    """One pass with p = exp(x - lse) from jax.nn; sums are renormalised, so even a bf16-rounded lse is exact.
    Queries 5 onwards are 40x larger (logits in the hundreds): a block given another block's lse overflows."""
    q, key, _ = inputs(jnp.float32, k=2)
    q = q * jnp.where(jnp.arange(T) < 5, 1.0, 40.0).astype(q.dtype)[None, :, None, None]
    visible, kwargs = visible_matrix("causal_padding")
    _, lse = jax.jit(
        lambda q, k, m: jax.nn.dot_product_attention(q, k, k, mask=m, return_residual=True)
    )(q, key, jnp.asarray(visible))
    assert lse.shape == (B, T, H)
    with jax.default_matmul_precision("highest"):
        got = given_lse(q, key, lse.astype(lse_dtype).astype(jnp.float32), kwargs["key_padding"])
    assert_statistics_equal(got, dense_statistics(q, key, visible), 1e-5)


@jax.jit
def given_lse(q, key, lse, padding):
    return attention_statistics(
        q,
        key,
        is_causal=True,
        key_padding=padding,
        lse=lse,
        sink_positions=SINKS,
        window=WINDOW,
        chunk_size=5,
        query_chunk_size=5,
    )  # the lse sliced per block


def test_bf16_inputs_accumulate_in_float32():
    q, key, _ = inputs(jnp.bfloat16)
    visible, kwargs = visible_matrix("causal")
    got = stats_fn(8, **kwargs)(q, key, None)
    assert got.entropy.dtype == jnp.float32 and got.lse.dtype == jnp.float32
    # The reference reads the same bf16 numbers in float64: only accumulation rounding remains.
    assert_statistics_equal(got, dense_statistics(q, key, visible), 1e-5)


def test_vmap_over_batch_and_grad_of_entropy_are_finite_and_exact():
    q, key, _ = inputs(jnp.float64)
    visible, kwargs = visible_matrix("causal_padding")

    def mean_entropy(q, key, padding, reduce=True):
        entropy = attention_statistics(
            q, key, is_causal=True, key_padding=padding, chunk_size=8, query_chunk_size=5
        ).entropy  # through the blocks and skipped chunks
        return jnp.sum(entropy) if reduce else entropy

    batched = jax.jit(lambda q, k, p: mean_entropy(q, k, p, reduce=False))(
        q, key, kwargs["key_padding"]
    )
    mapped = jax.jit(jax.vmap(lambda q, k, p: mean_entropy(q, k, p, reduce=False)))(
        q, key, kwargs["key_padding"]
    )
    np.testing.assert_allclose(mapped, batched, rtol=0, atol=1e-12)
    grad = jax.jit(jax.grad(mean_entropy))(q, key, kwargs["key_padding"])
    assert np.all(np.isfinite(grad)) and np.all(
        np.asarray(grad)[1] == 0
    )  # batch 1: every row fully masked

    def dense_entropy(q):
        p = attnjax.attention_weights(q, key, mask=jnp.asarray(visible))
        return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1)), 0))

    np.testing.assert_allclose(grad, jax.jit(jax.grad(dense_entropy))(q), rtol=0, atol=1e-10)


@pytest.mark.parametrize("is_causal", [False, True], ids=["T12_S37", "causal_T16_S16"])
@pytest.mark.parametrize("masking", ["key_padding", "mask", "bias"])
def test_non_finite_keys_and_values_at_masked_keys_change_nothing(masking, is_causal):
    """inf keys and NaN values at keys masked for every query of their key head (padding; a `[B, H, T, S]`
    mask hiding key 1 from key head 0's query heads only; a -inf bias): the statistics, the output and the
    gradients equal those with finite numbers there (the gradients of those keys 0). GQA; the padding keys
    are within the causal reach (T = S), in chunks the positions alone do not skip."""
    t, s = (16, 16) if is_causal else (T, S)
    q, key, _ = inputs(jnp.float64, t=t, s=s, k=2)
    value = jnp.asarray(np.random.default_rng(5).standard_normal(key.shape))
    g = jnp.asarray(np.random.default_rng(6).standard_normal(q.shape))
    padding = np.arange(s)[None, :] < np.array([[s - 6], [s - 1]])  # [B, S]
    garbage = np.broadcast_to(~padding[:, :, None], key.shape[:-1]).copy()  # [B, S, K]
    kwargs = {}
    if masking == "key_padding":
        kwargs["key_padding"] = jnp.asarray(padding)
    elif masking == "bias":
        kwargs["bias"] = jnp.asarray(np.where(padding, 0.0, -np.inf)[:, None, None, :])
    else:
        full = np.array(host_random.bernoulli(8, 0.7, (B, H, t, s)))
        full[..., 0] = True
        full[:, : H // 2, :, 1], full[:, H // 2 :, :, 1] = False, True
        kwargs["mask"] = jnp.asarray(full)
        garbage = np.zeros(key.shape[:-1], bool)
        garbage[:, 1, 0] = True

    @jax.jit
    def run(q, key, value):
        def loss(q, key, value):
            stats, out = attention_statistics(
                q, key, value=value, is_causal=is_causal, chunk_size=8, query_chunk_size=5, **kwargs
            )
            return jnp.sum(out * g) + jnp.sum(stats.entropy), (stats, out)

        return jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(q, key, value)

    garbage = jnp.asarray(garbage)[..., None]
    bad = run(q, jnp.where(garbage, jnp.inf, key), jnp.where(garbage, jnp.nan, value))
    clean = run(q, key, value)
    names = ("dq", "dk", "dv", *(f for f in FIELDS if f != "window_mass"), "output")
    for name, got, want in zip(
        names, jax.tree_util.tree_leaves(bad), jax.tree_util.tree_leaves(clean), strict=True
    ):
        assert np.all(np.isfinite(np.asarray(got))), f"{name}: not finite"
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)
    (_, dk, dv), _ = bad
    np.testing.assert_array_equal(jnp.where(garbage, dk, 0), 0.0)
    np.testing.assert_array_equal(jnp.where(garbage, dv, 0), 0.0)


def test_a_row_of_minus_inf_bias_is_a_fully_masked_row():
    """As in `dot_product_attention`: the documented values of a fully masked row, not a uniform row's."""
    q, key, _ = inputs(jnp.float64)
    bias = np.zeros((B, H, T, S))
    bias[0, 1, 4] = -np.inf
    got = stats_fn(8)(q, key, jnp.asarray(bias))
    for name in FIELDS:
        want = {"lse": MASKED_LSE, "argmax": -1}.get(name, 0)
        assert np.asarray(getattr(got, name))[0, 1, 4] == want, name
    assert np.asarray(got.max_weight)[0, 0, 4] > 0


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"scale": float("nan")}, ValueError, r"scale must be a finite number, got nan"),
        ({"temperature": "abc"}, TypeError, r"temperature must be a number"),
        ({"mask": np.where(np.eye(T, S) > 0, 0.0, -np.inf)}, ValueError, r"bias="),
    ],
)
def test_bad_scalars_and_additive_masks_raise_naming_them(kwargs, error, message):
    q = jnp.zeros((B, T, H, D), jnp.float32)
    with pytest.raises(error, match=message):
        attention_statistics(q, jnp.zeros((B, S, H, D), jnp.float32), **kwargs)


def test_compiled_temporaries_stay_below_one_dense_weight_matrix():
    """T = S = 4096, H = 8, D = 64, float32: the program never holds a [H, T, T] array."""
    t, h, d = 4096, 8, 64
    q = jax.ShapeDtypeStruct((1, t, h, d), jnp.float32)
    f = jax.jit(
        lambda q, k: attention_statistics(q, k, is_causal=True, sink_positions=(0,), window=128)
    )
    temp = f.lower(q, q).compile().memory_analysis().temp_size_in_bytes
    dense = h * t * t * 4
    assert temp < dense, (temp, dense)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (((T, H, D), (S, H)), {}, r"key must have layout \[..., T, H, D\]"),
        (((B, T, 3, D), (B, S, 2, D)), {}, r"key heads \(2\) must divide query heads \(3\)"),
        (
            ((B, T, H, D), (B, S, H, D)),
            {"chunk_size": 0},
            r"chunk_size must be an int >= 1, got 0 \(key.shape",
        ),
        (
            ((B, T, H, D), (B, S, H, D)),
            {"value": np.zeros((B, S - 1, H, D))},
            r"key and value must agree on \[..., S, K\]",
        ),
        (
            ((B, T, H, D), (B, S, H, D)),
            {"query_chunk_size": 1.5},
            r"query_chunk_size must be an int >= 1, got 1.5 \(query.shape",
        ),
        (
            ((B, T, H, D), (B, S, H, D)),
            {"sink_positions": (0, S)},
            r"sink_positions \[0, 37\] out of range .* S = 37",
        ),
        (
            ((B, T, H, D), (B, S, H, D)),
            {"lse": np.zeros((B, H, T))},
            r"lse must have shape \[..., T, H\]",
        ),
        (
            ((B, T, H, D), (B, S, H, D)),
            {"key_padding": np.ones((B, T), bool)},
            r"key_padding of shape \(2, 12\)",
        ),
        (
            ((B, T, H, D), (B, S, H, D)),
            {"mask": np.ones((T, T), bool)},
            r"mask of shape \(12, 12\)",
        ),
        (((B, T, H, D), (B, S, H, D)), {"window": 0}, r"window"),
    ],
)
def test_bad_input_raises_naming_the_argument_and_shapes(args, kwargs, message):
    q, key = (jnp.zeros(shape, jnp.float32) for shape in args)
    with pytest.raises(ValueError, match=message):
        attention_statistics(q, key, **kwargs)
