"""One process of the multi-process training test (`test_distributed.py`); not a test file itself.

    python -m tests.distributed_worker OUT NUM_PROCESSES PROCESS_ID PORT

Trains 2 seeds of a tiny one-layer model for 6 steps with `SeedsRunner` over a
('seed', 'data') mesh of every process's CPU devices (`jax.devices()`), and
process 0 writes the losses `[K, S]` and the final parameters' sum of squares
per seed to OUT (JSON). With NUM_PROCESSES 1 the process runs alone, without
`jax.distributed`. The device count per process comes from XLA_FLAGS
(`--xla_force_host_platform_device_count`), set by the caller.
"""

import json
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Batch(NamedTuple):
    inputs: jax.Array
    targets: jax.Array
    weights: jax.Array


class CopyTask(NamedTuple):
    vocab_size: int = 12
    seq_len: int = 8

    def batch(self, key, batch_size):
        x = jax.random.randint(key, (batch_size, self.seq_len), 0, self.vocab_size, jnp.int32)
        return Batch(x, x, jnp.ones(x.shape, jnp.float32))


def main(out: str, num_processes: int, process_id: int, port: int) -> None:
    if num_processes > 1:
        jax.distributed.initialize(
            f"localhost:{port}",
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=60,
        )
    from attnjax import nn, training

    config = nn.TransformerConfig.create(
        num_layers=1, features=16, num_heads=2, vocab_size=12, max_len=8
    )
    optimizer = training.OptimizerConfig(learning_rate=3e-3, warmup_steps=2, total_steps=6)
    trainer = training.Trainer(config, optimizer, CopyTask(), batch_size=8)
    mesh = training.seeds_mesh(2, 8, jax.devices())  # every process's devices
    runner = training.SeedsRunner(trainer, mesh)
    state = runner.init(jax.random.split(jax.random.key(0), 2))
    data_keys = jax.random.split(jax.random.key(1), 2)
    state, first = runner.train(state, data_keys, 3)
    state, second = runner.train(state, data_keys, 3)  # the step counter is read back between calls
    losses = np.concatenate([np.asarray(first["loss"]), np.asarray(second["loss"])])
    squares = jax.jit(
        lambda p: sum(
            jnp.sum(jnp.square(x), axis=tuple(range(1, x.ndim))) for x in jax.tree.leaves(p)
        ),
        out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
    )(state.params)
    if process_id == 0:
        with open(out, "w") as f:
            json.dump(
                {
                    "mesh": dict(mesh.shape),
                    "processes": jax.process_count(),
                    "devices": jax.device_count(),
                    "losses": losses.tolist(),
                    "param_squares": np.asarray(squares).tolist(),
                },
                f,
            )
    print(f"process {process_id} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
