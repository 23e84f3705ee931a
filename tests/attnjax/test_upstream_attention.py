"""Upstream attention test cases, ported onto attnjax.

What a jax.nn or flax user expects of `attnjax.dot_product_attention` and
`attnjax.nn.MultiHeadAttention`, taken case by case from

* jax `tests/nn_test.py`: `testDotProductAttention` (GQA against repeated
  key/value heads, bf16/fp16, under `vmap`, forward and VJP),
  `testDotProductAttentionMask` (bias, causal, padding through
  `query_seq_lengths`/`key_value_seq_lengths`, custom mask, sliding window and
  their combinations, forward and VJP including the bias gradient),
  `testDotProductAttentionFloat64MaskDebugInfs` (unbatched float64 inputs and a
  1-D mask raise nothing under `jax.debug_infs`) and
  `testDotProductAttentionBiasGradient` (self-attention bias gradient, with
  and without `vmap`), at upstream's shapes (T = S = 128) and tolerances,
  with upstream's parameter products trimmed where noted;
* flax `tests/nnx/nn/attention_test.py` (flax has no `gqa_test.py`; its GQA
  cases are `TestGQADotProductAttention` in this file):
  `MultiHeadAttention` output shapes, sown weights, causal-mask equivalence,
  module equivalence (flax's weights copied into ours), GQA shapes, parity of
  GQA with jax.nn, shape validation.

and extended with the cases a jax.nn/flax user hits next: every mask and bias
shape jax.nn broadcasts, unbatched queries with a 4-D mask, {0, 1} float masks
(what `nnx.make_attention_mask` returns), the positional call
`f(q, k, v, bias, mask)`, sequence lengths, local windows, `scale=`, and flax's
mask helpers fed to our module.

The reference is `jax.nn.dot_product_attention` itself (float32 at HIGHEST
matmul precision, or the upstream dtype at upstream's tolerance), checked
through the VJP with a random cotangent, so outputs and the gradients w.r.t.
q, k, v and bias are all compared. attnjax differs from jax.nn in one
documented way: a query row whose keys are all masked gets a zero output
(jax.nn gives the mean of the values). Inputs here keep at least one key per
row (key 0 is never masked), except in the one test that asserts the
zero-output rule.

Not ported: `return_residual` (jax.nn only), the cuDNN-only checks, flax's
autoregressive decode cache, `keep_rngs` and `in_kv_features` (attnjax's
module has no such options).
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attnjax
from attnjax import nn
from tests import host_random
from tests.reference import softmax_attention

# Tolerances for float32 comparisons against jax.nn (both at HIGHEST precision).
F32_TOL = dict(atol=1e-5, rtol=1e-5)

# The small case most tests share (eager op compilations are then reused):
# batch, query length != key length, query heads, key/value heads (GQA), head dim.
B_, T_, S_, H_, K_, D_ = 2, 5, 7, 4, 2, 8


# ----------------------------------------------------------------- helpers


def _qkv(seed, batch, t, s, h, kv, d, dtype=jnp.float32):
    rng = np.random.default_rng(seed)  # host draws: eager jax.random compiles per shape and dtype
    return tuple(
        jnp.asarray(rng.standard_normal(shape).astype(jnp.dtype(dtype)))
        for shape in (batch + (t, h, d), batch + (s, kv, d), batch + (s, kv, d))
    )


def _random_mask(seed, shape, p=0.6):
    """Random boolean mask that never masks key 0, so no query row is empty."""
    m = np.random.default_rng(seed).random(shape) < p
    m[..., 0] = True
    return jnp.asarray(m)


def _jax_nn(q, k, v, bias=None, mask=None, **kwargs):
    """jax.nn.dot_product_attention; it takes only boolean masks."""
    if mask is not None:
        mask = jnp.asarray(mask).astype(jnp.bool_)
    return jax.nn.dot_product_attention(q, k, v, bias, mask, **kwargs)


def _f64(x):
    return np.asarray(jnp.asarray(x).astype(jnp.float64))


def _assert_close(got, want, *, atol, rtol, what=""):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(_f64(got), _f64(want), atol=atol, rtol=rtol, err_msg=what)


def _value_and_vjp(fn, args, cotangent_seed, *, jit=False):
    """fn(*args) and its VJP against a fixed random cotangent."""

    def run(*args):
        out, pullback = jax.vjp(fn, *args)
        cotangent = host_random.normal(cotangent_seed, out.shape, out.dtype)
        return out, pullback(cotangent)

    with jax.default_matmul_precision("highest"):
        return (jax.jit(run) if jit else run)(*args)


def _check_against(
    ours, reference, args, names, *, atol, rtol, grad_tol=None, jit=False, ref_jit=None, seed=1234
):
    """Outputs and all input gradients of `ours` match `reference`.

    `grad_tol` maps an argument name to its gradient's (atol, rtol); default
    (atol, rtol). Eager by default: small cases share shapes, so eager op
    compilations are reused across cases; `jit` pays off for a one-off shape."""
    out, grads = _value_and_vjp(ours, args, seed, jit=jit)
    ref_out, ref_grads = _value_and_vjp(
        reference, args, seed, jit=jit if ref_jit is None else ref_jit
    )
    assert out.dtype == ref_out.dtype, (out.dtype, ref_out.dtype)
    _assert_close(out, ref_out, atol=atol, rtol=rtol, what="output")
    grad_tol = grad_tol or {}
    for name, g, ref_g in zip(names, grads, ref_grads):
        g_atol, g_rtol = grad_tol.get(name, (atol, rtol))
        _assert_close(g, ref_g, atol=g_atol, rtol=g_rtol, what=f"d{name}")


# ================================================================ jax.nn
# ------------------------------------------------- testDotProductAttention


GQA_CASES = [
    (jnp.bfloat16, 1, False),
    (jnp.bfloat16, 2, True),
    (jnp.bfloat16, 4, False),
    (jnp.float16, 2, False),
]


@pytest.mark.parametrize(
    "dtype, group_num, use_vmap",
    GQA_CASES,
    ids=[f"{d.__name__}-G{g}-{'vmap' if m else 'batched'}" for d, g, m in GQA_CASES],
)
def test_gqa_matches_jax_nn_on_repeated_heads(dtype, group_num, use_vmap):
    """jax testDotProductAttention: GQA output and dQ, dK, dV equal those of
    plain multi-head attention on key/value heads repeated G times (dK, dV
    summed over each group), at B=2, T=S=128, N=4, H=32, directly and under
    `vmap` (with positional `None` bias and mask), at upstream's tolerance
    0.01. Upstream's dtype x G x vmap product is trimmed to keep compile time
    down: G and vmap vary within bf16 (G=4 is multi-query attention, one
    key/value head); float32 GQA is checked at 1e-5 by the small-shape tests."""
    B, S, T, N, H, G = 2, 128, 128, 4, 32, group_num
    q, k, v = _qkv(0, (B,), T, S, N, N // G, H, dtype)
    ours = attnjax.dot_product_attention
    if use_vmap:
        ours = jax.vmap(ours, in_axes=(0, 0, 0, None, None))

    def ours_fn(q, k, v):
        return ours(q, k, v, None, None)

    def reference(q, k, v):
        return jax.nn.dot_product_attention(q, jnp.repeat(k, G, axis=2), jnp.repeat(v, G, axis=2))

    # Compiled for one-off shapes, except G=1 (its shapes are the bf16 mask
    # tests', whose eager compilations it warms up) and jax.nn's fp16, whose
    # dot algorithm falls back on CPU only when run eagerly.
    jit = not (dtype == jnp.bfloat16 and G == 1 and not use_vmap)
    _check_against(
        ours_fn,
        reference,
        (q, k, v),
        "qkv",
        atol=0.01,
        rtol=0.01,
        jit=jit,
        ref_jit=jit and dtype != jnp.float16,
    )


# --------------------------------------------- testDotProductAttentionMask

MASK_MODES = [
    "bias",
    "causal",
    "padding",
    "custom",
    ("causal", "padding"),
    ("custom", "padding"),
    ("bias", "causal"),
    ("causal", "sliding_window"),
    # Beyond upstream: a non-causal two-sided window, and everything at once.
    ("sliding_window",),
    ("bias", "custom", "padding", "causal", "sliding_window"),
]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=lambda d: d.__name__)
@pytest.mark.parametrize(
    "mask_mode", MASK_MODES, ids=lambda m: m if isinstance(m, str) else "+".join(m)
)
def test_mask_modes_match_jax_nn(mask_mode, dtype):
    """jax testDotProductAttentionMask: output and dQ, dK, dV, dbias agree with
    jax.nn. bf16 at upstream's B=2, T=S=128, N=4, H=32 and tolerances (0.01;
    0.02 for dQ, dK, dbias); float32 at tight tolerance on a small GQA case
    with T != S (B=2, T=5, S=7, N=4, K=2, H=8)."""
    mask_mode = (mask_mode,) if isinstance(mask_mode, str) else mask_mode
    if dtype == jnp.bfloat16:
        B, S, T, N, K, H = 2, 128, 128, 4, 4, 32
    else:
        B, S, T, N, K, H = B_, S_, T_, H_, K_, D_
    q, k, v = _qkv(1, (B,), T, S, N, K, H, dtype)
    bias = mask = q_seqlen = kv_seqlen = window = None
    is_causal = "causal" in mask_mode
    if "padding" in mask_mode:
        q_seqlen = jnp.array([T // 2, T // 4], jnp.int32)
        kv_seqlen = jnp.array([S // 4, S // 2], jnp.int32)
    if "custom" in mask_mode:
        mask = jnp.tril(jnp.ones((T, S), jnp.bool_))[None, None]
    if "bias" in mask_mode:
        bias = host_random.normal(2, (1, N, T, S), dtype)
    if "sliding_window" in mask_mode:
        window = (3, 2) if is_causal else (3, 0)
    if mask_mode == ("sliding_window",):
        window = (3, 2)
    if len(mask_mode) == 5:  # everything: a window wide enough that no padded-key row is empty
        window = (T // 2, 2)
    kwargs = dict(
        is_causal=is_causal,
        query_seq_lengths=q_seqlen,
        key_value_seq_lengths=kv_seqlen,
        local_window_size=window,
    )

    args, names = (q, k, v), "qkv"
    if bias is not None:
        args, names = args + (bias,), ("q", "k", "v", "bias")

    def split(args):
        return args[:3], (args[3] if len(args) == 4 else None)

    def ours(*args):
        (q, k, v), b = split(args)
        return attnjax.dot_product_attention(q, k, v, b, mask, **kwargs)

    def reference(*args):
        (q, k, v), b = split(args)
        return jax.nn.dot_product_attention(q, k, v, b, mask, **kwargs)

    if dtype == jnp.float32:
        _check_against(ours, reference, args, names, **F32_TOL)
    else:
        loose = (0.02, 0.02)
        _check_against(
            ours,
            reference,
            args,
            names,
            atol=0.01,
            rtol=0.01,
            grad_tol={"q": loose, "k": loose, "bias": loose},
        )


# ------------------------------ testDotProductAttentionFloat64MaskDebugInfs


def test_float64_unbatched_with_1d_mask_raises_nothing_under_debug_infs():
    """jax regression test #37422: unbatched float64 inputs (T=5, S=7, K=3,
    N=6, H=11) with a 1-D mask `(S,)` must not produce an inf anywhere (so
    `jax.debug_infs` stays silent) and must not warn."""
    T, S, K, N, H = 5, 7, 3, 6, 11
    mask = jnp.arange(S) <= S // 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with jax.debug_infs(True):
            out = attnjax.dot_product_attention(
                jnp.zeros((T, N, H), jnp.float64),
                jnp.zeros((S, K, H), jnp.float64),
                jnp.zeros((S, K, H), jnp.float64),
                mask=mask,
            )
            out.block_until_ready()
    assert out.shape == (T, N, H) and out.dtype == jnp.float64


# ------------------------------------ testDotProductAttentionBiasGradient


@pytest.mark.parametrize("batch_size, use_vmap", [(1, False), (4, True)], ids=["B1", "B4-vmap"])
def test_self_attention_bias_gradient_matches_jax_nn(batch_size, use_vmap):
    """jax testDotProductAttentionBiasGradient: q = k = v = x (bf16, S=128,
    N=4, H=32), bias `(B, N, S, S)`, a 3-D all-True mask `(1, 1, S)`, directly
    and under `vmap`; output at bf16's default 0.01, dbias within upstream's
    0.1. (Upstream's batch 16 is 4 here, and its batch x vmap product two cases.)"""
    B, S, N, H = batch_size, 128, 4, 32
    x = host_random.normal(3, (B, S, N, H), jnp.bfloat16)
    bias = host_random.normal(4, (B, N, S, S), jnp.bfloat16)
    mask = jnp.ones((1, 1, S), jnp.bool_)

    def attention(fn, x, bias, mask):
        return fn(query=x, key=x, value=x, bias=bias, mask=mask, is_causal=False)

    def batched(fn):
        f = functools.partial(attention, fn)
        f = jax.vmap(f, in_axes=(0, 0, None)) if use_vmap else f
        return lambda b: f(x, b, mask)

    ours, reference = batched(attnjax.dot_product_attention), batched(jax.nn.dot_product_attention)
    _check_against(
        ours,
        reference,
        (bias,),
        ["bias"],
        atol=0.01,
        rtol=0.01,
        grad_tol={"bias": (0.1, 0.1)},
        jit=True,
    )


# ------------------------------------------- mask and bias broadcast shapes

BROADCAST_SHAPES = {
    "S": (S_,),
    "1S": (1, S_),
    "11S": (1, 1, S_),
    "B11S": (B_, 1, 1, S_),
    "1H1S": (1, H_, 1, S_),
    "B1T1": (B_, 1, T_, 1),
    "1111": (1, 1, 1, 1),
    "BHTS": (B_, H_, T_, S_),
}


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", list(BROADCAST_SHAPES), ids=list(BROADCAST_SHAPES))
def test_mask_and_bias_broadcast_shapes_match_jax_nn(shape, is_causal):
    """Every mask and bias shape jax.nn broadcasts to `(B, H, T, S)` (it
    left-pads to rank 4), here a mask and a bias of that shape at once, with
    GQA (H=4, K=2) and T != S; output and gradients (the bias gradient has the
    bias's own shape) agree with jax.nn. A `(B, 1, T, 1)` or `(1, 1, 1, 1)`
    mask with any False would empty a whole row, so for those shapes the mask
    is all True here (the empty-row case is tested below).

    The reference gets the mask and bias broadcast to the full shape, which is
    what jax.nn does with them (and needs one jax.nn compilation for all
    shapes); the bias gradient flows back through that broadcast."""
    shape = BROADCAST_SHAPES[shape]
    full = (B_, H_, T_, S_)
    q, k, v = _qkv(5, (B_,), T_, S_, H_, K_, D_)
    mask = _random_mask(6, shape)
    bias = host_random.normal(7, shape, jnp.float32)

    def ours(q, k, v, b):
        return attnjax.dot_product_attention(q, k, v, b, mask, is_causal=is_causal)

    def reference(q, k, v, b):
        return jax.nn.dot_product_attention(
            q, k, v, jnp.broadcast_to(b, full), jnp.broadcast_to(mask, full), is_causal=is_causal
        )

    _check_against(ours, reference, (q, k, v, bias), ("q", "k", "v", "bias"), **F32_TOL)


@pytest.mark.parametrize(
    "mask_shape",
    [None, (S_,), (T_, S_), (1, 1, S_), (1, H_, T_, S_)],
    ids=["none", "S", "TS", "11S", "1HTS"],
)
def test_unbatched_inputs_match_jax_nn(mask_shape):
    """Unbatched q `[T, N, H]`, k/v `[S, K, H]` (jax.nn's TNH layout), with
    masks up to rank 4 (`(1, H, T, S)`, which jax.nn accepts for unbatched
    inputs), a 4-D bias `(1, H, T, S)`, GQA. The reference is jax.nn on the
    example repeated into a batch of two (the shapes the other tests use)."""
    q, k, v = (x[0] for x in _qkv(8, (B_,), T_, S_, H_, K_, D_))
    mask = None if mask_shape is None else _random_mask(9, mask_shape)
    bias = host_random.normal(10, (1, H_, T_, S_), jnp.float32)
    full = (B_, H_, T_, S_)

    def ours(q, k, v, b):
        return attnjax.dot_product_attention(q, k, v, b, mask)

    def reference(q, k, v, b):
        def pair(x):
            return jnp.stack([x, x])

        m = None if mask is None else jnp.broadcast_to(mask, full)
        return jax.nn.dot_product_attention(
            pair(q), pair(k), pair(v), jnp.broadcast_to(b, full), m
        )[0]

    _check_against(ours, reference, (q, k, v, bias), ("q", "k", "v", "bias"), **F32_TOL)


# ---------------------------------------------------- call conventions


def test_positional_bias_and_mask_like_jax_nn():
    """jax.nn's positional order is `(query, key, value, bias, mask)`."""
    q, k, v = _qkv(11, (B_,), T_, S_, H_, K_, D_)
    bias = host_random.normal(12, (B_, 1, T_, S_), jnp.float32)
    mask = _random_mask(13, (B_, H_, T_, S_))
    with jax.default_matmul_precision("highest"):
        positional = attnjax.dot_product_attention(q, k, v, bias, mask)
        keyword = attnjax.dot_product_attention(q, k, v, mask=mask, bias=bias)
        expected = jax.nn.dot_product_attention(q, k, v, bias, mask)
    np.testing.assert_array_equal(positional, keyword)
    _assert_close(positional, expected, **F32_TOL)


@pytest.mark.parametrize(
    "mask_dtype", [jnp.float32, jnp.bfloat16, jnp.float64], ids=lambda d: d.__name__
)
def test_numeric_01_mask_equals_boolean_mask(mask_dtype):
    """A {0, 1} float mask (what `nnx.make_attention_mask` returns by default)
    means the same as its boolean version: 1 attends, 0 does not."""
    q, k, v = _qkv(14, (B_,), T_, S_, H_, K_, D_)
    bool_mask = _random_mask(15, (B_, 1, T_, S_))
    float_mask = bool_mask.astype(mask_dtype)
    got = attnjax.dot_product_attention(q, k, v, mask=float_mask, is_causal=True)
    np.testing.assert_array_equal(
        got, attnjax.dot_product_attention(q, k, v, mask=bool_mask, is_causal=True)
    )
    with jax.default_matmul_precision("highest"):
        expected = _jax_nn(q, k, v, mask=float_mask, is_causal=True)
    _assert_close(got, expected, **F32_TOL)

    def attend(mask):
        return lambda q, k, v: attnjax.dot_product_attention(q, k, v, mask=mask, is_causal=True)

    _, grads = _value_and_vjp(attend(float_mask), (q, k, v), 56)
    _, bool_grads = _value_and_vjp(attend(bool_mask), (q, k, v), 56)
    for g, ref_g in zip(grads, bool_grads):
        np.testing.assert_array_equal(g, ref_g)


def test_flax_make_attention_mask_output_is_accepted():
    """Padding masks from `nnx.make_attention_mask` (float32 and bool) and
    flax's causal mask, combined with `nnx.combine_masks`, as jax.nn takes them."""
    q, k, v = _qkv(16, (B_,), T_, S_, H_, K_, D_)
    key_valid = jnp.arange(S_)[None, :] < jnp.array(
        [[S_], [3]]
    )  # [B, S]; example 1 has 4 padding keys
    query_valid = jnp.ones((B_, T_), jnp.bool_)
    for dtype in (jnp.float32, jnp.bool_):
        padding = nnx.make_attention_mask(query_valid, key_valid, dtype=dtype)
        assert padding.shape == (B_, 1, T_, S_)
        # flax's causal mask is square (self-attention); its first T rows are the top-left causal mask.
        causal = nnx.make_causal_mask(jnp.ones((B_, S_), jnp.int32), dtype=dtype)[:, :, :T_, :]
        mask = nnx.combine_masks(padding, causal, dtype=dtype)
        got = attnjax.dot_product_attention(q, k, v, mask=mask)
        with jax.default_matmul_precision("highest"):
            expected = _jax_nn(q, k, v, mask=mask)
        _assert_close(got, expected, what=str(dtype), **F32_TOL)
        np.testing.assert_allclose(
            got, attnjax.dot_product_attention(q, k, v, mask=padding, is_causal=True), atol=1e-6
        )


@pytest.mark.parametrize("scale", [0.1, 1.0, 2.5])
def test_scale_matches_jax_nn_and_float64_reference(scale):
    q, k, v = _qkv(17, (B_,), T_, S_, H_, K_, D_)
    bias = host_random.normal(18, (H_, T_, S_), jnp.float32)

    def ours(q, k, v):
        return attnjax.dot_product_attention(q, k, v, bias=bias, scale=scale)

    def reference(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, bias=bias[None], scale=scale)

    _check_against(ours, reference, (q, k, v), "qkv", **F32_TOL)
    q64, k64, v64 = (x.astype(jnp.float64) for x in (q, k, v))
    got = attnjax.dot_product_attention(q64, k64, v64, bias=bias.astype(jnp.float64), scale=scale)
    ref, _ = softmax_attention(q64, k64, v64, bias=bias, scale=scale)
    np.testing.assert_allclose(got, ref, atol=1e-12)


def test_temperature_is_scale_and_bias_over_temperature():
    """attnjax's temperature t equals jax.nn with scale / t and bias / t."""
    q, k, v = _qkv(19, (B_,), T_, S_, H_, K_, D_)
    bias = host_random.normal(20, (B_, 1, T_, S_), jnp.float32)
    t = 0.7

    def ours(q, k, v, b):
        return attnjax.dot_product_attention(q, k, v, b, None, temperature=t, is_causal=True)

    def reference(q, k, v, b):
        return jax.nn.dot_product_attention(
            q, k, v, b / t, None, scale=D_**-0.5 / t, is_causal=True
        )

    _check_against(ours, reference, (q, k, v, bias), ("q", "k", "v", "bias"), **F32_TOL)


@pytest.mark.parametrize("implementation", [None, "xla"], ids=["default", "xla"])
def test_implementation_argument(implementation):
    q, k, v = _qkv(21, (B_,), T_, S_, H_, K_, D_)
    mask = _random_mask(22, (B_, 1, T_, S_))
    with jax.default_matmul_precision("highest"):
        got = attnjax.dot_product_attention(
            q, k, v, mask=mask, is_causal=True, implementation=implementation
        )
        expected = jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=True)
    _assert_close(got, expected, **F32_TOL)


# -------------------------------------------------- sequence lengths


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("which", ["kv", "q", "both"])
def test_sequence_lengths_match_jax_nn_and_padding_masks(which, is_causal):
    """`key_value_seq_lengths` masks keys s >= L_kv[b]; `query_seq_lengths`
    zeroes the outputs of queries t >= L_q[b] (in jax.nn too); T != S, GQA,
    combined with a bias and a mask."""
    q, k, v = _qkv(23, (B_,), T_, S_, H_, K_, D_)
    bias = host_random.normal(24, (B_, H_, T_, S_), jnp.float32)
    mask = _random_mask(25, (1, H_, T_, S_))
    q_len = jnp.array([T_, 2], jnp.int32) if which in ("q", "both") else None
    kv_len = jnp.array([3, S_], jnp.int32) if which in ("kv", "both") else None
    kwargs = dict(is_causal=is_causal, query_seq_lengths=q_len, key_value_seq_lengths=kv_len)

    def ours(q, k, v, b):
        return attnjax.dot_product_attention(q, k, v, b, mask, **kwargs)

    def reference(q, k, v, b):
        return jax.nn.dot_product_attention(q, k, v, b, mask, **kwargs)

    _check_against(ours, reference, (q, k, v, bias), ("q", "k", "v", "bias"), **F32_TOL)

    # The same as an explicit key-padding mask, with the padded queries zeroed.
    explicit = mask
    if kv_len is not None:
        explicit = attnjax.combine_masks(
            explicit, attnjax.key_padding_mask(lengths=kv_len, kv_len=S_)
        )
    out = attnjax.dot_product_attention(q, k, v, bias, explicit, is_causal=is_causal)
    if q_len is not None:
        valid = (jnp.arange(T_)[None, :] < q_len[:, None]).astype(out.dtype)  # [B, T]
        out = out * valid[:, :, None, None]
        np.testing.assert_array_equal(ours(q, k, v, bias)[1, 2:], 0.0)
    np.testing.assert_allclose(ours(q, k, v, bias), out, atol=1e-6)


def test_sequence_lengths_are_traceable_under_jit_and_grad():
    q, k, v = _qkv(26, (B_,), T_, S_, H_, K_, D_)

    def loss(q, lengths):
        return jnp.sum(attnjax.dot_product_attention(q, k, v, key_value_seq_lengths=lengths) ** 2)

    def reference(q, lengths):
        return jnp.sum(jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths) ** 2)

    jitted = jax.jit(jax.value_and_grad(loss))  # lengths are traced: one compilation for both calls
    for lengths in ([2, 6], [S_, 1]):
        lengths = jnp.array(lengths, jnp.int32)
        value, grad = jitted(q, lengths)
        with jax.default_matmul_precision("highest"):
            ref_value, ref_grad = jax.value_and_grad(reference)(q, lengths)
        _assert_close(value, ref_value, **F32_TOL)
        _assert_close(grad, ref_grad, **F32_TOL)


# ---------------------------------------------------------- local window


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("window", [0, 1, 2, (2, 0), (0, 2), (3, 1)], ids=str)
def test_local_window_matches_jax_nn(window, is_causal):
    """`local_window_size=(left, right)`: query t sees keys t-left..t+right
    (an int w means (w, w)), aligned top-left for T != S as in jax.nn; the
    same as `attnjax.local_window_mask` passed as a mask."""
    q, k, v = _qkv(27, (B_,), T_, S_, H_, K_, D_)
    bias = host_random.normal(28, (1, H_, T_, S_), jnp.float32)

    def ours(q, k, v, b):
        return attnjax.dot_product_attention(
            q, k, v, b, local_window_size=window, is_causal=is_causal
        )

    def reference(q, k, v, b):
        return jax.nn.dot_product_attention(
            q, k, v, b, local_window_size=window, is_causal=is_causal
        )

    _check_against(ours, reference, (q, k, v, bias), ("q", "k", "v", "bias"), **F32_TOL)
    left, right = (window, window) if isinstance(window, int) else window
    band = attnjax.local_window_mask(T_, S_, left=left, right=right)
    np.testing.assert_allclose(
        ours(q, k, v, bias),
        attnjax.dot_product_attention(q, k, v, bias, band, is_causal=is_causal),
        atol=1e-6,
    )


# ------------------------------------------------ the documented difference


def test_fully_masked_rows_give_zero_where_jax_nn_averages_values():
    """The one place attnjax and jax.nn differ: a query with every key masked
    (here through a `(B, 1, T, 1)` mask and through one `(B, H, T, S)` row) gets
    output 0 in attnjax; jax.nn gives the mean of the values. Every other row,
    and every gradient, equals jax.nn's with those rows zeroed."""
    q, k, v = _qkv(29, (B_,), T_, S_, H_, K_, D_)
    rows = np.ones((B_, 1, T_, 1), bool)
    rows[0, 0, 2, 0] = rows[1, 0, 4, 0] = False
    full = np.array(_random_mask(30, (B_, H_, T_, S_)))
    full[1, 3, 0, :] = False  # head 3 of query 0 in example 1
    mask = jnp.asarray(rows & full)
    row_valid = jnp.any(mask, axis=-1)  # [B, H, T]
    keep = jnp.swapaxes(row_valid, 1, 2)[..., None].astype(jnp.float32)  # [B, T, H, 1]

    out = attnjax.dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(out[0, 2], 0.0)
    np.testing.assert_array_equal(out[1, 4], 0.0)
    np.testing.assert_array_equal(out[1, 0, 3], 0.0)
    jax_out = jax.nn.dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(
        jax_out[0, 2], jnp.mean(jnp.repeat(v[0], 2, axis=1), axis=0), atol=1e-5
    )

    def ours(q, k, v):
        return attnjax.dot_product_attention(q, k, v, mask=mask)

    def reference(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, mask=mask) * keep

    _check_against(ours, reference, (q, k, v), "qkv", **F32_TOL)
    grads = jax.grad(lambda *a: jnp.sum(ours(*a) ** 2), argnums=(0, 1, 2))(q, k, v)
    assert all(np.all(np.isfinite(g)) for g in grads)
    np.testing.assert_array_equal(grads[0][0, 2], 0.0)


# ---------------------------------------------------- weights and dropout


def test_return_weights_are_consistent_with_the_output():
    """With the jax.nn-style options, weights `[B, H, T, S]` rows sum to 1, are
    zero outside the allowed keys, and weights @ v is the output."""
    q, k, v = _qkv(31, (B_,), T_, S_, H_, K_, D_)
    kv_len = jnp.array([4, S_], jnp.int32)
    out, w = attnjax.dot_product_attention(
        q,
        k,
        v,
        is_causal=True,
        key_value_seq_lengths=kv_len,
        local_window_size=(2, 1),
        return_weights=True,
    )
    assert w.shape == (B_, H_, T_, S_)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
    allowed = np.asarray(attnjax.local_window_mask(T_, S_, left=2, right=0))
    np.testing.assert_array_equal(np.asarray(w)[:, :, ~allowed], 0.0)
    np.testing.assert_array_equal(np.asarray(w)[0, :, :, 4:], 0.0)
    v_full = jnp.repeat(v, H_ // K_, axis=2)
    with jax.default_matmul_precision("highest"):
        np.testing.assert_allclose(jnp.einsum("bhts,bshd->bthd", w, v_full), out, atol=1e-5)
        expected = jax.nn.dot_product_attention(
            q, k, v, is_causal=True, key_value_seq_lengths=kv_len, local_window_size=(2, 1)
        )
    _assert_close(out, expected, **F32_TOL)


def test_dropout_is_explicit_deterministic_and_unbiased():
    """`dropout_rate` with an explicit `dropout_rng`: rate 0 changes nothing, the
    same key gives the same output, another key another output, and averaged
    over keys the (inverted) dropout output is the dropout-free output."""
    q, k, v = _qkv(32, (B_,), T_, S_, H_, K_, D_)
    exact = attnjax.dot_product_attention(q, k, v)
    rng = jax.random.key(33)
    np.testing.assert_allclose(
        attnjax.dot_product_attention(q, k, v, dropout_rate=0.0, dropout_rng=rng), exact, atol=1e-7
    )
    a = attnjax.dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=rng)
    b = attnjax.dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=rng)
    c = attnjax.dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=jax.random.key(34))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c) and not np.allclose(a, exact)
    n = 4000
    keys = jax.random.split(jax.random.key(35), n)
    dropped = jax.jit(
        jax.vmap(lambda r: attnjax.dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=r))
    )
    samples = np.asarray(dropped(keys), np.float64)
    standard_error = samples.std(axis=0) / np.sqrt(n)
    assert np.all(np.abs(samples.mean(axis=0) - np.asarray(exact)) <= 5 * standard_error + 1e-6)


# ------------------------------------------------ flax nnx.dot_product_attention


def test_gqa_parity_with_jax_nn_and_flax():
    """flax test_gqa_parity_with_jax (4 query heads, 2 kv heads; upstream at
    B=2, T=S=8, D=16 here at the shared small shapes with T != S); flax's
    tolerance is 1e-3, ours 1e-5."""
    q, k, v = _qkv(36, (B_,), T_, S_, H_, K_, D_)
    with jax.default_matmul_precision("highest"):
        got = attnjax.dot_product_attention(q, k, v)
        _assert_close(got, jax.nn.dot_product_attention(q, k, v), **F32_TOL)
        _assert_close(got, nnx.dot_product_attention(q, k, v), **F32_TOL)


def test_gqa_shapes():
    """flax test_gqa_shapes: 6 query heads over 3 kv heads, T=4 != S=5."""
    q, k, v = (
        jax.ShapeDtypeStruct(s, jnp.float32) for s in ((2, 4, 6, 8), (2, 5, 3, 8), (2, 5, 3, 8))
    )
    out = jax.eval_shape(attnjax.dot_product_attention, q, k, v)
    assert out.shape == (2, 4, 6, 8) and out.dtype == jnp.float32


@pytest.mark.parametrize("is_cross_attention", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("use_padding", [False, True], ids=["no_padding", "padding"])
def test_causal_mask_equivalence_with_extra_batch_dim(use_padding, is_cross_attention):
    """flax test_causal_mask_equivalence: 5-D inputs `[B, 1, T, N, H]`; a
    pre-combined float causal(+padding) mask equals `is_causal=True` with the
    padding mask alone, and both equal flax/jax.nn. (Upstream pads the last two
    keys, which at its T = S = 2 empties every row of the self-attention case;
    here only the last key is padded. Upstream's B=1, N=2, T=2, S=4, H=4;
    here the shared small GQA shapes.)"""
    b, n, t = B_, H_, T_
    s = S_ if is_cross_attention else T_
    q, k, v = (x[:, None] for x in _qkv(38, (B_,), T_, S_, H_, K_, D_))  # [B, 1, T|S, N|K, H]
    k, v = k[:, :, :s], v[:, :, :s]
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((t, s), jnp.bool_)), (b, 1, n, t, s))
    padding = None
    if use_padding:
        padding = jnp.ones((b, 1, 1, t, s), jnp.bool_).at[..., -1:].set(False)
    combined = nnx.combine_masks(padding, causal, dtype=q.dtype)  # float32 {0, 1}
    pre_combined = attnjax.dot_product_attention(q, k, v, mask=combined)
    with_causal = attnjax.dot_product_attention(q, k, v, mask=padding, is_causal=True)
    np.testing.assert_allclose(pre_combined, with_causal, atol=1e-6)
    with jax.default_matmul_precision("highest"):
        expected = nnx.dot_product_attention(q, k, v, mask=combined, deterministic=True)
    _assert_close(pre_combined, expected, **F32_TOL)


@pytest.mark.parametrize(
    "shapes",
    [
        ((2, 16, 4, 8), (16, 4, 8), (16, 4, 8)),  # ranks differ
        ((2, 16, 4, 8), (3, 16, 4, 8), (3, 16, 4, 8)),  # batch dims differ
        ((2, 16, 4, 8), (2, 16, 4, 8), (2, 15, 4, 8)),  # key/value lengths differ
        ((2, 16, 4, 8), (2, 16, 4, 7), (2, 16, 4, 8)),  # query/key depths differ
        ((1, 4, 5, 8), (1, 4, 2, 8), (1, 4, 2, 8)),  # 2 kv heads do not divide 5 query heads
    ],
    ids=["rank", "batch", "kv_length", "depth", "heads"],
)
def test_invalid_shapes_raise_value_error_naming_shapes(shapes):
    """flax TestDotProductAttentionValidation and test_gqa_invalid_heads."""
    q, k, v = (jnp.ones(s, jnp.float32) for s in shapes)
    with pytest.raises(ValueError, match=r"shape"):
        attnjax.dot_product_attention(q, k, v)


# ================================================================= modules


def _flax_mha(num_heads, in_features, **kwargs):
    return nnx.MultiHeadAttention(num_heads, in_features, decode=False, rngs=nnx.Rngs(1), **kwargs)


def _randomise_flax_params(theirs, seed):
    """Give flax's biases and LayerNorm scales non-trivial values, so copying them matters."""
    rng = np.random.default_rng(seed)

    def draw(x):
        return jnp.asarray(rng.standard_normal(x.shape).astype(x.dtype))

    for name in ("query", "key", "value", "out"):
        layer = getattr(theirs, name)
        if layer.bias is not None:
            layer.bias[...] = 0.1 * draw(layer.bias)
    if theirs.normalize_qk:
        for ln in (theirs.query_ln, theirs.key_ln):
            ln.scale[...] = 1.0 + 0.1 * draw(ln.scale)


def _copy_flax_into_ours(theirs: nnx.MultiHeadAttention, ours: nn.MultiHeadAttention) -> None:
    """flax's `[F, H, Dh]` / `[H, Dh, F']` kernels into our `[F, H*Dh]` / `[H*Dh, F']`."""
    for name in ("query", "key", "value", "out"):
        src, dst = getattr(theirs, name), getattr(ours, name)
        dst.kernel[...] = src.kernel[...].reshape(dst.kernel.shape)
        if src.bias is not None:
            dst.bias[...] = src.bias[...].reshape(dst.bias.shape)
    if theirs.normalize_qk:
        ours.query_ln.scale[...] = theirs.query_ln.scale[...]
        ours.key_ln.scale[...] = theirs.key_ln.scale[...]


def _pair(num_heads=4, in_features=16, *, seed=40, **kwargs):
    """A flax module with random parameters and our module holding the same ones."""
    theirs = _flax_mha(num_heads, in_features, **kwargs)
    _randomise_flax_params(theirs, seed)
    ours = nn.MultiHeadAttention(in_features, num_heads, rngs=nnx.Rngs(0), **kwargs)
    _copy_flax_into_ours(theirs, ours)
    return theirs, ours


# The module tests share one size (in_features 16, 4 heads of width 4, x `[2, 6, 16]`).
F_, MH_, MT_ = 16, 4, 6


def _x(seed):
    return host_random.normal(seed, (2, MT_, F_), jnp.float32)


def test_module_basic_shapes():
    """flax test_basic: 2 heads, in 3, qkv 6, out 6, input (1, 7, 3) (traced
    for shapes only)."""

    def run():
        module = nn.MultiHeadAttention(3, 2, qkv_features=6, out_features=6, rngs=nnx.Rngs(0))
        return module(jnp.ones((1, 7, 3), jnp.float32))

    assert nnx.eval_shape(run).shape == (1, 7, 6)


def test_module_sows_weights_only_where_asked():
    """flax test_multihead_sow_attention_weights: of three stacked layers, only
    those called with `sow_weights=True` store `(B, H, T, T)` weights."""

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nn.MultiHeadAttention(F_, MH_, rngs=rngs) for _ in range(3)])

        def __call__(self, x, sow_weights=False):
            x = self.layers[0](x, sow_weights=sow_weights)
            x = self.layers[1](x)
            return self.layers[2](x, sow_weights=sow_weights)

    model = Model(nnx.Rngs(0))
    x = _x(39)
    _, inter = nnx.capture(model, nnx.Intermediate)(x, True)
    assert inter["layers"][0]["attention_weights"][0].shape == (2, MH_, MT_, MT_)
    assert 1 not in inter["layers"]
    assert inter["layers"][2]["attention_weights"][0].shape == (2, MH_, MT_, MT_)
    _, inter = nnx.capture(model, nnx.Intermediate)(x)
    assert not inter


MODULE_CASES = [
    dict(use_bias=True, normalize_qk=False),
    dict(use_bias=False, normalize_qk=True),
    dict(use_bias=True, normalize_qk=True, num_kv_heads=2),
    dict(use_bias=False, normalize_qk=False, num_kv_heads=2),
]


@pytest.mark.parametrize(
    "case", MODULE_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items())
)
def test_module_equals_flax_with_copied_weights(case):
    """flax TestLinenConsistency (use_bias x normalize_qk), across
    implementations, plus GQA (flax's `num_kv_heads`): flax's
    `nnx.MultiHeadAttention` weights copied into ours give the same output
    (self-attention with a mask, causal or not, and cross-attention)."""
    theirs, ours = _pair(MH_, F_, **case)
    x, ctx = _x(41), _x(42)
    mask = _random_mask(43, (2, 1, MT_, MT_))
    with jax.default_matmul_precision("highest"):
        for is_causal in (False, True):
            got = ours(x, mask=mask, is_causal=is_causal)
            expected = theirs(x, mask=mask, is_causal=is_causal)
            _assert_close(got, expected, what=f"self, is_causal={is_causal}", **F32_TOL)
        _assert_close(ours(x, ctx), theirs(x, ctx), what="cross", **F32_TOL)


def test_module_float16_equals_flax():
    """flax's dtype axis of TestLinenConsistency (float16): with computation
    dtype float16 both modules give the same output to fp16 precision."""
    theirs, ours = _pair(MH_, F_, dtype=jnp.float16, normalize_qk=True)
    x = _x(44)
    got, expected = ours(x, is_causal=True), theirs(x, is_causal=True)
    assert got.dtype == expected.dtype == jnp.float16
    _assert_close(got, expected, atol=1e-2, rtol=1e-2)


def test_module_gradients_equal_flax():
    """Parameter gradients of our module equal flax's, in flax's layout (GQA,
    QK-norm, mask and causal)."""
    theirs, ours = _pair(MH_, F_, num_kv_heads=2, normalize_qk=True)
    x = _x(45)
    mask = _random_mask(46, (2, 1, MT_, MT_))

    def loss(m):
        return jnp.sum(jnp.sin(m(x, mask=mask, is_causal=True)))

    with jax.default_matmul_precision("highest"):
        grad = nnx.jit(nnx.grad(loss))  # one compilation per module beats eager op-by-op here
        g_ours, g_theirs = grad(ours), grad(theirs)
    for name in ("query", "key", "value", "out"):
        for param in ("kernel", "bias"):
            got = g_ours[name][param][...]
            want = g_theirs[name][param][...].reshape(got.shape)
            _assert_close(got, want, what=f"{name}.{param}", **F32_TOL)
    for ln in ("query_ln", "key_ln"):
        _assert_close(g_ours[ln]["scale"][...], g_theirs[ln]["scale"][...], what=ln, **F32_TOL)


def test_gqa_module_kernel_and_output_shapes():
    """flax test_gqa_multihead_attention: 32 heads over 8 kv heads, qkv 2048
    (traced for shapes only)."""
    in_feat, n_heads, n_kv, qkv_feat = 128, 32, 8, 2048
    head_dim = qkv_feat // n_heads

    def make():
        return nn.MultiHeadAttention(
            in_feat, n_heads, qkv_features=qkv_feat, num_kv_heads=n_kv, rngs=nnx.Rngs(0)
        )

    model = nnx.eval_shape(make)
    assert model.query.kernel.shape == (in_feat, n_heads * head_dim)
    assert model.key.kernel.shape == model.value.kernel.shape == (in_feat, n_kv * head_dim)
    out = nnx.eval_shape(lambda: make()(jnp.ones((1, 10, in_feat), jnp.float32)))
    assert out.shape == (1, 10, in_feat)


@pytest.mark.parametrize("num_kv_heads", [None, 2], ids=["mha", "gqa"])
def test_module_takes_jax_nn_dot_product_attention(num_kv_heads):
    """`attention_fn=jax.nn.dot_product_attention` gives the default's output
    and parameter gradients (boolean mask, causal, GQA)."""
    default = nn.MultiHeadAttention(F_, MH_, num_kv_heads=num_kv_heads, rngs=nnx.Rngs(0))
    with_jax = nn.MultiHeadAttention(
        F_,
        MH_,
        num_kv_heads=num_kv_heads,
        attention_fn=jax.nn.dot_product_attention,
        rngs=nnx.Rngs(0),
    )
    x = _x(48)
    mask = _random_mask(49, (2, 1, MT_, MT_))
    with jax.default_matmul_precision("highest"):
        _assert_close(
            with_jax(x, mask=mask, is_causal=True), default(x, mask=mask, is_causal=True), **F32_TOL
        )
        _assert_close(with_jax(x), default(x), **F32_TOL)

        def loss(m):
            return jnp.sum(m(x, mask=mask, is_causal=True) ** 2)

        grad = nnx.jit(nnx.grad(loss))
        g_default, g_jax = grad(default), grad(with_jax)
    for a, b in zip(jax.tree.leaves(g_default), jax.tree.leaves(g_jax)):
        _assert_close(jnp.asarray(a), jnp.asarray(b), **F32_TOL)


@pytest.mark.parametrize("mask_dtype", [jnp.float32, jnp.bool_], ids=["float32", "bool"])
def test_module_takes_flax_mask_helpers(mask_dtype):
    """`nnx.make_attention_mask` (key padding) and `nnx.make_causal_mask`,
    combined by `nnx.combine_masks`, passed as `mask=` to our module give
    flax's module's output with the same weights and mask."""
    theirs, ours = _pair(MH_, F_)
    x = _x(50)
    tokens = jnp.array([[3, 1, 4, 1, 5, 9], [2, 6, 5, 0, 0, 0]], jnp.int32)  # 0 = padding
    padding = nnx.make_attention_mask(jnp.ones_like(tokens), tokens > 0, dtype=mask_dtype)
    causal = nnx.make_causal_mask(tokens, dtype=mask_dtype)
    with jax.default_matmul_precision("highest"):
        for mask in (padding, causal, nnx.combine_masks(padding, causal, dtype=mask_dtype)):
            _assert_close(ours(x, mask=mask), theirs(x, mask=mask), **F32_TOL)
        _assert_close(
            ours(x, mask=padding, is_causal=True),
            theirs(x, mask=padding, is_causal=True),
            **F32_TOL,
        )


def test_module_under_vmap_equals_batched_call():
    """Mapping the module over the batch axis (`nnx.vmap`, the module
    broadcast, each example unbatched `[T, F]` with its own mask) equals the
    batched call."""
    module = nn.MultiHeadAttention(F_, MH_, num_kv_heads=2, rngs=nnx.Rngs(0))
    x = _x(51)
    mask = _random_mask(52, (2, 1, MT_, MT_))

    @nnx.jit
    def mapped(module, x, mask):
        return nnx.vmap(lambda m, x, mask: m(x, mask=mask, is_causal=True), in_axes=(None, 0, 0))(
            module, x, mask
        )

    np.testing.assert_allclose(
        mapped(module, x, mask), module(x, mask=mask, is_causal=True), atol=1e-5
    )
