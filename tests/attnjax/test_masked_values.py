"""Masked means masked: what a masked key or value holds, NaN and inf included, never reaches the output,
the log-sum-exp or any gradient of `attnjax.dot_product_attention`.

The cross product a user combines: the kind of mask (sequence lengths, a padding mask `[B, 1, 1, S]`, a
shared `[T, S]` mask, a full `[B, H, T, S]` mask that hides a key from one group of query heads only, an
additive `-inf` bias) x causal x T = S or T != S x multi-head or grouped-query attention, against a
float64 NumPy reference whose sums skip masked pairs (`tests.reference.masked_attention_and_vjp`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnjax
from attnjax.attention import MASKED_LSE
from tests.reference import masked_attention_and_vjp

B, D = 2, 4
MASKS = ("lengths", "padding", "shared", "full", "bias")
SLOW = pytest.mark.slow
SHAPES = [  # (T, S, H, K): T != S with grouped queries in the quick tier, the rest of the product slow
    pytest.param(4, 7, 4, 2, id="T4_S7_H4_K2"),
    pytest.param(5, 5, 2, 2, id="T5_S5_H2_K2", marks=SLOW),
    pytest.param(5, 5, 4, 2, id="T5_S5_H4_K2", marks=SLOW),
    pytest.param(4, 7, 2, 2, id="T4_S7_H2_K2", marks=SLOW),
    pytest.param(4, 7, 4, 1, id="T4_S7_H4_K1", marks=SLOW),
]


def _case(kind, t, s, h, k, causal):
    """Inputs with garbage (inf keys, NaN / -inf values) at keys no query of their key head attends to.

    Returns q, k, v, the cotangents of out and lse, the keywords of the call, and the reference's mask
    `[B, H, T, S]` and bias.
    """
    rng = np.random.default_rng(sum(map(ord, kind)) + 100 * t + 10 * s + h + k + causal)
    q = rng.standard_normal((B, t, h, D)).astype(np.float32)
    key = rng.standard_normal((B, s, k, D)).astype(np.float32)
    value = rng.standard_normal((B, s, k, D)).astype(np.float32)
    g = rng.standard_normal((B, t, h, D)).astype(np.float32)
    g_lse = rng.standard_normal((B, t, h)).astype(np.float32)
    group = h // k
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    visible = np.ones((B, h, t, s), bool)
    if causal:
        visible &= j <= i
    lengths = np.array([s - 2, s - 1])  # keys s >= lengths[b] are padding
    padding = j[0] < lengths[:, None]  # [B, S]
    garbage = np.broadcast_to(~padding[:, :, None], (B, s, k)).copy()  # [B, S, K]
    kwargs, bias = {"is_causal": causal}, None
    if kind == "lengths":
        kwargs["key_value_seq_lengths"] = jnp.asarray(lengths, jnp.int32)
        visible &= padding[:, None, None, :]
    elif kind == "padding":
        kwargs["mask"] = jnp.asarray(padding[:, None, None, :])
        visible &= padding[:, None, None, :]
    elif (
        kind == "shared"
    ):  # one mask for the batch: key 1 hidden from every row, some entries at random
        shared = rng.random((t, s)) < 0.8
        shared[:, 0], shared[:, 1] = True, False
        kwargs["mask"] = jnp.asarray(shared)
        visible &= shared
        garbage = np.zeros((B, s, k), bool)
        garbage[:, 1] = True
    elif (
        kind == "full"
    ):  # key 1 hidden from the query heads of key head 0 only; other key heads read it
        full = rng.random((B, h, t, s)) < 0.8
        full[..., 0] = True
        full[:, :group, :, 1] = False
        full[:, group:, :, 1] = True
        kwargs["mask"] = jnp.asarray(full)
        visible &= full
        garbage = np.zeros((B, s, k), bool)
        garbage[:, 1, 0] = True
    else:  # an additive mask: -inf in the bias at padding keys
        finite = rng.standard_normal((B, h, t, s))
        bias = np.where(padding[:, None, None, :], finite, -np.inf).astype(np.float32)
        kwargs["bias"] = jnp.asarray(bias)
        visible &= padding[:, None, None, :]
    # inf in the keys, NaN in the values, and -inf in one value entry per garbage key.
    key = np.where(garbage[..., None], np.float32(np.inf), key)
    value = np.where(garbage[..., None], np.float32(np.nan), value)
    value[..., 0] = np.where(garbage, -np.inf, value[..., 0])
    return q, key, value, g, g_lse, kwargs, visible, bias


def _attention_and_grads(q, k, v, g, g_lse, kwargs):
    def loss(q, k, v):
        out, lse = attnjax.dot_product_attention(q, k, v, return_residual=True, **kwargs)
        return jnp.sum(out * g) + jnp.sum(lse * g_lse), (out, lse)

    with jax.default_matmul_precision("highest"):
        grads, (out, lse) = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return (out, lse, *grads)


def _assert_close(got, want, name):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.all(np.isfinite(got)), f"{name}: {np.sum(~np.isfinite(got))} non-finite entries"
    tol = 1e-5 * np.max(np.abs(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol, err_msg=name)


@pytest.mark.parametrize("t, s, h, k", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind", MASKS)
def test_non_finite_keys_and_values_at_masked_keys_change_nothing(kind, causal, t, s, h, k):
    q, key, value, g, g_lse, kwargs, visible, bias = _case(kind, t, s, h, k, causal)
    got = _attention_and_grads(q, key, value, g, g_lse, kwargs)
    want = masked_attention_and_vjp(q, key, value, g, g_lse, mask=visible, scale=D**-0.5, bias=bias)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        _assert_close(a, b, name)


def test_a_row_of_minus_inf_bias_is_a_fully_masked_row():
    """Zero weights, zero output, jax.nn's masked lse and zero gradients: as with `mask`, not uniform weights."""
    rng = np.random.default_rng(0)
    q, key, value = (jnp.asarray(rng.standard_normal((1, 3, 2, D)), jnp.float32) for _ in range(3))
    bias = np.zeros((2, 3, 3), np.float32)
    bias[1, 2] = -np.inf  # head 1, query 2: every key
    bias[0, 0, 1] = -np.inf  # one key of one row: masked, the rest of the row as usual

    def loss(q, key, value):
        out, weights, lse = attnjax.dot_product_attention(
            q, key, value, bias=jnp.asarray(bias), return_weights=True, return_residual=True
        )
        return jnp.sum(out), (out, weights, lse)

    grads, (out, weights, lse) = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(
        q, key, value
    )
    np.testing.assert_array_equal(weights[0, 1, 2], 0.0)
    np.testing.assert_array_equal(out[0, 2, 1], 0.0)
    assert lse[0, 2, 1] == np.float32(MASKED_LSE)
    np.testing.assert_array_equal(grads[0][0, 2, 1], 0.0)  # the query of the masked row
    assert float(weights[0, 0, 0, 1]) == 0.0
    np.testing.assert_allclose(np.sum(np.asarray(weights), -1)[0, 0], 1.0, rtol=1e-6)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in grads)


@pytest.mark.parametrize("fill", [-np.inf, -1e9])
def test_an_additive_float_mask_given_as_mask_raises_naming_bias(fill):
    q = jnp.zeros((1, 3, 2, D), jnp.float32)
    additive = np.where(np.tril(np.ones((3, 3), bool)), 0.0, fill).astype(np.float32)
    with pytest.raises(ValueError, match=r"mask.*0/1.*bias="):
        attnjax.dot_product_attention(q, q, q, mask=additive)


def test_a_0_1_float_mask_is_still_a_mask_and_a_traced_one_is_read_as_nonzero_attends():
    rng = np.random.default_rng(1)
    q, key, value = (jnp.asarray(rng.standard_normal((1, 4, 2, D)), jnp.float32) for _ in range(3))
    boolean = jnp.asarray(np.tril(np.ones((4, 4), bool)))
    attend = jax.jit(lambda m: attnjax.dot_product_attention(q, key, value, mask=m))
    want = attend(boolean)
    as_float = boolean.astype(jnp.float32)
    np.testing.assert_array_equal(attend(as_float), want)  # traced: unchecked, nonzero = attend
    np.testing.assert_allclose(  # concrete: checked to hold only 0 and 1, then the same mask
        attnjax.dot_product_attention(q, key, value, mask=as_float), want, rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize(
    "kwargs, reach",
    [({"is_causal": True}, 4), ({"local_window_size": (1, 2)}, 6)],
    ids=["causal", "window"],
)
def test_keys_past_the_causal_or_window_reach_change_nothing(kwargs, reach):
    """No mask array: T = 4 queries, S = 8 keys; keys s >= T (causal) or s >= T + right (window (1, 2)) are
    seen by no query, whatever they hold."""
    rng = np.random.default_rng(3)
    q, key, value, g = (rng.standard_normal((B, n, 4, D)).astype(np.float32) for n in (4, 8, 8, 4))
    g_lse = rng.standard_normal((B, 4, 4)).astype(np.float32)
    key[:, reach:], value[:, reach:] = np.inf, np.nan
    i, j = np.arange(4)[:, None], np.arange(8)[None, :]
    if "is_causal" in kwargs:
        visible = j <= i
    else:
        visible = (j >= i - 1) & (j <= i + 2)
    got = _attention_and_grads(q, key, value, g, g_lse, kwargs)
    want = masked_attention_and_vjp(q, key, value, g, g_lse, mask=visible, scale=D**-0.5)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        _assert_close(a, b, name)
