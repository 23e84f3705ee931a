"""Training: train state, jitted steps, seeds in one program, data parallelism, checkpoints.

The state is a plain pytree (`TrainState`), so a study trains several seeds
at once with `jax.vmap` over initialisation keys, and the step is one jitted
function over `lax.scan` of K optimiser steps (on a CPU, per-step dispatch
costs more than a small model's arithmetic). Batches are made from
`fold_in(data_key, step)`, so a run resumed from a checkpoint sees the same
data and ends with the same numbers as an uninterrupted one. A model with
dropout drops with a key derived from the same batch key (`dropout_keys`), so
its masks are as reproducible; evaluation runs it deterministically.

Parallelism: a 2-D `jax.sharding.Mesh` ('seed', 'data') of local devices.
The seed axis of the state and batches is sharded over 'seed' (independent
programs, no communication); the batch axis over 'data', with parameters
replicated within a seed group and the gradient all-reduce inserted by XLA.
`data_mesh` (the default) uses the data axis only.

Shapes: with S seeds, K steps per call, batch B and length T, batches are
`[K, S, B, T]`; every leaf of a vmapped state has a leading S axis.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from attnjax import compilation, nn
from attnjax.serialization import json_form

Array = jax.Array

GRAD_GROUPS = nn.params.GROUPS


class TrainState(NamedTuple):
    """step `[]`, trainable params, other model variables, optimiser state, diverged flag `[]`."""

    step: Array
    params: Any
    other: Any
    opt_state: Any
    diverged: Array


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with linear warmup then cosine decay, and global-norm clipping."""

    learning_rate: float = 1e-3
    warmup_steps: int = 100
    total_steps: int = 1000
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    b1: float = 0.9
    b2: float = 0.98

    def __post_init__(self):
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.total_steps < 1 or not 0 <= self.warmup_steps < self.total_steps:
            raise ValueError(
                f"need total_steps >= 1 and 0 <= warmup_steps < total_steps, "
                f"got warmup_steps={self.warmup_steps}, total_steps={self.total_steps}"
            )


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.learning_rate,
        warmup_steps=config.warmup_steps,
        decay_steps=config.total_steps,
        end_value=config.learning_rate * 0.1,
    )
    return optax.chain(
        optax.clip_by_global_norm(config.clip_norm),
        optax.adamw(schedule, b1=config.b1, b2=config.b2, weight_decay=config.weight_decay),
    )


def weighted_cross_entropy(logits: Array, targets: Array, weights: Array) -> tuple[Array, Array]:
    """Mean cross-entropy and accuracy over positions with weight > 0.

    logits `[B, T, V]`, targets `[B, T]` int, weights `[B, T]` -> (loss `[]`, accuracy `[]`).
    """
    logits = logits.astype(jnp.float32)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    total = jnp.maximum(jnp.sum(weights), 1.0)
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
    return jnp.sum(losses * weights) / total, jnp.sum(correct * weights) / total


def grad_norms(
    grads, num_heads: Optional[int] = None, num_kv_heads: Optional[int] = None
) -> dict[str, Array]:
    """Global L2 norm of the gradient per parameter group (`GRAD_GROUPS`: W_Q, W_K, W_V, W_O, MLP, rest).

    Groups are those of `attnjax.nn.params.grouped`; a fused W_qkv's gradient
    is split into its query, key and value parts, which needs `num_heads`
    (and `num_kv_heads` with GQA). Noci et al. 2022 predict that under rank
    collapse the gradients of the query and key weights vanish while those
    of the value weights do not.
    """
    groups = nn.params.grouped(grads, num_heads, num_kv_heads)
    squares = {
        g: sum(
            (jnp.sum(jnp.square(x.astype(jnp.float32))) for x in groups[g]),
            jnp.zeros((), jnp.float32),
        )
        for g in GRAD_GROUPS
    }
    norms = {f"grad_norm/{g}": jnp.sqrt(s) for g, s in squares.items()}
    norms["grad_norm/total"] = jnp.sqrt(sum(squares.values()))
    return norms


def layer_grad_norms(grads, num_heads: int, num_kv_heads: Optional[int] = None) -> dict[str, Array]:
    """Per-layer L2 norm of the attention projections' gradients (kernel and bias together).

    `grads`: a `Transformer`'s gradient tree (attention parameters stacked `[L, ...]`, separate or
    fused W_qkv alike) -> `{"layer_grad_norm/query" | "key" | "value" | "out": [L]}`, in float32.
    Noci et al. 2022 compare these per layer: under rank collapse the query and key gradients of
    the layers that receive collapsed inputs vanish.
    """
    out = {}
    for name, leaves in nn.params.attention_params(grads, num_heads, num_kv_heads).items():
        parts = [x for x in leaves.values() if x is not None]
        squares = sum(
            jnp.sum(jnp.square(x.astype(jnp.float32)).reshape(x.shape[0], -1), axis=1)
            for x in parts
        )
        out[f"layer_grad_norm/{name}"] = jnp.sqrt(squares)
    return out


@dataclasses.dataclass(frozen=True)
class Trainer:
    """Pure init / step / eval functions for one model config, task and optimiser.

    `task` needs `batch(key, batch_size) -> Batch(inputs, targets, weights)`.
    """

    model_config: nn.TransformerConfig
    optimizer_config: OptimizerConfig
    task: Any
    batch_size: int

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

    @property
    def has_dropout(self) -> bool:
        """Whether the model drops anything in training (residual branches or attention weights)."""
        block = self.model_config.block
        return block.residual_dropout_rate > 0 or block.attention.dropout_rate > 0

    @property
    def optimizer(self) -> optax.GradientTransformation:
        return make_optimizer(self.optimizer_config)

    def _split(self, model):
        return nnx.split(model, nnx.Param, ...)

    @property
    def graphdef(self):
        model = nnx.eval_shape(lambda: nn.Transformer(self.model_config, rngs=nnx.Rngs(0)))
        return self._split(model)[0]

    def init(self, key: Array, *, with_optimizer: bool = True) -> TrainState:
        """One seed's state from a PRNG key (vmap it for several seeds).

        `with_optimizer=False` leaves `opt_state` empty, for measuring
        untrained models without paying for the optimiser state.
        """
        # A dropout stream only where the model needs one to be built; the
        # training step passes its own key (`step`), so it is never drawn.
        streams = {"dropout": jax.random.fold_in(key, 1)} if self.has_dropout else {}
        model = nn.Transformer(self.model_config, rngs=nnx.Rngs(params=key, **streams))
        _, params, other = self._split(model)
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            other=other,
            opt_state=self.optimizer.init(params) if with_optimizer else (),
            diverged=jnp.zeros((), bool),
        )

    def model(self, state: TrainState):
        """The NNX model of one seed's state."""
        return nnx.merge(self.graphdef, state.params, state.other)

    def loss(
        self, params, other, batch, dropout_key: Optional[Array] = None
    ) -> tuple[Array, Array]:
        """(loss, accuracy) of one batch; with `dropout_key` the model drops with that key
        (split over layers), without it the model is deterministic (evaluation)."""
        model = nnx.merge(self.graphdef, params, other)
        logits = model(batch.inputs, deterministic=dropout_key is None, rngs=dropout_key)
        return weighted_cross_entropy(logits, batch.targets, batch.weights)

    def gradients(
        self, state: TrainState, batch, dropout_key: Optional[Array] = None
    ) -> tuple[tuple[Array, Array], Any]:
        """((loss, accuracy), gradient w.r.t. the trainable params) for one seed.

        The non-trainable variables are differentiated too and their gradient
        dropped: NNX needs every variable of a module at the same trace level
        (`allow_int`: a model with dropout keeps integer RNG state there).
        """
        grad_fn = jax.value_and_grad(self.loss, argnums=(0, 1), has_aux=True, allow_int=True)
        (loss, accuracy), (grads, _) = grad_fn(state.params, state.other, batch, dropout_key)
        return (loss, accuracy), grads

    def step(
        self, state: TrainState, batch, dropout_key: Optional[Array] = None
    ) -> tuple[TrainState, dict[str, Array]]:
        """One optimiser step for one seed (dropout with `dropout_key`, needed when
        `has_dropout`). A non-finite loss marks the run diverged; a diverged run's
        parameters are frozen so its numbers stay inspectable."""
        if self.has_dropout and dropout_key is None:
            raise ValueError(
                "the model has dropout: step needs a dropout_key (SeedsRunner derives one per step)"
            )
        (loss, accuracy), grads = self.gradients(state, batch, dropout_key)
        updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        diverged = state.diverged | ~jnp.isfinite(loss)

        def keep(new, old):
            return jax.tree.map(lambda n, o: jnp.where(diverged, o, n), new, old)

        new_state = TrainState(
            state.step + 1,
            keep(params, state.params),
            state.other,
            keep(opt_state, state.opt_state),
            diverged,
        )
        return new_state, {"loss": loss, "accuracy": accuracy, **grad_norms(grads)}

    def evaluate(self, state: TrainState, batch) -> dict[str, Array]:
        loss, accuracy = self.loss(state.params, state.other, batch)
        return {"eval_loss": loss, "eval_accuracy": accuracy}


# --------------------------------------------------------------------------
# Several seeds, K steps per call, sharded batches


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, at_most + 1) if n % d == 0)


def seeds_mesh(num_seeds: int, batch_size: int, devices: Optional[list] = None) -> Mesh:
    """2-D mesh ('seed', 'data') over local devices: seeds first, then the batch.

    The seed axis takes as many devices as evenly divide `num_seeds`; the data
    axis as many of the remaining ones as evenly divide `batch_size`. Seeds are
    independent programs, so sharding them needs no communication at all; on a
    multi-core CPU with one XLA device per core (`jax_num_cpu_devices`) it
    runs the seeds on all cores at once.
    """
    devices = jax.local_devices() if devices is None else devices
    seeds = _largest_divisor(num_seeds, len(devices))
    data = _largest_divisor(batch_size, len(devices) // seeds)
    return Mesh(np.array(devices[: seeds * data]).reshape(seeds, data), ("seed", "data"))


def data_mesh(batch_size: int, devices: Optional[list] = None) -> Mesh:
    """Mesh ('seed' of size 1, 'data') over as many local devices as evenly divide `batch_size`."""
    return seeds_mesh(1, batch_size, devices)


def batch_keys(data_keys: Array, start_step: int, num_steps: int) -> Array:
    """Keys `[K, S]` for steps start..start+K-1 of S seeds: fold_in(data_key[s], step)."""
    steps = jnp.arange(start_step, start_step + num_steps, dtype=jnp.uint32)
    return jax.vmap(lambda step: jax.vmap(lambda k: jax.random.fold_in(k, step))(data_keys))(steps)


def dropout_keys(keys: Array) -> Array:
    """The dropout key of each step's batch key `[K, S]`: fold_in(key, 1), as reproducible as the data."""
    return jax.vmap(jax.vmap(lambda k: jax.random.fold_in(k, 1)))(keys)


class SeedsRunner:
    """Jitted functions that train, evaluate and inspect S seeds at once.

    Args:
      trainer: the per-seed functions.
      mesh: a `seeds_mesh` ('seed', 'data'); default `data_mesh(trainer.batch_size)`,
        which replicates the seeds and shards the batch. State leaves `[S, ...]`
        are sharded over 'seed', batches `[K, S, B, T]` over 'seed' and 'data'.
    """

    def __init__(self, trainer: Trainer, mesh: Optional[Mesh] = None):
        self.trainer = trainer
        self.mesh = data_mesh(trainer.batch_size) if mesh is None else mesh
        if tuple(self.mesh.axis_names) != ("seed", "data"):
            raise ValueError(
                f"mesh axes must be ('seed', 'data') (see seeds_mesh), got {self.mesh.axis_names}"
            )
        batch_sharding = NamedSharding(self.mesh, P(None, "seed", "data"))  # [K, S, B, T]
        make = jax.vmap(jax.vmap(lambda key: trainer.task.batch(key, trainer.batch_size)))
        self._batches = compilation.jit_fast(make, out_shardings=batch_sharding)
        self._init = compilation.jit_fast(
            jax.vmap(trainer.init), out_shardings=NamedSharding(self.mesh, P("seed"))
        )
        self._train = jax.jit(self._train_chunk, donate_argnums=0)
        self._eval = jax.jit(jax.vmap(trainer.evaluate))

    def init(self, keys: Array) -> TrainState:
        """States of S seeds from keys `[S]`; S must be a multiple of the mesh's seed axis."""
        seed_devices = self.mesh.shape["seed"]
        if keys.shape[0] % seed_devices:
            raise ValueError(
                f"keys must be [S] with S a multiple of the mesh's {seed_devices} seed devices, "
                f"got keys.shape={tuple(keys.shape)}"
            )
        return self._init(keys)

    def _train_chunk(self, state, batches, keys):
        def body(state, inputs):
            return jax.vmap(self.trainer.step)(state, *inputs)

        state, metrics = jax.lax.scan(body, state, (batches,) if keys is None else (batches, keys))
        # Replicated, so every process can read them when the mesh spans several (they are small).
        return state, jax.lax.with_sharding_constraint(metrics, NamedSharding(self.mesh, P()))

    def train(self, state: TrainState, data_keys: Array, num_steps: int) -> tuple[TrainState, dict]:
        """`num_steps` steps for every seed; returns the state and metrics `[K, S]`.

        A model with dropout drops with `dropout_keys` of the batch keys, so a
        resumed run draws the same masks as an uninterrupted one."""
        start = int(
            np.asarray(state.step.addressable_shards[0].data).reshape(-1)[0]
        )  # the same for every seed
        keys = batch_keys(data_keys, start, num_steps)
        batches = self._batches(keys)
        return self._train(state, batches, dropout_keys(keys) if self.trainer.has_dropout else None)

    def evaluate(self, state: TrainState, eval_keys: Array) -> dict[str, np.ndarray]:
        """Mean eval loss/accuracy `[S]` over one held-out batch per key `[N, S]`."""
        batches = self._batches(eval_keys)
        metrics = [
            self._eval(state, jax.tree.map(lambda x: x[i], batches))
            for i in range(eval_keys.shape[0])
        ]
        return {k: np.mean([np.asarray(m[k]) for m in metrics], axis=0) for k in metrics[0]}

    def sample_batch(self, key: Array):
        """One batch `[B, T]` (for measurements), unsharded."""
        return self.trainer.task.batch(key, self.trainer.batch_size)


# --------------------------------------------------------------------------
# Checkpoints


class Checkpointer:
    """Orbax checkpoints of a run in `directory`: its `TrainState` and the rows measured so far.

    Each `save(step, state)` is ONE orbax step holding two items, `state` (the
    pytree, `StandardSave`) and `rows` (`self.rows` as JSON, `JsonSave`); the
    latest two steps are kept. Rows and state are atomic together: orbax writes
    a step's items into a temporary directory and renames it to its final name
    only once every item is written (its step finalisation). A run killed
    during a save leaves no step (the temporary one is never listed, and a
    later save of that step replaces it), so every listed step holds the state of that
    step and the rows measured up to it: a resumed run loses and repeats no row.

    `rows` is the run's list of JSON-able row dicts: a study appends to it
    before each save (`fit`'s `on_log`), and `restore` replaces it with the
    rows of the step it restores.

    A step that cannot be restored (a file cut short by a full disk, deleted,
    or a state of another shape) raises a ValueError naming the directory,
    the step, the cause, and what to delete: that step, to resume from the
    one before, or the directory, to start the run again.
    """

    def __init__(self, directory: str):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        options = ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=False)
        self.manager = ocp.CheckpointManager(
            os.path.abspath(directory), options=options, item_names=("state", "rows")
        )
        self.rows: list[dict] = []

    def latest_step(self) -> Optional[int]:
        return self.manager.latest_step()

    def save(self, step: int, state: TrainState) -> None:
        """Save `state` and `self.rows` as one orbax step `step` (synchronously)."""
        args = self._ocp.args
        self.manager.save(
            step,
            args=args.Composite(
                state=args.StandardSave(state), rows=args.JsonSave(json_form(self.rows))
            ),
        )
        self.manager.wait_until_finished()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def restore(self, like: TrainState, step: Optional[int] = None) -> TrainState:
        """State of checkpoint `step` (default: the latest), in the structure and shardings of `like`;
        `self.rows` becomes the rows saved in the same step."""
        step = self.manager.latest_step() if step is None else step
        if step is None or step not in self.manager.all_steps():
            raise ValueError(
                f"no checkpoint of step={step} in {self.manager.directory}; "
                f"saved steps: {self.all_steps()}"
            )
        args = self._ocp.args
        abstract = jax.tree.map(self._ocp.utils.to_shape_dtype_struct, like)
        try:
            restored = self.manager.restore(
                step,
                args=args.Composite(state=args.StandardRestore(abstract), rows=args.JsonRestore()),
            )
        except Exception as error:  # noqa: BLE001 - orbax and tensorstore raise many kinds
            raise ValueError(self._unreadable(step, error)) from error
        self.rows = list(restored.rows)
        return restored.state

    def _unreadable(self, step: int, error: Exception) -> str:
        """The message for step `step` that cannot be restored: the path, the cause, and what to delete."""
        directory = os.fspath(self.manager.directory)
        cause = (str(error).strip().splitlines() or [""])[0].split(" [tensorstore_spec")[0]
        if len(cause) > 400:  # a chain of causes, the root one last
            cause = "..." + cause[-400:]
        earlier = [s for s in self.all_steps() if s < step]
        resume = (
            f"delete {os.path.join(directory, str(step))} to resume from step {max(earlier)}, or "
            if earlier
            else "delete "
        )
        return (
            f"checkpoint step {step} in {directory} cannot be read ({type(error).__name__}: "
            f"{cause}); it is corrupt (a file cut short or missing) or holds another "
            f"state than `like`: {resume}{directory} to start the run again"
        )

    def close(self) -> None:
        self.manager.close()


def fit(
    runner: SeedsRunner,
    state: TrainState,
    data_keys: Array,
    *,
    total_steps: int,
    log_every: int,
    on_log: Optional[Callable[[int, TrainState, dict], None]] = None,
    checkpointer: Optional[Checkpointer] = None,
    progress: Optional[Callable[[str], None]] = print,
) -> TrainState:
    """Train S seeds from `state.step` to `total_steps`, `log_every` steps per call.

    After each call: `on_log(step, state, metrics)` with metrics averaged over
    the K steps (arrays `[S]`), a progress line, and a checkpoint if a
    checkpointer is given: the state with the checkpointer's rows, which
    `on_log` may have extended, in one step (so a killed run resumes from the
    last multiple of `log_every` with the rows measured up to it).
    """
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    step = int(np.asarray(state.step).reshape(-1)[0])
    while step < total_steps:
        num = min(log_every, total_steps - step)
        state, metrics = runner.train(state, data_keys, num)
        step += num
        means = {k: np.asarray(v).mean(axis=0) for k, v in metrics.items()}
        if on_log is not None:
            on_log(step, state, means)
        if checkpointer is not None:
            checkpointer.save(step, state)
        if progress is not None:
            loss = means["loss"]
            progress(
                f"  step {step:>6d}/{total_steps}  loss {np.nanmean(loss):.4f}  "
                f"acc {np.nanmean(means['accuracy']):.3f}  diverged {int(np.sum(np.asarray(state.diverged)))}"
            )
    return state


def num_params(state: TrainState) -> int:
    """Trainable parameters of one seed."""
    leaves = jax.tree.leaves(state.params)
    return int(sum(math.prod(x.shape[1:]) for x in leaves))
