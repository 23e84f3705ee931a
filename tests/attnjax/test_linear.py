"""Linear attention (attnjax.linear): parallel, causal chunked and recurrent forms.

References are float64 NumPy quadratic forms phi(Q) phi(K)^T, with feature
maps re-implemented from their formulas. Inputs are NumPy arrays and the
library calls are jitted: whole-program compiles are far cheaper than
op-by-op dispatch, which keeps this file fast.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from attnjax import features, linear, masks
from tests.reference import softmax_attention

attend = jax.jit(
    linear.linear_attention, static_argnames=("feature_map", "is_causal", "chunk_size", "eps")
)
attend_weights = jax.jit(
    linear.linear_attention_weights, static_argnames=("feature_map", "is_causal", "eps")
)

# One FAVOR+ map for the exactness tests: W [24, 8], float64.
W8 = np.asarray(features.orthogonal_random_matrix(jax.random.key(7), 24, 8, dtype=jnp.float64))
FAVOR8 = features.favor_plus(W8)


def qkv(seed, batch, t, s, h, k, d, dtype=np.float64, dv=None, scale=1.0):
    """Standard normal q `[*batch, t, h, d]`, k `[*batch, s, k, d]` (times scale), v `[*batch, s, k, dv]`."""
    rng = np.random.default_rng(seed)
    q = scale * rng.standard_normal(batch + (t, h, d))
    key = scale * rng.standard_normal(batch + (s, k, d))
    v = rng.standard_normal(batch + (s, k, dv or d))
    return q.astype(dtype), key.astype(dtype), v.astype(dtype)


def np_elu_plus_one(x):
    x = np.asarray(x, np.float64)
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def np_favor(w):
    """FAVOR+ without any stabiliser, float64 (Choromanski et al. 2021)."""
    w = np.asarray(w, np.float64)

    def phi(x):
        x = np.asarray(x, np.float64) / w.shape[1] ** 0.25
        return np.exp(x @ w.T - 0.5 * np.sum(x * x, -1, keepdims=True)) / np.sqrt(w.shape[0])

    return phi


FEATURE_MAPS = {
    "elu_plus_one": (features.elu_plus_one, np_elu_plus_one),
    "favor_plus": (FAVOR8, np_favor(W8)),
}


def visible(t, s, causal, valid):
    """bool `[..., 1, T, S]`: query t sees key s (s <= t if causal, top-left; `valid` `[..., S]`)."""
    keep = np.tril(np.ones((t, s), bool)) if causal else np.ones((t, s), bool)
    if valid is None:
        return keep
    return keep & np.asarray(valid)[..., None, None, :]


def quadratic_reference(q, k, v, np_phi, *, causal=False, valid=None, eps=0.0):
    """rows of (phi(Q) phi(K)^T ⊙ mask) / (row sum + eps), times V, in float64; (out, weights).

    Causal masks are top-left aligned (query t sees keys s <= t); `valid` is `[..., S]`.
    """
    num_heads, num_kv = q.shape[-2], k.shape[-2]
    pq = np_phi(np.asarray(q, np.float64))
    pk = np.repeat(np_phi(np.asarray(k, np.float64)), num_heads // num_kv, axis=-2)
    v = np.repeat(np.asarray(v, np.float64), num_heads // num_kv, axis=-2)
    scores = np.einsum("...thm,...shm->...hts", pq, pk)
    scores = np.where(visible(*scores.shape[-2:], causal, valid), scores, 0.0)
    total = scores.sum(-1, keepdims=True) + eps
    weights = scores / np.where(total != 0, total, 1.0)
    return np.einsum("...hts,...she->...the", weights, v), weights


def quadratic_reference_vjp(q, k, v, np_phi, np_dphi, g, *, causal=False, valid=None):
    """Gradients (dq, dk, dv) of sum(g * out) for `quadratic_reference`'s out, by hand, float64.

    With A = phi(Q) phi(K)^T (masked), W = A / rowsum(A), out = W V:
    dW = g V^T, dA_ts = (dW_ts - sum_s' dW_ts' W_ts') / rowsum_t, dphi(Q) = dA phi(K),
    dphi(K) = dA^T phi(Q), dV = W^T g; each summed over the query heads that share a key head.
    """
    q, k, v, g = (np.asarray(x, np.float64) for x in (q, k, v, g))
    num_heads, num_kv = q.shape[-2], k.shape[-2]
    group = num_heads // num_kv
    pq, pk = np_phi(q), np.repeat(np_phi(k), group, axis=-2)
    vv = np.repeat(v, group, axis=-2)
    scores = np.einsum("...thm,...shm->...hts", pq, pk)
    keep = visible(*scores.shape[-2:], causal, valid)
    scores = np.where(keep, scores, 0.0)
    total = scores.sum(-1, keepdims=True)
    safe = np.where(total != 0, total, 1.0)
    weights = scores / safe
    d_weights = np.einsum("...the,...she->...hts", g, vv)
    d_scores = (d_weights - np.sum(d_weights * weights, -1, keepdims=True)) / safe
    d_scores = np.where(keep & (total != 0), d_scores, 0.0)
    d_pq = np.einsum("...hts,...shm->...thm", d_scores, pk)
    d_pk = np.einsum("...hts,...thm->...shm", d_scores, pq)
    d_v = np.einsum("...hts,...the->...she", weights, g)

    def per_key_head(x):  # [..., S, H, X] -> [..., S, K, X]
        return x.reshape(x.shape[:-2] + (num_kv, group, x.shape[-1])).sum(-2)

    return d_pq * np_dphi(q), per_key_head(d_pk) * np_dphi(k), per_key_head(d_v)


def log_quadratic_reference(q, k, v, np_log_phi, *, causal=False):
    """`quadratic_reference` from log phi, in log space (float64): exact where phi underflows.

    weights_ts = softmax over visible s of logsumexp_m(log phi(q_t)_m + log phi(k_s)_m).
    """
    num_heads, num_kv = q.shape[-2], k.shape[-2]
    lq = np_log_phi(np.asarray(q, np.float64))  # [..., T, H, M]
    lk = np.repeat(np_log_phi(np.asarray(k, np.float64)), num_heads // num_kv, axis=-2)
    v = np.repeat(np.asarray(v, np.float64), num_heads // num_kv, axis=-2)
    terms = lq.swapaxes(-3, -2)[..., :, None, :] + lk.swapaxes(-3, -2)[..., None, :, :]
    top = terms.max(-1, keepdims=True)
    logits = np.log(np.exp(terms - top).sum(-1)) + top[..., 0]  # [..., H, T, S]
    logits = np.where(visible(*logits.shape[-2:], causal, None), logits, -np.inf)
    logits = logits - logits.max(-1, keepdims=True)
    weights = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return np.einsum("...hts,...she->...the", weights, v), weights


def scan_steps(q, k, v, feature_map):
    """Causal linear attention by scanning `linear_attention_step` over positions (state in q's dtype)."""
    m = features.num_features(feature_map, q.shape[-1])
    state = linear.init_state(q.shape[:-3], k.shape[-2], m, v.shape[-1], q.dtype)

    def step(state, qkv_t):
        return linear.linear_attention_step(state, *qkv_t, feature_map=feature_map)

    def move(x):
        return jnp.moveaxis(x, -3, 0)

    _, out = jax.lax.scan(step, state, (move(q), move(k), move(v)))
    return jnp.moveaxis(out, 0, -3)


def finite(*arrays):
    return all(np.all(np.isfinite(np.asarray(a, np.float64))) for a in arrays)


# ---------------------------------------------------------------- exactness of the forms


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
def test_noncausal_matches_quadratic_form(name):
    phi, np_phi = FEATURE_MAPS[name]
    q, k, v = qkv(0, (2,), 9, 11, 4, 2, 8, dv=5)  # float64, GQA H=4, K=2, T != S
    out = attend(q, k, v, feature_map=phi)
    ref, _ = quadratic_reference(q, k, v, np_phi)
    assert out.shape == (2, 9, 4, 5) and out.dtype == jnp.float64
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
@pytest.mark.slow
def test_causal_chunked_equals_recurrent_scan_and_quadratic_form(name):
    """Every chunk size from 1 to past T = 13 (only 1 and 13 divide it)."""
    phi, np_phi = FEATURE_MAPS[name]
    q, k, v = qkv(1, (2,), 13, 13, 4, 2, 8, dv=5)  # float64
    ref, _ = quadratic_reference(q, k, v, np_phi, causal=True)
    sizes = (1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 64)

    @jax.jit  # one program for every form: a single compile
    def every_form(q, k, v):
        chunked = [
            linear.linear_attention(q, k, v, feature_map=phi, is_causal=True, chunk_size=c)
            for c in sizes
        ]
        return scan_steps(q, k, v, phi), chunked

    recurrent, chunked = every_form(q, k, v)
    np.testing.assert_allclose(recurrent, ref, rtol=1e-10, atol=1e-12)
    for chunk_size, out in zip(sizes, chunked):
        np.testing.assert_allclose(
            out, ref, rtol=1e-10, atol=1e-12, err_msg=f"chunk_size={chunk_size}"
        )


@pytest.mark.parametrize("name", ["relu", "relu_random", "trig_random"])
def test_other_feature_maps_match_quadratic_form(name):
    """The linear algebra is exact for any feature map, positive or not (features from the library)."""
    w = features.gaussian_random_matrix(jax.random.key(9), 12, 8, dtype=jnp.float64)
    phi = {
        "relu": features.relu,
        "relu_random": features.relu_random(w),
        "trig_random": features.trig_random(w),
    }[name]
    q, k, v = qkv(19, (2,), 9, 9, 2, 2, 8, scale=0.5)  # float64
    both = jax.jit(
        lambda q, k, v: [
            linear.linear_attention(q, k, v, feature_map=phi, is_causal=c, chunk_size=4)
            for c in (False, True)
        ]
    )

    def np_phi(x):
        return np.asarray(phi(x), np.float64)

    for causal, out in zip((False, True), both(q, k, v)):
        ref, _ = quadratic_reference(q, k, v, np_phi, causal=causal)
        np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("t, s", [(7, 11), (11, 7)])
def test_causal_with_different_lengths_is_top_left_aligned(t, s):
    q, k, v = qkv(2, (), t, s, 2, 2, 8)  # float64
    out = attend(q, k, v, feature_map=features.elu_plus_one, is_causal=True, chunk_size=3)
    ref, _ = quadratic_reference(q, k, v, np_elu_plus_one, causal=True)
    np.testing.assert_allclose(out, ref, rtol=1e-10)


@pytest.mark.parametrize("is_causal", [False, True])
def test_weights_times_values_is_the_output(is_causal):
    q, k, v = qkv(3, (2,), 10, 10, 4, 2, 8, dv=3)  # float64
    valid = np.array([[True] * 10, [True] * 6 + [False] * 4])  # bool [2, S]
    mask = masks.key_padding_mask(valid=valid)  # bool [2, 1, 1, S]
    out = attend(q, k, v, feature_map=FAVOR8, is_causal=is_causal, mask=mask, chunk_size=4)
    weights = attend_weights(q, k, feature_map=FAVOR8, is_causal=is_causal, mask=mask)
    assert weights.shape == (2, 4, 10, 10) and weights.dtype == jnp.float64
    weights = np.asarray(weights)
    np.testing.assert_allclose(
        np.einsum("bhts,bshe->bthe", weights, np.repeat(v, 2, axis=-2)), out, rtol=1e-10, atol=1e-12
    )
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(-1), np.ones((2, 4, 10)), rtol=1e-12)
    np.testing.assert_array_equal(weights[1, :, :, 6:], np.zeros((4, 10, 4)))
    _, ref_weights = quadratic_reference(q, k, v, np_favor(W8), causal=is_causal, valid=valid)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-10, atol=1e-14)


def test_favor_stabiliser_cancels_in_outputs():
    q, k, v = qkv(4, (), 12, 12, 2, 2, 8, scale=2.0)  # float64
    raw = features.favor_plus(W8, stabilize=False)
    for causal in (False, True):
        a = attend(q, k, v, feature_map=FAVOR8, is_causal=causal, chunk_size=5)
        b = attend(q, k, v, feature_map=raw, is_causal=causal, chunk_size=5)
        np.testing.assert_allclose(a, b, rtol=1e-10)


# ---------------------------------------------------------------- masks and causality


@pytest.mark.parametrize("is_causal", [False, True])
def test_padded_keys_change_nothing(is_causal):
    """Padding (with garbage, even NaN) then masking == truncating the inputs."""
    lengths = np.array([7, 10], np.int32)
    q, k, v = qkv(5, (2,), 10, 10, 4, 2, 8)  # float64
    padded = np.arange(10)[None, :] >= lengths[:, None]  # bool [2, S]
    k[padded] = 1e6
    k[0, 9, 0, 0] = np.nan
    v[padded] = np.nan
    mask = masks.key_padding_mask(lengths=lengths, kv_len=10)  # bool [2, 1, 1, S]
    f = functools.partial(attend, feature_map=FAVOR8, is_causal=is_causal, chunk_size=3)
    out = f(q, k, v, mask=mask)
    truncated = f(q[:1], k[:1, :7], v[:1, :7])
    full = f(q[1:], k[1:], v[1:])
    rows = slice(0, 7) if is_causal else slice(None)
    np.testing.assert_allclose(out[:1, rows], truncated[:, rows], rtol=1e-12)
    np.testing.assert_allclose(out[1:], full, rtol=1e-12)
    assert finite(out)
    grads = jax.jit(jax.grad(lambda *a: jnp.sum(f(*a, mask=mask)), argnums=(0, 1, 2)))(q, k, v)
    assert finite(*grads)


def test_fully_masked_rows_give_zero_output_and_finite_gradients():
    q, k, v = qkv(6, (2,), 5, 5, 2, 2, 4)  # float64
    mask = np.array([[True, True, False, False, False], [False] * 5])[
        :, None, None, :
    ]  # bool [2, 1, 1, S]

    @jax.jit
    def outputs_and_grads(q, k, v):
        def f(q, k, v, causal):
            return linear.linear_attention(
                q, k, v, feature_map=features.elu_plus_one, mask=mask, is_causal=causal
            )

        return [
            (f(q, k, v, c), jax.grad(lambda *a: jnp.sum(f(*a, c)), argnums=(0, 1, 2))(q, k, v))
            for c in (False, True)
        ]

    for out, grads in outputs_and_grads(q, k, v):
        np.testing.assert_array_equal(out[1], np.zeros((5, 2, 4)))
        assert finite(out, *grads)
    weights = attend_weights(q, k, feature_map=features.elu_plus_one, mask=mask)
    np.testing.assert_array_equal(weights[1], np.zeros((2, 5, 5)))


def test_future_keys_cannot_change_past_outputs():
    """Causal FAVOR+: an extreme key at t0 leaves every output t < t0 bit-identical.

    A stabiliser computed over all positions (Performer's key maximum) would
    rescale every past key by a factor set by the future one; ours reads each
    key alone, so the past is untouched, within a chunk (C = 16) and across
    chunks (C = 4).
    """
    w = np.asarray(features.orthogonal_random_matrix(jax.random.key(8), 64, 16))  # float32
    q, k, v = qkv(8, (1,), 32, 32, 2, 2, 16, dtype=np.float32)
    t0 = 10
    k2, v2 = k.copy(), v.copy()
    k2[0, t0] = 30.0 * w[:2] * 16**0.25  # keys along projection rows: huge features
    v2[0, t0] = 1e30
    phi = features.favor_plus(w)

    @jax.jit
    def both_chunkings(q, k, v):
        return [
            linear.linear_attention(q, k, v, feature_map=phi, is_causal=True, chunk_size=c)
            for c in (4, 16)
        ]

    for before, after in zip(both_chunkings(q, k, v), both_chunkings(q, k2, v2)):
        np.testing.assert_array_equal(before[:, :t0], after[:, :t0])
        assert not np.allclose(before[:, t0:], after[:, t0:])
        assert finite(after)


def test_key_masks_only():
    q, k, v = qkv(9, (), 4, 4, 2, 2, 4)  # float64
    for bad in (
        np.tril(np.ones((4, 4), bool)),
        np.ones((2, 1, 4), bool),
    ):  # [T, S] and per-head masks
        with pytest.raises(ValueError, match="key masks only"):
            attend(q, k, v, feature_map=features.relu, mask=bad)
    with pytest.raises(TypeError, match="boolean"):
        attend(q, k, v, feature_map=features.relu, mask=np.ones((4,), np.float32))
    plain_vector = attend(q, k, v, feature_map=features.elu_plus_one, mask=np.ones((4,), bool))
    np.testing.assert_allclose(
        plain_vector, attend(q, k, v, feature_map=features.elu_plus_one), rtol=1e-12
    )


# ---------------------------------------------------------------- approximation of softmax


@pytest.mark.slow
def test_favor_plus_approximates_softmax_attention():
    """M = 4096, D = 64, T = 256: relative output error < 0.1, decreasing in M.

    FAVOR+'s per-entry relative variance is (exp(|q' + k'|^2) - 1) / M with
    x' = x / D^(1/4) (Choromanski et al. 2021, Lemma 2), so at a given M the
    usable logit range is limited. Here q, k ~ N(0, 0.2 I): logits q.k/8
    with standard deviation 0.2, the largest weight ~2.5x uniform. (At logit
    std 0.25 the error at M = 4096 is ~0.12-0.2; at 0.5 it is ~0.7.)
    """
    q, k, v = qkv(10, (), 256, 256, 2, 2, 64, scale=np.sqrt(0.2))  # float64
    exact, _ = softmax_attention(q, k, v)
    exact_causal, _ = softmax_attention(q, k, v, mask=np.tril(np.ones((256, 256), bool)))
    errors = []
    for m in (64, 256, 1024, 4096):
        phi = features.favor_plus(
            features.orthogonal_random_matrix(jax.random.key(11), m, 64, dtype=jnp.float64)
        )
        out = attend(q, k, v, feature_map=phi)
        errors.append(np.linalg.norm(np.asarray(out) - exact) / np.linalg.norm(exact))
    assert errors[-1] < 0.1, errors
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    causal = attend(q, k, v, feature_map=phi, is_causal=True)
    assert np.linalg.norm(np.asarray(causal) - exact_causal) / np.linalg.norm(exact_causal) < 0.1


# ---------------------------------------------------------------- gradients and precision


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
def test_gradients(name, is_causal):
    phi = FEATURE_MAPS[name][0]
    q, k, v = qkv(12, (1,), 7, 7, 4, 2, 8, dv=3, scale=0.5)  # float64
    mask = np.array([True] * 6 + [False])[None, None, None, :]  # bool [1, 1, 1, S]
    f = jax.jit(
        functools.partial(
            linear.linear_attention, feature_map=phi, is_causal=is_causal, mask=mask, chunk_size=3
        )
    )
    check_grads(f, (q, k, v), order=1, modes=("rev",), atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_bfloat16_long_sequence_is_finite():
    """bf16 inputs at T = 8192 (logit std 4): float32 features and state, no NaN or overflow."""
    phi = features.favor_plus(features.orthogonal_random_matrix(jax.random.key(13), 128, 64))
    q, k, v = (
        jnp.asarray(x, jnp.bfloat16)
        for x in qkv(13, (1,), 8192, 8192, 2, 2, 64, dtype=np.float32, scale=2.0)
    )
    f = jax.jit(lambda q, k, v: linear.linear_attention(q, k, v, feature_map=phi, is_causal=True))
    out, vjp = jax.vjp(f, q, k, v)
    assert out.dtype == jnp.bfloat16 and out.shape == (1, 8192, 2, 64)
    assert finite(out)
    ref = f(*(x.astype(jnp.float32) for x in (q, k, v)))
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=2e-2, rtol=2e-2)
    grads = vjp(jnp.ones_like(out))
    assert all(g.dtype == jnp.bfloat16 for g in grads) and finite(*grads)
    elu = attend(q, k, v, feature_map=features.elu_plus_one, is_causal=True)
    assert elu.dtype == jnp.bfloat16 and finite(elu)


def test_float32_with_x64_disabled():
    with jax.enable_x64(False):
        q, k, v = qkv(14, (2,), 9, 9, 2, 1, 8, dtype=np.float32)
        w = features.orthogonal_random_matrix(jax.random.key(14), 16, 8)  # float32
        for causal in (False, True):
            out = attend(
                q, k, v, feature_map=features.favor_plus(w), is_causal=causal, chunk_size=4
            )
            assert out.dtype == jnp.float32
            ref, _ = quadratic_reference(q, k, v, np_favor(w), causal=causal)
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
        state = linear.init_state((2,), 1, 16, 8)
        assert state.kv.dtype == jnp.float32 and state.kv.shape == (2, 1, 16, 8)


# ---------------------------------------------------------------- floating-point range
#
# The output is invariant to scaling phi(q_t) per query and every phi(k_s) by one
# common factor; relu is positively homogeneous, so relu(c q).relu(c k) = c^2
# relu(q).relu(k) and every scale c must give the unit-scale output. Inputs are
# float32 (features, products and sums are float32); references are float64
# from the same float32 inputs.

SCALES = (1e-30, 1e-20, 1e-19, 1e-11, 1.0, 1e18, 1e19, 1e20, 1e30)
VALID = np.array([[True] * 7, [True] * 5 + [False] * 2])  # bool [2, S]: keys 5, 6 of batch 1 padded


def np_relu(x):
    return np.maximum(np.asarray(x, np.float64), 0.0)


def np_relu_grad(x):
    return (np.asarray(x, np.float64) > 0).astype(np.float64)


def scaled_qkv(scale, seed=30):
    """float32 q `[2, 7, 4, 8]`, k `[2, 7, 2, 8]` times `scale`; v `[2, 7, 2, 5]` unscaled."""
    q, k, v = qkv(seed, (2,), 7, 7, 4, 2, 8, dv=5)  # float64
    return (scale * q).astype(np.float32), (scale * k).astype(np.float32), v.astype(np.float32)


def assert_close(got, want, rtol=1e-5, err_msg=""):
    """Elementwise within rtol, plus rtol times the largest |want| (entries that cancel to ~0)."""
    want = np.asarray(want, np.float64)
    atol = rtol * float(np.max(np.abs(want), initial=0.0))
    np.testing.assert_allclose(
        np.asarray(got, np.float64), want, rtol=rtol, atol=atol, err_msg=err_msg
    )


def _relu_forms(q, k, v):
    """Every form with relu features: (non-causal, chunked causal, recurrent, weights, causal weights)."""
    mask = masks.key_padding_mask(valid=VALID)  # bool [2, 1, 1, S]
    f = functools.partial(linear.linear_attention, feature_map=features.relu, mask=mask)
    w = functools.partial(linear.linear_attention_weights, feature_map=features.relu, mask=mask)
    return (
        f(q, k, v),
        f(q, k, v, is_causal=True, chunk_size=3),
        scan_steps(q, k, v, features.relu),
        w(q, k),
        w(q, k, is_causal=True),
    )


relu_forms = jax.jit(_relu_forms)


@pytest.mark.parametrize("scale", SCALES)
def test_relu_feature_scales_give_the_float64_output(scale):
    """Scales 1e-30..1e30 in float32 (products 1e-60..1e60): each form equals its float64 reference."""
    q, k, v = scaled_qkv(scale)
    noncausal, causal, recurrent, weights, causal_weights = relu_forms(q, k, v)
    cases = (
        (noncausal, False, VALID, 0),
        (causal, True, VALID, 0),
        (recurrent, True, None, 0),
        (weights, False, VALID, 1),
        (causal_weights, True, VALID, 1),
    )
    for i, (got, causal_, valid, which) in enumerate(cases):
        want = quadratic_reference(q, k, v, np_relu, causal=causal_, valid=valid)[which]
        assert finite(got), f"form {i}: non-finite at scale {scale}"
        assert_close(got, want, err_msg=f"form {i} at scale {scale}")


def _relu_vjps(q, k, v, g):
    mask = masks.key_padding_mask(valid=VALID)  # bool [2, 1, 1, S]

    def vjp(f):
        out, pullback = jax.vjp(f, q, k, v)
        return pullback(g)

    f = functools.partial(linear.linear_attention, feature_map=features.relu, mask=mask)
    return (
        vjp(f),
        vjp(functools.partial(f, is_causal=True, chunk_size=3)),
        vjp(lambda q, k, v: scan_steps(q, k, v, features.relu)),
    )


relu_vjps = jax.jit(_relu_vjps)


@pytest.mark.parametrize("scale", SCALES)
def test_relu_feature_scales_give_finite_float64_gradients(scale):
    """d sum(g * out) / d(q, k, v) at every scale: finite, equal to the float64 gradients (~1/scale)."""
    q, k, v = scaled_qkv(scale)
    g = np.random.default_rng(31).standard_normal((2, 7, 4, 5)).astype(np.float32)
    for got, (causal, valid) in zip(
        relu_vjps(q, k, v, g), ((False, VALID), (True, VALID), (True, None))
    ):
        want = quadratic_reference_vjp(
            q, k, v, np_relu, np_relu_grad, g, causal=causal, valid=valid
        )
        assert finite(*got), f"non-finite gradients at scale {scale} (causal={causal})"
        for name, a, b in zip("qkv", got, want):
            assert_close(
                a,
                b,
                err_msg=f"d{name} at scale {scale} (causal={causal}, mask={valid is not None})",
            )


def test_gradients_stay_finite_when_the_normaliser_is_tiny():
    """A query that sees only keys 2^-80 times smaller than another key: its normaliser is
    ~2^-80 after rescaling (no common factor can lift it), so the gradient must not use den^2."""
    q = np.zeros((1, 3, 1, 2), np.float32)
    q[0, :, 0, 0] = [1.0, 2.0, 0.5]  # queries on feature 0 only
    k = np.zeros((1, 3, 1, 2), np.float32)
    k[0, 0, 0, 1] = 1.0  # a unit key on feature 1
    k[0, 1:, 0, 0] = [2.0**-80, 3.0 * 2.0**-80]  # tiny keys on feature 0
    v = np.random.default_rng(32).standard_normal((1, 3, 1, 2)).astype(np.float32)
    g = np.ones((1, 3, 1, 2), np.float32)
    f = jax.jit(
        lambda q, k, v: jax.vjp(
            functools.partial(linear.linear_attention, feature_map=features.relu), q, k, v
        )
    )
    out, pullback = f(q, k, v)
    grads = jax.jit(pullback)(g)
    ref, _ = quadratic_reference(q, k, v, np_relu)
    assert_close(out, ref)
    assert finite(*grads)
    for name, a, b in zip("qkv", grads, quadratic_reference_vjp(q, k, v, np_relu, np_relu_grad, g)):
        assert_close(a, b, err_msg=f"d{name}")


def test_future_huge_key_in_the_same_chunk_leaves_the_past_bit_identical():
    """Relu keys: a key 1e30 times larger at t0 rescales its chunk by a power of two, exactly."""
    q, k, v = scaled_qkv(1.0, seed=33)
    k2 = k.copy()
    k2[:, 5] = 1e30 * np.abs(k[:, 5])
    f = jax.jit(
        lambda q, k, v: linear.linear_attention(
            q, k, v, feature_map=features.relu, is_causal=True, chunk_size=7
        )
    )
    before, after = f(q, k, v), f(q, k2, v)
    np.testing.assert_array_equal(before[:, :5], after[:, :5])
    assert finite(after)


def np_log_elu_plus_one(x):
    x = np.asarray(x, np.float64)
    return np.where(x > 0, np.log1p(np.maximum(x, 0.0)), x)


def np_log_favor(w):
    """log of FAVOR+ features (no stabiliser), float64."""
    w = np.asarray(w, np.float64)

    def log_phi(x):
        x = np.asarray(x, np.float64) / w.shape[1] ** 0.25
        return x @ w.T - 0.5 * np.sum(x * x, -1, keepdims=True) - 0.5 * np.log(w.shape[0])

    return log_phi


def _every_form(q, k, v, phi):
    """(non-causal, chunked causal, recurrent, weights, causal weights) with feature map `phi`."""
    f = functools.partial(linear.linear_attention, feature_map=phi)
    w = functools.partial(linear.linear_attention_weights, feature_map=phi)
    return (
        f(q, k, v),
        f(q, k, v, is_causal=True, chunk_size=3),
        scan_steps(q, k, v, phi),
        w(q, k),
        w(q, k, is_causal=True),
    )


every_form = jax.jit(_every_form, static_argnames="phi")


def assert_every_form_matches_log_reference(q, k, v, phi, np_log_phi, rtol):
    for i, (got, causal, which) in enumerate(
        zip(
            every_form(q, k, v, phi=phi),
            (False, True, True, False, True),
            (0, 0, 0, 1, 1),
        )
    ):
        want = log_quadratic_reference(q, k, v, np_log_phi, causal=causal)[which]
        assert finite(got), f"form {i}: non-finite"
        assert np.any(np.asarray(got) != 0), f"form {i}: all zero"
        assert_close(got, want, rtol=rtol, err_msg=f"form {i}")


def test_elu_plus_one_very_negative_inputs_are_not_zero():
    """elu(x) + 1 = exp(x) underflows at x = -1e4, but a common factor cancels: batch 0 has
    queries near -1e4 (every query feature exp(-1e4)), batch 1 keys near -1e4. float32."""
    q, k, v = qkv(34, (2,), 7, 7, 4, 2, 8, dtype=np.float32, dv=5)
    q[0] -= 1e4
    k[1] -= 1e4
    assert_every_form_matches_log_reference(
        q, k, v, features.elu_plus_one, np_log_elu_plus_one, rtol=1e-5
    )


def test_favor_plus_large_keys_do_not_underflow():
    """Keys x100: every FAVOR+ key feature is about exp(-1e4) (0 in any float), yet the attention
    is a well-defined average. float64, W [24, 8]."""
    q, k, v = qkv(35, (2,), 7, 7, 4, 2, 8, dv=5)  # float64
    k *= 100.0
    assert_every_form_matches_log_reference(q, k, v, FAVOR8, np_log_favor(W8), rtol=1e-5)


def test_eps_is_added_to_the_unscaled_normaliser():
    """out = phi(q)^T S / (phi(q)^T z + eps) in the caller's units, whatever the rescaling:
    eps comparable to the normaliser (relu features, float32, products ~ scale^2 = 1e-20)."""
    scale = 1e-10
    q, k, v = scaled_qkv(scale, seed=36)
    eps = 2.0 * scale**2
    mask = masks.key_padding_mask(valid=VALID)  # bool [2, 1, 1, S]
    forms = jax.jit(
        lambda q, k, v: (
            linear.linear_attention(q, k, v, feature_map=features.relu, mask=mask, eps=eps),
            linear.linear_attention(
                q,
                k,
                v,
                feature_map=features.relu,
                mask=mask,
                eps=eps,
                is_causal=True,
                chunk_size=3,
            ),
            linear.linear_attention_weights(q, k, feature_map=features.relu, mask=mask, eps=eps),
        )
    )
    noncausal, causal, weights = forms(q, k, v)
    ref = functools.partial(quadratic_reference, q, k, v, np_relu, valid=VALID, eps=eps)
    assert_close(noncausal, ref()[0])
    assert_close(causal, ref(causal=True)[0])
    assert_close(weights, ref()[1])


def test_queries_with_all_zero_features_attend_to_nothing():
    """A relu query with no positive coordinate has phi(q) = 0: its output is 0 and its weights
    sum to 0 (not 1), which is how such rows are told apart; gradients stay finite."""
    q, k, v = scaled_qkv(1.0, seed=37)
    q[0, 2] = -np.abs(q[0, 2])  # query 2 of batch 0, every head: phi(q) = 0
    outs = relu_forms(q, k, v)
    for got in outs[:3]:
        np.testing.assert_array_equal(got[0, 2], np.zeros((4, 5)))
    for weights in outs[3:]:
        np.testing.assert_array_equal(weights[0, :, 2].sum(-1), np.zeros(4))
        assert np.all(np.asarray(weights[0, :, 3:]).sum(-1) > 0.99)
    g = np.ones((2, 7, 4, 5), np.float32)
    assert all(finite(*grads) for grads in relu_vjps(q, k, v, g))


# ---------------------------------------------------------------- recurrent form and transforms


def test_recurrent_step_shapes_and_state():
    q, k, v = qkv(15, (3,), 1, 1, 4, 2, 8, dv=5)  # float64
    state = linear.init_state((3,), 2, 8, 5, jnp.float64)
    step = jax.jit(
        functools.partial(linear.linear_attention_step, feature_map=features.elu_plus_one)
    )
    new_state, out = step(state, q[:, 0], k[:, 0], v[:, 0])
    chex.assert_shape(out, (3, 4, 5))
    chex.assert_shape([new_state.kv, new_state.normalizer], [(3, 2, 8, 5), (3, 2, 8)])
    chex.assert_type([out, new_state.kv, new_state.normalizer], jnp.float64)
    # After one step each head's output is exactly its value (the only key).
    np.testing.assert_allclose(out, np.repeat(v[:, 0], 2, axis=-2), rtol=1e-12)


def test_jit_and_vmap_compose():
    q, k, v = qkv(16, (3,), 6, 6, 2, 2, 4)  # float64
    f = functools.partial(
        linear.linear_attention, feature_map=features.elu_plus_one, is_causal=True, chunk_size=4
    )
    ref, _ = quadratic_reference(q, k, v, np_elu_plus_one, causal=True)
    np.testing.assert_allclose(jax.jit(jax.vmap(f))(q, k, v), ref, rtol=1e-10)


# ---------------------------------------------------------------- validation


def test_validation_errors_at_trace_time():
    """Bad inputs raise while tracing (jax.eval_shape runs no compute)."""
    q, k, v = qkv(17, (), 4, 4, 4, 2, 8)  # float64

    def trace(*arrays, **kwargs):
        specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in arrays]
        return jax.eval_shape(functools.partial(linear.linear_attention, **kwargs), *specs)

    phi = features.elu_plus_one
    bad_heads = np.ones((4, 3, 8), np.float64)
    cases = [
        (ValueError, r"query must have layout .*query.shape=\(4, 8\)", (q[0], k, v), {}),
        (
            ValueError,
            r"key heads \(3\) must divide query heads \(4\)",
            (q, bad_heads, bad_heads),
            {},
        ),
        (ValueError, "same head dim D", (q, k[..., :4], v), {}),
        (ValueError, "chunk_size must be >= 1", (q, k, v), {"is_causal": True, "chunk_size": 0}),
        (TypeError, "chunk_size must be an int", (q, k, v), {"chunk_size": 2.5}),
        (TypeError, "feature_map must be callable", (q, k, v), {"feature_map": "elu"}),
        (ValueError, "eps must be a non-negative", (q, k, v), {"eps": -1.0}),
        (
            ValueError,
            r"input dim D=8 .*projection.shape=\(16, 6\)",
            (q, k, v),
            {"feature_map": features.favor_plus(np.ones((16, 6), np.float32))},
        ),
        (ValueError, "key masks only", (q, k, v), {"mask": np.tril(np.ones((4, 4), bool))}),
        (ValueError, "does not broadcast", (q, k, v), {"mask": np.ones((5,), bool)}),
    ]
    for error, message, arrays, kwargs in cases:
        with pytest.raises(error, match=message):
            trace(*arrays, **{"feature_map": phi, **kwargs})
    step = functools.partial(linear.linear_attention_step, feature_map=phi)
    state = linear.init_state((), 2, 8, 8, jnp.float64)
    with pytest.raises(ValueError, match="state does not match"):
        jax.eval_shape(step, linear.init_state((), 1, 8, 8), q[0], k[0], v[0])
    with pytest.raises(ValueError, match="M=8 features, state has M=16"):
        jax.eval_shape(step, linear.init_state((), 2, 16, 8), q[0], k[0], v[0])
    with pytest.raises(TypeError, match="LinearAttentionState"):
        step((state.kv, state.normalizer), q[0], k[0], v[0])
    with pytest.raises(ValueError, match="num_features must be a positive int"):
        linear.init_state((), 2, 0, 8)


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), np.float32("nan"), -1e-3])
def test_eps_must_be_finite_and_non_negative(eps):
    """eps = nan made every output NaN and eps = inf every output 0; each form refuses them."""
    q, k, v = qkv(38, (), 4, 4, 2, 2, 8)  # float64
    phi = features.elu_plus_one
    message = r"eps must be a non-negative finite float, got -?(nan|inf|0\.001)"
    with pytest.raises(ValueError, match=message):
        linear.linear_attention(q, k, v, feature_map=phi, eps=eps)
    with pytest.raises(ValueError, match=message):
        linear.linear_attention_weights(q, k, feature_map=phi, eps=eps)
    state = linear.init_state((), 2, 8, 8, jnp.float64)
    with pytest.raises(ValueError, match=message):
        linear.linear_attention_step(state, q[0], k[0], v[0], feature_map=phi, eps=eps)
