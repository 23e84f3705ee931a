"""Feature maps and random projections (attnjax.features).

References are float64 NumPy formulas written from the papers; statistical
tests use fixed seeds and tolerances of several standard errors.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import features


def normal(seed, shape, dtype=np.float64, scale=1.0):
    """Standard normal NumPy array (times scale) of the given dtype."""
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(dtype)


def favor_reference(x, w):
    """phi(x)_i = exp(w_i . x' - |x'|^2 / 2) / sqrt(M), x' = x / D^(1/4), float64."""
    return np.exp(favor_log_reference(x, w))


def favor_log_reference(x, w):
    """log phi(x)_i = w_i . x' - |x'|^2 / 2 - log(M) / 2, x' = x / D^(1/4), float64."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    x = x / x.shape[-1] ** 0.25
    return x @ w.T - 0.5 * np.sum(x * x, axis=-1, keepdims=True) - 0.5 * np.log(w.shape[0])


# ---------------------------------------------------------------- deterministic maps


def test_elu_plus_one_and_relu_match_formulas():
    x = normal(0, (3, 5, 8))  # float64
    xn = np.asarray(x)
    elu = features.elu_plus_one(x)
    np.testing.assert_allclose(elu, np.where(xn > 0, xn + 1.0, np.exp(xn)), rtol=1e-12)
    np.testing.assert_array_equal(features.relu(x), np.maximum(xn, 0.0))
    assert elu.dtype == jnp.float64 and np.all(np.asarray(elu) > 0)
    assert features.relu(x, is_query=True).shape == (3, 5, 8)


def test_relu_random_matches_formula():
    w = features.gaussian_random_matrix(jax.random.key(1), 32, 8, dtype=jnp.float64)
    x = normal(2, (4, 8))  # float64
    got = features.relu_random(w)(x)
    want = np.maximum(np.asarray(x) @ np.asarray(w).T, 0.0) / np.sqrt(32)
    assert got.shape == (4, 32) and got.dtype == jnp.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_elu_plus_one_keeps_its_digits_far_below_zero_in_float32():
    """elu(x) + 1 = exp(x) for x <= 0: computed as expm1(x) + 1 it lost every digit below
    x ~ -17 in float32 (0 at x = -20, where exp(x) = 2e-9)."""
    x = np.linspace(-80.0, 0.0, 161).astype(np.float32)
    got = np.asarray(features.elu_plus_one(x), np.float64)
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)), rtol=1e-6)


def test_log_features_are_the_log_of_the_features():
    """`phi.log` = log phi (elu_plus_one, favor_plus unstabilised), finite where phi underflows;
    maps without it give None."""
    x = normal(40, (3, 5, 8))  # float64
    np.testing.assert_allclose(
        np.exp(features.call_log_feature_map(features.elu_plus_one, x, is_query=True)),
        features.elu_plus_one(x),
        rtol=1e-12,
    )
    w = features.orthogonal_random_matrix(jax.random.key(41), 16, 8, dtype=jnp.float64)
    phi = features.favor_plus(w)
    for is_query in (True, False):
        log_phi = features.call_log_feature_map(phi, x, is_query=is_query)
        np.testing.assert_allclose(np.exp(log_phi), favor_reference(x, w), rtol=1e-12)
    far = 1e4 * x  # features exp(-1e7) or so: 0 in any float, their logs ordinary numbers
    assert np.all(np.asarray(phi(far, is_query=False)) == 0)
    log_far = features.call_log_feature_map(phi, far, is_query=False)
    np.testing.assert_allclose(log_far, favor_log_reference(far, w), rtol=1e-12)
    assert np.all(np.isfinite(log_far)) and np.all(np.asarray(log_far) < -1e4)
    assert np.all(np.isfinite(features.elu_plus_one.log(-1e4 + x)))
    for plain in (features.relu, features.relu_random(w), jax.nn.softplus):
        assert features.call_log_feature_map(plain, x, is_query=False) is None


# ---------------------------------------------------------------- FAVOR+


def test_favor_plus_matches_formula_and_is_positive():
    w = features.orthogonal_random_matrix(jax.random.key(3), 48, 16, dtype=jnp.float64)
    x = normal(4, (2, 5, 16))  # float64
    raw = features.favor_plus(w, stabilize=False)(x)
    np.testing.assert_allclose(raw, favor_reference(x, w), rtol=1e-12)
    # Keys: exact below the exponent cap. Queries: a per-row factor, max feature 1/sqrt(M).
    keys = features.favor_plus(w)(x, is_query=False)
    queries = features.favor_plus(w)(x, is_query=True)
    np.testing.assert_allclose(keys, raw, rtol=1e-12)
    ratio = np.asarray(queries) / np.asarray(raw)
    np.testing.assert_allclose(ratio, ratio[..., :1] * np.ones_like(ratio), rtol=1e-10)
    np.testing.assert_allclose(np.max(queries, axis=-1), 1 / np.sqrt(48), rtol=1e-12)
    assert np.all(np.asarray(queries) > 0) and np.all(np.asarray(keys) > 0)


def test_favor_plus_low_precision_input_computes_in_float32():
    w = features.gaussian_random_matrix(jax.random.key(5), 16, 8)  # float32
    x = jnp.asarray(normal(6, (3, 8)), jnp.bfloat16)
    assert features.favor_plus(w)(x).dtype == jnp.float32
    assert features.trig_random(w)(x).dtype == jnp.float32


def test_favor_plus_extreme_keys_and_queries_stay_finite():
    """Huge norms: query features are bounded by 1/sqrt(M) (shift), keys by exp(40)/sqrt(M) (clip)."""
    w = features.orthogonal_random_matrix(jax.random.key(7), 64, 32)  # float32
    x = normal(8, (4, 32), np.float32, scale=1e3)
    x = np.concatenate(
        [x, 3.0 * np.asarray(w[:2]) * 32**0.25], axis=0
    )  # keys aligned with long w_i
    phi = features.favor_plus(w)
    q, k = phi(x, is_query=True), phi(x, is_query=False)
    q, k = np.asarray(q), np.asarray(k)
    assert np.all(np.isfinite(q)) and np.all(np.isfinite(k))
    assert q.max() <= 1 / 8 + 1e-7
    assert k.max() <= math.exp(40.0) / 8 * (1 + 1e-6)


def draws(kind, num_draws, m, d, seed):
    """`num_draws` independent projections `[num_draws, m, d]` (float64), from one call.

    Orthogonal blocks are independent, so with m = d one matrix of
    num_draws * d rows holds num_draws independent draws.
    """
    key = jax.random.key(seed)
    if kind == "iid":
        w = features.gaussian_random_matrix(key, num_draws * m, d, dtype=jnp.float64)
    else:
        assert m == d
        w = features.orthogonal_random_matrix(
            key, num_draws * m, d, scaling=kind, dtype=jnp.float64
        )
    return jnp.reshape(w, (num_draws, m, d))


def kernel_estimates(projections, make_map, q, k):
    """phi(q).phi(k) for each projection: float64 `[num_draws, pairs]`."""

    def one(w):
        phi = make_map(w)
        return jnp.sum(phi(q) * phi(k), axis=-1)

    return np.asarray(jax.jit(jax.vmap(one))(projections))


def softmax_kernel(q, k):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    return np.exp(np.sum(q * k, axis=-1) / np.sqrt(q.shape[-1]))


def favor_raw(w):
    return features.favor_plus(w, stabilize=False)


def iid_variance(q, k, m):
    """Var[phi(q).phi(k)] = (exp(|q'+k'|^2) - 1) SM(q, k)^2 / M for iid Gaussian rows
    (Choromanski et al. 2021, Lemma 2), x' = x / D^(1/4)."""
    d = q.shape[-1]
    qs, ks = np.asarray(q) / d**0.25, np.asarray(k) / d**0.25
    return (np.exp(np.sum((qs + ks) ** 2, -1)) - 1) * softmax_kernel(q, k) ** 2 / m


@pytest.mark.parametrize(
    "kind, make_map",
    [("iid", favor_raw), ("chi", favor_raw), ("iid", features.trig_random)],
    ids=["favor_iid", "favor_orthogonal", "trig_iid"],
)
def test_random_features_are_unbiased_for_the_softmax_kernel(kind, make_map):
    """Mean over 4000 independent draws of phi(q).phi(k) -> exp(q.k / sqrt(D)).

    The estimates are iid across draws, so by the CLT the sample mean is
    within 5 standard errors of the truth with probability > 1 - 6e-7 per
    pair (seeds are fixed, so the test is deterministic).
    """
    q = normal(10, (6, 16), scale=0.6)  # float64, 6 (q, k) pairs, D = 16
    k = normal(11, (6, 16), scale=0.6)
    est = kernel_estimates(draws(kind, 4000, 16, 16, seed=12), make_map, q, k)
    mean = est.mean(axis=0)
    stderr = est.std(axis=0, ddof=1) / np.sqrt(est.shape[0])
    truth = softmax_kernel(q, k)
    assert np.all(stderr > 0)
    assert np.all(np.abs(mean - truth) < 5 * stderr), (mean, truth, stderr)


def test_favor_plus_iid_variance_matches_theory():
    """Sample variance over 8000 draws against Lemma 2's closed form.

    With |q' + k'|^2 ~ 0.5 the estimator's kurtosis is ~5, so the relative
    standard error of the sample variance is ~sqrt(4 / 8000) ~ 0.02: 15% is
    over 5 standard errors.
    """
    q = normal(13, (3, 8), scale=0.3)  # float64, D = 8, M = 8
    k = normal(14, (3, 8), scale=0.3)
    est = kernel_estimates(draws("iid", 8000, 8, 8, seed=15), favor_raw, q, k)
    np.testing.assert_allclose(est.var(axis=0, ddof=1), iid_variance(q, k, 8), rtol=0.15)


def test_orthogonal_features_have_lower_variance_than_iid():
    """At equal M = D = 16, block-orthogonal (chi norms) rows give a smaller kernel variance.

    The estimator is log-normal-like, so sample variances of pairs with large
    |q' + k'| are dominated by rare draws; small norms keep the tails light.
    Pooled over 8 pairs, the orthogonal/iid variance ratio is ~0.8 (Performer
    Theorem 2 predicts a strict reduction), against both the sample variance
    of iid draws and its closed form.
    """
    q = normal(16, (8, 16), scale=0.3)  # float64
    k = normal(17, (8, 16), scale=0.3)
    iid = kernel_estimates(draws("iid", 4000, 16, 16, seed=18), favor_raw, q, k).var(axis=0)
    ort = kernel_estimates(draws("chi", 4000, 16, 16, seed=19), favor_raw, q, k).var(axis=0)
    assert ort.sum() / iid.sum() < 0.9, ort / iid
    assert ort.sum() / iid_variance(q, k, 16).sum() < 0.9, ort / iid_variance(q, k, 16)


# ---------------------------------------------------------------- random matrices


@pytest.mark.parametrize("num_features, dim", [(40, 16), (16, 16), (5, 16)])
def test_orthogonal_random_matrix_blocks_are_orthogonal(num_features, dim):
    w = features.orthogonal_random_matrix(jax.random.key(20), num_features, dim, scaling="sqrt_d")
    assert w.shape == (num_features, dim) and w.dtype == jnp.float32
    w = np.asarray(w, np.float64)
    np.testing.assert_allclose(np.linalg.norm(w, axis=-1), np.sqrt(dim), rtol=1e-5)
    for start in range(0, num_features, dim):
        block = w[start : start + dim] / np.sqrt(dim)
        np.testing.assert_allclose(block @ block.T, np.eye(block.shape[0]), atol=1e-5)


def test_orthogonal_random_matrix_chi_norms_and_determinism():
    w = features.orthogonal_random_matrix(jax.random.key(21), 4096, 64, dtype=jnp.float64)
    sq_norms = np.sum(np.asarray(w) ** 2, axis=-1)
    # |w|^2 ~ chi^2(64): mean 64, standard deviation sqrt(128); 4096 draws.
    assert abs(sq_norms.mean() - 64) < 5 * np.sqrt(128 / 4096)
    assert abs(sq_norms.var() - 128) < 0.15 * 128
    again = features.orthogonal_random_matrix(jax.random.key(21), 4096, 64, dtype=jnp.float64)
    np.testing.assert_array_equal(w, again)
    other = features.orthogonal_random_matrix(jax.random.key(22), 4096, 64, dtype=jnp.float64)
    assert not np.allclose(w, other)


def test_gaussian_random_matrix_shape_and_dtype():
    w = features.gaussian_random_matrix(jax.random.key(23), 300, 20)
    assert w.shape == (300, 20) and w.dtype == jnp.float32
    assert abs(float(jnp.mean(w))) < 5 / np.sqrt(6000)


def test_features_work_with_x64_disabled():
    with jax.enable_x64(False):
        w = features.orthogonal_random_matrix(jax.random.key(24), 8, 4)
        x = normal(25, (3, 4), np.float32)
        assert w.dtype == jnp.float32
        for phi in (features.favor_plus(w), features.relu_random(w), features.trig_random(w)):
            assert phi(x).dtype == jnp.float32


# ---------------------------------------------------------------- helpers and validation


def test_call_feature_map_accepts_plain_callables_and_counts_features():
    x = normal(26, (2, 8))  # float64
    np.testing.assert_array_equal(
        features.call_feature_map(jax.nn.softplus, x, is_query=True), jax.nn.softplus(x)
    )
    w = features.gaussian_random_matrix(jax.random.key(27), 12, 8)
    assert features.num_features(features.elu_plus_one, 8) == 8
    assert features.num_features(features.favor_plus(w), 8) == 12
    assert features.num_features(features.trig_random(w), 8) == 24


def test_validation_errors():
    w = features.gaussian_random_matrix(jax.random.key(28), 12, 8)
    x = jnp.ones((2, 5), jnp.float32)
    with pytest.raises(ValueError, match=r"input dim D=5 .*projection.shape=\(12, 8\)"):
        features.favor_plus(w)(x)
    with pytest.raises(ValueError, match="projection must have shape"):
        features.favor_plus(jnp.ones((12,), jnp.float32))
    with pytest.raises(TypeError, match="feature_map must be callable"):
        features.call_feature_map("elu", x, is_query=False)
    with pytest.raises(ValueError, match="keeping the leading dims"):
        features.call_feature_map(lambda y: jnp.sum(y), x, is_query=False)

    def with_bad_log(y):
        return y

    def total(y):
        return jnp.sum(y)

    with_bad_log.log = total
    with pytest.raises(ValueError, match="feature_map.log must map"):
        features.call_log_feature_map(with_bad_log, x, is_query=False)
    with_bad_log.log = "log"
    with pytest.raises(TypeError, match="feature_map.log must be callable"):
        features.call_log_feature_map(with_bad_log, x, is_query=False)
    with pytest.raises(ValueError, match="scaling"):
        features.orthogonal_random_matrix(jax.random.key(0), 4, 4, scaling="unit")
    with pytest.raises(ValueError, match="num_features must be >= 1"):
        features.gaussian_random_matrix(jax.random.key(0), 0, 4)
    with pytest.raises(TypeError, match="dim must be an int"):
        features.orthogonal_random_matrix(jax.random.key(0), 4, 4.0)
