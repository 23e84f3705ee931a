"""attnjax.analysis.sinks against float64 NumPy references written from the formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import analysis
from attnjax.analysis import markov, sinks


def _stochastic(rng, shape, causal=False):
    a = rng.random(shape)
    if causal:
        a = a * np.tril(np.ones(shape[-2:]))
    return a / a.sum(-1, keepdims=True)


def test_exported_from_the_package():
    for name in ("normalized_entropy", "sink_mass", "uniform_sink_mass", "distance_to_first"):
        assert getattr(analysis, name) is getattr(sinks, name)


@pytest.mark.parametrize("causal", [False, True])
def test_normalized_entropy_divides_by_the_log_of_the_visible_keys(causal):
    rng = np.random.default_rng(0)
    a = _stochastic(rng, (2, 3, 5, 5), causal)
    visible = np.tril(np.ones((5, 5), bool)) if causal else np.ones((5, 5), bool)
    got = np.asarray(sinks.normalized_entropy(jnp.asarray(a), jnp.asarray(visible)))
    keys = visible.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.sum(np.where(a > 0, a * np.log(a), 0), axis=-1)
        want = np.where(keys > 1, h / np.log(np.maximum(keys, 2)), 0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert got.shape == (2, 3, 5)
    # Uniform over the visible keys is 1 for every query with a choice.
    uniform = visible / visible.sum(-1, keepdims=True)
    np.testing.assert_allclose(
        sinks.normalized_entropy(jnp.asarray(uniform), jnp.asarray(visible))[1:], 1, rtol=1e-12
    )


def test_normalized_entropy_without_a_mask_is_the_attention_entropy_over_log_s():
    a = jnp.asarray(_stochastic(np.random.default_rng(1), (4, 6, 6)))
    np.testing.assert_allclose(
        sinks.normalized_entropy(a), analysis.attention_entropy(a) / np.log(6), rtol=1e-12
    )


def test_sink_mass_and_its_uniform_baseline_broadcast_leading_axes():
    rng = np.random.default_rng(2)
    a = _stochastic(rng, (3, 2, 6, 6), causal=True)  # [L, H, T, S]
    sink = rng.random((4, 1, 1, 6)) < 0.4  # [C, 1, 1, S]
    got = np.asarray(sinks.sink_mass(jnp.asarray(a), jnp.asarray(sink)))
    assert got.shape == (4, 3, 2, 6)
    np.testing.assert_allclose(
        got, np.einsum("lhts,cs->clht", a, sink[:, 0, 0].astype(float)), rtol=1e-12
    )
    visible = np.tril(np.ones((6, 6), bool))
    base = np.asarray(sinks.uniform_sink_mass(jnp.asarray(visible), jnp.asarray(sink[:, 0, 0])))
    want = (visible[None] & sink[:, 0, 0][:, None, :]).sum(-1) / visible.sum(-1)
    np.testing.assert_allclose(base, want, rtol=1e-6)
    with pytest.raises(ValueError, match=r"sink must have shape \[..., 6\]"):
        sinks.sink_mass(jnp.asarray(a), jnp.ones((5,), bool))


def test_sink_mass_under_jit_with_a_broadcast_sink_axis_and_a_query_mean():
    """Regression: a broadcast product and sum here, then a weighted mean over queries, compiled on
    XLA:CPU to a loop that read only the first sink category."""
    rng = np.random.default_rng(3)
    a = jnp.asarray(_stochastic(rng, (6, 48, 12, 13, 13)), jnp.float32)
    sink = jnp.asarray(rng.random((4, 48, 13)) < 0.3, jnp.float32)
    weight = jnp.asarray(rng.random(13), jnp.float32)

    def per_category(a, sink):
        mass = sinks.sink_mass(a[None], sink[:, None, :, None, :])  # [C, L, B, H, T]
        return jnp.sum(
            jnp.sum(mass * weight[None, None, None, None], axis=-1), axis=(-1, -2)
        )  # [C, L]

    want = np.einsum(
        "lbhij,cbj,i->cl",
        np.asarray(a, np.float64),
        np.asarray(sink, np.float64),
        np.asarray(weight, np.float64),
    )
    np.testing.assert_allclose(jax.jit(per_category)(a, sink), want, rtol=1e-4)


def test_distance_to_first_and_triangular_slem():
    rng = np.random.default_rng(4)
    a = _stochastic(rng, (3, 7, 7), causal=True)
    np.testing.assert_allclose(
        sinks.distance_to_first(jnp.asarray(a)), 0.5 * np.abs(a - np.eye(7)[0]).sum(-1), rtol=1e-12
    )
    eig = np.sort(np.abs(np.linalg.eigvals(a)), axis=-1)[:, -2]
    np.testing.assert_allclose(markov.triangular_slem(jnp.asarray(a)), eig, rtol=1e-10)
    assert float(markov.triangular_slem(jnp.ones((1, 1)))) == 0


def test_mean_normalized_entropy_averages_the_queries_with_a_choice():
    """Uniform over each query's visible keys gives 1 (the first causal query, with one key, is left out);
    a map where no query has a choice gives 0; a numpy mean over rows 1..T-1 of a random causal map."""
    t = 7
    causal = np.tril(np.ones((t, t), bool))
    uniform = causal / causal.sum(-1, keepdims=True)
    np.testing.assert_allclose(analysis.mean_normalized_entropy(uniform, causal), 1.0, rtol=1e-12)
    assert float(analysis.mean_normalized_entropy(np.eye(t), np.eye(t, dtype=bool))) == 0.0
    a = _stochastic(np.random.default_rng(2), (3, t, t)) * causal
    a = a / a.sum(-1, keepdims=True)
    h = -np.sum(np.where(a > 0, a * np.log(np.where(a > 0, a, 1)), 0), -1)[:, 1:]
    expected = np.mean(h / np.log(np.arange(2, t + 1)), -1)
    np.testing.assert_allclose(analysis.mean_normalized_entropy(a, causal), expected, rtol=1e-12)


def test_sink_rate_counts_the_heads_whose_mean_first_token_mass_exceeds_epsilon():
    """Gu et al.'s rate from the definition: per head the mean over rows of a_(i,1), then the share of
    heads above 0.3; a uniform causal map at T = 64 has mean (1/64) sum_i 1/i = 0.074: no sink."""
    t = 64
    uniform = np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]
    sink = np.tile(np.eye(t)[:1], (t, 1))  # every row on the first key: alpha = 1
    half = 0.5 * sink + 0.5 * uniform  # alpha = 0.5 + 0.5 * 0.074 = 0.537
    # L = 2 layers x H = 3 heads: sinks in 3 of the 6.
    maps = np.stack([np.stack([uniform, sink, half]), np.stack([uniform, uniform, sink])])
    rate = analysis.sink_rate(maps[..., 0])
    assert float(rate) == 3 / 6
    np.testing.assert_allclose(np.mean(uniform[:, 0]), np.sum(1 / np.arange(1, t + 1)) / t)
    assert float(analysis.sink_rate(maps[..., 0], epsilon=0.6)) == 2 / 6  # half (0.537) drops out
    # A batch axis in front; `valid` leaves padded rows out of the mean.
    batch = np.stack([maps[..., 0], np.zeros_like(maps[..., 0])])
    np.testing.assert_array_equal(analysis.sink_rate(batch), [0.5, 0.0])
    padded = np.concatenate([uniform[:8, 0], np.ones(t - 8)])  # rows 8.. are padding, all on key 0
    valid = np.arange(t) < 8
    assert float(analysis.sink_rate(padded[None, None], valid=valid)) == 1.0  # mean 0.34 > 0.3
    assert float(analysis.sink_rate(padded[None, None], valid=np.ones(t, bool))) == 1.0
    no_pad = np.concatenate([uniform[:8, 0], np.zeros(t - 8)])
    assert float(analysis.sink_rate(no_pad[None, None])) == 0.0  # mean over all 64 rows: 0.043
    assert float(analysis.sink_rate(no_pad[None, None], valid=valid)) == 1.0


def test_sink_rate_rejects_bad_input():
    with pytest.raises(ValueError, match=r"first_token_mass must be \[..., L, H, T\]"):
        analysis.sink_rate(np.zeros((3, 8)))
    with pytest.raises(ValueError, match=r"epsilon must be a number in \(0, 1\), got 1.5"):
        analysis.sink_rate(np.zeros((1, 3, 8)), epsilon=1.5)
    with pytest.raises(ValueError, match=r"valid must be \[..., T\]"):
        analysis.sink_rate(np.zeros((1, 3, 8)), valid=np.ones(7, bool))
