"""Markov-chain view of attention: known answers, NumPy float64 references,
hypothesis properties on random stochastic matrices, jit/vmap, errors."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnjax import analysis as an

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 2e-6, np.float64: 1e-12}
METHODS = ["iterative", "eig", "host"]


def softmax_chain(seed, shape, scale=2.0, causal=False, dtype=np.float64):
    """Row-stochastic softmax(scale * z) with z ~ N(0, 1), built in float64."""
    z = scale * np.random.default_rng(seed).normal(size=shape)
    if causal:
        z = np.where(np.tril(np.ones(shape[-2:], bool)), z, -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(dtype)


def two_state(p, q, dtype):
    return np.array([[1 - p, p], [q, 1 - q]], dtype)


# ---- float64 NumPy references -------------------------------------------------------


def ref_slem(a):
    """|λ_2| from numpy.linalg.eig in float64: drop the eigenvalue nearest 1."""
    out = []
    for m in np.asarray(a, np.float64).reshape(-1, *a.shape[-2:]):
        ev = np.linalg.eigvals(m)
        out.append(np.abs(np.delete(ev, np.argmin(np.abs(ev - 1)))).max())
    return np.array(out).reshape(a.shape[:-2])


def ref_stationary(a):
    """Left eigenvector of the eigenvalue nearest 1, normalised to sum 1."""
    out = []
    for m in np.asarray(a, np.float64).reshape(-1, *a.shape[-2:]):
        ev, vecs = np.linalg.eig(m.T)
        v = np.real(vecs[:, np.argmin(np.abs(ev - 1))])
        out.append(v / v.sum())
    return np.array(out).reshape(a.shape[:-1])


def ref_dobrushin(a):
    a = np.asarray(a, np.float64)
    return 0.5 * np.abs(a[..., :, None, :] - a[..., None, :, :]).sum(-1).max((-2, -1))


# ---- known answers ----------------------------------------------------------------------


def uniform_and_permutations(n, dtype):
    """[uniform, identity, n-cycle, a 2-cycle with an (n-2)-cycle], each [n, n]."""
    eye = np.eye(n)
    mats = [
        np.full((n, n), 1 / n),
        eye,
        eye[np.roll(np.arange(n), 1)],
        eye[[1, 0, *np.roll(np.arange(2, n), 1)]],
    ]
    return np.stack(mats).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", METHODS)
def test_uniform_and_permutation_chains(method, dtype):
    n = 5
    a = uniform_and_permutations(n, dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    # uniform: rank one, mixes in one step; permutations: every |λ| = 1, no mixing
    np.testing.assert_allclose(an.slem(a, method=method), [0, 1, 1, 1], atol=tol)
    np.testing.assert_allclose(an.spectral_gap(a, method=method), [1, 0, 0, 0], atol=tol)
    np.testing.assert_allclose(an.dobrushin(a), [0, 1, 1, 1], atol=tol)
    # all four are doubly stochastic, so the uniform distribution is stationary
    np.testing.assert_allclose(an.stationary_distribution(a), np.full((4, n), 1 / n), atol=tol)
    residual = an.rank_one_residual(a)
    assert float(residual.best[0]) <= tol and float(residual.stationary[0]) <= tol
    assert np.all(np.asarray(residual.best[1:]) > 0.5)
    assert np.asarray(an.is_row_stochastic(a)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_two_state_chain_closed_form(dtype):
    pq = np.array([(0.3, 0.1), (0.9, 0.8), (0.05, 0.6), (1.0, 1.0)])
    a = np.stack([two_state(p, q, np.float64) for p, q in pq]).astype(dtype)
    lam2 = 1 - pq.sum(
        -1
    )  # eigenvalues 1 and 1 - p - q: a negative λ_2 and a periodic chain included
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(an.slem(a), np.abs(lam2), atol=tol)
    np.testing.assert_allclose(an.dobrushin(a), np.abs(lam2), atol=tol)
    np.testing.assert_allclose(
        an.stationary_distribution(a), pq[:, ::-1] / pq.sum(-1, keepdims=True), atol=tol
    )
    # increments shrink like |λ_2|^t: stop well above rounding level
    run = an.power_iteration(
        a[:3], np.array([1.0, 0.0], dtype), steps=6 if dtype == np.float32 else 12
    )
    np.testing.assert_allclose(
        run.rate, np.abs(lam2[:3]), rtol=1e-3 if dtype == np.float32 else 1e-9
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_chain_eigenvalues_are_the_diagonal(dtype):
    a = softmax_chain(1, (4, 5, 5), scale=3.0, causal=True, dtype=dtype)
    diag = np.sort(np.diagonal(a.astype(np.float64), axis1=-2, axis2=-1), -1)
    expected = diag[:, -2]  # triangular: eigenvalues = diagonal; a_00 = 1 is the Perron one
    np.testing.assert_allclose(an.slem(a), expected, atol=1e-6 if dtype == np.float32 else 1e-12)
    pi = an.stationary_distribution(a)  # token 0 is absorbing
    np.testing.assert_allclose(
        pi, np.tile(np.eye(5)[0], (4, 1)), atol=1e-5 if dtype == np.float32 else 1e-10
    )


def far_from_normal_causal_maps(dtype):
    """Causal softmax maps [2, 8, 33, 33] far from normal: a first-token sink and a previous-token head."""
    t = 33
    noise = 0.1 * np.random.default_rng(3).normal(size=(2, 8, t, t))
    scores = (
        noise + 5 * np.stack([np.broadcast_to(np.arange(t) == 0, (t, t)), np.eye(t, k=-1)])[:, None]
    )
    z = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", METHODS)
def test_slem_of_a_triangular_map_is_read_off_its_diagonal(method, dtype):
    """Sink and previous-token maps: |lambda_2| ~ 0.01 is ill-conditioned, and squaring the
    deflated matrix misses it in float32 (the control); slem reads the exact diagonal, causal or
    anti-causal."""
    a = far_from_normal_causal_maps(dtype)
    exact = np.diagonal(a.astype(np.float64), axis1=-2, axis2=-1)[..., 1:].max(-1)
    assert 0.005 < exact.min() and exact.max() < 0.05
    np.testing.assert_array_equal(an.slem(a, method=method), exact.astype(dtype))
    np.testing.assert_array_equal(an.slem(np.flip(a, (-2, -1)), method=method), exact.astype(dtype))
    if dtype == np.float32:
        deflated = jnp.asarray(a - an.stationary_distribution(a)[..., None, :])
        squaring = an.spectral_radius_by_squaring(deflated, an.default_squarings(dtype))
        assert np.max(np.abs(np.asarray(squaring, np.float64) - exact)) > 1e-3


# ---- cross-checks against numpy.linalg.eig in float64 -------------------------------------


def mixed_scale_chains(seed, n, dtype):
    """Four softmax chains [4, n, n] with score scales 0.5, 2, 4, 10 (fast to slow mixing)."""
    chains = [softmax_chain(seed + k, (n, n), scale=c) for k, c in enumerate([0.5, 2.0, 4.0, 10.0])]
    return np.stack(chains).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "method,n", [("iterative", 3), ("iterative", 32), ("eig", 32), ("host", 32)]
)
def test_slem_matches_numpy_eig(n, method, dtype):
    a = mixed_scale_chains(n, n, dtype)
    got = an.slem(a, method=method)
    assert got.dtype == dtype and got.shape == (4,)
    np.testing.assert_allclose(got, ref_slem(a), atol=5e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [3, 32])
def test_stationary_distribution_matches_numpy_eig(n, dtype):
    a = mixed_scale_chains(2 * n, n, dtype)
    pi = an.stationary_distribution(a)
    assert pi.dtype == dtype and pi.shape == (4, n)
    np.testing.assert_allclose(pi, ref_stationary(a), atol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stationary_fallback_solve_when_iteration_is_cut_short(dtype):
    # Nearly decoupled two-block chain: slow mixing, so 3 steps cannot converge.
    eps = 1e-3
    block = softmax_chain(5, (2, 4, 4), scale=1.0)
    a = np.zeros((8, 8))
    a[:4, :4], a[4:, 4:] = (1 - eps) * block[0], (1 - eps) * block[1]
    a[:4, 4:], a[4:, :4] = eps / 4, eps / 4
    a = a.astype(dtype)
    pi = an.stationary_distribution(a, max_iter=3)
    np.testing.assert_allclose(pi, ref_stationary(a), atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stationary_distribution_of_a_nan_matrix_is_nan_as_documented(dtype):
    """A NaN entry anywhere gives NaN, alone or batched with chains that converge or need many steps."""
    nan = np.full((3, 3), np.nan, dtype)
    one_entry = np.full((3, 3), 1 / 3, dtype)
    one_entry[1, 2] = np.nan
    slow = np.array([[0.999, 0.001, 0], [0, 0.999, 0.001], [0.001, 0, 0.999]], dtype)
    pi = np.asarray(an.stationary_distribution(np.stack([nan, one_entry, slow])))
    assert np.all(np.isnan(pi[:2])), pi
    np.testing.assert_allclose(pi[2], 1 / 3, atol=1e-4)
    assert np.all(np.isnan(np.asarray(an.stationary_distribution(nan))))


@pytest.mark.parametrize("dtype", DTYPES)
def test_stationary_distribution_of_reducible_and_periodic_chains(dtype):
    block = softmax_chain(6, (2, 3, 3), scale=2.0)
    reducible = np.zeros((6, 6))
    reducible[:3, :3], reducible[3:, 3:] = block[0], block[1]  # two closed classes: π not unique
    bipartite = np.array(
        [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    )  # period 2, π = (1/2, 1/4, 1/4)
    for a in [reducible, bipartite]:
        a = a.astype(dtype)
        pi = np.asarray(an.stationary_distribution(a), np.float64)
        assert pi.min() >= 0 and abs(pi.sum() - 1) <= 1e-6
        np.testing.assert_allclose(
            pi @ a.astype(np.float64), pi, atol=1e-5 if dtype == np.float32 else 1e-12
        )
    np.testing.assert_allclose(
        an.stationary_distribution(bipartite.astype(dtype)), [0.5, 0.25, 0.25], atol=1e-6
    )


# ---- properties on random stochastic matrices (hypothesis) ---------------------------------


@st.composite
def stochastic_matrices(draw, count=4):
    n = draw(st.sampled_from([2, 5]))  # few shapes: each new shape costs a compilation
    seed = draw(st.integers(0, 2**31 - 1))
    kind = draw(st.sampled_from(["softmax", "dirichlet", "sparse", "causal"]))
    rng = np.random.default_rng(seed)
    if kind == "dirichlet":
        mats = rng.dirichlet(np.full(n, draw(st.sampled_from([0.1, 1.0, 10.0]))), size=(count, n))
    else:
        z = draw(st.sampled_from([0.5, 2.0, 8.0])) * rng.normal(size=(count, n, n))
        if kind == "sparse":
            z = np.where(rng.random(z.shape) < 0.3, z, -np.inf)
            z[:, np.arange(n), rng.integers(0, n, n)] = 0.0  # every row keeps one key
        if kind == "causal":
            z = np.where(np.tril(np.ones((n, n), bool)), z, -np.inf)
        e = np.exp(z - z.max(-1, keepdims=True))
        mats = e / e.sum(-1, keepdims=True)
    return mats  # float64 [count, n, n]


@settings(max_examples=25, deadline=None)
@given(stochastic_matrices(), st.sampled_from(DTYPES))
def test_dobrushin_is_submultiplicative(mats, dtype):
    products = np.einsum("kij,kjl->kil", mats, np.roll(mats, -1, axis=0))  # A_k A_{k+1}, float64
    tau = np.asarray(an.dobrushin(mats.astype(dtype)), np.float64)
    tau_products = np.asarray(an.dobrushin(products.astype(dtype)), np.float64)
    assert np.all(tau_products <= tau * np.roll(tau, -1) + 10 * TOL[dtype])
    np.testing.assert_allclose(tau, ref_dobrushin(mats), atol=10 * TOL[dtype])


@settings(max_examples=25, deadline=None)
@given(stochastic_matrices(), st.sampled_from(DTYPES))
def test_slem_is_bounded_by_dobrushin_and_matches_numpy(mats, dtype):
    a = mats.astype(dtype)
    lam2 = np.asarray(an.slem(a))
    assert np.all(lam2 <= np.asarray(an.dobrushin(a)) + 1e-5)
    assert np.all(lam2 <= 1 + 1e-6)
    # causal and sparse chains can have ill-conditioned (defective) eigenvalues,
    # so the float64 reference itself is only good to about sqrt(eps) there
    np.testing.assert_allclose(lam2, ref_slem(mats), atol=1e-4 if dtype == np.float32 else 1e-7)


@settings(max_examples=25, deadline=None)
@given(stochastic_matrices(), st.sampled_from(DTYPES))
def test_stationary_distribution_is_a_fixed_point(mats, dtype):
    a = mats.astype(dtype)
    pi = np.asarray(an.stationary_distribution(a), np.float64)
    assert pi.min() >= 0
    np.testing.assert_allclose(pi.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(
        np.einsum("bi,bij->bj", pi, mats), pi, atol=1e-5 if dtype == np.float32 else 1e-11
    )


# ---- products across depth, rank-one residuals, power iteration -----------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_path_product_matches_loop_and_collapses(dtype):
    mats = softmax_chain(7, (2, 6, 5, 5), scale=1.0, dtype=dtype)  # [batch, layers, n, n]
    prods = an.path_product(mats)
    assert prods.shape == mats.shape and prods.dtype == dtype
    expected = np.empty_like(mats, dtype=np.float64)
    for b in range(2):
        p = np.eye(5)
        for layer in range(6):
            p = mats[b, layer].astype(np.float64) @ p
            expected[b, layer] = p
    np.testing.assert_allclose(prods, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)
    tau = np.asarray(an.dobrushin(prods))  # [2, 6]
    assert np.all(np.diff(tau, axis=-1) <= 1e-6)  # sub-multiplicativity: τ(P_l) is non-increasing
    residual = an.rank_one_residual(prods)
    assert np.all(np.asarray(residual.best) <= np.asarray(residual.stationary) + 1e-6)
    assert np.all(np.asarray(residual.stationary)[:, -1] < np.asarray(residual.stationary)[:, 0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rank_one_residual_matches_numpy(dtype):
    p = softmax_chain(8, (4, 5, 5), scale=2.0, dtype=dtype)
    got = an.rank_one_residual(p)
    s = np.linalg.svd(p.astype(np.float64), compute_uv=False)
    best = np.sqrt((s[:, 1:] ** 2).sum(-1) / (s**2).sum(-1))
    pi = ref_stationary(p)
    stationary = np.linalg.norm(p - pi[:, None, :], axis=(-2, -1)) / np.linalg.norm(
        p, axis=(-2, -1)
    )
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got.best, best, rtol=rtol)
    np.testing.assert_allclose(got.stationary, stationary, rtol=rtol)
    np.testing.assert_allclose(an.stationary_residual(p, pi.astype(dtype)), stationary, rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_power_iteration_iterates_and_rate(dtype):
    a = softmax_chain(9, (4, 5, 5), scale=3.0, dtype=dtype)
    v0 = np.linspace(-1.0, 1.0, 5).astype(dtype)
    run = an.power_iteration(a, v0, steps=40)
    assert run.iterates.shape == (4, 41, 5) and run.iterates.dtype == dtype
    v = np.tile(v0.astype(np.float64), (4, 1))
    for t in range(1, 4):
        v = np.einsum("bij,bj->bi", a.astype(np.float64), v)
        np.testing.assert_allclose(
            run.iterates[:, t], v, rtol=1e-5 if dtype == np.float32 else 1e-12
        )
    # right iterates reach consensus (π·v0) 1 at the rate |λ_2|^t, measured by `rate`
    pi, lam2 = ref_stationary(a), ref_slem(a)
    consensus_error = np.abs(np.asarray(run.iterates[:, -1], np.float64) - (pi @ v0)[:, None]).max(
        -1
    )
    assert np.all(consensus_error <= 5 * lam2**40 + 1e-6)
    np.testing.assert_allclose(
        run.rate, lam2, rtol=0.05
    )  # complex λ_2 makes the increments oscillate
    left = an.power_iteration(a, np.full(5, 1 / 5, dtype), steps=150, side="left")
    mixed = lam2**150 < 1e-8  # distributions reach π where |λ_2|^150 is negligible
    assert mixed.sum() >= 2
    np.testing.assert_allclose(np.asarray(left.iterates[:, -1])[mixed], pi[mixed], atol=1e-6)


def test_is_row_stochastic_rejects_bad_rows():
    good = softmax_chain(10, (4, 4))
    negative = good.copy()
    negative[0] = [-0.1, 1.1, 0.0, 0.0]  # sums to one, one negative entry
    unnormalised = good * 1.01
    assert bool(an.is_row_stochastic(good.astype(np.float32)))
    assert not bool(an.is_row_stochastic(negative))
    assert not bool(an.is_row_stochastic(unnormalised))
    flags = an.is_row_stochastic(np.stack([good, unnormalised]))
    assert flags.dtype == jnp.bool_ and flags.tolist() == [True, False]


def test_markov_report_shares_one_stationary_solve():
    a = softmax_chain(11, (4, 5, 5), dtype=np.float64)
    report = jax.jit(an.markov_report)(a)
    np.testing.assert_allclose(report.slem, ref_slem(a), atol=1e-12)
    np.testing.assert_allclose(report.spectral_gap, 1 - ref_slem(a), atol=1e-12)
    np.testing.assert_allclose(report.dobrushin, ref_dobrushin(a), atol=1e-12)
    np.testing.assert_allclose(report.stationary, ref_stationary(a), atol=1e-12)
    np.testing.assert_allclose(report.stationary_residual, an.stationary_residual(a), atol=1e-12)


# ---- transformations and dtypes ------------------------------------------------------------

FUNCTIONS = {
    "is_row_stochastic": an.is_row_stochastic,
    "stationary_distribution": an.stationary_distribution,
    "slem": an.slem,
    "slem_eig": lambda a: an.slem(a, method="eig"),
    "slem_host": lambda a: an.slem(a, method="host"),
    "spectral_gap": an.spectral_gap,
    "dobrushin": an.dobrushin,
    "rank_one_residual": an.rank_one_residual,
    "stationary_residual": an.stationary_residual,
    "power_iteration": lambda a: an.power_iteration(a, jnp.ones(5, a.dtype), 4),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_vmap_agrees_with_batched_call(name):
    # the public functions are jax.jit-compiled themselves; vmap must see the same maths
    fn = FUNCTIONS[name]
    a = softmax_chain(12, (4, 5, 5), dtype=np.float32)
    chex.assert_trees_all_close(jax.vmap(fn)(a), fn(a), rtol=1e-5, atol=1e-6)


def test_path_product_under_jit_and_vmap():
    mats = softmax_chain(13, (2, 3, 4, 4), dtype=np.float32)
    np.testing.assert_allclose(
        jax.vmap(jax.jit(an.path_product))(mats), an.path_product(mats), rtol=1e-6
    )


def test_float32_without_x64():
    a = softmax_chain(14, (2, 6, 6), dtype=np.float32)
    with jax.enable_x64(False):
        report = jax.jit(an.markov_report)(jnp.asarray(a))
        prods = jax.jit(an.path_product)(jnp.asarray(a))
    for value in report:
        assert value.dtype == jnp.float32
    assert prods.dtype == jnp.float32
    np.testing.assert_allclose(report.slem, ref_slem(a), atol=1e-6)


# ---- bad input ------------------------------------------------------------------------------


def test_non_square_raises_naming_argument_and_shape():
    with pytest.raises(ValueError, match=r"a must be square.*\(3, 4\)"):
        an.slem(np.ones((3, 4), np.float32) / 4)
    with pytest.raises(ValueError, match=r"a must have shape.*\(4,\)"):
        an.stationary_distribution(np.ones(4, np.float32))


def test_bad_arguments_raise():
    a = np.full((3, 3), 1 / 3, np.float32)
    with pytest.raises(ValueError, match="method"):
        an.slem(a, method="qr")
    with pytest.raises(ValueError, match="steps"):
        an.power_iteration(a, np.ones(3, np.float32), steps=1)
    with pytest.raises(ValueError, match="side"):
        an.power_iteration(a, np.ones(3, np.float32), steps=3, side="up")
    with pytest.raises(ValueError, match=r"v0 must have shape \[\.\.\., 3\]"):
        an.power_iteration(a, np.ones(4, np.float32), steps=3)
    with pytest.raises(ValueError, match=r"pi must have shape \[\.\.\., 3\]"):
        an.stationary_residual(a, np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"mats must have shape \[\.\.\., L, n, n\]"):
        an.path_product(a)
