"""Tasks, models and trainers from the config blocks the studies share (`task`, `model`, `train`).

Used by the studies and the benchmark (which times the rank-collapse study's
model without importing the study). Architectures are the presets of
`attnjax.nn.ARCHITECTURES`.
"""
from __future__ import annotations

import jax.numpy as jnp

from attnjax import nn, tasks, training

COMPUTE_DTYPES = ("float32", "bfloat16")


def make_task(task_config):
    """`task` block (`name` and the task's arguments) -> a task of `attnjax.tasks`."""
    kwargs = {k: v for k, v in task_config.items() if k != "name"}
    return tasks.make_task(task_config.name, **kwargs)


def check_architectures(field: str, names) -> None:
    """Raise ValueError naming `field` unless every name is a preset of `nn.ARCHITECTURES`."""
    for name in names:
        if name not in nn.ARCHITECTURES:
            raise ValueError(f"{field}: unknown {name!r}; valid: {tuple(nn.ARCHITECTURES)}")


def transformer_config(model, task, *, architecture: str, depth: int, causal: bool, temperature: float = 1.0,
                       kind: str = "softmax", overrides: dict | None = None) -> nn.TransformerConfig:
    """`model` block (features, num_heads, mlp_ratio, positions; optionally feature_map,
    num_features and the compute dtype) -> the config of a `depth`-layer Transformer for `task`.

    `overrides`: `TransformerConfig` fields that replace what the blocks and the
    preset give (e.g. `embedding_init`, `norm`, or `dtype` and `param_dtype`)."""
    options = {k: model[k] for k in ("feature_map", "num_features") if k in model}
    attention = nn.AttentionConfig(temperature=temperature, attention_kind=kind, **options)
    extra = {}
    if "dtype" in model:
        if model.dtype not in COMPUTE_DTYPES:
            raise ValueError(f"model.dtype must be one of {COMPUTE_DTYPES}, got {model.dtype!r}")
        extra.update(dtype=jnp.dtype(model.dtype), param_dtype=jnp.float32)
    fields = dict(
        num_layers=depth, features=model.features, num_heads=model.num_heads, vocab_size=task.vocab_size,
        max_len=task.seq_len, positions=model.positions, causal=causal, attention=attention,
        mlp_features=model.mlp_ratio * model.features, **extra,
        **nn.architecture(architecture),
    )
    return nn.TransformerConfig(**{**fields, **(overrides or {})})


def make_trainer(model, train, task, **spec) -> training.Trainer:
    """A trainer of `transformer_config(model, task, **spec)` with the `train` block's optimiser and batch size."""
    # Init-only studies (steps = 0) still build an optimiser; give it one step.
    optimizer = training.OptimizerConfig(
        learning_rate=train.learning_rate, warmup_steps=train.warmup_steps if train.steps else 0,
        total_steps=max(train.steps, 1), weight_decay=train.weight_decay,
    )
    return training.Trainer(transformer_config(model, task, **spec), optimizer, task, train.batch_size)
