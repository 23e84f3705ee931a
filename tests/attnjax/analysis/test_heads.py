"""Per-head statistics: entropy, distance, redundancy, pattern classes."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import analysis as an

DTYPES = [np.float32, np.float64]
NAMES = an.PATTERN_NAMES


def softmax_heads(seed, shape, scale=2.0, dtype=np.float64):
    z = scale * np.random.default_rng(seed).normal(size=shape)
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(dtype)


def rtol(dtype):
    return 1e-5 if dtype == np.float32 else 1e-12


# ---- entropy and distance ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_entropy_known_answers(dtype):
    n = 6
    maps = np.stack([np.full((n, n), 1 / n), np.eye(n)]).astype(dtype)  # uniform, one-hot
    h = an.attention_entropy(maps)
    assert h.shape == (2, n) and h.dtype == dtype
    np.testing.assert_allclose(h[0], np.full(n, np.log(n)), rtol=rtol(dtype))
    np.testing.assert_array_equal(h[1], np.zeros(n, dtype))  # 0 log 0 = 0, no NaN
    np.testing.assert_allclose(an.normalized_entropy(maps)[0], np.ones(n), rtol=rtol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_entropy_matches_numpy(dtype):
    w = softmax_heads(1, (2, 3, 5, 7), dtype=dtype)
    w64 = w.astype(np.float64)
    expected = -np.sum(w64 * np.log(w64), -1)
    np.testing.assert_allclose(an.attention_entropy(w), expected, rtol=rtol(dtype))
    np.testing.assert_allclose(an.normalized_entropy(w), expected / np.log(7), rtol=rtol(dtype))


def test_one_entropy_normalisation_and_a_uniform_causal_map_is_uniform():
    """The normalised entropy divides by the log of each query's visible keys (`normalized_entropy`), and
    the pattern classes read it: a uniform causal map (a_ij = 1 / (i + 1), j <= i) is uniform given its
    mask, and only then (over log T its later rows score below 1)."""
    t = 12
    causal = np.tril(np.ones((t, t), bool))
    uniform_causal = causal / causal.sum(-1, keepdims=True)
    with pytest.raises(TypeError, match="normalize"):
        an.attention_entropy(uniform_causal, normalize=True)
    features = an.pattern_features(uniform_causal, visible=causal)
    np.testing.assert_allclose(
        float(features.entropy), 1.0, rtol=1e-12
    )  # rows 1..T-1; row 0 has no choice
    over_log_t = np.mean(
        np.log(np.arange(2, t + 1)) / np.log(t)
    )  # what log T would give, rows 1..T-1
    assert float(an.pattern_features(uniform_causal).entropy) < over_log_t + 1e-12 < 0.9
    assert int(an.classify_pattern(uniform_causal, visible=causal)) == an.PATTERN_NAMES.index(
        "uniform"
    )
    assert int(an.classify_pattern(uniform_causal)) != an.PATTERN_NAMES.index("uniform")
    with pytest.raises(ValueError, match="visible must have shape"):
        an.pattern_features(uniform_causal, visible=causal[:5])


@pytest.mark.parametrize("dtype", DTYPES)
def test_mean_attention_distance(dtype):
    n = 5
    pos = np.arange(n)
    dist = np.abs(pos[:, None] - pos[None, :]).astype(np.float64)
    maps = np.stack([np.eye(n), np.full((n, n), 1 / n), np.eye(n)[np.roll(pos, 1)]]).astype(dtype)
    got = an.mean_attention_distance(maps)
    assert got.shape == (3, n) and got.dtype == dtype
    np.testing.assert_allclose(got[0], np.zeros(n), atol=rtol(dtype))  # attend to self
    np.testing.assert_allclose(got[1], dist.mean(-1), rtol=rtol(dtype))  # uniform
    np.testing.assert_allclose(
        got[2], [4, 1, 1, 1, 1], rtol=rtol(dtype)
    )  # previous token; query 0 wraps to key 4
    w = softmax_heads(2, (2, 4, 6), dtype=dtype)
    expected = (
        w.astype(np.float64) * np.abs(np.arange(4)[:, None] + 2 - np.arange(6)[None, :])
    ).sum(-1)
    np.testing.assert_allclose(
        an.mean_attention_distance(w, query_offset=2), expected, rtol=rtol(dtype)
    )


# ---- head redundancy --------------------------------------------------------------------------


def ref_redundancy(w, centered=False):
    """The seed's double loop (§6.3), per example, in float64."""
    w = np.asarray(w, np.float64)
    h = w.shape[-3]
    flat = w.reshape(*w.shape[:-2], -1)
    if centered:
        flat = flat - flat.mean(-1, keepdims=True)
    out = np.empty(w.shape[:-3] + (h, h))
    for i in range(h):
        for j in range(h):
            a, b = flat[..., i, :], flat[..., j, :]
            out[..., i, j] = (a * b).sum(-1) / (
                np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
            )
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_head_redundancy_matches_double_loop(dtype):
    w = softmax_heads(3, (2, 4, 5, 5), dtype=dtype)  # [batch, heads, T, S]
    got = an.head_redundancy(w)
    assert got.shape == (2, 4, 4) and got.dtype == dtype
    np.testing.assert_allclose(got, ref_redundancy(w), rtol=rtol(dtype))
    np.testing.assert_allclose(
        np.diagonal(got, axis1=-2, axis2=-1), np.ones((2, 4)), rtol=rtol(dtype)
    )
    pooled = an.head_redundancy(w, pooled=True)  # the seed: batch flattened into each head's vector
    np.testing.assert_allclose(
        pooled, ref_redundancy(np.swapaxes(w, 0, 1).reshape(1, 4, 10, 5))[0], rtol=rtol(dtype)
    )
    centered = an.head_redundancy(w, centered=True)  # Pearson correlation
    np.testing.assert_allclose(
        centered[0],
        np.corrcoef(w[0].reshape(4, -1).astype(np.float64)),
        rtol=1e-4 if dtype == np.float32 else 1e-12,
    )


def test_head_redundancy_identical_and_disjoint_heads():
    n = 4
    eye = np.eye(n)
    heads = np.stack([eye, eye, eye[np.roll(np.arange(n), 1)]])  # float64 [3, n, n]
    r = np.asarray(an.head_redundancy(heads))
    np.testing.assert_allclose(r, [[1, 1, 0], [1, 1, 0], [0, 0, 1]], atol=1e-12)
    zero = np.concatenate([heads[:1], np.zeros((1, n, n))])  # an all-masked head
    np.testing.assert_allclose(an.head_redundancy(zero), [[1, 0], [0, 0]], atol=1e-12)


# ---- pattern classes -----------------------------------------------------------------------------


def prototype_maps(t, rng):
    """One float64 [t, t] map per class, with a little noise, in PATTERN_NAMES order."""
    eye = np.eye(t)

    def mix(m, alpha=0.9):
        noise = rng.dirichlet(np.ones(t), size=t)
        return alpha * m + (1 - alpha) * noise

    far = eye[(np.arange(t) + t // 2) % t]  # one-hot on distant, varying keys
    sink = np.zeros((t, t))
    sink[:, 0] = 1.0  # every query attends to the first token
    band = np.zeros((t, t))
    for i in range(t):  # previous and next neighbours, not oneself
        band[i, max(i - 1, 0)] += 0.5
        band[i, min(i + 1, t - 1)] += 0.5
    # hierarchical: mass spread over a block of a quarter of the keys, away from the query
    block = np.zeros((t, t))
    for i in range(t):
        start = ((i // (t // 4)) * (t // 4) + t // 2) % t
        block[i, start : start + t // 4] = 1.0 / (t // 4)
    return {
        "uniform": mix(np.full((t, t), 1 / t), 0.5),
        "one-hot": mix(far, 0.999),
        "diagonal": mix(eye),
        "local": mix(band),
        "global": mix(sink),
        "hierarchical": mix(block),
    }


@pytest.mark.parametrize("dtype", DTYPES)
def test_classify_pattern_prototypes(dtype):
    maps = prototype_maps(32, np.random.default_rng(4))
    stack = np.stack([maps[name] for name in NAMES]).astype(dtype)  # [6, 32, 32]
    codes = an.classify_pattern(stack)
    assert codes.dtype == jnp.int32 and codes.shape == (6,)
    assert [NAMES[c] for c in np.asarray(codes)] == list(NAMES)


def test_pattern_features_known_values():
    t = 20
    eye = np.eye(t)
    f = an.pattern_features(np.stack([eye, np.full((t, t), 1 / t)]))  # float64
    np.testing.assert_allclose(f.entropy, [0, 1], atol=1e-12)
    np.testing.assert_allclose(f.diagonal, [1, 1 / t], atol=1e-12)
    np.testing.assert_allclose(f.local[0], 1, atol=1e-12)
    radius, top = 1, 2  # key_fraction 0.1 of 20 keys: band |i - j| <= 1, top 2 keys
    band_size = np.minimum(np.arange(t) + radius, t - 1) - np.maximum(np.arange(t) - radius, 0) + 1
    np.testing.assert_allclose(f.local[1], band_size.mean() / t, atol=1e-12)
    np.testing.assert_allclose(f.global_, [top / t, top / t], atol=1e-12)


def test_classify_pattern_thresholds_are_arguments():
    t = 16
    half = 0.6 * np.eye(t, dtype=np.float64) + 0.4 / t  # a little over 60% on oneself
    assert NAMES[int(an.classify_pattern(half))] == "diagonal"
    assert NAMES[int(an.classify_pattern(half, majority=0.7))] != "diagonal"


def test_classify_pattern_batched_under_vmap():
    maps = prototype_maps(32, np.random.default_rng(5))
    stack = np.stack([maps[name] for name in NAMES]).astype(np.float32)
    batch = np.stack([stack, stack[::-1]])  # [2, 6, 32, 32]
    codes = an.classify_pattern(batch)
    np.testing.assert_array_equal(codes, [np.arange(6), np.arange(6)[::-1]])
    np.testing.assert_array_equal(jax.vmap(an.classify_pattern)(batch), codes)


# ---- transformations and dtypes --------------------------------------------------------------------

FUNCTIONS = {
    "attention_entropy": an.attention_entropy,
    "mean_attention_distance": an.mean_attention_distance,
    "head_redundancy": an.head_redundancy,
    "pattern_features": an.pattern_features,
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_vmap_agrees_with_batched_call(name):
    fn = FUNCTIONS[name]
    w = softmax_heads(6, (3, 2, 5, 5), dtype=np.float32)
    chex.assert_trees_all_close(jax.vmap(fn)(w), fn(w), rtol=1e-6)


def test_float32_without_x64():
    w = softmax_heads(7, (2, 4, 6, 6), dtype=np.float32)
    with jax.enable_x64(False):
        w32 = jnp.asarray(w)
        outs = [an.attention_entropy(w32), an.mean_attention_distance(w32), an.head_redundancy(w32)]
        codes = an.classify_pattern(w32)
    for out in outs:
        assert out.dtype == jnp.float32
    assert codes.dtype == jnp.int32 and codes.shape == (2, 4)


# ---- bad input -----------------------------------------------------------------------------------------


def test_bad_input_raises_naming_argument_and_shape():
    with pytest.raises(ValueError, match=r"weights must have shape \[\.\.\., H, T, S\].*\(5, 5\)"):
        an.head_redundancy(np.ones((5, 5), np.float32) / 5)
    with pytest.raises(ValueError, match=r"weights must be square.*\(4, 6\)"):
        an.classify_pattern(np.ones((4, 6), np.float32) / 6)
    with pytest.raises(ValueError, match=r"weights must have shape \[\.\.\., T, S\].*\(6,\)"):
        an.attention_entropy(np.ones(6, np.float32) / 6)
    with pytest.raises(ValueError, match="key_fraction"):
        an.pattern_features(np.eye(4, dtype=np.float32), key_fraction=0.0)
    with pytest.raises(TypeError, match="weights must be a floating array"):
        an.attention_entropy(np.eye(3, dtype=np.int32))
