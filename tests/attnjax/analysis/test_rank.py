"""Rank metrics: known answers, float64 NumPy references, jit/vmap, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import analysis as an

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 2e-5, np.float64: 1e-11}

SV_METRICS = [
    "stable_rank",
    "effective_rank",
    "participation_ratio",
    "spectral_entropy",
    "condition_number",
]


def random_x(seed, shape, dtype):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


# ---- float64 NumPy references -------------------------------------------------


def ref_sv(x):
    return np.linalg.svd(np.asarray(x, np.float64), compute_uv=False)


def ref_metric(name, x):
    s = ref_sv(x)
    p = s / s.sum(-1, keepdims=True)
    entropy = -np.sum(p * np.log(p), -1)
    return {
        "stable_rank": (s**2).sum(-1) / s[..., 0] ** 2,
        "effective_rank": np.exp(entropy),
        "participation_ratio": (s**2).sum(-1) ** 2 / (s**4).sum(-1),
        "spectral_entropy": entropy,
        "condition_number": s[..., 0] / s[..., -1],
    }[name]


def ref_residual(x, norm):
    x = np.asarray(x, np.float64)
    res = x - x.mean(-2, keepdims=True)

    def nrm(m):
        if norm == "fro":
            return np.sqrt((m**2).sum((-2, -1)))
        return np.sqrt(np.abs(m).sum(-2).max(-1) * np.abs(m).sum(-1).max(-1))

    return nrm(res) / nrm(x)


def ref_token_cosine(x):
    x = np.asarray(x, np.float64)
    u = x / np.linalg.norm(x, axis=-1, keepdims=True)
    gram = u @ np.swapaxes(u, -1, -2)
    t = x.shape[-2]
    off = ~np.eye(t, dtype=bool)
    return gram[..., off].mean(-1)


# ---- known answers (through rank_report: one compilation per shape) ------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_identical_tokens_have_no_residual_and_rank_one(dtype):
    row = np.array([0.5, -2.0, 1.0, 3.0], dtype)
    r = an.rank_report(np.tile(row, (6, 1)))  # X = 1 xᵀ, [6, 4]
    tol = TOL[dtype]
    assert float(r.residual_ratio) <= tol and float(r.residual_ratio_l1inf) <= tol
    np.testing.assert_allclose(r.stable_rank, 1.0, atol=tol)
    np.testing.assert_allclose(r.effective_rank, 1.0, atol=1e-3 if dtype == np.float32 else 1e-6)
    np.testing.assert_allclose(r.participation_ratio, 1.0, atol=tol)
    np.testing.assert_allclose(r.token_cosine_similarity, 1.0, atol=tol)
    assert int(r.numerical_rank) == 1
    assert float(r.rank_one_residual) <= (1e-3 if dtype == np.float32 else 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_orthonormal_matrix_has_full_effective_rank(dtype):
    n = 6
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(n, n)))  # float64 orthonormal
    r = an.rank_report(q.astype(dtype))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for value in [r.effective_rank, r.stable_rank, r.participation_ratio]:
        np.testing.assert_allclose(value, n, rtol=tol)
    np.testing.assert_allclose(r.spectral_entropy, np.log(n), rtol=tol)
    np.testing.assert_allclose(r.condition_number, 1.0, rtol=tol)
    assert int(r.numerical_rank) == n


@pytest.mark.parametrize("dtype", DTYPES)
def test_diagonal_matrices_known_values(dtype):
    x = np.stack([np.diag([4.0, 2.0, 1.0]), np.diag([2.0, 0.0, 0.0])]).astype(dtype)
    r = an.rank_report(x)
    tol = TOL[dtype]
    p = np.array([4.0, 2.0, 1.0]) / 7
    np.testing.assert_allclose(r.condition_number[0], 4.0, rtol=tol)
    np.testing.assert_allclose(r.stable_rank[0], (16 + 4 + 1) / 16, rtol=tol)
    np.testing.assert_allclose(r.participation_ratio[0], 21.0**2 / (256 + 16 + 1), rtol=tol)
    np.testing.assert_allclose(r.spectral_entropy[0], -np.sum(p * np.log(p)), rtol=tol)
    # one non-zero singular value: 0 log 0 = 0 (the seed's log(p + eps) is not 0), σ_min = 0 -> inf
    assert float(r.spectral_entropy[1]) == 0.0 and float(r.effective_rank[1]) == 1.0
    assert float(r.condition_number[1]) == np.inf and int(r.numerical_rank[1]) == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_matrix_conventions(dtype):
    report = an.rank_report(np.zeros((6, 4), dtype))
    for name in [
        "residual_ratio",
        "residual_ratio_l1inf",
        "token_cosine_similarity",
        "stable_rank",
        "effective_rank",
        "participation_ratio",
        "spectral_entropy",
        "rank_one_residual",
    ]:
        assert float(getattr(report, name)) == 0.0, name
    assert int(report.numerical_rank) == 0
    assert float(report.condition_number) == np.inf


@pytest.mark.parametrize("dtype", DTYPES)
def test_numerical_rank_is_relative_to_largest_singular_value(dtype):
    rng = np.random.default_rng(1)
    u, _ = np.linalg.qr(rng.normal(size=(9, 9)))
    v, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    s = np.zeros((9, 5))
    s[[0, 1, 2], [0, 1, 2]] = [3.0, 2.0, 1.0]
    x = u @ s @ v.T  # float64, rank 3
    scaled = np.stack([scale * x for scale in [1e-9, 1.0, 1e9]]).astype(dtype)
    # an absolute threshold such as the seed's 1e-6 fails at one end or the other
    np.testing.assert_array_equal(an.numerical_rank(scaled), [3, 3, 3])
    np.testing.assert_array_equal(
        an.numerical_rank(scaled, rtol=0.5), [2, 2, 2]
    )  # only 3 and 2 exceed 1.5


# ---- every function against float64 NumPy, and under vmap --------------------------------


def references(x):
    refs = {name: ref_metric(name, x) for name in SV_METRICS}
    refs["residual_ratio"] = ref_residual(x, "fro")
    refs["residual_ratio_l1inf"] = ref_residual(x, "l1inf")
    refs["token_cosine_similarity"] = ref_token_cosine(x)
    refs["numerical_rank"] = np.linalg.matrix_rank(np.asarray(x, np.float64))
    return refs


FUNCTIONS = {
    "residual_ratio": an.residual_ratio,
    "residual_ratio_l1inf": lambda x: an.residual_ratio(x, "l1inf"),
    "token_cosine_similarity": an.token_cosine_similarity,
    "stable_rank": an.stable_rank,
    "effective_rank": an.effective_rank,
    "numerical_rank": an.numerical_rank,
    "participation_ratio": an.participation_ratio,
    "spectral_entropy": an.spectral_entropy,
    "condition_number": an.condition_number,
}


def random_batch(dtype):
    x = random_x(2, (3, 2, 9, 5), np.float64)
    x[0, 0, :, 4] = x[0, 0, :, 3]  # one rank-deficient matrix
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_matches_numpy_and_vmap(name, dtype):
    fn, x = FUNCTIONS[name], random_batch(dtype)
    got = fn(x)
    assert got.shape == (3, 2)
    assert got.dtype == (jnp.int32 if name == "numerical_rank" else dtype)
    expected = references(x)[name]
    if name == "condition_number":  # the rank-deficient matrix has σ_min at rounding level
        got, expected = np.asarray(got).ravel()[1:], expected.ravel()[1:]
    np.testing.assert_allclose(got, expected, rtol=1e-4 if dtype == np.float32 else 1e-10)
    if dtype == np.float32:
        # the public functions are jax.jit-compiled themselves; vmap must see the same maths
        np.testing.assert_allclose(jax.vmap(jax.vmap(fn))(x), fn(x), rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rank_report_agrees_with_the_separate_functions(dtype):
    x = random_batch(dtype)
    report = an.rank_report(x)
    for name, fn in FUNCTIONS.items():
        np.testing.assert_allclose(getattr(report, name), fn(x), rtol=1e-6, err_msg=name)
    s = ref_sv(x)
    np.testing.assert_allclose(
        report.singular_values, s, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-6
    )
    best = np.sqrt((s[..., 1:] ** 2).sum(-1) / (s**2).sum(-1))
    np.testing.assert_allclose(
        report.rank_one_residual, best, rtol=1e-4 if dtype == np.float32 else 1e-10
    )


def test_rank_report_works_under_jit_and_without_x64():
    x = random_x(7, (2, 5, 4), np.float32)
    with jax.enable_x64(False):
        report = jax.jit(an.rank_report)(jnp.asarray(x))
    for name, value in report._asdict().items():
        expected = jnp.int32 if name == "numerical_rank" else jnp.float32
        assert value.dtype == expected, name
    np.testing.assert_allclose(report.stable_rank, ref_metric("stable_rank", x), rtol=1e-4)


def test_half_precision_is_computed_in_float32():
    x = random_x(8, (5, 4), np.float32)
    got = an.stable_rank(jnp.asarray(x, jnp.bfloat16))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, ref_metric("stable_rank", x), rtol=2e-2)


# ---- bad input -----------------------------------------------------------------------


def test_vector_input_raises_naming_argument_and_shape():
    with pytest.raises(ValueError, match=r"x .*\(5,\)"):
        an.stable_rank(np.ones(5, np.float32))


def test_unknown_norm_raises():
    with pytest.raises(ValueError, match="norm"):
        an.residual_ratio(np.ones((3, 3), np.float32), norm="nuclear")


def test_integer_input_raises_type_error():
    with pytest.raises(TypeError, match="x must be a floating array"):
        an.effective_rank(np.ones((3, 3), np.int32))


def test_token_cosine_needs_two_tokens():
    with pytest.raises(ValueError, match=r"x needs at least 2 rows.*\(1, 4\)"):
        an.token_cosine_similarity(np.ones((1, 4), np.float32))
