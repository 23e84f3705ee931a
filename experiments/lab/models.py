"""Tasks, models and trainers from the config blocks the studies share (`task`, `model`, `train`).

Used by the studies and the benchmark. Architectures are the presets of
`experiments.architectures`. `transformer_config` is the one step from a
config block to an `attnjax.nn.TransformerConfig`.
"""

from __future__ import annotations

import jax.numpy as jnp

from attnjax import nn, tasks, training
from experiments.architectures import architecture as preset

COMPUTE_DTYPES = ("float32", "bfloat16")


def make_task(task_config):
    """`task` block (`name` and the task's arguments) -> a task of `attnjax.tasks`."""
    kwargs = {k: v for k, v in task_config.items() if k != "name"}
    return tasks.make_task(task_config.name, **kwargs)


def transformer_config(
    model,
    task,
    *,
    architecture: str,
    depth: int,
    causal: bool,
    temperature: float = 1.0,
    kind: str = "softmax",
    overrides: dict | None = None,
) -> nn.TransformerConfig:
    """`model` block (features, num_heads, mlp_ratio, positions; optionally feature_map,
    num_features and the compute dtype) and the preset `architecture` -> the config of a
    `depth`-layer Transformer for `task`.

    `overrides`: fields of any of the model's configs (`TransformerConfig.create`'s
    keywords) that replace what the block and the preset give (e.g. `embedding_init`,
    `norm`, or `dtype` and `param_dtype`)."""
    fields = {k: model[k] for k in ("feature_map", "num_features") if k in model}
    if "dtype" in model:
        if model.dtype not in COMPUTE_DTYPES:
            raise ValueError(f"model.dtype must be one of {COMPUTE_DTYPES}, got {model.dtype!r}")
        fields.update(dtype=jnp.dtype(model.dtype), param_dtype=jnp.float32)
    fields.update(
        num_layers=depth,
        features=model.features,
        num_heads=model.num_heads,
        vocab_size=task.vocab_size,
        max_len=task.seq_len,
        positions=model.positions,
        causal=causal,
        temperature=temperature,
        attention_kind=kind,
        mlp_features=model.mlp_ratio * model.features,
        **preset(architecture),
    )
    return nn.TransformerConfig.create(**{**fields, **(overrides or {})})


def make_trainer(model, train, task, **spec) -> training.Trainer:
    """A trainer of `transformer_config(model, task, **spec)` with the `train` block's optimiser and batch size."""
    # Init-only studies (steps = 0) still build an optimiser; give it one step.
    optimizer = training.OptimizerConfig(
        learning_rate=train.learning_rate,
        warmup_steps=train.warmup_steps if train.steps else 0,
        total_steps=max(train.steps, 1),
        weight_decay=train.weight_decay,
    )
    return training.Trainer(
        transformer_config(model, task, **spec), optimizer, task, train.batch_size
    )
