"""attnjax.analysis.residual against float64 NumPy references written from the formulas."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import analysis
from attnjax.analysis import residual


def _composite_np(m):
    m = np.abs(np.asarray(m, np.float64))
    return math.sqrt(m.sum(axis=0).max() * m.sum(axis=1).max())


def test_exported_from_the_package():
    for name in ("NORMS", "composite_norm", "residual_norm", "residual_ratio", "shared_norm"):
        assert getattr(analysis, name) is getattr(residual, name)


def test_composite_norm_and_residuals_match_numpy():
    x = np.random.default_rng(0).normal(size=(3, 7, 5))
    np.testing.assert_allclose(
        residual.composite_norm(jnp.asarray(x)), [_composite_np(m) for m in x], rtol=1e-12
    )
    centred = x - x.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(
        residual.residual_norm(jnp.asarray(x), "l1inf"),
        [_composite_np(m) for m in centred],
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        residual.residual_norm(jnp.asarray(x), "fro"),
        np.sqrt((centred**2).sum(axis=(1, 2))),
        rtol=1e-12,
    )
    # The relative residual is the absolute one over ||X||, in either norm.
    np.testing.assert_allclose(
        residual.residual_ratio(jnp.asarray(x), "l1inf"),
        [_composite_np(c) / _composite_np(m) for c, m in zip(centred, x)],
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        residual.residual_ratio(jnp.asarray(x), "fro"),
        np.sqrt((centred**2).sum(axis=(1, 2)) / (x**2).sum(axis=(1, 2))),
        rtol=1e-12,
    )
    # A component shared by every token changes the relative residual, not the absolute one.
    shifted = x + 100.0
    np.testing.assert_allclose(
        residual.residual_norm(jnp.asarray(shifted), "l1inf"),
        residual.residual_norm(jnp.asarray(x), "l1inf"),
        rtol=1e-10,
    )
    assert np.all(
        residual.residual_ratio(jnp.asarray(shifted), "l1inf")
        < 0.1 * residual.residual_ratio(jnp.asarray(x), "l1inf")
    )
    for fn in (residual.residual_norm, residual.residual_ratio):
        with pytest.raises(ValueError, match=r"norm must be one of \('fro', 'l1inf'\); got 'l2'"):
            fn(jnp.asarray(x), "l2")


def test_every_entry_point_defaults_to_the_frobenius_norm():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 6, 4)))
    for fn in (residual.residual_norm, residual.residual_ratio):
        np.testing.assert_array_equal(fn(x), fn(x, "fro"))
        assert not np.allclose(fn(x), fn(x, "l1inf"))


def test_composite_norm_fails_the_triangle_inequality():
    """Dong et al.'s sqrt(||M||_1 ||M||_inf) is not a norm: sqrt(2) + sqrt(2) < 3."""
    a = jnp.asarray([[1.0, 0.0], [1.0, 0.0]], jnp.float64)
    b = jnp.asarray([[1.0, 1.0], [0.0, 0.0]], jnp.float64)
    na, nb, nab = (float(residual.composite_norm(m)) for m in (a, b, a + b))
    assert na == pytest.approx(math.sqrt(2), rel=1e-15)
    assert nb == pytest.approx(math.sqrt(2), rel=1e-15)
    assert nab == pytest.approx(3.0, rel=1e-15)
    assert nab > na + nb + 0.1
    # Its factors are norms: each satisfies the triangle inequality on the same pair.
    for axis in (0, 1):
        sums = [float(jnp.max(jnp.sum(jnp.abs(m), axis=axis))) for m in (a, b, a + b)]
        assert sums[2] <= sums[0] + sums[1]


def test_composite_norm_is_sub_multiplicative_and_bounds_the_spectral_norm():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 50, 6, 6))
    c = residual.composite_norm
    assert np.all(np.asarray(c(jnp.asarray(a @ b))) <= np.asarray(c(a) * c(b)) * (1 + 1e-12))
    assert np.all(np.linalg.norm(a, 2, axis=(-2, -1)) <= np.asarray(c(a)) * (1 + 1e-12))


def test_shared_norm_completes_the_frobenius_residual():
    x = np.random.default_rng(5).normal(size=(2, 5, 3)) + np.array([10.0, 0.0, -3.0])
    res = np.asarray(residual.residual_norm(jnp.asarray(x)))
    shared = np.asarray(residual.shared_norm(jnp.asarray(x)))
    mean = x.mean(-2, keepdims=True)
    np.testing.assert_allclose(res, np.linalg.norm((x - mean).reshape(2, -1), axis=-1), rtol=1e-12)
    np.testing.assert_allclose(shared, np.sqrt(5) * np.linalg.norm(mean[:, 0], axis=-1), rtol=1e-12)
    np.testing.assert_allclose(res**2 + shared**2, (x**2).sum((-2, -1)), rtol=1e-12)
    np.testing.assert_allclose(
        res / np.sqrt((x**2).sum((-2, -1))), residual.residual_ratio(jnp.asarray(x)), rtol=1e-12
    )
    # Identical rows: no residual, however large the shared part.
    same = jnp.full((4, 2), 1e3)
    assert float(residual.residual_norm(same)) == 0
    assert float(residual.shared_norm(same)) == pytest.approx(1e3 * np.sqrt(8))


@pytest.mark.parametrize(
    "fn",
    [
        residual.composite_norm,
        residual.shared_norm,
        lambda x: residual.residual_norm(x, "l1inf"),
        lambda x: residual.residual_ratio(x, "l1inf"),
    ],
)
def test_vmap_is_the_batched_call(fn):
    x = jnp.asarray(np.random.default_rng(3).normal(size=(3, 4, 6, 5)))
    np.testing.assert_allclose(jax.vmap(jax.vmap(fn))(x), fn(x), rtol=1e-14)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match=r"x .*\(5,\)"):
        residual.residual_norm(jnp.ones(5))
    with pytest.raises(TypeError, match="x must be a floating array"):
        residual.shared_norm(jnp.ones((3, 2), jnp.int32))
    with pytest.raises(ValueError, match=r"m .*\(4,\)"):
        residual.composite_norm(jnp.ones(4))
