import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import attnjax
from attnjax import attention
from attnjax import softmax as softmax_lib
from tests import host_random
from tests.reference import softmax_attention

HIGHEST = jax.lax.Precision.HIGHEST


def qkv(seed, batch, t, s, h, k, d, dtype=jnp.float32, dv=None):
    """Standard normal q `[*batch, t, h, d]`, k `[*batch, s, k, d]`, v `[*batch, s, k, dv]`, drawn on the host."""
    rng = np.random.default_rng(seed)
    shapes = (batch + (t, h, d), batch + (s, k, d), batch + (s, k, dv or d))
    return tuple(
        jnp.asarray(rng.standard_normal(shape).astype(jnp.dtype(dtype))) for shape in shapes
    )


def random_mask(seed, shape, p=0.7):
    """Random boolean mask whose rows are never empty (key 0 always allowed)."""
    m = np.random.default_rng(seed).random(shape) < p
    m[..., 0] = True
    return jnp.asarray(m)


# ---------------------------------------------------------------- accuracy


@pytest.mark.parametrize("return_weights", [False, True], ids=["out", "out_and_weights"])
@pytest.mark.parametrize(
    "case",
    ["plain", "causal", "mask", "bias", "temperature", "gqa", "mqa", "all"],
)
def test_float32_matches_float64_reference(case, return_weights):
    """Acceptance: max abs error <= 1e-5 at T = S = 128, H = 8, D = 64 (float32)."""
    num_kv = {"gqa": 2, "mqa": 1, "all": 4}.get(case, 8)
    q, k, v = qkv(0, (2,), 128, 128, 8, num_kv, 64)
    kwargs = {}
    ref_kwargs = {}
    if case in ("mask", "all"):
        kwargs["mask"] = ref_kwargs["mask"] = random_mask(1, (2, 1, 128, 128))
    if case in ("bias", "all"):
        kwargs["bias"] = ref_kwargs["bias"] = host_random.normal(2, (8, 128, 128), jnp.float32)
    if case in ("temperature", "all"):
        kwargs["temperature"] = ref_kwargs["temperature"] = 0.5
    causal = case in ("causal", "all")
    if causal:
        ref_kwargs["mask"] = np.tril(np.ones((128, 128), bool)) & np.asarray(
            ref_kwargs.get("mask", True)
        )
    with jax.default_matmul_precision("highest"):
        got = attnjax.dot_product_attention(
            q, k, v, is_causal=causal, return_weights=return_weights, **kwargs
        )
    out = got[0] if return_weights else got
    ref_out, ref_w = softmax_attention(q, k, v, **ref_kwargs)
    assert out.dtype == jnp.float32 and out.shape == (2, 128, 8, 64)
    assert np.max(np.abs(np.asarray(out, np.float64) - ref_out)) <= 1e-5
    if return_weights:
        assert got[1].shape == (2, 8, 128, 128)
        assert np.max(np.abs(np.asarray(got[1], np.float64) - ref_w)) <= 1e-6


@pytest.mark.parametrize("return_weights", [False, True], ids=["out", "out_and_weights"])
def test_bfloat16_within_relative_tolerance(return_weights):
    q, k, v = qkv(3, (2,), 128, 128, 8, 8, 64, dtype=jnp.bfloat16)
    got = attnjax.dot_product_attention(q, k, v, is_causal=True, return_weights=return_weights)
    out = got[0] if return_weights else got
    assert out.dtype == jnp.bfloat16
    ref, _ = softmax_attention(q, k, v, mask=np.tril(np.ones((128, 128), bool)))
    rel = np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref)
    assert rel <= 2e-2
    if return_weights:
        assert got[1].dtype == jnp.float32
        np.testing.assert_allclose(got[1].sum(-1), 1.0, atol=1e-5)


def test_float64_inputs_stay_float64():
    q, k, v = qkv(4, (), 16, 16, 2, 2, 8, dtype=jnp.float64)
    out, w = attnjax.dot_product_attention(q, k, v, return_weights=True)
    assert out.dtype == w.dtype == jnp.float64
    ref_out, ref_w = softmax_attention(q, k, v)
    np.testing.assert_allclose(out, ref_out, atol=1e-13)
    np.testing.assert_allclose(w, ref_w, atol=1e-13)


# ---------------------------------------------------- independent implementation


@pytest.mark.parametrize("return_weights", [False, True], ids=["out", "out_and_weights"])
@pytest.mark.parametrize("num_kv", [4, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_jax_nn_dot_product_attention(causal, num_kv, return_weights):
    q, k, v = qkv(
        5, (2,), 7, 11, 4, num_kv, 8
    )  # T != S; shapes shared with other tests (reused op compilations)
    mask = random_mask(6, (2, 4, 7, 11))
    bias = host_random.normal(7, (2, 1, 7, 11), jnp.float32)
    expected = jax.nn.dot_product_attention(q, k, v, bias, mask, is_causal=causal)
    got = attnjax.dot_product_attention(
        q, k, v, mask=mask, bias=bias, is_causal=causal, return_weights=return_weights
    )
    got = got[0] if return_weights else got
    np.testing.assert_allclose(got, expected, atol=2e-6, rtol=2e-6)


def test_different_query_and_key_lengths_and_value_dim():
    q, k, v = qkv(8, (2,), 7, 11, 4, 2, 8, dv=5)
    out, w = attnjax.dot_product_attention(q, k, v, return_weights=True)
    chex.assert_shape([out, w], [(2, 7, 4, 5), (2, 4, 7, 11)])
    ref_out, _ = softmax_attention(q, k, v)
    np.testing.assert_allclose(out, ref_out, atol=1e-5)


@pytest.mark.slow
def test_leading_batch_dims_equal_per_example_calls():
    q, k, v = qkv(9, (2, 3), 10, 10, 4, 2, 8)
    mask = random_mask(10, (2, 3, 1, 10, 10))
    single = jax.jit(
        functools.partial(attnjax.dot_product_attention, is_causal=True)
    )  # one compile, six calls
    singles = [
        [single(q[i, j], k[i, j], v[i, j], mask=mask[i, j]) for j in range(3)] for i in range(2)
    ]
    for return_weights in (False, True):
        batched = attnjax.dot_product_attention(
            q, k, v, mask=mask, is_causal=True, return_weights=return_weights
        )
        batched = batched[0] if return_weights else batched
        for i in range(2):
            for j in range(3):
                np.testing.assert_allclose(batched[i, j], singles[i][j], atol=1e-6)


# --------------------------------------------------------------- identities


def test_default_scale_is_one_over_sqrt_d_and_what_no_scale_means():
    assert attention.default_scale(64) == 0.125
    assert attention.default_scale(3) == pytest.approx(3**-0.5, rel=1e-15)
    q, k, v = qkv(3, (2,), 5, 6, 4, 2, 9)
    np.testing.assert_array_equal(
        attnjax.dot_product_attention(q, k, v),
        attnjax.dot_product_attention(q, k, v, scale=attention.default_scale(9)),
    )
    assert not np.allclose(
        attnjax.dot_product_attention(q, k, v), attnjax.dot_product_attention(q, k, v, scale=1.0)
    )


def test_weights_rows_sum_to_one_and_are_nonnegative():
    q, k, _ = qkv(
        11, (2,), 7, 11, 4, 2, 8
    )  # the shapes of other tests here: their op compilations are reused
    w = attnjax.attention_weights(q, k, bias=host_random.normal(1, (7, 11), jnp.float32))
    assert w.shape == (2, 4, 7, 11)
    assert float(w.min()) >= 0.0
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)


def test_attention_weights_equals_returned_weights():
    q, k, v = qkv(12, (2,), 7, 11, 4, 2, 8)
    _, w = attnjax.dot_product_attention(
        q, k, v, is_causal=True, temperature=2.0, return_weights=True
    )
    np.testing.assert_array_equal(
        attnjax.attention_weights(q, k, is_causal=True, temperature=2.0), w
    )


def test_causal_weights_are_lower_triangular():
    q, k, _ = qkv(
        13, (2,), 7, 11, 4, 2, 8
    )  # T < S: query t sees keys s <= t (top-left aligned, as jax.nn)
    w = np.asarray(attnjax.attention_weights(q, k, is_causal=True))
    np.testing.assert_array_equal(np.triu(w, 1), 0.0)
    assert np.all(np.diagonal(w, axis1=-2, axis2=-1) > 0)


def test_temperature_limits_one_hot_and_uniform():
    q, k, _ = qkv(14, (), 8, 8, 2, 2, 16)
    cold = attnjax.attention_weights(q, k, temperature=1e-4)
    logits = np.einsum("thd,shd->hts", np.asarray(q, np.float64), np.asarray(k, np.float64))
    np.testing.assert_allclose(cold, np.eye(8)[np.argmax(logits, -1)], atol=1e-6)
    hot = attnjax.attention_weights(q, k, temperature=1e6)
    np.testing.assert_allclose(hot, 1 / 8, atol=1e-5)


def test_softmax_with_temperature_matches_jax_nn_softmax():
    x = host_random.normal(15, (4, 9), jnp.float32) * 3
    np.testing.assert_allclose(
        attnjax.softmax_with_temperature(x, 0.7), jax.nn.softmax(x / 0.7), atol=1e-6
    )
    mask = jnp.arange(9)[None, :] < jnp.array([[3], [9], [1], [0]])
    got = attnjax.softmax_with_temperature(x, mask=mask)
    np.testing.assert_allclose(got[:3], jax.nn.softmax(x[:3], where=mask[:3]) * mask[:3], atol=1e-6)
    np.testing.assert_array_equal(got[3], 0.0)


def test_softmax_with_temperature_upcasts_bfloat16():
    x = jnp.array([[1.0, 2.0, 3.0]], jnp.bfloat16)
    assert attnjax.softmax_with_temperature(x).dtype == jnp.float32


# ---------------------------------------------------------------- numerics


def _loss(q, k, v, **kwargs):
    return jnp.sum(attnjax.dot_product_attention(q, k, v, **kwargs) ** 2)


@pytest.mark.parametrize("return_weights", [False, True], ids=["out", "out_and_weights"])
@pytest.mark.slow
def test_fully_masked_rows_give_zero_output_and_finite_grads(return_weights):
    q, k, v = qkv(16, (2,), 6, 6, 2, 2, 4)
    mask = np.ones((2, 2, 6, 6), bool)
    mask[0, 1, 3] = False  # one query row with no visible key
    mask[1, :, :, :] = False  # a whole example masked
    mask = jnp.asarray(mask)
    got = attnjax.dot_product_attention(q, k, v, mask=mask, return_weights=return_weights)
    out = got[0] if return_weights else got
    np.testing.assert_array_equal(out[0, 3, 1], 0.0)
    np.testing.assert_array_equal(out[1], 0.0)
    assert np.all(np.isfinite(out))
    if return_weights:
        np.testing.assert_array_equal(got[1][0, 1, 3], 0.0)
        np.testing.assert_allclose(got[1][0, 0].sum(-1), 1.0, atol=1e-6)

    def loss(q, k, v):
        return jnp.sum(
            attnjax.dot_product_attention(q, k, v, mask=mask, return_weights=return_weights)[0] ** 2
            if return_weights
            else attnjax.dot_product_attention(q, k, v, mask=mask) ** 2
        )

    grads = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    for g in grads:
        assert np.all(np.isfinite(g))
    np.testing.assert_array_equal(grads[0][1], 0.0)  # masked example gets no gradient


@pytest.mark.parametrize("return_weights", [False, True], ids=["out", "out_and_weights"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.slow
def test_extreme_temperature_and_logits_stay_finite(dtype, return_weights):
    q, k, v = qkv(17, (1,), 16, 16, 2, 2, 8, dtype=jnp.float32)
    big = (q * 100.0).astype(dtype), (k * 100.0).astype(dtype), v.astype(dtype)  # logits ~ 1e4
    for inputs, temperature in (
        ((q.astype(dtype), k.astype(dtype), v.astype(dtype)), 1e-4),
        (big, 1.0),
        (big, 1e-4),
    ):
        out = attnjax.dot_product_attention(
            *inputs, temperature=temperature, return_weights=return_weights
        )
        out = out[0] if return_weights else out
        assert np.all(np.isfinite(np.asarray(out, np.float32)))
        grads = jax.grad(
            lambda *a: jnp.sum(
                (
                    attnjax.dot_product_attention(*a, temperature=temperature, return_weights=True)[
                        0
                    ]
                    if return_weights
                    else attnjax.dot_product_attention(*a, temperature=temperature)
                ).astype(jnp.float32)
            ),
            argnums=(0, 1, 2),
        )(*inputs)
        for g in grads:
            assert np.all(np.isfinite(np.asarray(g, np.float32)))


def test_logits_beyond_float32_range_do_not_make_nan():
    logits = jnp.array([[3e38, -3e38, 0.0]], jnp.float32)
    w = attnjax.softmax_with_temperature(logits, 1e-30)
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w, [[1.0, 0.0, 0.0]])


def _attend_one_head(q, k, v, mask=None, bias=None, *, scale, temperature):
    """The core `_attention` for one head: q `[T, D]`, k `[S, D]`, v `[S, Dv]` -> out `[T, Dv]`, weights `[T, S]`."""
    out, weights = attention._attention(
        q[:, None], k[:, None], v[:, None], mask, bias, None, scale=scale, temperature=temperature
    )
    return out[:, 0], weights[0]


@pytest.mark.slow
def test_core_gradients_match_finite_differences():
    q, k, v = qkv(18, (), 5, 6, 1, 1, 3, dtype=jnp.float64)
    mask = random_mask(19, (5, 6))
    bias = host_random.normal(20, (5, 6), jnp.float64)
    core = functools.partial(_attend_one_head, scale=0.5, temperature=0.8)
    f = jax.jit(lambda q, k, v, b: core(q, k, v, mask, b))
    check_grads(f, (q[:, 0], k[:, 0], v[:, 0], bias), order=2, modes=["fwd", "rev"])


@pytest.mark.parametrize("return_weights", [False, True], ids=["out", "out_and_weights"])
@pytest.mark.slow
def test_public_function_gradients_match_finite_differences(return_weights):
    q, k, v = qkv(21, (2,), 5, 5, 4, 2, 3, dtype=jnp.float64)
    mask = random_mask(22, (2, 1, 5, 5))

    def f(q, k, v):
        got = attnjax.dot_product_attention(
            q, k, v, mask=mask, is_causal=True, return_weights=return_weights
        )
        return got[0] if return_weights else got

    check_grads(f, (q, k, v), order=1, modes=["rev"])


# ------------------------------------------------------------- composition


class TestComposesWithJit(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_same_numbers_with_and_without_jit(self):
        """GQA with a mask and causal, against the float64 reference."""
        q, k, v = qkv(23, (4,), 8, 8, 4, 2, 4)
        mask = random_mask(29, (4, 1, 8, 8))
        fn = self.variant(
            functools.partial(attnjax.dot_product_attention, is_causal=True, return_weights=True)
        )
        causal = np.tril(np.ones((8, 8), bool))
        chex.assert_trees_all_close(
            fn(q, k, v, mask=mask),
            softmax_attention(q, k, v, mask=np.asarray(mask) & causal),
            atol=1e-5,
        )


def test_composes_with_vmap_and_grad():
    q, k, v = qkv(23, (4,), 8, 8, 2, 2, 4)
    fn = functools.partial(attnjax.dot_product_attention, is_causal=True)
    np.testing.assert_allclose(jax.vmap(fn)(q, k, v), fn(q, k, v), atol=1e-6)
    g = jax.jit(jax.grad(lambda q: jnp.sum(fn(q, k, v))))(q)
    assert g.shape == q.shape and np.all(np.isfinite(g))


def test_an_eager_call_is_one_program_per_shape_and_options():
    """Outside transformations a call compiles one program per shapes and options and reuses it (a
    static option, the temperature, makes another); under `jit` and with an array temperature the result
    is the same, and equals the float64 reference."""
    compiled = attention._compiled_compute
    q, k, v = qkv(26, (2,), 7, 9, 4, 2, 4)
    mask = random_mask(26, (2, 4, 7, 9))
    kwargs = dict(mask=mask, is_causal=True, temperature=0.7, return_weights=True)
    before = compiled._cache_size()
    out, weights = attnjax.dot_product_attention(q, k, v, **kwargs)
    assert compiled._cache_size() == before + 1
    attnjax.dot_product_attention(q + 1, k, v, **kwargs)  # same shapes and options: reused
    assert compiled._cache_size() == before + 1
    attnjax.dot_product_attention(q, k, v, **{**kwargs, "temperature": 0.5})  # a static option
    assert compiled._cache_size() == before + 2
    jitted = jax.jit(lambda q: attnjax.dot_product_attention(q, k, v, **kwargs))(q)
    array_temperature = attnjax.dot_product_attention(
        q, k, v, **{**kwargs, "temperature": jnp.float32(0.7)}
    )
    assert compiled._cache_size() == before + 2
    for other in (jitted, array_temperature):
        np.testing.assert_allclose(other[0], out, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(other[1], weights, rtol=1e-6, atol=1e-6)
    reference_out, reference_weights = softmax_attention(
        *(np.asarray(x, np.float64) for x in (q, k, v)),
        mask=np.asarray(mask) & np.tril(np.ones((7, 9), bool)),
        temperature=0.7,
    )
    np.testing.assert_allclose(out, reference_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights, reference_weights, rtol=1e-5, atol=1e-6)


def test_traced_temperature_uses_core_and_matches():
    q, k, v = qkv(24, (2,), 8, 8, 2, 2, 4)
    f = jax.jit(lambda t: attnjax.dot_product_attention(q, k, v, temperature=t))
    np.testing.assert_allclose(
        f(jnp.float32(0.5)), attnjax.dot_product_attention(q, k, v, temperature=0.5), atol=1e-6
    )


def test_temperature_gradient_is_finite():
    q, k, v = qkv(25, (), 8, 8, 2, 2, 4)
    g = jax.grad(lambda t: jnp.sum(attnjax.dot_product_attention(q, k, v, temperature=t) ** 2))(
        jnp.float32(0.7)
    )
    assert np.isfinite(g) and g != 0


@pytest.mark.slow
def test_temperature_gradient_matches_float64_finite_differences():
    q, k, v = qkv(27, (), 6, 7, 2, 1, 4, dtype=jnp.float64)
    mask = random_mask(28, (6, 7))
    f = jax.jit(lambda q, t: attnjax.dot_product_attention(q, k, v, mask=mask, temperature=t))
    check_grads(f, (q, jnp.float64(0.8)), order=2, modes=["fwd", "rev"])


@pytest.mark.parametrize("temperature", [1e-30, 1e-20])
def test_tiny_traced_temperature_has_the_vanishing_gradient_of_a_hard_max(temperature):
    """At t -> 0 the rows are one-hot and locally constant in t: the derivative is 0, not
    -logits / t^2 overflowing into inf * 0 = NaN (what differentiating logits / t gives)."""
    q, k, v = qkv(29, (), 8, 8, 2, 2, 4)

    def loss(t):
        return jnp.sum(attnjax.dot_product_attention(q, k, v, temperature=t) ** 2)

    def softmax_loss(t):
        return jnp.sum(attnjax.softmax_with_temperature(q[..., 0], t) ** 2)

    for fn in (loss, softmax_loss):
        assert float(jax.grad(fn)(jnp.float32(temperature))) == 0.0
    naive = jax.grad(lambda t: jnp.sum(softmax_lib._softmax(q[..., 0] / t, None) ** 2))(
        jnp.float32(temperature)
    )
    assert not np.isfinite(naive)


def test_softmax_with_temperature_is_one_function_in_three_places():
    """Defined in attnjax.softmax, re-exported by attnjax.attention and attnjax."""
    defined = softmax_lib.softmax_with_temperature
    assert (
        attnjax.softmax_with_temperature is defined
        and attention.softmax_with_temperature is defined
    )


def test_articles_example_runs_and_rows_sum_to_one():
    """Seed 000 example: batch 2, seq 10, d_model 512, 8 heads (head dim 64)."""
    x = host_random.normal(26, (2, 10, 512), jnp.float32)
    heads = x.reshape(2, 10, 8, 64)
    out, w = attnjax.dot_product_attention(heads, heads, heads, return_weights=True)
    chex.assert_shape([out, w], [(2, 10, 8, 64), (2, 8, 10, 10)])
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)


# ------------------------------------------------------------------ errors


SAME_QKV = ((2, 4, 8, 16),) * 3


@pytest.mark.parametrize(
    "shapes, kwargs, message",
    [
        (
            ((10, 64), (10, 1, 64), (10, 1, 64)),
            {},
            r"query must have layout \[\.\.\., T, H, D\].*\(10, 64\)",
        ),
        (
            ((2, 4, 8, 16), (2, 4, 3, 16), (2, 4, 3, 16)),
            {},
            r"key heads \(3\) must divide query heads \(8\)",
        ),
        (
            ((2, 4, 8, 16), (2, 4, 16, 16), (2, 4, 16, 16)),
            {},
            r"key heads \(16\) must divide query heads \(8\)",
        ),
        (
            ((2, 4, 8, 16), (2, 4, 8, 8), (2, 4, 8, 8)),
            {},
            r"head dim D.*\(2, 4, 8, 16\).*\(2, 4, 8, 8\)",
        ),
        (((2, 4, 8, 16), (2, 5, 8, 16), (2, 4, 8, 16)), {}, r"key and value must agree"),
        (((2, 4, 8, 16), (3, 4, 8, 16), (3, 4, 8, 16)), {}, r"same batch dims"),
        (SAME_QKV, {"mask": np.ones((4, 5), bool)}, r"mask of shape \(4, 5\).*\(2, 8, 4, 4\)"),
        (SAME_QKV, {"mask": np.ones((3, 8, 4, 4), bool)}, r"mask of shape \(3, 8, 4, 4\)"),
        (SAME_QKV, {"mask": np.ones((4, 4), np.complex64)}, r"mask must be boolean or numeric"),
        (
            ((4, 8, 16),) * 3,
            {"mask": np.ones((2, 8, 4, 4), bool)},
            r"mask of shape \(2, 8, 4, 4\).*\(8, 4, 4\)",
        ),
        (
            SAME_QKV,
            {"key_value_seq_lengths": np.ones((3,), np.int32)},
            r"key_value_seq_lengths of shape \(3,\).*\(2,\)",
        ),
        (
            SAME_QKV,
            {"query_seq_lengths": np.ones((2,), np.float32)},
            r"query_seq_lengths must be an integer array",
        ),
        (SAME_QKV, {"local_window_size": -1}, r"local_window_size must be a non-negative int"),
        (SAME_QKV, {"local_window_size": (1, 2, 3)}, r"local_window_size must be .*\(1, 2, 3\)"),
        (SAME_QKV, {"implementation": "flash"}, r"implementation must be one of"),
        (SAME_QKV, {"dropout_rate": 1.0}, r"dropout_rate must be a number in \[0, 1\)"),
        (SAME_QKV, {"dropout_rate": 0.1}, r"dropout_rate=0.1 needs a dropout_rng"),
        (SAME_QKV, {"bias": np.ones((5, 4), np.float32)}, r"bias of shape \(5, 4\)"),
        (SAME_QKV, {"temperature": -1.0}, r"temperature must be a positive number, got -1.0"),
        (SAME_QKV, {"temperature": 0.0}, r"temperature must be a positive number, got 0.0"),
    ],
)
def test_bad_inputs_raise_before_compute(shapes, kwargs, message):
    arrays = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    expected = TypeError if ("boolean" in message or "integer array" in message) else ValueError
    with pytest.raises(expected, match=message):
        # Tracing alone (no compute) must raise.
        jax.eval_shape(lambda q, k, v: attnjax.dot_product_attention(q, k, v, **kwargs), *arrays)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"scale": float("nan")}, ValueError, r"scale must be a finite number, got nan"),
        ({"scale": -float("inf")}, ValueError, r"scale must be a finite number, got -inf"),
        ({"scale": jnp.asarray(jnp.nan)}, ValueError, r"scale must be a finite number"),
        ({"scale": "0.5"}, TypeError, r"scale must be a number or a scalar array, got str"),
        ({"scale": np.ones(2)}, ValueError, r"scale must be a scalar, got shape \(2,\)"),
        ({"temperature": float("nan")}, ValueError, r"temperature must be a positive number"),
        ({"temperature": jnp.asarray(0.0)}, ValueError, r"temperature must be a positive number"),
        ({"temperature": "abc"}, TypeError, r"temperature must be a number or a scalar array"),
        ({"is_causal": "False"}, TypeError, r"is_causal must be a bool, got 'False'"),
        ({"is_causal": 1}, TypeError, r"is_causal must be a bool, got 1"),
        ({"return_weights": "yes"}, TypeError, r"return_weights must be a bool"),
        ({"return_residual": None}, TypeError, r"return_residual must be a bool"),
    ],
)
def test_bad_scalars_raise_naming_them(kwargs, error, message):
    q = jnp.zeros((1, 3, 2, 4), jnp.float32)
    with pytest.raises(error, match=message):
        attnjax.dot_product_attention(q, q, q, **kwargs)


def test_a_zero_head_dim_raises_as_jax_nn_does():
    q = jax.ShapeDtypeStruct((1, 3, 2, 0), jnp.float32)
    with pytest.raises(ValueError, match=r"head dim D >= 1 \(got query.shape=\(1, 3, 2, 0\)"):
        jax.eval_shape(lambda q: attnjax.dot_product_attention(q, q, q), q)


@pytest.mark.parametrize("scale", [-0.5, 0.0])
def test_any_finite_scale_is_legal_zero_and_negative_included(scale):
    """A negative scale ranks keys in reverse, a zero one gives uniform weights: both are what the formula says."""
    q, k, v = qkv(40, (1,), 5, 6, 2, 1, 4)
    out, weights = attnjax.dot_product_attention(q, k, v, scale=scale, return_weights=True)
    ref_out, ref_weights = softmax_attention(q, k, v, scale=scale)
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "temperature, error, message",
    [
        (0.0, ValueError, r"temperature must be a positive number, got 0.0"),
        (-1.0, ValueError, r"temperature must be a positive number, got -1.0"),
        (float("nan"), ValueError, r"temperature must be a positive number, got nan"),
        (jnp.asarray(-2.0), ValueError, r"temperature must be a positive number"),
        ("abc", TypeError, r"temperature must be a number or a scalar array, got str 'abc'"),
        (True, TypeError, r"temperature must be a number, got the bool True"),
        (jnp.ones(3), ValueError, r"temperature must be a scalar, got shape \(3,\)"),
    ],
)
def test_softmax_with_temperature_rejects_bad_temperatures(temperature, error, message):
    with pytest.raises(error, match=message):
        attnjax.softmax_with_temperature(jnp.zeros((2, 3), jnp.float32), temperature)


def test_softmax_with_temperature_takes_a_traced_temperature():
    """Inside jit its value is unknown, so unchecked: the call traces (a check reading it would raise)."""
    x = jnp.asarray([[1.0, 2.0, 3.0]], jnp.float32)
    got = jax.jit(attnjax.softmax_with_temperature)(x, jnp.asarray(2.0))
    np.testing.assert_allclose(got, jax.nn.softmax(x / 2.0), rtol=1e-6)


def test_integer_inputs_raise_type_error():
    x = jnp.ones((2, 4, 2, 8), jnp.int32)
    with pytest.raises(TypeError, match="query must be a floating-point array"):
        attnjax.dot_product_attention(x, x, x)


# ---------------------------------------------- the jax.nn (cuDNN) wrapper


@pytest.mark.parametrize("causal", [False, True])
def test_jax_nn_wrapper_has_attnjax_semantics(causal):
    """The GPU fast path wraps jax.nn.dot_product_attention; check the wrapper
    (batch dims, temperature, bias, GQA, fully masked rows) through its XLA
    implementation, which takes the same arguments as cuDNN's."""
    q, k, v = qkv(
        27, (2, 3), 10, 10, 4, 2, 8
    )  # the shapes of test_leading_batch_dims_equal_per_example_calls
    mask = np.array(host_random.bernoulli(28, 0.6, (2, 3, 1, 10, 10)))
    mask[0, 1, 0, 4] = False  # a fully masked query row
    mask = jnp.asarray(mask)
    bias = host_random.normal(29, (4, 10, 10), jnp.float32)
    expected = attnjax.dot_product_attention(
        q, k, v, mask=mask, bias=bias, is_causal=causal, temperature=0.7
    )
    got = attention._jax_nn_attention(q, k, v, mask, bias, causal, 8**-0.5, 0.7, "xla")
    np.testing.assert_allclose(got, expected, atol=2e-6)
    np.testing.assert_array_equal(got[0, 1, 4], 0.0)


def test_cudnn_is_only_considered_on_gpu_for_half_precision():
    q = jnp.zeros((1, 4, 2, 8), jnp.bfloat16)
    expected = jax.default_backend() == "gpu"
    assert attention._can_use_cudnn(q, q, q, 1.0) == expected
    assert not attention._can_use_cudnn(
        q.astype(jnp.float32), q.astype(jnp.float32), q.astype(jnp.float32), 1.0
    )


# ----------------------------------------------------------------- dropout


def test_dropout_rate_zero_is_exactly_no_dropout():
    q, k, v = qkv(30, (2,), 6, 6, 4, 2, 8)
    plain = attnjax.dot_product_attention(q, k, v, is_causal=True)
    np.testing.assert_array_equal(
        attnjax.dot_product_attention(
            q, k, v, is_causal=True, dropout_rate=0.0, dropout_rng=jax.random.key(0)
        ),
        plain,
    )


@pytest.mark.slow
def test_dropout_draws_differ_per_head_and_average_to_no_dropout():
    """E[keep / (1 - p)] = 1, so the mean output over n draws tends to the
    dropout-free output with standard error ~ sd / sqrt(n)."""
    q, k, v = qkv(31, (), 6, 6, 4, 4, 8, dtype=jnp.float64)
    rate, n = 0.3, 4000
    plain, weights = attnjax.dot_product_attention(q, k, v, is_causal=True, return_weights=True)

    def draw(key):
        return attnjax.dot_product_attention(
            q,
            k,
            v,
            is_causal=True,
            dropout_rate=rate,
            dropout_rng=key,
            return_weights=True,
        )

    outs, ws = jax.vmap(draw)(jax.random.split(jax.random.key(1), n))
    np.testing.assert_array_equal(ws[0], weights)  # weights are the softmax's, before dropout
    assert not np.allclose(outs[0], plain)
    # Every head gets its own draw: identical q/k/v in two heads still give different outputs.
    same = (
        jnp.broadcast_to(q[:, :1], q.shape),
        jnp.broadcast_to(k[:, :1], k.shape),
        jnp.broadcast_to(v[:, :1], v.shape),
    )
    one = attnjax.dot_product_attention(*same, dropout_rate=rate, dropout_rng=jax.random.key(2))
    assert not np.allclose(one[:, 0], one[:, 1])
    stderr = np.std(np.asarray(outs), axis=0) / np.sqrt(n)
    assert np.all(
        np.abs(np.mean(np.asarray(outs), axis=0) - np.asarray(plain)) <= 5 * stderr + 1e-12
    )


def test_signature_is_a_superset_of_jax_nn():
    import inspect

    ours = inspect.signature(attnjax.dot_product_attention).parameters
    theirs = inspect.signature(jax.nn.dot_product_attention).parameters
    for name, p in theirs.items():
        assert name in ours, name
        assert ours[name].kind == p.kind, name
    assert list(ours)[:5] == list(theirs)[:5]


# ---------------------------------------------------------------- return_residual (the log-sum-exp per row)


@pytest.mark.parametrize("case", ["plain", "causal_gqa", "mask_bias", "lengths_window"])
@pytest.mark.slow
def test_residual_is_jax_nns_lse_including_fully_masked_rows(case):
    """Same layout [..., T, H] and value (float32, 1e-6) as jax.nn's, MASKED_LSE in fully masked rows."""
    q, k, v = qkv(41, (2,), 7, 11, 4, 2 if case == "causal_gqa" else 4, 8)
    kwargs = {"is_causal": case == "causal_gqa"}
    if case == "mask_bias":
        kwargs["mask"] = (
            random_mask(2, (2, 4, 7, 11)).at[1, :, 3].set(False)
        )  # row 3 of batch 1: no keys
        kwargs["bias"] = host_random.normal(3, (2, 4, 7, 11), jnp.float32)
    if case == "lengths_window":
        lengths = jnp.array([7, 4], jnp.int32), jnp.array([11, 0], jnp.int32)
        kwargs.update(
            query_seq_lengths=lengths[0], key_value_seq_lengths=lengths[1], local_window_size=(2, 3)
        )
    with jax.default_matmul_precision("highest"):
        out, lse = attnjax.dot_product_attention(q, k, v, return_residual=True, **kwargs)
        want_out, want = jax.nn.dot_product_attention(q, k, v, return_residual=True, **kwargs)
    assert lse.shape == want.shape == (2, 7, 4) and lse.dtype == jnp.float32
    np.testing.assert_allclose(lse, want, rtol=1e-6, atol=1e-6)
    masked = np.asarray(want) < -1e38
    assert masked.any() == (case in ("mask_bias", "lengths_window"))
    np.testing.assert_array_equal(np.asarray(lse)[masked], np.float32(attention.MASKED_LSE))
    np.testing.assert_array_equal(out, attnjax.dot_product_attention(q, k, v, **kwargs))


def test_residual_gradient_matches_a_float64_reference():
    """d lse_th / d q_th = (scale / t) sum_s p_ths k_s, d / d k_s = (scale / t) sum_t p_ths q_th (GQA: summed
    over the group), zero in a fully masked row; jax.nn's lse is a stop-gradient, so the reference is NumPy."""
    q, k, v = qkv(42, (), 5, 6, 4, 2, 8, dtype=jnp.float64)
    mask = np.ones((4, 5, 6), bool)
    mask[:, 2] = False
    mask[1, :, :3] = False
    w = np.asarray(host_random.normal(4, (5, 4), jnp.float64))
    scale, t = 0.3, 0.7

    def loss(q, k):
        _, lse = attnjax.dot_product_attention(
            q, k, v, mask=mask, scale=scale, temperature=t, return_residual=True
        )
        return jnp.sum(lse * w)

    dq, dk = jax.jit(jax.grad(loss, argnums=(0, 1)))(q, k)
    _, p = softmax_attention(q, k, v, mask=mask, scale=scale, temperature=t)  # [H, T, S] float64
    qn, kn = np.asarray(q), np.repeat(np.asarray(k), 2, axis=-2)  # key head per query head
    c = scale / t * np.swapaxes(w, 0, 1)[..., None] * p  # [H, T, S]: weight of d x_hts
    want_dq = np.einsum("hts,shd->thd", c, kn)
    want_dk = np.einsum("hts,thd->shd", c, qn).reshape(6, 2, 2, 8).sum(axis=2)
    np.testing.assert_allclose(dq, want_dq, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dk, want_dk, rtol=0, atol=1e-12)
    assert np.all(np.asarray(dq)[2] == 0)


def test_residual_comes_after_the_weights():
    q, k, v = qkv(43, (2,), 6, 6, 2, 2, 4)
    out, weights, lse = attnjax.dot_product_attention(
        q, k, v, is_causal=True, return_weights=True, return_residual=True
    )
    out2, weights2 = attnjax.dot_product_attention(q, k, v, is_causal=True, return_weights=True)
    np.testing.assert_array_equal(out, out2)
    np.testing.assert_array_equal(weights, weights2)
    # log of a visible weight is the logit minus the lse: lse_t = x_t0 - log p_t0 (key 0 is always visible).
    x0 = jnp.einsum("bthd,bthd->bht", q, jnp.broadcast_to(k[:, :1], q.shape)) / 2.0
    np.testing.assert_allclose(
        jnp.swapaxes(lse, -1, -2), x0 - jnp.log(weights[..., 0]), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    "t, s, name, length", [(0, 4, "query", "T"), (4, 0, "key", "S"), (0, 0, "query", "T")]
)
def test_zero_length_query_or_key_raises_naming_it(t, s, name, length):
    q = jax.ShapeDtypeStruct((2, t, 4, 8), jnp.float32)
    kv = jax.ShapeDtypeStruct((2, s, 2, 8), jnp.float32)
    message = (
        rf"{name} must hold at least one position: its length {length} \(axis -3\) is 0.*"
        rf"query.shape=\(2, {t}, 4, 8\), key.shape=\(2, {s}, 2, 8\)"
    )
    calls = {
        "softmax": lambda q, k, v: attnjax.dot_product_attention(q, k, v, return_weights=True),
        "linear": lambda q, k, v: attnjax.linear_attention(
            q, k, v, feature_map=attnjax.features.elu_plus_one
        ),
        "linear causal": lambda q, k, v: attnjax.linear_attention(
            q, k, v, feature_map=attnjax.features.relu, is_causal=True
        ),
    }
    for fn in calls.values():
        with pytest.raises(ValueError, match=message):
            jax.eval_shape(fn, q, kv, kv)  # tracing alone raises: no compute
