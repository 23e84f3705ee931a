"""Data-parallel and seed-sharded training on eight CPU devices.

Run in their own process with `ATTNJAX_TEST_DEVICES=8` (`tests/attnjax/test_multi_device.py`
starts it): the rest of the suite runs on one device.
"""

# ruff: noqa: F401, F811
import jax
import numpy as np
import pytest

from attnjax import training

# The fixtures `runner` and `two_seed_losses` are test_training's own (imported, so used by name).
from tests.attnjax.test_training import _losses, runner, two_seed_losses


@pytest.fixture(scope="module", autouse=True)
def eight_devices():
    if jax.device_count() != 8:
        raise pytest.UsageError(
            f"these tests need 8 devices, found {jax.device_count()}: "
            "run them with ATTNJAX_TEST_DEVICES=8"
        )


def test_eight_device_data_parallel_equals_one_device(runner, two_seed_losses):
    assert jax.device_count() == 8
    sharded = runner
    assert sharded.mesh.shape["data"] == 8
    single = training.SeedsRunner(
        runner.trainer, mesh=training.data_mesh(8, jax.local_devices()[:1])
    )
    np.testing.assert_allclose(two_seed_losses, _losses(single, 2), rtol=1e-4)
    batches = sharded._batches(training.batch_keys(jax.random.split(jax.random.key(3), 2), 0, 1))
    assert len(batches.inputs.sharding.device_set) == 8


def test_data_mesh_uses_devices_that_divide_the_batch():
    assert training.data_mesh(12).shape == {"seed": 1, "data": 6}
    assert training.data_mesh(7).shape["data"] == 7


def test_seeds_mesh_puts_devices_on_seeds_first_then_the_batch():
    assert training.seeds_mesh(8, 16).shape == {"seed": 8, "data": 1}
    assert training.seeds_mesh(2, 16).shape == {"seed": 2, "data": 4}
    assert training.seeds_mesh(3, 4).shape == {"seed": 3, "data": 2}
    assert training.seeds_mesh(1, 5, jax.local_devices()[:1]).shape == {"seed": 1, "data": 1}


def test_seeds_sharded_over_devices_equal_a_data_parallel_run(runner, two_seed_losses):
    sharded = training.SeedsRunner(runner.trainer, mesh=training.seeds_mesh(2, 8))
    assert sharded.mesh.shape == {"seed": 2, "data": 4}
    state = sharded.init(jax.random.split(jax.random.key(0), 2))
    assert all(leaf.sharding.spec[0] == "seed" for leaf in jax.tree.leaves(state.params))
    np.testing.assert_allclose(two_seed_losses, _losses(sharded, 2), rtol=1e-4)


def test_seed_count_must_fill_the_seed_axis(runner):
    sharded = training.SeedsRunner(runner.trainer, mesh=training.seeds_mesh(2, 8))
    with pytest.raises(ValueError, match="multiple of the mesh's 2 seed devices"):
        sharded.init(jax.random.split(jax.random.key(0), 3))
