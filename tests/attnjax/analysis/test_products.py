"""`analysis.attention_matvec`, `attention_rmatvec` and `received_mass` against the dense maps of
`attnjax.dot_product_attention`: A v, A^T u and column sums in float64 (and float32), causal and not,
grouped-query heads, key padding, local windows, a query count that is not a multiple of the chunk."""

import jax.numpy as jnp
import numpy as np
import pytest

import attnjax
from attnjax import analysis

OPTIONS = dict(scale=0.4, temperature=0.8)
B, T, H, K, D, M = 2, 200, 4, 2, 8, 3


def _case(dtype, is_causal, padded, window=None, seed=0):
    """q, k, lse (`attention_statistics`), key padding and the dense maps `[B, H, T, T]` in float64."""
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(B, T, H, D)), dtype)
    k = jnp.asarray(rng.normal(size=(B, T, K, D)), dtype)
    padding = None
    if padded:
        padding = jnp.asarray(np.arange(T)[None, :] < np.array([[T], [T - 37]]))  # second: 37 pads
    lse = analysis.attention_statistics(
        q,
        k,
        is_causal=is_causal,
        key_padding=padding,
        local_window=window,
        chunk_size=64,
        **OPTIONS,
    ).lse
    mask = None if padding is None else padding[:, None, None, :]
    _, weights = attnjax.dot_product_attention(
        q.astype(jnp.float64),
        k.astype(jnp.float64),
        k.astype(jnp.float64),
        mask=mask,
        is_causal=is_causal,
        local_window_size=window,
        return_weights=True,
        **OPTIONS,
    )
    return q, k, lse, padding, np.asarray(weights, np.float64)


# (is_causal, padded, local window): a causal band, and a two-sided one over padded keys.
CASES = [
    (False, False, None),
    (True, False, None),
    (False, True, None),
    (True, True, None),
    (True, False, 16),
    (False, True, (8, 4)),
]


@pytest.mark.parametrize("dtype, tol", [(jnp.float64, 1e-10), (jnp.float32, 1e-5)])
@pytest.mark.parametrize("is_causal, padded, window", CASES)
def test_products_equal_the_dense_maps(dtype, tol, is_causal, padded, window):
    q, k, lse, padding, dense = _case(dtype, is_causal, padded, window)
    rng = np.random.default_rng(1)
    v, u = rng.normal(size=(B, H, T, M)), rng.normal(size=(B, H, T, M))
    options = dict(
        is_causal=is_causal,
        local_window=window,
        key_padding=padding,
        query_chunk_size=64,
        key_chunk_size=48,  # tiles above the diagonal or outside the window are skipped
        **OPTIONS,
    )
    av = analysis.attention_matvec(q, k, lse, jnp.asarray(v, dtype), **options)
    atu = analysis.attention_rmatvec(q, k, lse, jnp.asarray(u, dtype), **options)
    assert av.shape == atu.shape == (B, H, T, M)
    np.testing.assert_allclose(np.asarray(av), dense @ v, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(atu), np.swapaxes(dense, -1, -2) @ u, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "is_causal, window",
    [(True, None), (True, 4), (False, (3, 1)), (False, (0, 6)), (False, (9, 2))],
)
def test_a_tile_seen_by_one_query_key_pair_is_not_skipped(is_causal, window):
    """Query blocks of 5 and key chunks of 7 (coprime): every offset of the causal diagonal and of
    the window's edges falls somewhere inside a tile, at its first or last row or column included,
    so a tile that one pair alone sees is computed (an off-by-one in the skip would drop it)."""
    q, k, lse, padding, dense = _case(jnp.float64, is_causal, False, window, seed=4)
    u = np.random.default_rng(5).normal(size=(B, H, T, M))
    options = dict(is_causal=is_causal, local_window=window, query_chunk_size=5, key_chunk_size=7)
    atu = analysis.attention_rmatvec(q, k, lse, jnp.asarray(u), **options, **OPTIONS)
    av = analysis.attention_matvec(q, k, lse, jnp.asarray(u), **options, **OPTIONS)
    np.testing.assert_allclose(np.asarray(av), dense @ u, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(atu), np.swapaxes(dense, -1, -2) @ u, atol=1e-12)


@pytest.mark.parametrize("is_causal, padded, window", CASES)
def test_received_mass_is_the_column_sums_and_its_top_keys(is_causal, padded, window):
    q, k, lse, padding, dense = _case(jnp.float64, is_causal, padded, window, seed=2)
    got = analysis.received_mass(
        q,
        k,
        lse,
        top_k=5,
        is_causal=is_causal,
        local_window=window,
        key_padding=padding,
        **OPTIONS,
    )
    columns = dense.sum(axis=-2)  # [B, H, S]
    np.testing.assert_allclose(np.asarray(got.mass), columns, rtol=1e-10, atol=1e-10)
    assert got.top_keys.dtype == jnp.int32
    np.testing.assert_array_equal(
        np.asarray(got.top_keys), np.argsort(-columns, axis=-1, kind="stable")[..., :5]
    )
    np.testing.assert_allclose(
        np.asarray(got.top_mass), np.sort(columns, axis=-1)[..., ::-1][..., :5], rtol=1e-10
    )
    # Each row gives away mass 1 (0 for a row that sees no key: a window over padded keys): the
    # columns sum to the number of rows that see a key.
    seen = np.ones((B, H)) * T
    if padded and window is not None:
        lengths = np.array([T, T - 37])[:, None, None]
        rows = np.arange(T)[None, None, :]
        seen = np.sum(rows - window[0] < lengths, axis=-1) * np.ones((B, H))
    np.testing.assert_allclose(np.asarray(got.mass).sum(-1), seen, rtol=1e-10)


def test_padded_keys_receive_nothing():
    q, k, lse, padding, _ = _case(jnp.float64, True, True, seed=3)
    mass = analysis.received_mass(q, k, lse, is_causal=True, key_padding=padding, **OPTIONS).mass
    assert np.all(np.asarray(mass)[1, :, T - 37 :] == 0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lse=jnp.zeros((B, T, H))), r"lse must be \[..., H, T\]"),
        (dict(vectors=jnp.zeros((B, H, T + 1, M))), r"vectors must be \[..., H, S, M\]"),
        (dict(key_padding=jnp.ones((B, T + 1), bool)), r"key_padding must be \[..., S\]"),
        (dict(key=jnp.zeros((B, T, 3, D))), "must divide query heads"),
    ],
)
def test_bad_shapes_raise_naming_the_argument(kwargs, message):
    args = dict(
        query=jnp.zeros((B, T, H, D)),
        key=jnp.zeros((B, T, K, D)),
        lse=jnp.zeros((B, H, T)),
        vectors=jnp.zeros((B, H, T, M)),
    )
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        analysis.attention_matvec(**args)


def test_top_k_beyond_the_keys_raises():
    with pytest.raises(ValueError, match="top_k=9 exceeds the number of keys S=8"):
        analysis.received_mass(
            jnp.zeros((1, 8, 2, 4)), jnp.zeros((1, 8, 2, 4)), jnp.zeros((1, 2, 8)), top_k=9
        )


@pytest.mark.parametrize("is_causal, padded, window", CASES)
def test_leading_singular_values_equal_the_dense_svd_within_their_bounds(is_causal, padded, window):
    q, k, lse, padding, dense = _case(jnp.float64, is_causal, padded, window, seed=4)
    options = dict(is_causal=is_causal, local_window=window, key_padding=padding, **OPTIONS)
    want = np.linalg.svd(dense, compute_uv=False)[..., :2]  # [B, H, 2]
    got = analysis.leading_singular_values(q, k, lse, num_values=2, **options)
    assert got.values.shape == got.bounds.shape == (B, H, 2)
    assert np.all(np.abs(np.asarray(got.values) - want) <= np.asarray(got.bounds) + 1e-12)
    np.testing.assert_allclose(np.asarray(got.values), want, rtol=1e-6)


def test_fewer_rounds_on_a_band_map_stay_within_their_bounds():
    """A band map's spectrum decays slowly (sigma_9 / sigma_2 up to 0.90 here, 0.63 without the window;
    p = 8 vectors): 20 rounds leave sigma_2 off by more than 1e-6, and the bounds say so."""
    q, k, lse, _, dense = _case(jnp.float64, True, False, 16, seed=4)
    want = np.linalg.svd(dense, compute_uv=False)[..., :2]
    got = analysis.leading_singular_values(
        q, k, lse, num_values=2, iterations=20, is_causal=True, local_window=16, **OPTIONS
    )
    error = np.abs(np.asarray(got.values) - want)
    assert error.max() / want.max() > 1e-6
    assert np.all(error <= np.asarray(got.bounds) + 1e-12)


def test_more_values_than_the_subspace_holds_raise():
    with pytest.raises(ValueError, match=r"num_values \+ oversampling = 10 must not exceed"):
        analysis.leading_singular_values(
            jnp.zeros((1, 8, 2, 4)), jnp.zeros((1, 8, 2, 4)), jnp.zeros((1, 2, 8)), num_values=4
        )


def test_memory_grows_like_t_not_t_squared():
    """At T = 8192 and H = 9 (3 key heads), the compiled temporaries of A^T u with 4 vectors and of the
    leading singular values stay below half of one dense `[H, T, T]` float32 map."""
    import jax

    t, heads = 8192, 9
    q = jax.ShapeDtypeStruct((1, t, heads, 64), jnp.float32)
    k = jax.ShapeDtypeStruct((1, t, 3, 64), jnp.float32)
    lse = jax.ShapeDtypeStruct((1, heads, t), jnp.float32)
    u = jax.ShapeDtypeStruct((1, heads, t, 4), jnp.float32)
    dense = heads * t * t * 4
    for fn, args in (
        (
            lambda q, k, lse, u: analysis.attention_rmatvec(q, k, lse, u, is_causal=True),
            (q, k, lse, u),
        ),
        (
            lambda q, k, lse: analysis.leading_singular_values(q, k, lse, is_causal=True),
            (q, k, lse),
        ),
    ):
        temp = jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes
        assert temp < 0.5 * dense, (temp / dense, fn)


@pytest.mark.parametrize(
    "dtype, tol, is_causal, window",
    [
        (jnp.float64, 1e-10, True, 512),
        (jnp.float32, 1e-5, True, 512),
        (jnp.float64, 1e-10, False, None),
    ],
)
def test_at_t_2048_the_products_equal_the_dense_map(dtype, tol, is_causal, window):
    """The acceptance length: T = 2048, one sequence with 300 padded keys, 4 query heads on 2 key heads,
    causal with a local window of 512 (float64 and float32) and bidirectional (float64); A v, A^T u,
    the received mass and its top 4 keys against the dense float64 map. (The singular values at this
    length, 45 s against a dense SVD, are checked at T = 200 here.)"""
    t, heads = 2048, 4
    rng = np.random.default_rng(5)
    q = jnp.asarray(rng.normal(size=(1, t, heads, D)), dtype)
    k = jnp.asarray(rng.normal(size=(1, t, 2, D)), dtype)
    padding = jnp.asarray(np.arange(t)[None, :] < t - 300)
    options = dict(is_causal=is_causal, local_window=window, key_padding=padding, **OPTIONS)
    lse = analysis.attention_statistics(q, k, chunk_size=256, **options).lse
    _, dense = attnjax.dot_product_attention(
        q.astype(jnp.float64),
        k.astype(jnp.float64),
        k.astype(jnp.float64),
        mask=padding[:, None, None, :],
        is_causal=is_causal,
        local_window_size=window,
        return_weights=True,
        **OPTIONS,
    )
    dense = np.asarray(dense, np.float64)  # [1, H, T, T]
    v, u = rng.normal(size=(1, heads, t, M)), rng.normal(size=(1, heads, t, M))
    products = dict(options, query_chunk_size=256)
    av = analysis.attention_matvec(q, k, lse, jnp.asarray(v, dtype), **products)
    atu = analysis.attention_rmatvec(q, k, lse, jnp.asarray(u, dtype), **products)
    received = analysis.received_mass(q, k, lse, top_k=4, **products)
    np.testing.assert_allclose(np.asarray(av), dense @ v, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(atu), np.swapaxes(dense, -1, -2) @ u, rtol=tol, atol=tol)
    mass = dense.sum(-2)  # [1, H, S]
    np.testing.assert_allclose(np.asarray(received.mass), mass, rtol=tol, atol=tol)
    top = np.argsort(-mass, axis=-1)[..., :4]
    np.testing.assert_array_equal(received.top_keys, top)
    np.testing.assert_allclose(
        received.top_mass, np.take_along_axis(mass, top, -1), rtol=tol, atol=tol
    )
