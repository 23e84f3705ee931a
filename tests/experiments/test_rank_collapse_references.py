"""The references the rank-collapse study computes beside its runs: the eps-scaling identity of a layer, the
exact uniform causal chain, and the mode-of-context baseline of associative recall."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import tasks
from attnjax.analysis.residual import residual_norm, residual_ratio
from experiments.lab import models
from experiments.rank_collapse import chain, recall, scaling
from tests.experiments.lab.test_studies import rank_collapse_test_config


def test_scaled_inputs_keep_the_mean_token_and_set_the_relative_residual_to_eps():
    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(0), (3, 5, 4), jnp.float64) + 2.0  # [B, T, D]
        eps = jnp.asarray([1e-1, 1e-2, 1e-3], jnp.float64)
        out = scaling.scaled_inputs(x, eps)  # [E, B, T, D]
        # Identical rows whose mean is exact have no residual to scale (R = 0 stays 0).
        flat = jnp.full((2, 5, 4), 3.0, jnp.float64)
        flat_out = scaling.scaled_inputs(flat, eps)
    assert out.shape == (3, 3, 5, 4)
    np.testing.assert_allclose(
        jnp.mean(out, axis=-2), jnp.broadcast_to(jnp.mean(x, -2), (3, 3, 4)), rtol=1e-12
    )
    shared = np.sqrt(5) * np.linalg.norm(np.mean(x, axis=-2), axis=-1)  # ||1 x_bar^T||_F, [B]
    np.testing.assert_allclose(
        residual_norm(out, "fro"), np.asarray(eps)[:, None] * shared[None], rtol=1e-12
    )
    np.testing.assert_array_equal(flat_out, jnp.broadcast_to(flat, (3, 2, 5, 4)))


def _attention_only(causal=False):
    """An untrained attention-only model of the test config in float64, its state and hidden states."""
    config = rank_collapse_test_config()
    task = models.make_task(config.task)
    with jax.enable_x64(True):
        trainer = models.make_trainer(
            config.model,
            config.train,
            task,
            architecture="attention_only",
            depth=3,
            causal=causal,
            overrides=dict(
                dtype=jnp.float64,
                param_dtype=jnp.float64,
                embedding_init=jax.nn.initializers.normal(1.25),
            ),
        )
        state = trainer.init(jax.random.key(0), with_optimizer=False)
        inputs = task.batch(jax.random.key(1), 4).inputs
        _, inter = trainer.model(state)(inputs, return_intermediates=True)
    return trainer, state, inter["hidden"]


def test_every_layer_of_pure_attention_scales_as_eps_cubed():
    """Dong et al.'s leading order on an untrained attention-only network: the layer's residual falls as
    eps^3, to a next-order term that shrinks about 10x per decade of eps."""
    trainer, state, hidden = _attention_only()
    eps = np.asarray([1e-1, 1e-2, 1e-3])
    with jax.enable_x64(True):
        res = np.asarray(scaling.layer_residuals(trainer.model(state).blocks, hidden, eps))
    assert res.shape == (3, 3, 4)  # [E, L, B]
    slopes = np.log(res[:-1] / res[1:]) / np.log(10)  # [2, L, B]
    assert np.all(np.abs(slopes - 3) < 0.05)
    deviation = np.median(np.abs(slopes - 3), axis=-1)  # [decade, L]
    np.testing.assert_array_less(deviation[1], deviation[0] / 3)


def test_layer_residuals_apply_each_layer_to_its_own_input():
    """Layer l reads hidden[l - 1]: at eps = ||R||_F / ||1 x_bar^T||_F (eps R_hat = R) the identity's input
    is the forward pass's own, and so is its output."""
    trainer, state, hidden = _attention_only()
    with jax.enable_x64(True):
        x = hidden[:-1]
        shared = np.sqrt(x.shape[-2]) * np.linalg.norm(np.mean(x, axis=-2), axis=-1)  # [L, B]
        size = np.asarray(residual_norm(x, "fro"))
        eps = size / shared  # per layer and example: X_(l-1) itself
        blocks = trainer.model(state).blocks
        per_point = [
            float(scaling.layer_residuals(blocks, hidden, [eps[layer, b]])[0, layer, b])
            for layer in range(3)
            for b in range(2)
        ]
        expected = np.asarray(residual_norm(hidden[1:], "l1inf"))[:, :2].ravel()
    np.testing.assert_allclose(per_point, expected, rtol=1e-9)


def test_the_uniform_causal_chain_is_row_stochastic_with_lambda_2_one_half():
    a = np.asarray(chain.uniform_causal(6))
    np.testing.assert_allclose(a.sum(axis=1), 1.0)
    assert np.all(np.triu(a, 1) == 0)
    np.testing.assert_allclose(np.sort(np.abs(np.linalg.eigvals(a)))[-2], chain.UNIFORM_LAMBDA2)


def test_chain_residuals_are_a_power_of_the_uniform_chain():
    with jax.enable_x64(True):
        x0 = jax.random.normal(jax.random.key(2), (3, 6, 4), jnp.float64)
        got = np.asarray(chain.chain_residuals(x0, 5))
    a = np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None]
    x, expected = np.asarray(x0), []
    for _ in range(6):
        expected.append(np.mean(np.asarray(residual_ratio(x, "fro"))))
        x = a @ x
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    # The asymptotic rate is |lambda_2| = 1/2 (the last layers of a longer chain).
    with jax.enable_x64(True):
        long = np.asarray(chain.chain_residuals(x0, 40))
    np.testing.assert_allclose(long[-1] / long[-2], 0.5, rtol=1e-3)


def _batch(values_per_example, queried, predictions, vocab=8, pairs=4):
    """A recall batch: keys 0..3 then values (ids 4..7), queried keys; predictions at every position."""
    inputs, targets, weights = [], [], []
    for values, asked in zip(values_per_example, queried):
        keys = list(range(pairs))
        seq = [t for kv in zip(keys, values) for t in kv] + list(asked)
        inputs.append(seq)
        targets.append([0] * (2 * pairs) + [values[k] for k in asked])
        weights.append([0.0] * (2 * pairs) + [1.0] * len(asked))
    return (
        jnp.asarray(predictions),
        jnp.asarray(inputs),
        jnp.asarray(targets),
        jnp.asarray(weights),
    )


def test_recall_scores_count_the_mode_baseline_and_the_non_mode_queries():
    # Example 1: values 5, 5, 6, 7 (mode 5, counted twice); example 2: 4, 6, 6, 4 (modes 4 and 6, a tie:
    # the baseline predicts the smallest, 4). Every key is queried.
    values = [[5, 5, 6, 7], [4, 6, 6, 4]]
    queried = [[0, 1, 2, 3], [3, 2, 1, 0]]
    # The model answers example 1 perfectly; in example 2 it says 4 everywhere.
    predictions = [[0] * 8 + [5, 5, 6, 7], [0] * 8 + [4, 4, 4, 4]]
    counts = {
        k: int(v) for k, v in recall.scores(*_batch(values, queried, predictions), 4, 8).items()
    }
    assert counts == {
        "queries": 8,
        "correct": 4 + 2,
        "mode_correct": 2 + 2,  # example 1: the two 5s; example 2: the two 4s
        "not_mode_queries": 2,  # example 1: the answers 6 and 7 (a tie's values are all modes)
        "not_mode_correct": 2,
    }


def test_recall_mode_baseline_matches_its_expectation_on_the_task():
    """On the study's task the mode scores E[max count] / N; at N = 8 pairs over 16 values about 0.26."""
    task = tasks.AssociativeRecall(num_pairs=8, num_queries=8, vocab_size=32)
    batch = task.batch(jax.random.key(0), 4096)
    counts = recall.scores(batch.targets, *batch, task.num_pairs, task.vocab_size)
    assert int(counts["correct"]) == int(counts["queries"])  # predicting the targets
    baseline = int(counts["mode_correct"]) / int(counts["queries"])
    assert baseline == pytest.approx(0.26, abs=0.01)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, 16, (200000, 8))
    expected = np.mean((draws[..., None] == np.arange(16)).sum(axis=1).max(axis=1)) / 8
    assert baseline == pytest.approx(expected, abs=0.01)
