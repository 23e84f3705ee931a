"""Dong et al.'s theory as functions (attnjax.analysis.collapse), with controls that can fail."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import analysis, dot_product_attention, nn
from attnjax.analysis import collapse
from attnjax.analysis.depth import depth_profile

# --------------------------------------------------------------------------
# Predictions and fits: the controls


def test_doubly_exponential_sequence():
    np.testing.assert_allclose(
        collapse.doubly_exponential_sequence(0.9, 4), 0.9 ** (3.0 ** np.arange(5)), rtol=1e-12
    )
    c = 2.0
    expected = [0.5, c * 0.5**3, c * (c * 0.5**3) ** 3]
    np.testing.assert_allclose(
        collapse.doubly_exponential_sequence(0.5, 2, constant=c), expected, rtol=1e-12
    )
    with pytest.raises(ValueError, match="r0 must be > 0"):
        collapse.doubly_exponential_sequence(0.0, 3)
    with pytest.raises(ValueError, match="num_layers"):
        collapse.doubly_exponential_sequence(0.5, -1)


@pytest.mark.parametrize("r0", [0.99, 0.9, 0.5])
def test_positive_control_three_to_the_l_passes(r0):
    r = collapse.doubly_exponential_sequence(r0, 8)  # r_l = r0^(3^l)
    fit = collapse.fit_log_log(r)
    assert len(fit.layers) >= 3 and fit.layers[0] == 0
    np.testing.assert_allclose(fit.rate, 3.0, rtol=1e-9)
    assert collapse.is_doubly_exponential(fit)
    # Replicates with multiplicative noise on log(1/r): still passes, the interval covers 3.
    noise = np.exp(0.05 * np.random.default_rng(1).normal(size=(16, r.size)))
    noisy = np.exp(math.log(r0) * 3.0 ** np.arange(r.size)[None] * noise)
    fit = collapse.fit_log_log(noisy)
    assert collapse.is_doubly_exponential(fit) and fit.rate_low <= 3.0 <= fit.rate_high


@pytest.mark.parametrize(
    "q, r0, layers", [(0.1, 1.0, 6), (0.1, 1.0, 3), (0.5, 0.9, 20), (1e-3, 0.5, 4), (0.7, 1.0, 40)]
)
def test_negative_control_geometric_decay_fails(q, r0, layers):
    r = r0 * q ** np.arange(layers + 1, dtype=np.float64)  # 0.1^l among them
    fit = collapse.fit_log_log(r)
    assert not collapse.is_doubly_exponential(fit), fit
    assert (
        min(fit.step_growth[1:]) <= 2.0 + 1e-12
    )  # from layer 1 on, geometric growth of log(1/r) is <= 2
    # Replicates narrow the interval but do not rescue geometric decay.
    assert not collapse.is_doubly_exponential(collapse.fit_log_log(np.repeat(r[None], 64, axis=0)))
    # The geometric fit recovers q exactly.
    np.testing.assert_allclose(collapse.fit_geometric(r).rate, q, rtol=1e-9)


def test_fits_use_the_resolved_layers_only():
    r = np.array([1.0, 0.9, 0.9**3, 0.9**9, 0.9**27, 1e-16, 1e-16, 0.3])
    fit = collapse.fit_log_log(r)
    assert fit.layers == (
        1,
        2,
        3,
        4,
    )  # r_0 = 1 has no log(1/r) > 0; 1e-16 is below the float64 floor
    np.testing.assert_allclose(fit.rate, 3.0, rtol=1e-9)
    assert collapse.fit_log_log(r, floor=0.1).layers == (1, 2, 3)
    # Too few layers: no interval, and no verdict of doubly exponential decay.
    short = collapse.fit_log_log(np.array([0.5, 0.125, 1e-20]))
    assert (
        short.layers == (0, 1)
        and math.isnan(short.rate_low)
        and not collapse.is_doubly_exponential(short)
    )
    with pytest.raises(ValueError, match="floor must be > 0"):
        collapse.fit_log_log(r, floor=0.0)
    with pytest.raises(ValueError, match=r"residuals must be \[L \+ 1\]"):
        collapse.fit_log_log(np.zeros((2, 3, 4)))
    geometric = collapse.fit_geometric(0.8 ** np.arange(10.0), start=2)
    assert geometric.layers[0] == 2 and geometric.rate_low <= 0.8 <= geometric.rate_high


# --------------------------------------------------------------------------
# The bound from the weights


def _attention_layer(x, w_q, w_k, w_v, w_o, num_heads):
    """Multi-head self-attention without biases, x [T, D] -> [T, D], in the input dtype."""
    t, d = x.shape
    dh = w_q.shape[1] // num_heads

    def heads(y):
        return y.reshape(t, num_heads, dh)

    out = dot_product_attention(heads(x @ w_q)[None], heads(x @ w_k)[None], heads(x @ w_v)[None])[0]
    return out.reshape(t, num_heads * dh) @ w_o


def test_bound_on_a_two_token_example_by_hand():
    a, w, v = 0.3, 2.0, 0.7
    x = jnp.array([[a], [-a]], jnp.float64)
    one = jnp.ones((1, 1), jnp.float64)
    out = _attention_layer(x, w * one, one, v * one, one, 1)
    # P = [[s, 1 - s], [1 - s, s]] with s = sigmoid(2 w a^2), so out = v a (2 s - 1) [1, -1]^T.
    measured = analysis.residual_norm(out, "l1inf")
    np.testing.assert_allclose(measured, math.sqrt(2) * v * a * math.tanh(w * a * a), rtol=1e-12)
    w_qk, w_vo = collapse.head_matrices(w * one, one, v * one, one, 1)
    c = collapse.dong_constant(w_qk, w_vo, 1)
    np.testing.assert_allclose(c, 4 * w * v, rtol=1e-12)
    bound = c * analysis.residual_norm(x, "l1inf") ** 3
    np.testing.assert_allclose(bound, 4 * w * v * (math.sqrt(2) * a) ** 3, rtol=1e-12)
    assert measured <= bound
    np.testing.assert_allclose(
        collapse.dong_constant(w_qk, w_vo, 4.0, gamma=3.0), 3 * 4 * w * v / 2, rtol=1e-12
    )


@pytest.mark.parametrize("num_heads", [1, 4])
@pytest.mark.slow
def test_bound_holds_near_rank_one_on_random_float64_inputs(num_heads):
    rng = np.random.default_rng(num_heads)
    t, d = 12, 16
    ratios = []
    for trial in range(20):
        ws = [jnp.asarray(rng.normal(size=s) / math.sqrt(d)) for s in [(d, d)] * 3 + [(d, d)]]
        w_qk, w_vo = collapse.head_matrices(*ws, num_heads)
        c = collapse.dong_constant(w_qk, w_vo, d // num_heads)
        row = []
        for eps in (1e-1, 1e-2, 1e-3):
            x = jnp.asarray(rng.normal(size=(1, d)) + eps * rng.normal(size=(t, d)))
            out = _attention_layer(x, *ws, num_heads)
            row.append(
                float(
                    analysis.residual_norm(out, "l1inf")
                    / (c * analysis.residual_norm(x, "l1inf") ** 3)
                )
            )
        ratios.append(row)
    ratios = np.asarray(ratios)  # [trial, eps]
    assert np.all(ratios <= 1.0), ratios.max()
    # The residual is cubic in the input residual near rank one: over two
    # decades of eps the ratio to c res^3 stays within a factor 10 (a linear
    # map would change it by 1e4, a quadratic one by 1e2).
    assert np.all(ratios.max(axis=1) / ratios.min(axis=1) < 10), ratios


def test_head_matrices_and_constant_check_shapes():
    w = jnp.zeros((8, 8))
    with pytest.raises(ValueError, match="num_heads must be a positive int dividing"):
        collapse.head_matrices(w, w, w, w, 3)
    with pytest.raises(ValueError, match=r"w_o \[H Dh, D\]"):
        collapse.head_matrices(w, w, w, jnp.zeros((8, 4)), 2)
    with pytest.raises(ValueError, match="w_qk and w_v must both be"):
        collapse.dong_constant(jnp.zeros((8, 8)), jnp.zeros((8, 8)), 4)


# --------------------------------------------------------------------------
# Attention statistics and paths


def test_logit_variance_recovers_the_logits_variance():
    logits = jnp.asarray(np.random.default_rng(2).normal(scale=1.5, size=(3, 9, 9)))
    weights = jax.nn.softmax(logits, axis=-1)
    np.testing.assert_allclose(
        collapse.logit_variance(weights), jnp.mean(jnp.var(logits, axis=-1), axis=-1), rtol=1e-10
    )
    # Causal: masked keys (weight 0) are left out, and so is the first query (one key).
    causal = jnp.where(jnp.tril(jnp.ones((9, 9), bool)), logits, -jnp.inf)
    w = jax.nn.softmax(causal, axis=-1)
    expected = np.mean(
        [[np.var(np.asarray(logits)[b, i, : i + 1]) for i in range(1, 9)] for b in range(3)], axis=1
    )
    np.testing.assert_allclose(collapse.logit_variance(w), expected, rtol=1e-10)


def test_unit_variance_queries_and_keys_give_unit_logit_variance():
    rng = np.random.default_rng(3)
    d, t = 256, 64
    q, k = rng.normal(size=(t, d)), rng.normal(size=(t, d))
    weights = jax.nn.softmax(jnp.asarray(q @ k.T / math.sqrt(d)), axis=-1)
    assert abs(float(collapse.logit_variance(weights)) - 1.0) < 0.1


def test_sampled_paths_and_their_products():
    attention = jax.nn.softmax(
        jnp.asarray(np.random.default_rng(4).normal(size=(5, 3, 2, 6, 6))), axis=-1
    )
    paths = collapse.sample_paths(
        jax.random.key(0), num_layers=5, num_heads=2, length=3, num_paths=40, num_examples=3
    )
    layers, heads, examples = (np.asarray(paths[k]) for k in ("layers", "heads", "examples"))
    assert layers.shape == (40, 3) and np.all(np.diff(layers, axis=1) > 0) and layers.max() <= 4
    assert (
        set(heads.ravel()) <= {0, 1}
        and set(examples) <= {0, 1, 2}
        and len(set(map(tuple, layers))) > 1
    )
    products = collapse.path_products(attention, paths["layers"], paths["heads"], paths["examples"])
    a = np.asarray(attention)
    for n in (0, 17):
        expected = np.eye(6)
        for layer, head in zip(layers[n], heads[n]):
            expected = a[layer, examples[n], head] @ expected
        np.testing.assert_allclose(products[n], expected, rtol=1e-12)
    np.testing.assert_allclose(products.sum(axis=-1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="length must be an int in"):
        collapse.sample_paths(jax.random.key(0), num_layers=2, num_heads=1, length=3, num_paths=1)


# --------------------------------------------------------------------------
# The depth profile in float64


@pytest.mark.slow
def test_depth_profile_keeps_float64_and_resolves_the_collapse():
    config = nn.TransformerConfig.create(
        num_layers=5,
        features=32,
        num_heads=4,
        input_features=32,
        positions=None,
        skip=False,
        mlp=False,
        norm=None,
        final_norm=False,
        dtype=jnp.float64,
        param_dtype=jnp.float64,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (3, 16, 32), jnp.float64)  # unit-variance tokens
    inter = model(x, return_intermediates=True)[1]
    profile = depth_profile(inter["hidden"], inter["attention"])
    assert all(v.dtype == jnp.float64 for v in profile.values())
    r = np.asarray(profile["residual_fro"])
    assert r[0] > 0.9 and np.all(np.diff(r) < 0)
    # Below float32 resolution (~1e-7) and still above the float64 floor.
    assert np.any((r > 1e-14) & (r < 1e-8)), r
    np.testing.assert_allclose(
        profile["residual_abs_fro"][1],
        np.mean([np.linalg.norm(h - h.mean(axis=0)) for h in np.asarray(inter["hidden"][1])]),
        rtol=1e-10,
    )
    means = np.asarray(inter["hidden"]).mean(axis=2)  # [L + 1, B, D]
    np.testing.assert_allclose(
        profile["mean_token_norm"],
        np.sqrt(16) * np.linalg.norm(means, axis=-1).mean(axis=1),
        rtol=1e-10,
    )
    ent = np.asarray(profile["attention_entropy_normalized"])
    np.testing.assert_allclose(
        ent, np.asarray(profile["attention_entropy"]) / math.log(16), rtol=1e-10
    )
    assert ent[0] < 0.95 and profile["dobrushin"][0] > 0.1
