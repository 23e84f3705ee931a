"""bf16 compute with float32 parameters (`model.dtype='bfloat16'` in the rank-collapse config)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import training
from configs import rank_collapse as config_lib
from experiments.lab import models

STEPS, LOG_EVERY, SEEDS = 40, 10, 2


def _trainer(dtype: str):
    config = config_lib.get_config("smoke")
    config.model.dtype = dtype
    config.train.update(steps=STEPS, warmup_steps=4)
    return models.make_trainer(
        config.model,
        config.train,
        models.make_task(config.task),
        architecture="skip_mlp",
        depth=2,
        causal=True,
    )


def _loss_curve(dtype: str):
    """Loss averaged over each `LOG_EVERY` steps `[STEPS / LOG_EVERY, SEEDS]` and the final state."""
    runner = training.SeedsRunner(_trainer(dtype))
    state = runner.init(jax.random.split(jax.random.key(0), SEEDS))
    logged = []
    state = training.fit(
        runner,
        state,
        jax.random.split(jax.random.key(1), SEEDS),
        total_steps=STEPS,
        log_every=LOG_EVERY,
        on_log=lambda step, s, m: logged.append(m["loss"]),
        progress=None,
    )
    return np.stack(logged), state


@pytest.fixture(scope="module")
def curves():
    return {dtype: _loss_curve(dtype) for dtype in ("float32", "bfloat16")}


def test_bf16_compute_keeps_float32_params_and_optimizer_state(curves):
    _, state = curves["bfloat16"]
    floats = [
        x
        for x in jax.tree.leaves((state.params, state.opt_state))
        if jnp.issubdtype(x.dtype, jnp.floating)
    ]
    assert floats and all(x.dtype == jnp.float32 for x in floats)


def test_bf16_compute_runs_the_model_in_bf16(curves):
    trainer = _trainer("bfloat16")
    state = jax.tree.map(lambda x: x[0], curves["bfloat16"][1])  # the first seed, trained
    inputs = trainer.task.batch(jax.random.key(1), 4).inputs
    logits, inter = jax.jit(lambda state, x: trainer.model(state)(x, return_intermediates=True))(
        state, inputs
    )
    assert logits.dtype == jnp.bfloat16 and inter["hidden"].dtype == jnp.bfloat16
    # Softmax weights stay in float32 and rows still sum to one.
    assert inter["attention"].dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(inter["attention"]).sum(-1), 1.0, rtol=1e-5)


def test_bf16_loss_curve_tracks_float32(curves):
    loss32, _ = curves["float32"]
    loss16, _ = curves["bfloat16"]
    assert np.all(np.isfinite(loss16))
    # Both learn: the last window's loss is well below the first's.
    assert np.all(loss32[-1] < 0.9 * loss32[0]) and np.all(loss16[-1] < 0.9 * loss16[0])
    # bf16 keeps 8 bits of mantissa (relative rounding 2^-9 ~ 0.002 per op);
    # the curves agree to within 3% at every logged window, for every seed.
    np.testing.assert_allclose(loss16, loss32, rtol=0.03)


def test_unknown_compute_dtype_is_rejected():
    with pytest.raises(ValueError, match="model.dtype must be one of"):
        _trainer("float16")
