import dataclasses
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import nn, training


class Batch(NamedTuple):
    inputs: jax.Array
    targets: jax.Array
    weights: jax.Array


@dataclasses.dataclass(frozen=True)
class CopyTask:
    """Targets equal inputs; `nan_weights` poisons the loss to force divergence."""

    vocab_size: int = 12
    seq_len: int = 8
    nan_weights: bool = False

    def batch(self, key, batch_size):
        x = jax.random.randint(key, (batch_size, self.seq_len), 0, self.vocab_size, jnp.int32)
        w = jnp.full(x.shape, jnp.nan if self.nan_weights else 1.0, jnp.float32)
        return Batch(x, x, w)


def _trainer(task=None, total_steps=20, batch_size=8):
    config = nn.TransformerConfig.create(
        num_layers=2, features=16, num_heads=2, vocab_size=12, max_len=8
    )
    opt = training.OptimizerConfig(learning_rate=3e-3, warmup_steps=2, total_steps=total_steps)
    return training.Trainer(config, opt, task or CopyTask(), batch_size)


@pytest.fixture(scope="module")
def runner():
    """One runner (so one set of compiled programs) shared by the tests below."""
    return training.SeedsRunner(_trainer(total_steps=20))


@pytest.fixture(scope="module")
def two_seed_losses(runner):
    return _losses(runner, 2)


def _run(runner, seeds, steps, log_every, checkpointer=None, state=None):
    init_keys = jax.random.split(jax.random.key(0), 4)[:seeds]
    data_keys = jax.random.split(jax.random.key(1), 4)[:seeds]
    state = runner.init(init_keys) if state is None else state
    return training.fit(
        runner,
        state,
        data_keys,
        total_steps=steps,
        log_every=log_every,
        checkpointer=checkpointer,
        progress=None,
    )


def test_training_reduces_loss_and_is_deterministic(runner, two_seed_losses):
    assert np.all(two_seed_losses[-1] < 0.8 * two_seed_losses[0])
    np.testing.assert_array_equal(_losses(runner, 2), two_seed_losses)


def _losses(runner, seeds, steps=20, log_every=5):
    logged = []
    state = runner.init(jax.random.split(jax.random.key(0), 4)[:seeds])
    training.fit(
        runner,
        state,
        jax.random.split(jax.random.key(1), 4)[:seeds],
        total_steps=steps,
        log_every=log_every,
        on_log=lambda step, s, m: logged.append(m["loss"]),
        progress=None,
    )
    return np.stack(logged)  # [calls, seeds]


# Parameters are compared through the losses they produce: Adam turns
# rounding-level differences in near-zero gradients (a different reduction
# order) into +-lr steps on those parameters, which moves no loss.


def test_vmapped_seed_equals_a_single_seed_run(runner, two_seed_losses):
    np.testing.assert_allclose(two_seed_losses[:, 0], _losses(runner, 1)[:, 0], rtol=1e-4)


def test_resume_from_checkpoint_gives_identical_results(tmp_path, monkeypatch):
    """Bit for bit, and the step compiles once: a restored state has the structure, dtypes
    and shardings of a fresh one, so resuming reuses the program."""
    monkeypatch.setattr(
        training.Trainer, "step", chex.assert_max_traces(training.Trainer.step, n=1)
    )
    runner = training.SeedsRunner(_trainer(total_steps=20))
    uninterrupted = _run(runner, 2, 20, 5)
    ckpt = training.Checkpointer(str(tmp_path / "ckpt"))
    _run(runner, 2, 10, 5, checkpointer=ckpt)  # "killed" after step 10
    ckpt.close()
    ckpt = training.Checkpointer(str(tmp_path / "ckpt"))
    assert ckpt.latest_step() == 10
    restored = ckpt.restore(runner.init(jax.random.split(jax.random.key(0), 2)))
    assert int(restored.step[0]) == 10
    resumed = _run(runner, 2, 20, 5, checkpointer=ckpt, state=restored)
    ckpt.close()
    chex.assert_trees_all_equal(uninterrupted, resumed)


def _fit_with_rows(runner, ckpt, steps, state=None):
    """Train to `steps` saving, with each checkpoint, one row per log step: the step and the state's step."""

    def on_log(step, state, metrics):
        ckpt.rows.append({"step": step, "state_step": int(state.step[0]), "loss": metrics["loss"]})

    init_keys, data_keys = (
        jax.random.split(jax.random.key(0), 2),
        jax.random.split(jax.random.key(1), 2),
    )
    state = runner.init(init_keys) if state is None else state
    return training.fit(
        runner,
        state,
        data_keys,
        total_steps=steps,
        log_every=5,
        on_log=on_log,
        checkpointer=ckpt,
        progress=None,
    )


def test_checkpoint_restores_rows_and_state_of_the_same_step(runner, tmp_path):
    ckpt = training.Checkpointer(str(tmp_path / "ckpt"))
    _fit_with_rows(runner, ckpt, 15)
    ckpt.close()
    like = runner.init(jax.random.split(jax.random.key(0), 2))
    ckpt = training.Checkpointer(str(tmp_path / "ckpt"))
    assert ckpt.all_steps() == [10, 15]  # the latest two kept
    for step in (10, 15):
        state = ckpt.restore(like, step)
        assert int(state.step[0]) == step
        assert [row["step"] for row in ckpt.rows] == [5, 10, 15][: step // 5]
        assert all(row["step"] == row["state_step"] for row in ckpt.rows)
    with pytest.raises(ValueError, match=r"no checkpoint of step=5 .* saved steps: \[10, 15\]"):
        ckpt.restore(like, 5)
    ckpt.close()


def test_a_kill_during_the_save_leaves_neither_rows_nor_state_of_that_step(
    runner, tmp_path, monkeypatch
):
    """A kill while the rows item is written (the state item maybe already written) leaves an unfinalised
    step that is never listed: the run resumes from the step before, with its rows."""
    import orbax.checkpoint as ocp

    ckpt = training.Checkpointer(str(tmp_path / "ckpt"))
    _fit_with_rows(runner, ckpt, 5)

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt("simulated kill while the rows are written")

    monkeypatch.setattr(ocp.handlers.JsonCheckpointHandler, "async_save", killed)
    with pytest.raises(KeyboardInterrupt):
        _fit_with_rows(
            runner,
            ckpt,
            10,
            state=ckpt.restore(runner.init(jax.random.split(jax.random.key(0), 2))),
        )
    monkeypatch.undo()
    ckpt.close()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["10.orbax-checkpoint-tmp", "5"]
    ckpt = training.Checkpointer(str(tmp_path / "ckpt"))
    assert ckpt.latest_step() == 5
    assert int(ckpt.restore(runner.init(jax.random.split(jax.random.key(0), 2))).step[0]) == 5
    assert [row["step"] for row in ckpt.rows] == [5]
    ckpt.close()


@pytest.mark.parametrize("damaged", ["state/manifest.ocdbt", "rows/metadata"])
def test_a_corrupt_checkpoint_is_named_with_the_way_out(runner, tmp_path, damaged):
    """A truncated file of the latest step (a full disk, a copy cut short) is reported with the
    checkpoint's path, the step and what to delete, not as an error of orbax's internals."""
    directory = tmp_path / "ckpt"
    ckpt = training.Checkpointer(str(directory))
    _fit_with_rows(runner, ckpt, 10)
    ckpt.close()
    path = directory / "10" / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    ckpt = training.Checkpointer(str(directory))
    like = runner.init(jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError) as error:
        ckpt.restore(like)
    message = str(error.value)
    assert message.startswith(f"checkpoint step 10 in {directory} cannot be read")
    assert f"delete {directory / '10'} to resume from step 5" in message
    assert f"or {directory} to start the run again" in message
    assert int(ckpt.restore(like, 5).step[0]) == 5  # the step before is intact
    ckpt.close()


def test_non_finite_loss_marks_diverged_and_freezes_parameters():
    runner = training.SeedsRunner(_trainer(CopyTask(nan_weights=True)))
    init = runner.init(jax.random.split(jax.random.key(0), 2))
    before = jax.tree.map(np.asarray, (init.params, init.opt_state))  # copied: the state is donated
    state = _run(runner, 2, 4, 2, state=init)
    assert np.all(np.asarray(state.diverged))
    chex.assert_trees_all_equal((state.params, state.opt_state), before)


def test_grad_norms_per_group():
    trainer = _trainer()
    state = trainer.init(jax.random.key(0))
    batch = trainer.task.batch(jax.random.key(1), 4)
    grads = jax.jit(trainer.gradients)(state, batch)[1]
    norms = training.grad_norms(grads)
    for group in ("query", "key", "value", "out", "mlp", "other"):
        assert float(norms[f"grad_norm/{group}"]) > 0
    assert (
        "grad_norm/qkv" not in norms
    )  # a fused W_qkv is split into its query, key and value parts
    total = np.sqrt(sum(float(norms[f"grad_norm/{g}"]) ** 2 for g in training.GRAD_GROUPS))
    np.testing.assert_allclose(float(norms["grad_norm/total"]), total, rtol=1e-5)


def test_layer_grad_norms_split_the_group_norms_by_layer():
    """Per-layer norms: sqrt of the sum over layers of their squares is the group's global norm (an identity),
    and each layer's norm is that of its own slice of the stacked gradient."""
    trainer = _trainer()
    state = trainer.init(jax.random.key(0))
    grads = jax.jit(trainer.gradients)(state, trainer.task.batch(jax.random.key(1), 4))[1]
    block = trainer.model_config.block
    per_layer = training.layer_grad_norms(grads, block.num_heads)
    totals = training.grad_norms(grads, block.num_heads)
    num_layers = trainer.model_config.num_layers
    for name in ("query", "key", "value", "out"):
        layers = np.asarray(per_layer[f"layer_grad_norm/{name}"])
        assert layers.shape == (num_layers,) and np.all(layers > 0)
        np.testing.assert_allclose(
            np.sqrt(np.sum(layers**2)), float(totals[f"grad_norm/{name}"]), rtol=1e-5
        )
    kernel = np.asarray(nn.params.attention_params(grads, block.num_heads)["query"]["kernel"])
    bias = nn.params.attention_params(grads, block.num_heads)["query"]["bias"]
    bias = np.zeros((num_layers, 0)) if bias is None else np.asarray(bias).reshape(num_layers, -1)
    by_hand = [np.sqrt(np.sum(kernel[i] ** 2) + np.sum(bias[i] ** 2)) for i in range(num_layers)]
    np.testing.assert_allclose(np.asarray(per_layer["layer_grad_norm/query"]), by_hand, rtol=1e-5)


def test_weighted_cross_entropy_ignores_zero_weights():
    logits = jnp.array([[[5.0, 0.0], [0.0, 5.0], [9.0, 0.0]]], jnp.float32)
    targets = jnp.array([[0, 1, 1]], jnp.int32)
    loss, acc = training.weighted_cross_entropy(
        logits, targets, jnp.array([[1.0, 1.0, 0.0]], jnp.float32)
    )
    np.testing.assert_allclose(acc, 1.0)
    np.testing.assert_allclose(loss, np.log1p(np.exp(-5.0)), rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(warmup_steps=50, total_steps=10), "warmup_steps"),
        (dict(warmup_steps=10, total_steps=10), "warmup_steps < total_steps"),
    ],
)
def test_optimizer_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        training.OptimizerConfig(**kwargs)


def test_linear_attention_model_trains_with_its_projection_fixed():
    """Random projections are variables outside the params: carried, never updated."""
    config = nn.TransformerConfig.create(
        num_layers=2,
        features=16,
        num_heads=2,
        vocab_size=12,
        max_len=8,
        attention=nn.AttentionConfig(attention_kind="linear", num_features=8),
    )
    trainer = training.Trainer(
        config, training.OptimizerConfig(total_steps=4, warmup_steps=1), CopyTask(), 8
    )
    runner = training.SeedsRunner(trainer)
    state = runner.init(jax.random.split(jax.random.key(0), 2))
    projection = np.asarray(jax.tree.leaves(state.other)[0])
    assert projection.shape == (2, 2, 8, 8)  # [seeds, layers, M, Dh]
    first_param = np.asarray(jax.tree.leaves(state.params)[0])  # the state is donated to training
    trained = training.fit(
        runner,
        state,
        jax.random.split(jax.random.key(1), 2),
        total_steps=4,
        log_every=2,
        progress=None,
    )
    np.testing.assert_array_equal(jax.tree.leaves(trained.other)[0], projection)
    assert not np.allclose(jax.tree.leaves(trained.params)[0], first_param)


def _dropout_trainer():
    config = nn.TransformerConfig.create(
        num_layers=1,
        features=16,
        num_heads=2,
        vocab_size=12,
        max_len=8,
        residual_dropout_rate=0.3,
        attention=nn.AttentionConfig(dropout_rate=0.2),
    )
    return training.Trainer(
        config, training.OptimizerConfig(total_steps=4, warmup_steps=1), CopyTask(), 8
    )


def test_dropout_is_drawn_with_the_step_key_and_off_without_one():
    trainer = _dropout_trainer()
    assert trainer.has_dropout and not _trainer().has_dropout
    runner = training.SeedsRunner(trainer)
    data_keys = jax.random.split(jax.random.key(1), 2)
    state = runner.init(jax.random.split(jax.random.key(0), 2))
    first = jax.tree.map(lambda x: x[0], state)  # seed 0 at step 0
    batch = trainer.task.batch(training.batch_keys(data_keys, 0, 1)[0, 0], trainer.batch_size)
    loss = jax.jit(trainer.loss)
    step_key = training.dropout_keys(training.batch_keys(data_keys, 0, 1))[0, 0]

    def at(key):
        return float(loss(first.params, first.other, batch, key)[0])

    assert at(step_key) == at(step_key) and at(step_key) != at(jax.random.key(3))
    # Without a key: the deterministic model (dropout off), computed independently.
    logits = jax.jit(lambda s: trainer.model(s)(batch.inputs, deterministic=True))(first)
    np.testing.assert_allclose(
        at(None),
        training.weighted_cross_entropy(logits, batch.targets, batch.weights)[0],
        rtol=1e-6,
    )
    assert at(step_key) != at(None)
    # The runner's first step drops with exactly that key.
    _, metrics = runner.train(state, data_keys, 2)
    np.testing.assert_allclose(metrics["loss"][0, 0], at(step_key), rtol=1e-6)
    with pytest.raises(ValueError, match="dropout_key"):
        trainer.step(first, batch)


def test_dropout_keys_depend_only_on_the_data_key_and_the_step():
    """So a resumed run (steps 2..3 in a second call) draws the masks of an uninterrupted one."""
    data_keys = jax.random.split(jax.random.key(1), 2)

    def data(keys):
        return np.asarray(jax.random.key_data(keys))

    at_once = data(training.dropout_keys(training.batch_keys(data_keys, 0, 4)))
    in_two = [
        data(training.dropout_keys(training.batch_keys(data_keys, start, 2))) for start in (0, 2)
    ]
    np.testing.assert_array_equal(at_once, np.concatenate(in_two))
    flat = at_once.reshape(8, -1)
    assert len({row.tobytes() for row in flat}) == 8  # every step and seed its own key
    batch_data = data(training.batch_keys(data_keys, 0, 4)).reshape(8, -1)
    assert not any(
        np.array_equal(a, b) for a, b in zip(flat, batch_data)
    )  # not the batch keys themselves
